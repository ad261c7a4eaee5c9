"""Big frames are decoded off the event loop, so that no message holds a server still.

A server (the master, an agent) runs every handler on one event loop. The C decoder
(:meth:`.codec.ServiceSchema.decode`) holds the interpreter while it works: a
16 MiB frame of small structs (a reconciliation of 200,000 tasks, an agent
re-registering 150,000 tasks) held the master's loop for 0.3 to 0.75 s on this
kind of machine; no ping went out and no other peer was served meanwhile.

So a server decodes a frame larger than :data:`INLINE_DECODE_MAX` on the worker
thread of an :class:`OffLoopDecoder`, with the pure-Python readers
(:meth:`.codec.ServiceSchema.decode_yielding`). Python code gives up the interpreter
every switch interval, so the loop keeps serving everyone else while a big frame
decodes, at about half speed; the big frame itself decodes about twelve times slower
than inline. The connection it came on stops reading until its handler has run, so
its messages are still handled in the order they were sent, and a peer cannot queue
more than one big frame at a time per connection.

Frames up to :data:`INLINE_DECODE_MAX` (nearly all: a status update is 200 bytes, a
launch of a few tasks a few KB) decode inline, in at most a few milliseconds.
Clients (scheduler and executor drivers) decode everything inline: their loop serves
only them, and a driver decodes a big offer message ten times faster that way.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable

import structlog

from .codec import MalformedMessage, ServiceSchema

log = structlog.get_logger("mezzo.rpc")

INLINE_DECODE_MAX = 64 * 1024
"""Bytes: frames up to this size decode on the loop (at most about 5 ms of it)."""

Decoded = tuple[str, tuple] | MalformedMessage
"""What a decode gives back: ``(method, args)``, or why the frame is not a message."""


class Ticket:
    """A frame waiting for (or on) the worker; :meth:`cancel` when nobody wants it."""

    __slots__ = ("_decoder", "cancelled", "done", "loop", "max_frame", "payload", "schema")

    def __init__(
        self,
        decoder: OffLoopDecoder,
        schema: ServiceSchema,
        payload: bytes,
        max_frame: int,
        loop: asyncio.AbstractEventLoop,
        done: Callable[[Decoded], None],
    ) -> None:
        self._decoder = decoder
        self.schema = schema
        self.payload: bytes | None = payload
        self.max_frame = max_frame
        self.loop = loop
        self.done = done
        self.cancelled = False

    def cancel(self) -> None:
        """Do not decode the frame (or do not deliver it, if under way), and let its
        bytes go now: a connection closed with a big frame waiting."""
        self.cancelled = True
        self._decoder._withdraw(self)


class OffLoopDecoder:
    """One worker thread decoding the big frames of every connection of a process.

    One thread is enough: the work is interpreter-bound, so more threads would only
    take more turns from the loop. Frames wait in arrival order; each connection has
    at most one waiting (it stops reading meanwhile), so what waits is bounded by the
    connections a server admits, and the bytes in it count towards its
    ``partial_frames_max_bytes`` (:mod:`.limits`) as received-but-unserved input.

    The thread is a daemon: a process exiting does not wait for a decode nobody
    needs any more.
    """

    def __init__(self) -> None:
        self._queue: deque[Ticket] = deque()
        self._ready = threading.Condition()
        self._thread: threading.Thread | None = None
        self.decoded = 0
        """Frames decoded so far (metrics, tests)."""

    def submit(
        self,
        schema: ServiceSchema,
        payload: bytes,
        max_frame: int,
        done: Callable[[Decoded], None],
    ) -> Ticket:
        """Decode ``payload`` on the worker, then call ``done(result)`` on the calling
        thread's event loop (which must be running), unless cancelled first."""
        ticket = Ticket(self, schema, payload, max_frame, asyncio.get_running_loop(), done)
        with self._ready:
            self._queue.append(ticket)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name="mezzo-decode", daemon=True)
                self._thread.start()
            self._ready.notify()
        return ticket

    @property
    def waiting(self) -> int:
        """Frames queued, not counting the one being decoded."""
        return len(self._queue)

    def _withdraw(self, ticket: Ticket) -> None:
        with self._ready:
            try:
                self._queue.remove(ticket)  # linear in the queue: at most one per connection
            except ValueError:
                pass  # being decoded now: it is dropped when done
            ticket.payload = None

    def _work(self) -> None:
        while True:
            with self._ready:
                while not self._queue:
                    self._ready.wait()
                ticket = self._queue.popleft()
                payload = ticket.payload
            if payload is None:
                continue
            result: Decoded
            try:
                result = ticket.schema.decode_yielding(payload, ticket.max_frame)
            except MalformedMessage as exc:
                result = exc
            # The frame's bytes go now, not when the next one arrives.
            del payload
            ticket.payload = None
            self.decoded += 1
            if ticket.cancelled:
                continue
            try:
                ticket.loop.call_soon_threadsafe(_deliver, ticket, result)
            except RuntimeError:
                pass  # that loop is closed: nobody waits for this message any more


def _deliver(ticket: Ticket, result: Decoded) -> None:
    if not ticket.cancelled:
        ticket.done(result)


OFFLOAD = OffLoopDecoder()
"""The decoder of this process's servers (:func:`.endpoint.serve`)."""
