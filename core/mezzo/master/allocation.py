"""The allocation cycle: the master's side of offering (the allocator decides whom).

:class:`Cycle` is what the allocator plugin sees (``mezzo.hookspecs.AllocationCycle``):
the agents with something free, a cheap ``may_offer`` check, and ``offer``. The
checks run in a fixed order, cheapest and most selective first:

1. refuse filters left by declines (O(1) per pair);
2. the framework's persistent filters from ``set_filters`` (only if it set any);
3. configured offer filter components, in TOML order.

Each "no" is counted by reason per framework, so ``mezzo state`` can answer "why
did framework F get no offer of agent A?".

:class:`AllocationTimer` batches triggers (freed resources, new frameworks,
revives) so that at most one cycle runs per ``allocation_interval``, but a trigger
after a quiet period runs at once: frameworks are not made to wait for a tick.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Callable, Iterable

from ..hookspecs import AllocationCycle
from ..resources import Resources
from .records import OfferRecord

if TYPE_CHECKING:
    from .master import Master

REFUSED = "refused recently (decline filter)"


class Cycle(AllocationCycle):
    """One allocation cycle over the master's state at loop time ``now``."""

    def __init__(self, master: "Master", now: float) -> None:
        self._m = master
        self._now = now
        self.made: dict[str, list[OfferRecord]] = defaultdict(list)
        self.skips: Counter[tuple[str, str]] = Counter()

    def agents(self) -> Iterable[str]:
        ids = [a.id for a in self._m.agents.values() if a.connected and a.free]
        random.shuffle(ids)
        return ids

    def free(self, agent_id: str) -> Resources:
        return self._m.agents[agent_id].free

    def may_offer(self, framework_id: str, agent_id: str) -> bool:
        m = self._m
        agent = m.agents.get(agent_id)
        framework = m.frameworks.get(framework_id)
        if agent is None or framework is None or framework.conn is None or not agent.free:
            return False
        if m.refusals.refuses(framework_id, agent_id, agent.free, self._now):
            self.skips[(framework_id, REFUSED)] += 1
            return False
        if framework.has_filters:
            for f in m.builtin_filters:
                reason = f.refuse(framework, agent, agent.free)
                if reason is not None:
                    self.skips[(framework_id, reason)] += 1
                    return False
        for f in m.offer_filters:
            reason = f.refuse(framework, agent, agent.free)
            if reason is not None:
                self.skips[(framework_id, f"{f.name}: {reason}")] += 1
                return False
        return True

    def offer(self, framework_id: str, agent_id: str) -> None:
        m = self._m
        agent = m.agents[agent_id]
        framework = m.frameworks[framework_id]
        resources = agent.free
        if not resources:
            return
        agent.free = Resources()
        offer = m.offer_book.create(framework, agent, resources, self._now)
        m.allocator.allocated(framework_id, resources)
        self.made[framework_id].append(offer)


class AllocationTimer:
    """Runs ``run`` after a trigger, at most once per ``interval`` seconds."""

    def __init__(self, loop: asyncio.AbstractEventLoop, interval: float, run: Callable[[], None]) -> None:
        self._loop = loop
        self._interval = interval
        self._run = run
        self._handle: asyncio.TimerHandle | asyncio.Handle | None = None
        self._last = -float("inf")
        self._wakeup: asyncio.TimerHandle | None = None
        self._wakeup_at = float("inf")

    def request(self) -> None:
        """Ask for a cycle: at once if none ran in the last interval, else at its end."""
        if self._handle is not None:
            return
        delay = self._last + self._interval - self._loop.time()
        if delay <= 0:
            self._handle = self._loop.call_soon(self._fire)
        else:
            self._handle = self._loop.call_later(delay, self._fire)

    def request_at(self, when: float) -> None:
        """Ask for a cycle at loop time ``when`` (a refuse filter or offer expiring)."""
        if when >= self._wakeup_at:
            return
        if self._wakeup is not None:
            self._wakeup.cancel()
        self._wakeup_at = when
        self._wakeup = self._loop.call_at(when, self._woken)

    def _woken(self) -> None:
        self._wakeup = None
        self._wakeup_at = float("inf")
        self.request()

    def _fire(self) -> None:
        self._handle = None
        self._last = self._loop.time()
        self._run()

    def cancel(self) -> None:
        for h in (self._handle, self._wakeup):
            if h is not None:
                h.cancel()
        self._handle = self._wakeup = None
