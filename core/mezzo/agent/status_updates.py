"""Reliable, ordered delivery of task status updates from the agent to the master.

Usage::

    updates = StatusUpdateManager(send=master_send, agent_id=lambda: agent.agent_id,
                                  retry=config.status_update_retry,
                                  on_stream_end=forget_task)
    updates.update(TaskStatus(task_id=..., framework_id=..., state=TASK_RUNNING))
    updates.acknowledge(framework_id, task_id, uuid)     # from the master
    updates.resend_all()                                 # after re-registration

Semantics (at-least-once, as in Apache Mesos):

- One :class:`StatusUpdateStream` per task. Updates are queued in the order they
  happen; only the oldest unacknowledged one is *in flight*. The next is sent
  only when the master's acknowledgement for the in-flight one comes back, so
  the scheduler sees a task's states in order even across retries and failover.
- Each update carries a ``uuid`` (kept when an executor supplied one, so the
  executor's own retries de-duplicate), the agent and framework ids, a ``source``
  and a ``timestamp``.
- The in-flight update is re-sent until acknowledged, backing off exponentially
  with jitter (:class:`~mezzo.backoff.Backoff`): the n-th wait is drawn between
  half and all of ``min(2 * retry * 2**n, MAX_RETRY_INTERVAL)``, so the first
  resend comes 1-2 s after the send by default, the next 2-4 s later, and none
  more than 30 s after the one before. Not sooner than ``retry * 2**n`` until
  the cap, because an update unacknowledged for a while usually means a master
  too busy to answer, and a resend only adds to its queue; jittered, because
  after a failover every agent's updates go out together. It is also re-sent at
  once after the agent re-registers (the master may have failed over and never
  seen it), which starts its backoff again.
- The schedule stretches for a master that answers slowly: the manager keeps a
  :class:`~mezzo.round_trip.RoundTripEstimate` of the time from an update's first
  send to its acknowledgement, and while that estimate's timeout ``T`` is above
  ``retry`` every wait is ``T / retry`` times longer (first ``T``-``2T``, capped as
  above). A master whose queue holds seconds of work then sees no resends of
  updates it has merely not reached yet.
- An acknowledgement whose uuid is not the one in flight (a duplicate, or for an
  update already taken over) is ignored.
- Once the terminal update of a task is acknowledged the stream ends and
  ``on_stream_end`` lets the agent drop the task. Updates arriving after a
  terminal one are dropped: a task does not come back to life.
- With a ``journal`` (the agent's :class:`~mezzo.agent.checkpoint.Checkpoint`),
  each update is recorded before it is first sent and each acknowledgement once
  applied; :meth:`StatusUpdateManager.recover` rebuilds a stream from the
  journal after the agent restarted (same uuids, so anything delivered before
  the crash is recognised downstream).

Error handling: ``send`` returns False when the master is unreachable; the update
stays queued and the retry timer keeps ticking, so nothing is lost while the
agent reconnects. Nothing here raises on bad acknowledgements.
"""

from __future__ import annotations

import asyncio
import time
import uuid as uuidlib
from collections import deque
from collections.abc import Callable
from typing import Any

import structlog

from .. import is_terminal, state_name
from ..backoff import Backoff
from ..round_trip import RoundTripEstimate
from ..wire.ttypes import TaskStatus
from .checkpoint.replay import SEEN_KEPT

log = structlog.get_logger("mezzo.agent", component="agent")

MAX_RETRY_INTERVAL = 30.0
"""Seconds: the longest wait between two sends of an unacknowledged update (unless the
configured ``retry`` is above half of it: then twice ``retry``)."""

StreamKey = tuple[str, str]
"""``(framework_id, task_id)``."""


