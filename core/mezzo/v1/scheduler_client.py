"""A blocking client of the v1 scheduler API: a framework in one thread, no event loop.

``mezzo run`` is a framework of one task that lives for a few tens of milliseconds;
the Thrift driver's event loop, codec and threads would be most of its cost. This
client speaks the master's v1 scheduler API (:mod:`mezzo.http.scheduler_api`)
instead, as any Mesos framework would: one connection holds the ``SUBSCRIBE``
stream, read by a thread into :class:`Events`; calls go on a second, kept-alive one.

    client = SchedulerClient(("127.0.0.1", 5050), {"name": "run", "user": "me"}, context=None)
    framework_id = client.subscribe()
    event = client.next_event(timeout=1.0)     # a dict, None after timeout, or StreamEnded
    client.call("ACCEPT", {...})
    client.close()

Errors: :class:`CallRefused` (the master answered a call or the subscription with an
error status: ``status`` and its text), and the socket's own ``OSError`` s.
"""

from __future__ import annotations

import _thread
import json
import time
from collections import deque

from ..blocking_http import HttpConnection
from .recordio import RecordReader

# typing itself is not imported: 2-3 ms of a command's start-up.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import ssl
    from typing import Any

PATH = "/api/v1/scheduler"
IDLE_REDIAL_SECONDS = 20.0
"""A calls' connection idle this long is replaced before the next call (see :meth:`SchedulerClient.call`)."""
JSON = {"Content-Type": "application/json", "Accept": "application/json"}


class CallRefused(Exception):
    """The master answered ``status`` (not 2xx) with ``text``."""

    def __init__(self, call: str, status: int, text: str) -> None:
        super().__init__(f"{call}: HTTP {status}: {text}")
        self.call = call
        self.status = status
        self.text = text


class StreamEnded:
    """The event after the last: the stream is over (``reason`` says how)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"StreamEnded({self.reason!r})"


class Events:
    """What the stream's reader thread hands to the caller's: a queue with one producer.

    Built on ``_thread``'s lock, not ``queue`` and ``threading``, whose imports were 1.5 ms
    of ``mezzo run``'s start-up. The lock is held while no event is signalled: the
    reader releases it after adding one (if it is held), the caller takes it to wait. As
    only the reader releases it, the lock it found held is still held when it releases."""

    def __init__(self) -> None:
        self._items: deque[dict[str, Any] | StreamEnded] = deque()
        self._signal = _thread.allocate_lock()
        self._signal.acquire()

    def put(self, event: dict[str, Any] | StreamEnded) -> None:
        self._items.append(event)
        if self._signal.locked():
            self._signal.release()

    def get(self, timeout: float | None) -> dict[str, Any] | StreamEnded | None:
        """The oldest event; None when none came within ``timeout`` seconds (None: wait)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._items:
            if deadline is None:
                self._signal.acquire()
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self._signal.acquire(timeout=left)
        return self._items.popleft()


