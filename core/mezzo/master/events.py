"""The master's event stream for tools: what changed, as it happens.

Tools that mirror the cluster (dashboards, service discovery, the CLI following a
task) would otherwise poll ``/state``, which is what hurt Mesos masters most. They
subscribe instead (``POST /api/v1 {"type": "SUBSCRIBE"}`` or ``GET /events``, see
:mod:`mezzo.http.event_api`) and get one JSON object per change, named as Apache
Mesos' v1 operator API names them::

    {"type": "SUBSCRIBED", "subscribed": {"heartbeat_interval_seconds": 15.0, ...}}
    {"type": "TASK_ADDED", "task_added": {"task": {...}}}
    {"type": "TASK_UPDATED", "task_updated": {"framework_id": ..., "state": ..., "status": {...}}}
    {"type": "AGENT_ADDED", "agent_added": {"agent": {...}}}
    {"type": "AGENT_REMOVED", "agent_removed": {"agent_id": ..., "reason": ...}}
    {"type": "FRAMEWORK_ADDED" | "FRAMEWORK_UPDATED", "framework_added" | ...: {"framework": {...}}}
    {"type": "FRAMEWORK_REMOVED", "framework_removed": {"framework_id": ..., "reason": ...}}
    {"type": "HEARTBEAT"}

Bodies are in the HTTP API's shapes (:mod:`.mesos_view`: flat resources, ``TASK_*``
names), not protobuf JSON. ``SUBSCRIBED`` carries counts, not the whole state (at
50,000 agents that would be the very poll the stream replaces): a tool reads
``/state`` once after subscribing and applies the events from there.

Contracts:

- **Nothing when nobody listens.** :meth:`EventStream.publish` takes a function
  making the body, called only when someone subscribed: the master's hot paths pay
  one attribute test per change otherwise.
- **Bounded.** At most :data:`MAX_SUBSCRIBERS` subscribers; each has a queue of at
  most :data:`QUEUE_BYTES` of encoded events. One that falls further behind (a tool
  that stopped reading) is cut off with a last ``ERROR`` event saying so, not waited
  for: the master never holds events for it without bound.
- **Each sees what it may.** A subscriber's :class:`~mezzo.acls.View` filters the
  events as it filters ``/state``: frameworks (and their tasks) by user, agents only
  with ``view_cluster``.
- The stream belongs to the master process: it ends (each subscriber gets ``ERROR``)
  when the master stops leading.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from .. import state_name
from ..acls import View
from ..task_user import DEFAULT_USER
from .mesos_view import agent_body, task_body
from .state_view import shows

if TYPE_CHECKING:
    from ..wire.ttypes import FrameworkInfo, TaskStatus
    from .records import AgentRecord, FrameworkRecord, TaskRecord

log = structlog.get_logger("mezzo.master", component="events")

MAX_SUBSCRIBERS = 64
"""Subscribers at once; one more is refused (503) until one leaves."""
QUEUE_BYTES = 8 << 20
"""Encoded events a subscriber may have waiting before it is cut off."""

AGENTS = "agents"
"""The scope of an event about agents: shown only to viewers of the cluster."""


class Subscriber:
    """One subscriber's queue of encoded events (see the module docstring)."""

    def __init__(self, view: View) -> None:
        self.view = view
        self._queue: deque[bytes] = deque()
        self._bytes = 0
        self._wake: asyncio.Event = asyncio.Event()
        self.ended: str | None = None
        """Why the stream ended (None while it runs)."""

    def put(self, record: bytes) -> bool:
        """Queue one encoded event; False (and the subscriber ended) when it is too far behind."""
        if self.ended is not None:
            return False
        if self._bytes + len(record) > QUEUE_BYTES:
            self.end(f"fell behind by more than {QUEUE_BYTES >> 20} MiB of events; subscribe again")
            return False
        self._queue.append(record)
        self._bytes += len(record)
        self._wake.set()
        return True

    def end(self, reason: str) -> None:
        """End the stream: the last event says ``reason``."""
        if self.ended is None:
            self.ended = reason
            self._queue.clear()
            self._bytes = 0
            self._queue.append(encode("ERROR", "error", {"message": reason}))
            self._wake.set()

    async def next_batch(self, timeout: float) -> list[bytes]:
        """The events queued since the last call (waiting up to ``timeout`` for one; an
        empty list when none came)."""
        if not self._queue:
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except TimeoutError:
                return []
        batch = list(self._queue)
        self._queue.clear()
        self._bytes = 0
        return batch


