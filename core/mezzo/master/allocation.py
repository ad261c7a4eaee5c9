"""The allocation cycle: the master's side of offering (the allocator decides whom).

:class:`Cycle` is what the allocator plugin sees (``mezzo.hookspecs.AllocationCycle``):
the agents with something free, a cheap ``may_offer`` check, and ``offer``. The
checks run in a fixed order, cheapest and most selective first:

1. refuse filters left by declines (O(1) per pair);
2. the framework's persistent filters from ``set_filters`` (only if it set any);
3. configured offer filter components, in TOML order.

Each "no" is counted by reason per framework, so ``mezzo state`` can answer "why
did framework F get no offer of agent A?".

Before any of that, ``agents()`` holds back an agent on which less than its minimum
offer is free (``master.min_offer``, paper §4.6): were each resource offered as soon
as a small task freed it, a framework with large tasks could be offered only crumbs
while frameworks with small tasks take every one. The minimum is capped by the
agent's total (:func:`effective_min_offer`), computed once when the agent registers,
so the check costs one comparison per agent with something free, and nothing when
no minimum is configured. Held-back agents are counted for ``mezzo state``
(``agents_below_min_offer``).

:class:`AllocationTimer` batches triggers (freed resources, new frameworks,
revives) so that at most one cycle runs per ``allocation_interval``, but a trigger
after a quiet period runs at once: frameworks are not made to wait for a tick.
Resources freed by a task's end are offered sooner still (see the class).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Callable, Iterable

from ..hookspecs import AllocationCycle
from ..resources import Resources
from .records import OfferRecord

if TYPE_CHECKING:
    from .master import Master


def effective_min_offer(min_offer: Resources | None, total: Resources) -> Resources | None:
    """What must be free on an agent of ``total`` resources before it is offered.

    ``min_offer`` (``master.min_offer``, scalars) capped by the agent's total, resource
    by resource: an agent smaller than the minimum is offered once it is entirely free
    (it would never be offered otherwise), and a resource the agent does not have is
    not waited for. None when nothing is to be waited for.
    """
    if min_offer is None:
        return None
    return min_offer.intersection(total) or None


class Cycle(AllocationCycle):
    """One allocation cycle over the master's state at loop time ``now``.

    ``may_offer`` is the innermost call of every allocator (agents x frameworks in
    the worst case), so it caches what it looked up for the agent it was last asked
    about: allocators ask about one agent for many frameworks in a row.
    """

    def __init__(self, master: "Master", now: float) -> None:
        self._m = master
        self._now = now
        self.made: dict[str, list[OfferRecord]] = defaultdict(list)
        self.skips: Counter[tuple[str, str]] = Counter()
        self.fully_refused_agents = 0
        self.agents_below_min_offer = 0
        self._agent_id: str | None = None
        self._agent = None
        self._agent_refusals: dict | None = None

    def agents(self) -> Iterable[str]:
        m = self._m
        refusals = m.refusals
        n_frameworks = len(m.frameworks)
        ids = []
        below_min = 0
        # Only the agents with something free: at steady state a small part of a
        # large cluster (see AgentRecord.offerable).
        for a in m.offerable.values():
            minimum = a.min_offer  # None unless master.min_offer is set
            if minimum is not None and not minimum.fits_in(a.free):
                below_min += 1
                continue
            if refusals.refused_by_all(a.id, n_frameworks):
                self.fully_refused_agents += 1
                continue
            ids.append(a.id)
        self.agents_below_min_offer += below_min
        random.shuffle(ids)
        return ids

    def free(self, agent_id: str) -> Resources:
        return self._m.agents[agent_id].free

    def _load_agent(self, agent_id: str) -> None:
        self._agent_id = agent_id
        self._agent = self._m.agents.get(agent_id)
        self._agent_refusals = self._m.refusals.of_agent(agent_id)

    def may_offer(self, framework_id: str, agent_id: str) -> bool:
        if agent_id != self._agent_id:
            self._load_agent(agent_id)
        agent = self._agent
        if agent is None or not agent.free:
            return False
        refusals = self._agent_refusals
        if refusals is not None:
            entry = refusals.get(framework_id)
            if entry is not None and entry[0] > self._now:
                return False
        m = self._m
        framework = m.frameworks.get(framework_id)
        if framework is None or framework.conn is None:
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

    def refusing(self, agent_id: str):
        # Every refusal held covers the agent's free pool and expired ones were
        # dropped at the start of the cycle, so the agent's refusal dict is the answer.
        return self._m.refusals.of_agent(agent_id) or frozenset()

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

    def reasons(self) -> dict[str, dict[str, int]]:
        """Per framework, why candidates were not offered, with counts (for ``mezzo state``).
        Refuse filters are not counted here: the state shows them directly."""
        out: dict[str, dict[str, int]] = {}
        for (fid, reason), n in self.skips.items():
            out.setdefault(fid, {})[reason] = n
        return out


PROMPT_FRACTION = 0.1
"""A prompt request waits at most this fraction of ``allocation_interval`` after the last cycle."""

PROMPT_COST_FACTOR = 10
"""...and at least this many times the last cycle's own cost, so that prompt cycles never take
more than about a tenth of the master's loop, however large the cluster."""


