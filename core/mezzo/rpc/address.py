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


WILDCARDS = frozenset({"0.0.0.0", "::", ""})
"""Hosts a server binds to listen everywhere; no peer can dial them."""


def join_address(host: str, port: int) -> str:
    """``(host, port)`` written as peers dial it: IPv6 hosts in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def dialable_address(text: str, default_port: int) -> str:
    """An address to advertise (``HOST`` or ``HOST:PORT``), checked and written whole.

    Raises :class:`ValueError` saying what is wrong: a port that is not a number in
    1-65535, or a wildcard host (``0.0.0.0``, ``::``), which no peer can dial.
    """
    stripped = text.strip()
    host, port = parse_address(stripped, default_port)
    if stripped.startswith(":") or host in WILDCARDS:
        raise ValueError(f"{text!r} names no host peers can dial (a wildcard or empty host)")
    if port == 0:
        raise ValueError(f"{text!r}: port 0 cannot be dialled")
    return join_address(host, port)
