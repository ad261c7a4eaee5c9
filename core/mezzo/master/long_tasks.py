"""Long and short tasks (paper §4.4).

A framework marks a task long (``TaskInfo.long``) or leaves it short. Long tasks
filling whole agents would keep frameworks with short tasks off those agents (and
off their data), so the master bounds what long tasks may hold on each agent:

- **The bound.** ``master.long_task_fraction`` of each agent's total, scalar by
  scalar (floored to a thousandth), fixed when the agent registers. At 1 (the
  default) nothing is bounded and offers carry no room.
- **The room.** An offer carries ``long_task_room``: the agent's bound minus what its
  long tasks hold, within the offer. A long task that does not fit in the room left
  (counting the long tasks before it in the same launch) is refused with TASK_ERROR,
  reason ``insufficient_long_task_room``. Short tasks may use anything.
- **The limit.** ``master.short_task_max`` (seconds, 0 = none): a task not marked long
  that runs longer is revoked (killed with ``master.revocation_grace_period``, reason
  ``revoked``), since it holds resources the bound meant for short tasks.

What a long task holds is its own resources; an executor it brought is not counted
(executors are shared by the framework's later tasks, long or short).
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING

import structlog

from ..resources import SCALE, Resources
from .periodic import PeriodicCheck
from .records import AgentRecord, TaskRecord
from .revocation_monitor import send_kill

if TYPE_CHECKING:
    from .state import ClusterState

log = structlog.get_logger("mezzo.master", component="long_tasks")

INSUFFICIENT_LONG_TASK_ROOM = "insufficient_long_task_room"


def long_task_limit(fraction: float, total: Resources) -> Resources | None:
    """What long tasks may hold on an agent of ``total``: ``fraction`` of each scalar,
    floored to a thousandth; None when nothing is bounded (``fraction >= 1``)."""
    if fraction >= 1:
        return None
    return Resources({name: math.floor(m * fraction) / SCALE for name, m in total.scalars.items()})


def is_long(task: TaskRecord) -> bool:
    return task.info.long is True


def room(agent: AgentRecord) -> Resources | None:
    """The long-task room left on ``agent`` (None: unbounded)."""
    if agent.long_limit is None:
        return None
    return agent.long_limit - agent.long_used


def offer_room(agent: AgentRecord, offered: Resources) -> Resources | None:
    """``Offer.long_task_room`` for an offer of ``offered`` on ``agent``."""
    left = room(agent)
    return None if left is None else left.intersection(offered)


def task_started(agent: AgentRecord, task: TaskRecord) -> None:
    if is_long(task):
        agent.long_used = agent.long_used + task.resources


def task_released(agent: AgentRecord, task: TaskRecord) -> None:
    if is_long(task):
        agent.long_used = agent.long_used - task.resources


class ShortTaskLimit(PeriodicCheck):
    """Revokes tasks not marked long that outlive ``master.short_task_max``.

    Tasks are queued in launch order with their deadline, so a check looks only at
    the tasks whose deadline passed: O(expired), whatever the number of tasks.
    """

    log = log  # this module's logger, with its component

    def __init__(self, state: ClusterState, max_seconds: float, grace: float) -> None:
        self.state = state
        self.max_seconds = max_seconds
        self.grace = grace
        self.interval = min(1.0, max(max_seconds / 4, 0.05))
        self.queue: deque[tuple[float, str, str]] = deque()
        """(loop-time deadline, framework id, task id) of short tasks, oldest first."""
        self.tasks_revoked = 0

    def task_started(self, task: TaskRecord) -> None:
        """Watch a task launched (or learned of from its agent) now."""
        if not is_long(task):
            self.queue.append((self.state.now() + self.max_seconds, task.framework_id, task.id))

    def task_ended(self, task: TaskRecord, agent: AgentRecord | None) -> None:
        """Nothing to do: an ended task is skipped when its deadline comes."""

    def launched(self, framework_id: str) -> None:
        """Nothing to do."""

    def check(self) -> list[TaskRecord]:
        """Revoke the short tasks past their deadline that still run; returns them."""
        state, now, revoked = self.state, self.state.now(), []
        queue = self.queue
        while queue and queue[0][0] <= now:
            _, fid, tid = queue.popleft()
            framework = state.frameworks.get(fid)
            task = framework.tasks.get(tid) if framework is not None else None
            agent = state.agents.get(task.agent_id) if task is not None else None
            if task is None or agent is None or agent.conn is None:
                continue  # ended, or its agent is away (its end or loss will be reported)
            message = (
                f"revoked: task ran longer than master.short_task_max ({self.max_seconds:g} s) "
                f"without being marked long"
            )
            log.info(
                "revoking a short task past short_task_max",
                framework=fid,
                task=tid,
                agent=agent.id,
                max_seconds=self.max_seconds,
            )
            send_kill(state, agent, fid, tid, grace=self.grace, message=message)
            self.tasks_revoked += 1
            revoked.append(task)
        return revoked