class SchedulerClient:
    """One framework's subscription and calls; see the module docstring."""

    def __init__(
        self,
        address: tuple[str, int],
        framework_info: dict[str, Any],
        *,
        context: ssl.SSLContext | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.address = address
        self.framework_info = framework_info
        self.framework_id = ""
        self.stream_id = ""
        self._context = context
        self._timeout = timeout
        self._stream: HttpConnection | None = None
        self._calls: HttpConnection | None = None
        self._events = Events()
        self._last_call = 0.0

    def subscribe(self, framework_id: str = "") -> str:
        """Subscribe (again, as ``framework_id``, after a lost stream); the framework's
        id once ``SUBSCRIBED`` came. :class:`CallRefused` when the master refused."""
        info = dict(self.framework_info)
        call: dict[str, Any] = {"type": "SUBSCRIBE", "subscribe": {"framework_info": info}}
        if framework_id:
            info["id"] = {"value": framework_id}
            call["framework_id"] = {"value": framework_id}
        for _hop in range(2):
            host, port = self.address
            self._stream = HttpConnection(host, port, timeout=self._timeout, context=self._context)
            answer = self._stream.open("POST", PATH, json.dumps(call).encode(), JSON)
            if answer.status == 200:
                break
            text = answer.read_body(64 * 1024).decode("utf-8", "replace")
            self._stream.close()
            location = answer.header("location") or ""
            if answer.status == 307 and location.startswith("//"):
                # A standby names the leader (``//host:port/path``): subscribe there.
                where = location[2:].split("/", 1)[0]
                leader, _, leader_port = where.rpartition(":")
                if leader and leader_port.isdigit():
                    self.address = (leader.strip("[]"), int(leader_port))
                    continue
            raise CallRefused("SUBSCRIBE", answer.status, text.strip())
        else:
            raise CallRefused("SUBSCRIBE", 307, "redirected twice: no master leads")
        self.stream_id = answer.header("mesos-stream-id") or ""
        self._events = Events()
        # The reader's first wait must not end at the calls' timeout: a socket's timeout
        # set later does not reach a read already waiting, and the first offers may be a
        # while coming. Set below to five heartbeats, for the reads after that one.
        self._stream.set_read_timeout(None)
        # A daemon thread (``_thread``'s are): the run may end while it waits on the stream.
        _thread.start_new_thread(self._read, (answer, self._events))
        first = self.next_event(self._timeout)
        try:
            assert isinstance(first, dict) and first.get("type") == "SUBSCRIBED"
            subscribed = first["subscribed"]
            self.framework_id = subscribed["framework_id"]["value"]
            heartbeat = float(subscribed.get("heartbeat_interval_seconds", 15.0))
        except (AssertionError, KeyError, TypeError, ValueError):
            self._stream.close()
            raise CallRefused(
                "SUBSCRIBE", 200, f"the stream began with {str(first)[:200]}, not SUBSCRIBED"
            ) from None
        # Quiet for up to a heartbeat interval: a stream with no event for five of them
        # is taken for broken (what Mesos asks of its clients), not the calls' timeout.
        self._stream.set_read_timeout(max(5 * heartbeat, self._timeout))
        return self.framework_id

    def _read(self, answer: Any, events: Events) -> None:
        reader = RecordReader()
        reason = "the master ended the stream"
        try:
            for piece in answer.pieces():
                for record in reader.feed(piece):
                    events.put(json.loads(record))
        except Exception as exc:  # noqa: BLE001 - whatever broke it, the stream is over
            reason = f"the stream broke: {type(exc).__name__}: {exc}"
        finally:
            events.put(StreamEnded(reason))

    def next_event(self, timeout: float | None) -> dict[str, Any] | StreamEnded | None:
        """The next event; None when none came within ``timeout`` seconds."""
        return self._events.get(timeout)

    def call(self, kind: str, body: dict[str, Any] | None = None) -> None:
        """Send one call (``body`` under the type's key); :class:`CallRefused` unless 2xx."""
        message: dict[str, Any] = {"type": kind, "framework_id": {"value": self.framework_id}}
        if body is not None:
            message[kind.lower()] = body
        now = time.monotonic()
        if self._calls is not None and now - self._last_call > IDLE_REDIAL_SECONDS:
            # The master closes idle keep-alive connections (60 s by default): a call is
            # never sent down one it may have closed, since it could not be sent again.
            self._calls.close()
            self._calls = None
        if self._calls is None:
            host, port = self.address
            self._calls = HttpConnection(host, port, timeout=self._timeout, context=self._context)
        self._last_call = now
        try:
            answer = self._calls.request(
                "POST", PATH, json.dumps(message).encode(), {**JSON, "Mesos-Stream-Id": self.stream_id}
            )
        except BaseException:
            self._calls.close()
            self._calls = None
            raise
        if not 200 <= answer.status < 300:
            raise CallRefused(kind, answer.status, answer.body.decode("utf-8", "replace").strip())

    def close(self) -> None:
        for conn in (self._calls, self._stream):
            if conn is not None:
                conn.close()
        self._calls = self._stream = None
