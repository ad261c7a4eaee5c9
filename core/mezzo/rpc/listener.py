"""Accepting connections one socket at a time, each admitted or refused on the spot.

asyncio's own server accepts up to its backlog (4,096 here) sockets per readiness
event and only later, one event-loop task each, makes their protocols. A flood of
connections therefore takes descriptors faster than any protocol can refuse them:
a master at a 256-descriptor limit ran out after 500 idle connections although its
bound was 224. And when ``accept()`` does fail with EMFILE, Python 3.11's loop goes
on trying the rest of its backlog, logging a traceback each time (52,583 lines in
that test) and arming as many retry timers.

:class:`Listener` does the accepting itself, with public event-loop calls only
(``add_reader``, ``connect_accepted_socket``): each socket is put to the
:class:`~.limits.ConnectionLimiter` the moment it is accepted and, if over a
limit, reset there and then (SO_LINGER 0: an RST, and no TIME_WAIT left behind
for a refusal). So the descriptors in use never exceed the bound by more than the
one being refused. Should ``accept()`` run out of descriptors or memory anyway
(the daemon's own files ate its reserve), the listener stops reading for
:data:`ACCEPT_RETRY_DELAY` and logs once, then tries again.

With TLS, a socket's handshake runs before its connection is made; a peer that
fails it (plaintext at a TLS port, no certificate or an untrusted one, too slow) is
logged once with the reason in an operator's words (:func:`.tls.handshake_refusal`)
and its slot given back.

It stands in for ``asyncio.Server`` where mezzo uses one: ``sockets``, ``close()``,
``wait_closed()``. Closing it stops accepting; connections already made live on,
as with asyncio's server.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import struct
from collections.abc import Callable

import structlog

from ..errors import ConfigError
from .connection import Connection
from .limits import ConnectionLimiter
from .tls import ServerTls, handshake_refusal
from .tls_stream import accept_tls

log = structlog.get_logger("mezzo.rpc")

ACCEPT_BATCH = 512
"""Sockets accepted per readiness event before the loop serves anything else."""

ACCEPT_RETRY_DELAY = 0.5
"""Seconds the listener rests after ``accept()`` ran out of descriptors or memory."""

REFUSAL_LOG_INTERVAL = 10.0
"""Seconds between two log lines for handshakes refused for the same reason."""

_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends an RST


async def bind(host: str, port: int, backlog: int) -> list[socket.socket]:
    """Listening, non-blocking sockets for every address ``host`` resolves to (all
    interfaces for "" ), like ``loop.create_server`` binds them: SO_REUSEADDR, and
    IPv6 sockets IPv6-only so that an IPv4 socket can share the port.

    Raises :class:`OSError` naming the address that could not be bound.
    """
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(
        host or None, port, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    sockets: list[socket.socket] = []
    seen = set()
    try:
        for family, kind, proto, _name, address in infos:
            if (family, address) in seen:
                continue
            seen.add((family, address))
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                raise OSError(
                    exc.errno, f"error while attempting to bind on address {address!r}: {exc.strerror}"
                ) from None
            sock.listen(backlog)
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    if not sockets:
        raise OSError(f"{host!r} resolves to no address to listen on")
    return sockets


class Listener:
    """Serves ``sockets``: each accepted socket admitted by ``limiter`` (all of them
    without one) becomes a connection made by ``make(address)``."""

    def __init__(
        self,
        sockets: list[socket.socket],
        make: Callable[[str], Connection],
        limiter: ConnectionLimiter | None,
        tls: ServerTls | None = None,
    ) -> None:
        self.sockets = sockets
        self._make = make
        self._limiter = limiter
        self._tls = tls
        self._refusals = _RefusalLog()
        self._loop = asyncio.get_running_loop()
        self._starting: set[asyncio.Task] = set()
        self._retry: dict[int, asyncio.TimerHandle] = {}
        self._out_of_resources_logged = False
        self._closed = False
        for sock in sockets:
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    def _accept(self, sock: socket.socket) -> None:
        limiter, loop = self._limiter, self._loop
        for _ in range(ACCEPT_BATCH):
            try:
                conn, peer = sock.accept()
            except (BlockingIOError, InterruptedError):
                return  # no one else waiting
            except ConnectionAbortedError:
                continue  # gone before we got to it
            except OSError as exc:
                if exc.errno not in _OUT_OF_RESOURCES:
                    raise  # the loop logs it; the reader stays
                self._rest(sock, exc)
                return
            address = ""
            if limiter is not None:
                admitted = limiter.admit(peer, loop.time())
                if admitted is None:
                    _reset(conn)
                    continue
                address = admitted
            conn.setblocking(False)
            task = loop.create_task(self._start(conn, address, peer))
            self._starting.add(task)
            task.add_done_callback(self._starting.discard)

    async def _start(self, sock: socket.socket, address: str, peer: tuple) -> None:
        made: list[Connection] = []

        def factory() -> Connection:
            made.append(self._make(address))
            return made[0]

        tls = self._tls
        try:
            if tls is None:
                await self._loop.connect_accepted_socket(factory, sock)
            else:
                await accept_tls(self._loop, factory, sock, tls.context, tls.handshake_timeout)
        except Exception as exc:  # the peer left during set-up, or worse
            # Once made, the connection's transport owns the socket, and its loss
            # gives the slot back; before that, both are ours to give back (a failed
            # TLS handshake has closed the socket already).
            if made and (made[0]._transport is not None or made[0].closed.done()):
                log.info("could not start a connection", error=str(exc) or type(exc).__name__)
                return
            if tls is None:
                sock.close()
            if self._limiter is not None:
                self._limiter.abandon(address)
            if tls is not None:
                # The connection is made once the handshake has succeeded, so this is its failure.
                self._refusals.note(handshake_refusal(exc), f"{peer[0]}:{peer[1]}", self._loop.time())
            else:
                log.info("could not start a connection", error=str(exc) or type(exc).__name__)

    def _rest(self, sock: socket.socket, exc: OSError) -> None:
        """Out of descriptors (or memory): stop accepting for a moment, log once per spell."""
        if not self._out_of_resources_logged:
            self._out_of_resources_logged = True
            log.error(
                "cannot accept connections: out of resources; retrying every "
                f"{ACCEPT_RETRY_DELAY:g} s (raise the open-file limit, or lower max_open)",
                error=exc.strerror or str(exc),
            )
        fd = sock.fileno()
        self._loop.remove_reader(fd)
        self._retry[fd] = self._loop.call_later(ACCEPT_RETRY_DELAY, self._resume, sock)

    def _resume(self, sock: socket.socket) -> None:
        self._retry.pop(sock.fileno(), None)
        if not self._closed:
            self._loop.add_reader(sock.fileno(), self._accept, sock)
            self._accept(sock)
            if sock.fileno() not in self._retry:
                self._out_of_resources_logged = False

    def close(self) -> None:
        """Stop accepting and close the listening sockets (connections live on)."""
        if self._closed:
            return
        self._closed = True
        for handle in self._retry.values():
            handle.cancel()
        self._retry.clear()
        for sock in self.sockets:
            self._loop.remove_reader(sock.fileno())
            sock.close()

    async def wait_closed(self) -> None:
        """For ``asyncio.Server`` callers: once closed, nothing is left to wait for."""

    def is_serving(self) -> bool:
        return not self._closed

    async def __aenter__(self) -> Listener:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
        await self.wait_closed()


class _RefusalLog:
    """Logs refused handshakes, each reason at most once per :data:`REFUSAL_LOG_INTERVAL`
    (saying how many more there were), so that a peer dialling in a loop cannot
    flood the log. Holds one entry per reason: a few strings."""

    __slots__ = ("_last", "_since")

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self._since: dict[str, int] = {}

    def note(self, reason: str, peer: str, now: float) -> None:
        last = self._last.get(reason)
        if last is not None and now - last < REFUSAL_LOG_INTERVAL:
            self._since[reason] = self._since.get(reason, 0) + 1
            return
        if len(self._last) >= 64:  # reasons are a handful; never let odd texts pile up
            self._last.clear()
            self._since.clear()
        self._last[reason] = now
        log.warning("refused a connection: " + reason, peer=peer, more_since_last=self._since.pop(reason, 0))


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with an RST: the peer learns at once, and no TIME_WAIT stays here."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
    except OSError:
        pass
    sock.close()


def listen_error(key: str, host: str, port: int, exc: OSError) -> ConfigError:
    """A daemon that cannot listen where it was told: the :class:`ConfigError` naming
    ``key`` (a user's mistake, one line, exit 2), not a traceback."""
    why = exc.strerror or str(exc)
    if exc.errno == errno.EADDRINUSE:
        why = "the address is in use (another master or agent running? choose another with --listen)"
    elif exc.errno == errno.EACCES:
        why = "permission denied (ports below 1024 need root)"
    return ConfigError(key, f"cannot listen on {host}:{port}: {why}")