def encode(event_type: str, key: str | None, body: Any) -> bytes:
    """One event as JSON bytes: ``{"type": event_type, key: body}``."""
    event: dict[str, Any] = {"type": event_type}
    if key is not None:
        event[key] = body
    return json.dumps(event, separators=(",", ":")).encode()


class EventStream:
    """The master's subscribers and what is published to them."""

    def __init__(self) -> None:
        self.subscribers: set[Subscriber] = set()
        self.published = 0
        self.cut_off = 0
        """Subscribers ended for falling behind (a metric)."""

    def subscribe(self, view: View) -> Subscriber | None:
        """A new subscriber seeing what ``view`` shows; None when :data:`MAX_SUBSCRIBERS` listen."""
        if len(self.subscribers) >= MAX_SUBSCRIBERS:
            return None
        subscriber = Subscriber(view)
        self.subscribers.add(subscriber)
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self.subscribers.discard(subscriber)

    def publish(self, event_type: str, scope: FrameworkInfo | str, make_body: Callable[[], Any]) -> None:
        """Send an event to every subscriber whose view shows ``scope`` (a framework's
        info, or :data:`AGENTS`); ``make_body`` is called only if one does."""
        if not self.subscribers:
            return
        record: bytes | None = None
        for subscriber in list(self.subscribers):
            view = subscriber.view
            if not view.everything:
                if scope == AGENTS:
                    if not view.cluster:
                        continue
                elif not shows(view, scope):  # type: ignore[arg-type]
                    continue
            if record is None:
                try:
                    record = encode(event_type, event_type.lower(), make_body())
                except Exception:  # an event must never break what the master was doing
                    log.exception("event not published: its body could not be made", event=event_type)
                    return
                self.published += 1
            if not subscriber.put(record):
                self.cut_off += 1
                self.subscribers.discard(subscriber)

    def end_all(self, reason: str) -> None:
        """End every subscriber's stream (the master stops leading or stops)."""
        for subscriber in self.subscribers:
            subscriber.end(reason)
        self.subscribers.clear()

    # -- the events the master's parts publish ---------------------------------------------

    def task_added(self, task: TaskRecord, framework: FrameworkRecord) -> None:
        self.publish("TASK_ADDED", framework.info, lambda: {"task": task_body(task, framework.info.role)})

    def task_updated(
        self, task: TaskRecord, framework: FrameworkRecord | None, status: TaskStatus | None = None
    ) -> None:
        """``task`` changed state: reported by ``status``, or (None) decided by the master
        (its agent was lost, it was not re-reported)."""
        if framework is None:
            return  # the framework is gone: FRAMEWORK_REMOVED says it for its tasks
        self.publish(
            "TASK_UPDATED",
            framework.info,
            lambda: {
                "framework_id": task.framework_id,
                "state": state_name(task.state),
                "status": {
                    "task_id": task.id,
                    "agent_id": task.agent_id,
                    "state": state_name(task.state),
                    "message": task.message,
                    "reason": task.reason,
                    "source": (status.source or "") if status is not None else "master",
                    "timestamp": (status.timestamp if status is not None else None) or task.updated_at,
                    "exit_code": task.exit_code,
                },
            },
        )

    def agent_added(self, agent: AgentRecord) -> None:
        self.publish("AGENT_ADDED", AGENTS, lambda: {"agent": agent_body(agent)})

    def agent_removed(self, agent_id: str, reason: str) -> None:
        self.publish("AGENT_REMOVED", AGENTS, lambda: {"agent_id": agent_id, "reason": reason})

    def framework_added(self, framework: FrameworkRecord) -> None:
        self.publish("FRAMEWORK_ADDED", framework.info, lambda: {"framework": framework_body(framework)})

    def framework_updated(self, framework: FrameworkRecord) -> None:
        self.publish("FRAMEWORK_UPDATED", framework.info, lambda: {"framework": framework_body(framework)})

    def framework_removed(self, framework: FrameworkRecord, reason: str) -> None:
        self.publish(
            "FRAMEWORK_REMOVED", framework.info, lambda: {"framework_id": framework.id, "reason": reason}
        )


def framework_body(f: FrameworkRecord) -> dict[str, Any]:
    return {
        "id": f.id,
        "name": f.info.name,
        "user": f.info.user or DEFAULT_USER,
        "role": f.info.role,
        "principal": f.principal,
        "active": f.active and f.conn is not None,
        "connected": f.conn is not None,
        "failover_deadline": f.failover_deadline,
    }
