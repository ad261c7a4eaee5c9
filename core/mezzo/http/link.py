"""One HTTP connection at a daemon's port, bounded like every other connection there.

The master serves its HTTP API at its Thrift port: a connection whose first byte is
a letter (``GET``, ``POST``, ...) cannot be Thrift, whose frames start with a length
far below 1 GiB, so :class:`~mezzo.rpc.connection.Connection` hands such a socket
over (``handoff``) to an :class:`HttpLink`, with TLS already done beneath it when the
port speaks TLS. The link sits between the socket's transport and aiohttp's request
handler: the handler's transport is the link, and the link is the transport's
protocol. That is where the port's :class:`~mezzo.rpc.limits.ConnectionLimiter`
keeps its hold, as it does on Thrift connections, for which the link answers the
same questions:

- a *request* is what the client sent until its head reached a handler (or, failing
  that, a response began), held like an incomplete frame: the first must arrive within
  ``first_frame_timeout``, each within ``partial_frame_timeout`` of its first byte (a
  client trickling its headers, or a body, is closed), and their bytes count in
  ``partial_frames_max_bytes``; the time a handler then takes (a state rendered for
  seconds) is not the client's;
- a connection silent for ``unregistered_idle_timeout`` is closed (an idle
  keep-alive), unless its response is still being written;
- a client that does not read what it asked for is not read from while more than
  ``write_buffer_high`` waits for it (aiohttp's own flow control then holds its
  handler), and aborted after ``write_stall_timeout`` without taking a byte;
- the connection keeps the admission slot its socket was given, and frees it when lost.

Reading is paused for two reasons, kept apart: the client's unread backlog (above)
and aiohttp's own queue of pipelined requests or unread body; the socket is read
again only once neither holds it.

Nothing here parses HTTP but the master's fast lane for v1 scheduler calls
(:mod:`.call_lane`, given as ``lane``): until a request is not one it takes, a
connection's bytes go to the lane first. Otherwise a request's head is known to be
in when a handler starts (:meth:`HttpLink.request_arrived`, from
:func:`.server.request_arrived`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ..rpc.limits import ConnectionLimiter
from . import call_lane

V1_CALLS = "v1-calls"
"""The tag of a connection on which a v1 client made a call on a live stream (a 202): it
is spared the port's idle timeout, as a registered Thrift peer is. Mesos never closes
such a connection, and pymesos fails its next call (its driver's thread with it) on one
the server closed while it was quiet."""


def keep_for_calls(link: object) -> None:
    """Tag ``link`` (a request's transport) :data:`V1_CALLS`, unless it is tagged already."""
    if getattr(link, "tag", False) is None:
        link.tag = V1_CALLS  # type: ignore[attr-defined]


class HttpLink(asyncio.Protocol):
    """The socket's protocol, and aiohttp's request handler's transport; see the module docstring."""

    tag: Any = None
    """Never registered, as the limiter sees it (its idle timeout applies)."""
    reading_held = False
    """Reading is only paused for the client's own backlog (``write_paused``)."""
    dropped_for = ""
    """The port's bound this connection was dropped for ("" unless it was)."""

    def __init__(
        self,
        handler: asyncio.Protocol,
        limiter: ConnectionLimiter | None,
        loop: asyncio.AbstractEventLoop,
        *,
        peer: str = "?",
        principal: str | None = None,
        lane: call_lane.Answer | None = None,
    ) -> None:
        self._handler = handler
        self._lane = lane
        """The v1 calls' fast lane, until a request is not for it (then None for good)."""
        self._lane_held = bytearray()
        """The start of a request that may still be the lane's."""
        self._lane_until = 0
        """How long the held request is once whole (0: its head is still coming)."""
        self._lane_scanned = 0
        """How far the held head was searched for its end."""
        self._limiter = limiter
        self._loop = loop
        self._transport: asyncio.Transport | None = None
        self.peer = peer
        self.principal = principal
        """Who the client proved to be with its TLS certificate (None without one)."""
        self.last_received = loop.time()
        self.write_paused = False
        self._handler_paused = False
        """aiohttp asked not to be given more for now (pipelined requests, an unread body)."""
        self._request_bytes = 0
        """Bytes received since a request's head last reached a handler (or a response
        began): the request being read, held like an incomplete frame."""
        self._bytes_out = 0

    # -- the limiter's view (the same as a Thrift Connection's) --------------------------

    @property
    def pending_input(self) -> int:
        return self._request_bytes

    @property
    def bytes_sent(self) -> int:
        return self._bytes_out - self.get_write_buffer_size()

    def unsent_bytes(self) -> int:
        return self.get_write_buffer_size()

    @property
    def is_open(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    # -- the socket's protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        if self._limiter is not None:
            high = self._limiter.settings.write_buffer_high
            transport.set_write_buffer_limits(high=high, low=high // 4)  # type: ignore[attr-defined]
        self._handler.connection_made(self)  # type: ignore[arg-type]

    def data_received(self, data: bytes) -> None:
        self.last_received = now = self._loop.time()
        self._request_bytes += len(data)
        if self._limiter is not None:
            self._limiter.received(self, 0, now)  # type: ignore[arg-type]
            if not self.is_open:
                return  # dropped for it (too much held): nothing of it is served
        if self._lane is not None:
            data = self._through_lane(data)
            if not data:
                return
        self._handler.data_received(data)

    def _through_lane(self, data: bytes) -> bytes:
        """Answer the lane's requests at the start of what came; what is left for aiohttp
        (b"" while the lane still holds a partial request, or took it all).

        A partial request is held, and read again only once it can have grown whole (its
        head's blank line in, then its declared length): a request trickled in byte by
        byte costs its length, not its length squared."""
        lane = self._lane
        assert lane is not None
        held = self._lane_held
        if held:
            held += data
            if len(held) < self._lane_until or (
                not self._lane_until and not call_lane.head_complete(held, self._lane_scanned)
            ):
                self._lane_scanned = len(held)
                return b""
            buf: bytes | bytearray = held
        else:
            buf = data
        start = 0
        while start < len(buf):
            request = call_lane.parse(buf, start)
            if isinstance(request, call_lane.NeedMore):
                # Held as it is where it already is, else copied once.
                self._lane_held = held if buf is held and not start else bytearray(buf[start:])
                self._lane_until = request.until
                self._lane_scanned = len(self._lane_held)
                if start:
                    self._held_again(len(self._lane_held))
                return b""
            answer = None
            if isinstance(request, call_lane.LaneRequest):
                answer = call_lane.answer(lane, request, self.principal)
            if answer is None:
                break  # not the lane's: this connection is aiohttp's from here on
            self.write(answer)  # which also ends the request's clock (request_arrived)
            if answer.startswith(b"HTTP/1.1 202 "):
                keep_for_calls(self)
            start = request.end  # type: ignore[union-attr]
        else:
            self._lane_held = bytearray()
            return b""
        self._lane = None
        self._lane_held = bytearray()
        if start:
            self._held_again(len(buf) - start)  # the rest is aiohttp's: a request being read
        return bytes(buf[start:])

    def _held_again(self, size: int) -> None:
        """After an answer, the ``size`` bytes left of the same read are a new request
        being read: held input again, its clock starting now, as a frame begun in a read."""
        self._request_bytes = size
        if self._limiter is not None and size:
            self._limiter.received(self, 0, self._loop.time())  # type: ignore[arg-type]

    def request_arrived(self) -> None:
        """A request's head reached a handler: what the client sent is no longer held
        input; whatever follows (a body, the next request) starts a new clock."""
        if self._request_bytes:
            self._request_bytes = 0
            if self._limiter is not None:
                self._limiter.received(self, 1, self._loop.time())  # type: ignore[arg-type]

    def eof_received(self) -> bool | None:
        return self._handler.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if self._limiter is not None:
            self._limiter.release(self)  # type: ignore[arg-type]
        self._handler.connection_lost(exc)

    def pause_writing(self) -> None:
        self.write_paused = True
        if self._limiter is not None:
            self._limiter.write_paused(self, self._loop.time())  # type: ignore[arg-type]
        if self._transport is not None:
            self._transport.pause_reading()
        self._handler.pause_writing()

    def resume_writing(self) -> None:
        self.write_paused = False
        if self._limiter is not None:
            self._limiter.write_resumed(self, self._loop.time())  # type: ignore[arg-type]
        if self._transport is not None and not self._handler_paused and not self._transport.is_closing():
            self._transport.resume_reading()
        self._handler.resume_writing()

    # -- the handler's transport ------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        transport = self._transport
        if transport is None:
            return
        self.request_arrived()  # a response began (aiohttp's own, to a request it refused)
        self._bytes_out += len(data)
        transport.write(data)

    def writelines(self, lines: Any) -> None:
        self.write(b"".join(lines))

    def is_closing(self) -> bool:
        return self._transport is None or self._transport.is_closing()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default) if self._transport is not None else default

    def pause_reading(self) -> None:
        self._handler_paused = True
        if self._transport is not None and not self._transport.is_closing():
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._handler_paused = False
        if self._transport is not None and not self._transport.is_closing() and not self.write_paused:
            self._transport.resume_reading()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() if self._transport is not None else 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if self._transport is not None:
            self._transport.set_write_buffer_limits(high, low)


def http_handoff(
    make_handler: Callable[[], asyncio.Protocol],
    limiter: ConnectionLimiter | None,
    lane: call_lane.Answer | None = None,
) -> Callable[[Any], HttpLink]:
    """What a port's connections call to give a socket whose first byte is a letter
    to the HTTP server (``make_handler``: aiohttp's request handler factory; ``lane``:
    the v1 calls' fast lane, on the master)."""

    def take(conn: Any) -> HttpLink:
        return HttpLink(
            make_handler(), limiter, conn._loop, peer=conn.peer, principal=conn.principal, lane=lane
        )

    return take
