"""How an address is written: ``HOST:PORT``, as every server binds and every peer dials.

A module of its own, importing only ``re`` (``ipaddress`` when a host is checked), for the
clients that need only this: the operator's commands parse ``--master`` without loading
asyncio and the rest of :mod:`mezzo.rpc`, nor ``ipaddress`` (1-2 ms of a command's start-up)
to split ``HOST:PORT``.
"""

from __future__ import annotations

import re


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
    """An address to advertise (``HOST``, ``HOST:PORT``, ``[V6]`` or ``[V6]:PORT``),
    checked and written whole, the port ``default_port`` when not given.

    Raises :class:`ValueError` saying what is wrong: no host, a wildcard host
    (``0.0.0.0``, ``::``), which no peer can dial, a host that is neither an IP address
    nor a DNS name, text after the port, or a port that is not a number in 1-65535.
    """
    stripped = text.strip()
    if stripped.startswith("["):
        host, closed, rest = stripped[1:].partition("]")
        if not closed or (rest and not rest.startswith(":")):
            raise ValueError(f"{text!r} is not [IPv6] or [IPv6]:PORT")
        port_text = rest[1:]
    elif stripped.count(":") > 1:  # a bare IPv6 address has no port
        host, port_text = stripped, ""
    else:
        host, _, port_text = stripped.partition(":")
    problem = host_problem(host)
    if problem is not None:
        raise ValueError(f"{text!r}: {problem}")
    if not port_text:
        port = default_port
    elif not port_text.isdigit():
        raise ValueError(f"{text!r}: port {port_text!r} is not a number")
    else:
        port = int(port_text)
    if not 0 < port <= 65535:
        raise ValueError(f"{text!r}: port {port} is out of range (1-65535; port 0 cannot be dialled)")
    return join_address(host, port)


def host_problem(host: str) -> str | None:
    """Why peers could not dial ``host``, or None: it must be an IP address other than
    a wildcard, or a DNS name (letters, digits, ``-``, ``_`` and dots, at most 253)."""
    if not host:
        return "no host peers can dial (the host is empty)"
    import ipaddress

    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        if ":" in host or _DIGITS_AND_DOTS.fullmatch(host) or not _DNS_NAME.fullmatch(host):
            return f"host {host!r} is neither an IP address nor a DNS name"
        return None
    if ip.is_unspecified:
        return f"no host peers can dial ({host} is the wildcard address)"
    return None


def is_loopback(host: str) -> bool:
    """True for an IP address of the loopback network (127/8, ::1)."""
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_DNS_NAME = re.compile(
    r"(?=.{1,253}\Z)[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?"
)
_DIGITS_AND_DOTS = re.compile(r"[0-9.]+")
