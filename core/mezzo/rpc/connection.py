"""One duplex Thrift connection as an asyncio protocol.

Incoming frames are decoded against the local service schema and dispatched to a
handler object: the call ``launch_tasks(a, b, c, d)`` becomes
``handler.launch_tasks(connection, a, b, c, d)``. Outgoing messages are framed
bytes from :class:`~mezzo.rpc.codec.Remote` stubs made by :meth:`Connection.remote`.

Error handling: nothing a peer sends can raise out of ``data_received``. An
oversized frame or an undecodable message is logged with the peer's address and
the connection is closed (we cannot trust where the next frame starts). An
exception from a handler is a bug on our side: it is logged with its traceback
and the connection keeps serving.

Sends coalesce: frames written during one turn of the event loop leave in a
single ``write``, which matters when the master fans out thousands of offers.
All connections of a loop are flushed by one callback per turn (:class:`_Flusher`),
not one each: at 50,000 agents the master has thousands of connections with
something to send every turn. ``send`` may be called from any thread.

Bounds: a connection a server accepted has a :class:`~mezzo.rpc.limits.ConnectionLimiter`
(see there), which admitted its socket: it is timed out when silent or stuck in
the middle of a frame, and stops reading while its peer does not read what it is
sent (``pause_writing``). A connection we dialled has none: it always reads, so two
daemons can never both wait for the other to read.

Big frames: a server's connections (``offload`` set) hand a frame larger than
:data:`~mezzo.rpc.offload.INLINE_DECODE_MAX` to a worker thread to decode
(:mod:`.offload`), stop reading, and hold the frames that came behind it, until
its handler has run: messages are still handled one at a time, in order.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import structlog

from .codec import MalformedMessage, Remote, ServiceSchema
from .framing import DEFAULT_MAX_FRAME, FrameDecoder, FrameTooLarge
from .offload import INLINE_DECODE_MAX
from .tls import principal_of, reads_as_tls_record

if TYPE_CHECKING:
    from .limits import ConnectionLimiter
    from .offload import Decoded, OffLoopDecoder, Ticket

log = structlog.get_logger("mezzo.rpc")


class Traffic:
    """Messages received and sent by this process over all its connections, and the
    reads and writes that carried them.

    Read by the master's metrics; an integer increment per message is the cheapest
    way to know the message rate the brief's scale targets are about. Reads and
    writes are what TLS pays for (a record each, whatever its size), so their
    ratio to messages says how well sends are coalesced.
    """

    __slots__ = ("received", "sent", "reads", "writes")

    def __init__(self) -> None:
        self.received = 0
        self.sent = 0
        self.reads = 0
        self.writes = 0


TRAFFIC = Traffic()


class _Flusher:
    """Writes out every connection of one loop that queued frames during this turn.

    It holds no reference to its loop (it is the value of a weak-keyed map from
    loops), only to the connections waiting for the next flush.
    """

    __slots__ = ("_dirty", "_scheduled")

    def __init__(self) -> None:
        self._dirty: list[Connection] = []
        self._scheduled = False

    def add(self, conn: Connection) -> None:
        self._dirty.append(conn)
        if not self._scheduled:
            self._scheduled = True
            conn._loop.call_soon(self._flush_all)

    def _flush_all(self) -> None:
        dirty, self._dirty = self._dirty, []
        self._scheduled = False
        for conn in dirty:
            try:
                conn._flush()
            except Exception:  # one broken transport must not leave the others unflushed
                log.exception("flushing a connection failed", peer=conn.peer)


_flushers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Flusher] = weakref.WeakKeyDictionary()


def _flusher_of(loop: asyncio.AbstractEventLoop) -> _Flusher:
    flusher = _flushers.get(loop)
    if flusher is None:
        flusher = _flushers[loop] = _Flusher()
    return flusher


class Connection(asyncio.Protocol):
    """A framed Thrift connection dispatching to ``handler``.

    ``tag`` is free for the owner (the master stores which framework or agent a
    connection belongs to); for a ``limiter``, None means the peer has not
    registered. ``closed`` is a future done when the connection ends.
    """

    def __init__(
        self,
        schema: ServiceSchema,
        handler: Any,
        *,
        max_frame: int = DEFAULT_MAX_FRAME,
        loop: asyncio.AbstractEventLoop | None = None,
        limiter: ConnectionLimiter | None = None,
        address: str = "",
        offload: OffLoopDecoder | None = None,
        handoff: Callable[[Connection], asyncio.Protocol] | None = None,
        keepalive: bool = False,
    ) -> None:
        self.schema = schema
        self._keepalive = keepalive
        self.handler = handler
        self.max_frame = max_frame
        self.tag: Any = None
        self.dropped_for = ""
        """The bound of the port's limiter this connection was dropped for ("" unless it was)."""
        self.peer = "?"
        self.principal: str | None = None
        """Who the peer proved to be: the common name of its TLS certificate (None
        without TLS, or for a client without a certificate where that is allowed)."""
        self._loop = loop or asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._decoder = FrameDecoder(max_frame)
        self._transport: asyncio.Transport | None = None
        self._closing = False
        self._outbox: list[bytes] = []
        self._flush_scheduled = False
        self._flusher = _flusher_of(self._loop)
        self._remotes: dict[int, Remote] = {}
        self._limiter = limiter
        self._address = address
        """What the limiter counts this connection under (it admitted the socket)."""
        self._write_max = limiter.settings.write_buffer_max if limiter is not None else 0
        """0 for a connection without limits: then nothing below is checked."""
        self._outbox_bytes = 0
        self._bytes_out = 0
        """Bytes handed to the transport so far."""
        self.write_paused = False
        """True while the transport holds more than its high-water mark for the peer."""
        self._offload = offload
        self._inline_max = INLINE_DECODE_MAX if offload is not None else 0
        self._decoding: _Decoding | None = None
        """The frame being decoded off the loop, if any: reading stops meanwhile."""
        self._holds = 0
        """Holds on reading (:meth:`hold_reading`) not released yet."""
        self._behind: deque[bytes] = deque()
        """Frames received behind it (or while reading is held), handled once it has been."""
        self._held_bytes = 0
        """Bytes of both, counted as input held for the limiter."""
        self.last_received = self._loop.time()
        """Loop time of the last bytes from the peer (the master's agent health check)."""
        self.closed: asyncio.Future[None] = self._loop.create_future()
        self._handoff = handoff
        """Makes the protocol that takes over a socket whose first byte is a letter (an
        HTTP request at this port); None once the first bytes came, or when there is none."""

    # -- asyncio.Protocol -------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.principal = principal_of(transport)
        limiter = self._limiter
        if limiter is not None:
            limiter.made(self, self._address, self._loop.time())
            high = limiter.settings.write_buffer_high
            transport.set_write_buffer_limits(high=high, low=high // 4)  # type: ignore[attr-defined]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            _set_nodelay(sock)
            if self._keepalive:
                _set_keepalive(sock)

    def data_received(self, data: bytes) -> None:
        self.last_received = now = self._loop.time()
        TRAFFIC.reads += 1
        if self._handoff is not None:
            handoff, self._handoff = self._handoff, None
            # No frame starts with a letter: its length would be over 1 GiB.
            if data[:1].isalpha():
                self._hand_over(handoff(self), data)
                return
        try:
            frames = self._decoder.feed(data)
        except FrameTooLarge as exc:
            if reads_as_tls_record(exc.size):
                log.warning(
                    "closing connection: the peer began a TLS handshake at this plaintext port "
                    "(is tls.enabled on at its side and off here?)",
                    peer=self.peer,
                )
            else:
                log.warning("closing connection: oversized frame", peer=self.peer, error=str(exc))
            self.close()
            return
        if (self._decoding is not None or self._holds) and frames:
            # Read before reading stopped: they wait their turn behind the big frame
            # (or until reading is no longer held).
            TRAFFIC.received += len(frames)
            self._behind.extend(frames)
            self._held_bytes += sum(map(len, frames))
            frames = []
        if self._limiter is not None:
            self._limiter.received(self, len(frames), now)
            if self._closing:
                return  # dropped for its incomplete frame: its messages are not served
        TRAFFIC.received += len(frames)
        self._serve(frames)

    def _hand_over(self, protocol: asyncio.Protocol, data: bytes) -> None:
        """Give the socket (and its admission slot) to ``protocol``, which gets ``data``
        first: this connection is done with, its handler never having heard of it."""
        transport = self._transport
        assert transport is not None
        self._transport = None
        self._closing = True
        if self._limiter is not None:
            self._limiter.handed_over(self, protocol, self._loop.time())  # type: ignore[arg-type]
        if not self.closed.done():
            self.closed.set_result(None)
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        protocol.data_received(data)

    def _serve(self, frames: Iterable[bytes]) -> None:
        """Handle ``frames`` in order, until one goes to the worker, reading is held
        (:meth:`hold_reading`) or we close."""
        frames = iter(frames)
        inline_max = self._inline_max
        for payload in frames:
            if self._holds:
                # A handler held reading (hold_reading): the rest waits for its release.
                behind = [payload, *frames]
                self._behind.extendleft(reversed(behind))
                self._held_bytes += sum(map(len, behind))
                return
            if inline_max and len(payload) > inline_max:
                self._decode_off_loop(payload, frames)
                return
            try:
                name, args = self.schema.decode(payload, self.max_frame)
            except MalformedMessage as exc:
                log.warning("closing connection: malformed message", peer=self.peer, error=str(exc))
                self.close()
                return
            self._call(name, args)
            if self._closing:
                # The handler closed us; later frames of this chunk are not for anyone.
                return

    def _call(self, name: str, args: tuple) -> None:
        try:
            getattr(self.handler, name)(self, *args)
        except Exception:
            log.exception("handler failed", peer=self.peer, method=name)

    def _decode_off_loop(self, payload: bytes, rest: Iterable[bytes]) -> None:
        """Hand ``payload`` to the worker; hold ``rest`` and stop reading until it is handled."""
        behind = list(rest)
        self._behind.extendleft(reversed(behind))
        self._held_bytes += len(payload) + sum(map(len, behind))
        decoding = self._decoding = _Decoding(len(payload))
        assert self._offload is not None
        decoding.ticket = self._offload.submit(self.schema, payload, self.max_frame, self._decoded)
        if self._transport is not None:
            self._transport.pause_reading()
        if self._limiter is not None:
            self._limiter.received(self, 0, self._loop.time())
            self._limiter.reading_held(self)

    def _decoded(self, result: Decoded) -> None:
        """The worker's answer for the big frame (on the loop): handle it, then what waited."""
        decoding, self._decoding = self._decoding, None
        if decoding is None or self._transport is None or self._closing:
            return  # closed meanwhile: nobody is left to serve
        self._held_bytes -= decoding.size
        if isinstance(result, MalformedMessage):
            log.warning("closing connection: malformed message", peer=self.peer, error=str(result))
            self.close()
            return
        self._call(*result)
        behind, self._behind = self._behind, deque()
        self._held_bytes -= sum(map(len, behind))
        if not self._closing:
            self._serve(behind)
        if self._decoding is None:
            self._resume_reading()
        self._account_resumed()

    def hold_reading(self) -> Callable[[], None]:
        """Handle nothing more from the peer until the returned release is called.

        For a handler whose work on a message goes on over several turns of the loop
        (the master adopting a big re-registration a chunk at a time): the peer's
        next messages must not be handled before that work is done. Reading stops;
        frames already received wait, in order, like those behind a frame decoded
        off the loop. Holds compose with each other and with the other reasons
        reading stops (``write_paused``, a frame on the worker): reading resumes when
        none is left. The release is idempotent and must be called on the loop; the
        frames that waited are handled on the loop's next turn, not inside it.
        """
        self._holds += 1
        if self._transport is not None:
            self._transport.pause_reading()
        if self._limiter is not None:
            self._limiter.reading_held(self)
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            self._holds -= 1
            if not self._holds:
                self._loop.call_soon(self._unheld)

        return release

    def _unheld(self) -> None:
        """The last hold was released: handle what waited, then read again."""
        if self._holds or self._decoding is not None or self._transport is None or self._closing:
            return  # held again, decoding (its end serves what waits), or gone
        behind, self._behind = self._behind, deque()
        self._held_bytes -= sum(map(len, behind))
        self._serve(behind)
        if self._decoding is None:
            self._resume_reading()
        self._account_resumed()

    def _account_resumed(self) -> None:
        """Tell the limiter what is still pending once held frames were served, and
        restart the incomplete frame's clock if this side reads again."""
        if self._limiter is None or self._closing:
            return
        now = self._loop.time()
        self._limiter.received(self, 0, now)
        if not self.reading_held:
            self._limiter.reading_released(self, now)

    def _resume_reading(self) -> None:
        """Read again, unless something else still holds reading back."""
        transport = self._transport
        if (
            transport is not None
            and not self._closing
            and not self.write_paused
            and self._decoding is None
            and not self._holds
        ):
            transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._decoder.clear()
        self._drop_held()
        if not self.closed.done():
            self.closed.set_result(None)
        if self._limiter is not None:
            self._limiter.release(self)
        lost = getattr(self.handler, "connection_lost", None)
        if lost is not None:
            try:
                lost(self)
            except Exception:
                log.exception("connection_lost handler failed", peer=self.peer)

    def pause_writing(self) -> None:
        """The transport holds more than its high-water mark for the peer. With a
        limiter, stop reading from the peer until it has taken most of it: it asks
        for nothing more while it does not read what it asked for. (Without one, keep
        reading: a client must, or both ends could wait for the other.)"""
        if self._limiter is None or self._transport is None:
            return
        self.write_paused = True
        self._transport.pause_reading()
        self._limiter.write_paused(self, self._loop.time())

    def resume_writing(self) -> None:
        if self._limiter is None or not self.write_paused:
            return
        self.write_paused = False
        self._resume_reading()
        self._limiter.write_resumed(self, self._loop.time())

    # -- what is held ------------------------------------------------------

    @property
    def reading_held(self) -> bool:
        """True while this side stopped reading for its own reasons: a frame on the
        decode worker, or a handler's :meth:`hold_reading`."""
        return self._decoding is not None or self._holds > 0

    @property
    def pending_input(self) -> int:
        """Bytes received from the peer and not served yet: an incomplete frame, a
        big frame being decoded off the loop with those that came behind it, and
        frames waiting while reading is held."""
        return self._decoder.pending + self._held_bytes

    @property
    def bytes_sent(self) -> int:
        """Bytes the peer's side has taken so far (handed to the kernel)."""
        transport = self._transport
        return self._bytes_out - (transport.get_write_buffer_size() if transport is not None else 0)

    def unsent_bytes(self) -> int:
        """Bytes queued for the peer that have not reached the kernel yet."""
        transport = self._transport
        buffered = transport.get_write_buffer_size() if transport is not None else 0
        return buffered + sum(map(len, self._outbox))

    # -- sending ----------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._transport is not None and not self._closing

    def remote(self, schema: ServiceSchema) -> Remote:
        """A stub calling the peer's service ``schema`` over this connection."""
        stub = self._remotes.get(id(schema))
        if stub is None:
            stub = self._remotes[id(schema)] = Remote(self.send, schema)
        return stub

    def send(self, message: bytes) -> None:
        """Queue one framed message; silently dropped once the connection is closed.

        Dropping is the actor-model contract: a message to a dead peer is lost, and
        the protocol above (acknowledgements, re-registration) makes up for it.
        """
        if threading.get_ident() != self._loop_thread:
            self._loop.call_soon_threadsafe(self.send, message)
            return
        if self._transport is None or self._closing:
            return
        if self._write_max:
            # What waits for the peer before this message: the outbox, and the
            # transport's buffer once above its high-water mark (below it, at most
            # that mark). One message always goes to a peer that keeps up.
            queued = self._outbox_bytes
            if self.write_paused:
                queued += self._transport.get_write_buffer_size()
            if queued >= self._write_max:
                self._limiter.overflow(self, queued)  # type: ignore[union-attr]
                return
            self._outbox_bytes += len(message)
        TRAFFIC.sent += 1
        self._outbox.append(message)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._flusher.add(self)

    def _flush(self) -> None:
        self._flush_scheduled = False
        self._outbox_bytes = 0
        if self._transport is None or not self._outbox:
            self._outbox.clear()
            return
        data = b"".join(self._outbox) if len(self._outbox) > 1 else self._outbox[0]
        self._outbox.clear()
        self._bytes_out += len(data)
        TRAFFIC.writes += 1
        self._transport.write(data)

    def close(self) -> None:
        """Flush what is queued, then close. Safe to call more than once, from any thread."""
        if threading.get_ident() != self._loop_thread:
            self._loop.call_soon_threadsafe(self.close)
            return
        if self._transport is not None and not self._closing:
            self._flush()
            self._closing = True
            self._drop_held()
            self._transport.close()
            # A peer that does not read would keep the close (and the buffer) waiting
            # forever: the limiter aborts it once it stops taking bytes.
            if self._limiter is not None and self._transport.get_write_buffer_size():
                self._limiter.closing(self, self._loop.time())

    def abort(self) -> None:
        """Drop the connection now, with whatever waits in either direction (the
        limits do this: their peers may never read). Event-loop thread only."""
        transport = self._transport
        if transport is None:
            return
        self._closing = True
        self._outbox.clear()
        self._outbox_bytes = 0
        self._decoder.clear()
        self._drop_held()
        transport.abort()

    def _drop_held(self) -> None:
        """Forget the frames not served yet (the connection is gone)."""
        decoding, self._decoding = self._decoding, None
        if decoding is not None and decoding.ticket is not None:
            decoding.ticket.cancel()
        self._behind.clear()
        self._held_bytes = 0


def _set_nodelay(sock: Any) -> None:
    import socket

    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except (OSError, AttributeError):  # not TCP (e.g. a unix socket in tests)
        pass


KEEPALIVE_IDLE = 10
"""Seconds a dialled connection may carry nothing before the kernel probes the peer."""
KEEPALIVE_INTERVAL = 5
KEEPALIVE_PROBES = 3
UNACKED_TIMEOUT = 120
"""Seconds data sent may stay unacknowledged before the kernel gives the connection up
(long: a peer that stops reading for a while, e.g. an overloaded master, is not dead)."""


def _set_keepalive(sock: Any) -> None:
    """Have the kernel find a dialled peer that vanished, even on a connection that
    carries nothing: after a partition the peer's FIN or RST may never arrive, and an
    idle agent or scheduler would wait on a dead connection for ever instead of
    redialling. Probes after :data:`KEEPALIVE_IDLE` s of silence, every
    :data:`KEEPALIVE_INTERVAL` s, :data:`KEEPALIVE_PROBES` of them (25 s in all); data
    unacknowledged for :data:`UNACKED_TIMEOUT` s ends it too. (The master finds its
    silent peers by pinging them, :mod:`mezzo.master.health`.)"""
    import socket

    options = [
        (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPIDLE", None), KEEPALIVE_IDLE),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPINTVL", None), KEEPALIVE_INTERVAL),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPCNT", None), KEEPALIVE_PROBES),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_USER_TIMEOUT", None), UNACKED_TIMEOUT * 1000),
    ]
    for level, option, value in options:
        if option is None:
            continue  # not on this platform: the probes that are still help
        try:
            sock.setsockopt(level, option, value)
        except (OSError, AttributeError):  # not TCP (e.g. a unix socket in tests)
            return


class _Decoding:
    """A frame of this connection on the worker."""

    __slots__ = ("size", "ticket")

    def __init__(self, size: int) -> None:
        self.size = size
        self.ticket: Ticket | None = None
