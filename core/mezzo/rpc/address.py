"""How an address is written: ``HOST:PORT``, as every server binds and every peer dials.

A module of its own, importing nothing, for the clients that need only this: the
operator's commands parse ``--master`` without loading asyncio and the rest of
:mod:`mezzo.rpc`.
"""

from __future__ import annotations


def parse_address(text: str, default_port: int) -> tuple[str, int]:
    """``"host:port"``, ``"host"``, ``":port"`` or ``"[v6addr]:port"`` to ``(host, port)``.

    Raises :class:`ValueError` naming the text when the port is not a number in range.
    """
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else str(default_port)
    elif text.count(":") > 1:  # a bare IPv6 address has no port
        host, port_text = text, str(default_port)
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            host, port_text = text, str(default_port)
    host = host or "127.0.0.1"
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"bad address {text!r}: port {port_text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"bad address {text!r}: port {port} is out of range")
    return host, port
