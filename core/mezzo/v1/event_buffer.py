"""The events waiting to go out on one v1 event stream (a scheduler's or an executor's).

A daemon's code hands events to a stream from wherever it is (the master's state
changing, an agent launching a task) and must never wait for a slow reader. This
buffer sits between that code and the stream's HTTP response:

- :meth:`EventBuffer.send` appends one event, framed in RecordIO, and returns at once;
- until the response's head is out, events wait here (the handler writes the first of
  them with the head: :meth:`EventBuffer.take`); from :meth:`EventBuffer.push_to` on,
  the buffer writes them itself, each as one HTTP chunk, once per turn of the loop
  whatever number came in it;
- the handler only waits (:meth:`EventBuffer.idle`) for the stream to end or to have
  been silent for its heartbeat interval, then sends a ``HEARTBEAT``;
- :meth:`EventBuffer.close` ends the stream once what is buffered is written.

Why push rather than the handler pulling each event: a v1 framework gets two or three
events per task, and waking a handler task for each (a future, a timer, a turn of the
task, aiohttp's writer) made an event cost its server 32-44 µs of CPU against 21.5 µs
now (docs/benchmarks.md, the v1 façade's cost). A turn's events still leave in one
write. The response stays aiohttp's: it writes the head, and the end once closed.

**Bounded.** At most ``max_bytes`` of events wait for a reader that does not read them,
counting what the connection has not sent yet; past that the buffer is dropped, the
stream closed, and ``abort`` (the connection's) called: a peer that stops reading costs
the daemon that much memory and no more.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from . import translate
from .recordio import frame


class EventBuffer:
    """One stream's buffered events; see the module docstring."""

    def __init__(self, max_bytes: int, abort: Callable[[], None] | None = None) -> None:
        self.max_bytes = max_bytes
        self._abort = abort
        """Drops the HTTP connection at once (a peer that stopped reading): what it has
        not read would otherwise only go after ``write_stall_timeout``."""
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._transport: asyncio.WriteTransport | None = None
        """Where events are written once the response's head is out (:meth:`push_to`)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._flush_due = False
        """A write of the buffered events is scheduled for this turn's end."""
        self._last_write = 0.0
        """When events were last written (the loop's clock): the heartbeat's reference."""
        self._waiter: asyncio.Future[None] | None = None
        """What the handler awaits in :meth:`idle`, woken when the stream closes."""
        self.closing = False
        """No more events: what is buffered is written, then the response ends."""
        self.end_reason = ""
        """Why the stream ended from the daemon's side ("" while it lasts, or when the peer left)."""

    @property
    def is_open(self) -> bool:
        return not self.closing

    def close(self, reason: str = "") -> None:
        """End the stream once what is buffered is written."""
        if not self.closing:
            self.closing = True
            self.end_reason = reason
            if self._waiter is not None:
                _wake(self._waiter)

    def send(self, kind: str, payload: dict[str, Any] | None) -> None:
        """Buffer the event ``{"type": kind, kind.lower(): payload}`` (nothing once closing)."""
        if self.closing:
            return
        record = frame(translate.event(kind, payload))
        transport = self._transport
        unsent = transport.get_write_buffer_size() if transport is not None else 0
        if self._buffered + unsent + len(record) > self.max_bytes:
            self._chunks.clear()
            self._buffered = 0
            self.close(f"more than {self.max_bytes >> 20} MiB of events unread: the peer is not reading")
            if self._abort is not None:
                self._abort()
            return
        self._chunks.append(record)
        self._buffered += len(record)
        if transport is not None and not self._flush_due:
            self._flush_due = True
            self._loop.call_soon(self.flush)  # type: ignore[union-attr]

    def heartbeat(self) -> None:
        """What the handler sends after its interval without an event: written at once,
        which restarts the interval."""
        self.send("HEARTBEAT", None)
        self.flush()

    def take(self) -> bytes:
        """Everything buffered (b"" if nothing is), no longer buffered."""
        if not self._chunks:
            return b""
        chunk = b"".join(self._chunks)
        self._chunks.clear()
        self._buffered = 0
        return chunk

    def push_to(self, transport: asyncio.WriteTransport) -> None:
        """From now on, write the events to ``transport`` as HTTP chunks, as they come
        (the response's head must be out: aiohttp may hold it until its first write)."""
        self._transport = transport
        self._loop = asyncio.get_running_loop()
        self._last_write = self._loop.time()
        self.flush()

    def flush(self) -> None:
        """Write what is buffered, as one chunk (nothing before :meth:`push_to`). A
        connection found closing ends the stream: the peer left. Once the stream is
        closing, this writes the last events and lets go of the connection: whatever
        follows on it (the response's end, another request's answer) is not the buffer's."""
        self._flush_due = False
        transport = self._transport
        if transport is None:
            return
        if transport.is_closing():
            self._chunks.clear()
            self._buffered = 0
            self.close()
        else:
            data = self.take()
            if data:
                transport.write(b"%x\r\n%b\r\n" % (len(data), data))
                self._last_write = self._loop.time()  # type: ignore[union-attr]
        if self.closing:
            self._transport = None

    async def idle(self, heartbeat: float) -> bool:
        """Wait until the stream closes (True) or has written nothing for ``heartbeat``
        seconds (False). One timer per interval, however many events pass meanwhile."""
        loop = asyncio.get_running_loop()
        while not self.closing:
            quiet_until = self._last_write + heartbeat
            if loop.time() >= quiet_until:
                return False
            # A bare future and a timer, not wait_for() on an Event: no task of its own.
            self._waiter = waiter = loop.create_future()
            timer = loop.call_at(quiet_until, _wake, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None
        return True


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