class AllocationTimer:
    """Runs ``run`` after a trigger, at most once per ``interval`` seconds.

    A *prompt* request (resources that a task's end freed) may run sooner: at most
    ``interval × PROMPT_FRACTION`` after the last cycle, but never sooner than
    ``PROMPT_COST_FACTOR`` times that cycle's cost after its end, and only while the
    master keeps up: when the last cycle ran later than it was due by more than that
    fraction, the loop is saturated and prompt requests wait the whole interval like
    any other (at 50,000 agents they cost latency instead of saving it). Why both kinds:
    tasks that end together end a few milliseconds apart, and with the full interval
    the second slot would wait up to a whole interval for the first slot's cycle to
    age (2-5 % of a job of one-second tasks, ``bench/overhead.py``). Declines and
    unused resources keep the full interval: a framework that declines with
    ``refuse_seconds = 0`` would otherwise be sent the same offer as fast as it can
    answer. Task ends are bounded by real work.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, interval: float, run: Callable[[], None]) -> None:
        self._loop = loop
        self._interval = interval
        self._run = run
        self._handle: asyncio.TimerHandle | asyncio.Handle | None = None
        self._handle_at = float("inf")
        self._last = -float("inf")
        self._last_end = -float("inf")
        self._last_cost = 0.0
        self._saturated = False
        self._wakeup: asyncio.TimerHandle | None = None
        self._wakeup_at = float("inf")

    def request(self, *, prompt: bool = False) -> None:
        """Ask for a cycle: at once if none ran in the last interval, else at its end
        (``prompt``: see the class docstring)."""
        if prompt and not self._saturated:
            when = max(self._last + self._interval * PROMPT_FRACTION,
                       self._last_end + self._last_cost * PROMPT_COST_FACTOR)
        else:
            when = self._last + self._interval
        if self._handle is not None:
            if when >= self._handle_at:
                return
            self._handle.cancel()
        now = self._loop.time()
        if when <= now:
            self._handle = self._loop.call_soon(self._fire)
            self._handle_at = now
        else:
            self._handle = self._loop.call_at(when, self._fire)
            self._handle_at = when

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
        self._last = self._loop.time()
        self._saturated = self._last - self._handle_at > self._interval * PROMPT_FRACTION
        self._handle = None
        self._handle_at = float("inf")
        started = time.perf_counter()
        try:
            self._run()
        finally:
            self._last_cost = time.perf_counter() - started
            self._last_end = self._loop.time()

    def cancel(self) -> None:
        for h in (self._handle, self._wakeup):
            if h is not None:
                h.cancel()
        self._handle = self._wakeup = None
        self._handle_at = self._wakeup_at = float("inf")