class StatusUpdateStream:
    """The ordered, acknowledged updates of one task."""

    def __init__(
        self,
        key: StreamKey,
        send: Callable[[TaskStatus], bool],
        retry: float,
        round_trip: RoundTripEstimate | None = None,
    ) -> None:
        self.key = key
        self._send = send
        self._retry = max(retry, 0.001)
        first = 2 * self._retry  # the ceiling of the first wait; its floor is ``retry``
        self._backoff = Backoff(first, max(MAX_RETRY_INTERVAL, first))
        self._round_trip = round_trip
        self._sent_at: float | None = None
        """When the update in flight was first sent, while its round trip may be observed."""
        self._pending: deque[TaskStatus] = deque()
        self._uuids: set[str] = set()
        """Uuids of the most recent updates (at most :data:`SEEN_KEPT`, see there)..."""
        self._order: deque[str] = deque()
        """... oldest first ..."""
        self._pending_uuids: set[str] = set()
        """... and of every unacknowledged one, however many."""
        self._timer: asyncio.TimerHandle | None = None
        self.terminal_queued = False
        self.ended = False
        self.latest: TaskStatus | None = None
        """The most recent update added (acknowledged or not)."""

    @property
    def in_flight(self) -> TaskStatus | None:
        return self._pending[0] if self._pending else None

    def has_seen(self, uuid: str) -> bool:
        return uuid in self._uuids or uuid in self._pending_uuids

    def _saw(self, uuid: str) -> None:
        if uuid not in self._uuids:
            self._uuids.add(uuid)
            self._order.append(uuid)
            if len(self._order) > SEEN_KEPT:
                self._uuids.discard(self._order.popleft())

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, status: TaskStatus, record: Callable[[TaskStatus], None] | None = None) -> bool:
        """Queue ``status`` (already stamped with a uuid); False if dropped.

        ``record`` is called with it once it is accepted, before it is sent."""
        if self.has_seen(status.uuid):
            return False  # an executor retrying an update we already hold
        if self.terminal_queued:
            log.info(
                "dropping update after a terminal one",
                framework=self.key[0],
                task=self.key[1],
                state=state_name(status.state),
            )
            return False
        if record is not None:
            record(status)
        self._saw(status.uuid)
        self._pending_uuids.add(status.uuid)
        self._pending.append(status)
        self.latest = status
        if is_terminal(status.state):
            self.terminal_queued = True
        if len(self._pending) == 1:
            self._transmit(first=True)
        return True

    def acknowledge(self, uuid: str) -> bool:
        """The master acknowledged ``uuid``; True if it was the update in flight."""
        head = self.in_flight
        if head is None or head.uuid != uuid:
            return False
        self._pending_uuids.discard(self._pending.popleft().uuid)
        self._cancel_timer()
        self._backoff.reset()
        if self._sent_at is not None and self._round_trip is not None:
            self._round_trip.observe(time.monotonic() - self._sent_at)
        self._sent_at = None
        if is_terminal(head.state):
            self.ended = True
            self._pending.clear()
            self._pending_uuids.clear()
        elif self._pending:
            self._transmit(first=True)
        return True

    def resend(self) -> None:
        """Send the in-flight update again now and restart its backoff."""
        if self._pending:
            self._cancel_timer()
            self._backoff.reset()
            self._sent_at = None  # its first send may have gone to a master now gone
            self._transmit()

    def restore(self, pending: list[TaskStatus], seen: set[str], latest: TaskStatus | None) -> None:
        """Take back what a checkpoint recorded: ``pending`` (unacknowledged, oldest
        first) goes out again, in order, as if never sent."""
        for uuid in seen:
            self._saw(uuid)
        for status in pending:
            self._saw(status.uuid)
            self._pending_uuids.add(status.uuid)
        self._pending.extend(pending)
        self.latest = latest if latest is not None else (pending[-1] if pending else None)
        self.terminal_queued = self.latest is not None and is_terminal(self.latest.state)
        if self._pending:
            self._transmit()

    def close(self) -> None:
        self._cancel_timer()
        self._pending.clear()
        self._pending_uuids.clear()

    def _transmit(self, *, first: bool = False) -> None:
        """Send the update in flight and arm its resend. ``first``: its first send over
        a link the master has been answering on, so its round trip may be observed."""
        self._send(self._pending[0])
        if first:
            self._sent_at = time.monotonic()
        scale = 1.0 if self._round_trip is None else self._round_trip.timeout / self._retry
        self._timer = asyncio.get_running_loop().call_later(self._backoff.next(scale), self._resend_due)

    def _resend_due(self) -> None:
        self._timer = None
        if not self._pending:
            return
        head = self._pending[0]
        log.debug(
            "re-sending unacknowledged status update",
            framework=self.key[0],
            task=self.key[1],
            state=state_name(head.state),
            uuid=head.uuid,
        )
        self._transmit()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class StatusUpdateManager:
    """All streams of an agent, keyed by ``(framework_id, task_id)``."""

    def __init__(
        self,
        send: Callable[[TaskStatus], bool],
        agent_id: Callable[[], str],
        retry: float,
        on_stream_end: Callable[[StreamKey], None] = lambda key: None,
        journal: Any = None,
    ) -> None:
        self._send = send
        self._agent_id = agent_id
        self._retry = retry
        self._on_stream_end = on_stream_end
        self.round_trip = RoundTripEstimate(
            floor=max(retry, 0.001), ceiling=max(MAX_RETRY_INTERVAL / 2, retry)
        )
        """How long the master takes to acknowledge an update; stretches every stream's resends."""
        self._journal = journal if journal is not None and journal.enabled else None
        self._record = self._journal.update if self._journal is not None else None
        self.streams: dict[StreamKey, StatusUpdateStream] = {}

    def update(self, status: TaskStatus, *, source: str = "agent") -> TaskStatus | None:
        """Stamp ``status`` and queue it on its task's stream.

        Returns the stamped status, or None when the stream dropped it (duplicate
        uuid, or after the task's terminal update).
        """
        if not status.uuid:
            status.uuid = uuidlib.uuid4().hex
        status.agent_id = self._agent_id()
        status.source = status.source or source
        if not status.timestamp:
            status.timestamp = time.time()
        key = (status.framework_id, status.task_id)
        stream = self.streams.get(key)
        if stream is None:
            stream = self.streams[key] = StatusUpdateStream(key, self._send, self._retry, self.round_trip)
        return status if stream.add(status, self._record) else None

    def acknowledge(self, framework_id: str, task_id: str, uuid: str) -> bool:
        """Apply the master's acknowledgement; True when it matched the update in flight."""
        key = (framework_id, task_id)
        stream = self.streams.get(key)
        if stream is None or not stream.acknowledge(uuid):
            log.debug("ignoring stale acknowledgement", framework=framework_id, task=task_id, uuid=uuid)
            return False
        if self._journal is not None:
            self._journal.ack(framework_id, task_id, uuid)
        if stream.ended:
            del self.streams[key]
            self._on_stream_end(key)
        return True

    def holds(self, framework_id: str, task_id: str, uuid: str) -> bool:
        """True if the stream of the task has seen ``uuid`` (for executor retries)."""
        stream = self.streams.get((framework_id, task_id))
        return stream is not None and stream.has_seen(uuid)

    def latest(self, framework_id: str, task_id: str) -> TaskStatus | None:
        stream = self.streams.get((framework_id, task_id))
        return stream.latest if stream is not None else None

    def recover(
        self, key: StreamKey, pending: list[TaskStatus], seen: set[str], latest: TaskStatus | None
    ) -> StatusUpdateStream:
        """Rebuild the stream of ``key`` from a checkpoint (nothing is journaled again)."""
        stream = self.streams.get(key)
        if stream is None:
            stream = self.streams[key] = StatusUpdateStream(key, self._send, self._retry, self.round_trip)
        stream.restore(pending, seen, latest)
        return stream

    def resend_all(self) -> None:
        """After (re-)registration: every in-flight update goes out again."""
        for stream in self.streams.values():
            stream.resend()

    def drop_framework(self, framework_id: str) -> None:
        """Forget every update of a framework that was shut down (nobody will ack them)."""
        for key in [k for k in self.streams if k[0] == framework_id]:
            self.streams.pop(key).close()

    def close(self) -> None:
        for stream in self.streams.values():
            stream.close()
        self.streams.clear()
