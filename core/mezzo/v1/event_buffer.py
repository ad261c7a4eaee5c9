"""The events waiting to go out on one v1 event stream (a scheduler's or an executor's).

A daemon's code hands events to a stream from wherever it is (the master's state
changing, an agent launching a task) and must never wait for a slow reader; the HTTP
handler that holds the streaming response writes them out on a turn of its own. This
buffer sits between them:

- :meth:`EventBuffer.send` appends one event, framed in RecordIO, and returns at once;
- :meth:`EventBuffer.next_chunk` (the handler) takes everything buffered, waiting for
  the first event up to a timeout (a ``HEARTBEAT`` is then the handler's to send);
- :meth:`EventBuffer.close` ends the stream once what is buffered is written.

**Bounded.** At most ``max_bytes`` of events wait for a reader that does not read them;
past that the buffer is dropped, the stream closed, and ``abort`` (the connection's)
called: a peer that stops reading costs the daemon that much memory and no more.
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
        """Drops the HTTP connection at once (a peer that stopped reading): the handler is
        stuck in a write it would otherwise only leave after ``write_stall_timeout``."""
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._waiter: asyncio.Future[None] | None = None
        """What the handler awaits while no event is buffered (see :meth:`next_chunk`)."""
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
            self._wake()

    def send(self, kind: str, payload: dict[str, Any] | None) -> None:
        """Buffer the event ``{"type": kind, kind.lower(): payload}`` (nothing once closing)."""
        if self.closing:
            return
        record = frame(translate.event(kind, payload))
        if self._buffered + len(record) > self.max_bytes:
            self._chunks.clear()
            self._buffered = 0
            self.close(f"more than {self.max_bytes >> 20} MiB of events unread: the peer is not reading")
            if self._abort is not None:
                self._abort()
            return
        self._chunks.append(record)
        self._buffered += len(record)
        self._wake()

    def heartbeat(self) -> None:
        """What the handler sends after its interval without an event."""
        self.send("HEARTBEAT", None)

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def next_chunk(self, timeout: float) -> bytes | None:
        """The events buffered since the last call, waiting up to ``timeout`` seconds
        for one (``b""`` if none came); None once the stream is closing and drained."""
        if not self._chunks and not self.closing:
            # A bare future and a timer, not wait_for() on an Event: this runs once per
            # event or two, and wait_for wraps every wait in a task of its own.
            loop = asyncio.get_running_loop()
            self._waiter = waiter = loop.create_future()
            timer = loop.call_later(timeout, self._wake)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None
            if not self._chunks and not self.closing:
                return b""
        if not self._chunks:
            return None if self.closing else b""
        chunk = b"".join(self._chunks)
        self._chunks.clear()
        self._buffered = 0
        return chunk
