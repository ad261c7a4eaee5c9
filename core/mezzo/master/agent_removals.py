"""How many agents the master may declare lost at once (Apache Mesos'
``--agent_removal_rate_limit``).

An agent that stops answering, or does not come back after its connection broke, is
removed: its tasks are reported TASK_LOST and killed if it ever returns. One agent
going is a fault of that agent. A large part of the cluster going at the same moment
is far more likely the master's own fault (its network link, its host, a stall) than
a coincidence, and acting on it would kill work all over the cluster. So removals
are limited: within any ``window`` seconds, at most ``fraction`` of the registered
agents (at least one) are removed; the others wait, and the master logs that it
suspects itself. If they are still gone in a later window, they are removed then, a
window's worth at a time.

Cost: a deque of the removal times within the window; O(1) amortised per question.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from .ports import Clock

log = structlog.get_logger("mezzo.master", component="master")


class RemovalLimit:
    """Decides whether one more agent may be removed now. See the module docstring."""

    def __init__(self, clock: Clock, *, fraction: float, window: float) -> None:
        self._clock = clock
        self.fraction = fraction
        self.window = window
        self._recent: deque[float] = deque()
        """Clock times of the removals within the window, oldest first."""
        self.deferred = 0
        """Removals refused so far (each retried later)."""
        self._warned_at = -math.inf

    def allow(self, registered: int, *, agent_id: str, reason: str) -> bool:
        """True (and counted) if an agent may be removed now, ``registered`` agents
        being in the cluster; False when the window's share is used up."""
        now = self._clock.now()
        recent = self._recent
        while recent and recent[0] <= now - self.window:
            recent.popleft()
        # The cluster as it was before this window's removals: those count against
        # the share, and must not shrink it.
        limit = max(1, math.floor(self.fraction * (registered + len(recent))))
        if len(recent) < limit:
            recent.append(now)
            return True
        self.deferred += 1
        if now - self._warned_at >= self.window / 4:
            self._warned_at = now
            log.warning(
                "many agents lost at once: suspecting the master itself, not removing them yet",
                removed_in_window=len(recent),
                limit=limit,
                window=self.window,
                agent=agent_id,
                reason=reason,
                deferred_so_far=self.deferred,
            )
        return False

    def next_chance(self) -> float:
        """Seconds until the oldest removal of the window leaves it (when to try again)."""
        if not self._recent:
            return 0.0
        return max(0.0, self._recent[0] + self.window - self._clock.now())
