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

:class:`Allocation` runs the cycles of one leadership term: it expires refuse
filters and offers, hands the allocator a :class:`Cycle`, and sends what it
offered. When cycles run is :class:`~.allocation_timer.AllocationTimer`'s call.

**A cycle is all or nothing.** An allocator that raises half-way through
``allocate`` (a bug in a plugin) may have made some offers already; were they
kept but never sent, their resources would sit booked to frameworks that never
heard of them until ``offer_timeout``. So the cycle's offers are rolled back: taken
off the book, returned to their agents' free pools, and recovered from the
allocator, and another cycle is requested. The failure is reported through the
plugin guard (:mod:`mezzo.plugin_guard`). An offer filter that raises is "broken",
not "no": the pair is not offered in that cycle, the failure is counted, and the
state's ``not_offered`` shows it as ``"<filter>: error"``.
"""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from ..hookspecs import AllocationCycle
from ..resources import Resources
from ..wire.ttypes import Offer
from .allocation_timer import AllocationTimer
from .long_tasks import offer_room
from .records import AgentRecord, OfferRecord

if TYPE_CHECKING:
    from .ports import Timer
    from .recovery import Recovery
    from .state import ClusterState

log = structlog.get_logger("mezzo.master", component="master")


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
    """One allocation cycle over the cluster state at clock time ``now``.

    ``may_offer`` is the innermost call of every allocator (agents x frameworks in
    the worst case), so it caches what it looked up for the agent it was last asked
    about: allocators ask about one agent for many frameworks in a row.
    """

    def __init__(self, state: ClusterState, now: float) -> None:
        self._m = state
        self._now = now
        self.made: dict[str, list[OfferRecord]] = defaultdict(list)
        self.skips: Counter[tuple[str, str]] = Counter()
        self.fully_refused_agents = 0
        self.agents_below_min_offer = 0
        self._agent_id: str | None = None
        self._agent: AgentRecord | None = None
        self._agent_refusals: dict[str, tuple[float, Resources]] | None = None

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
            try:
                reason = f.refuse(framework, agent, agent.free)
            except Exception as exc:  # broken, not "no": see the module docstring
                m.guard.failed(f, "refuse", exc, framework=framework_id, agent=agent_id)
                self.skips[(framework_id, f"{f.name}: error")] += 1
                return False
            if reason is not None:
                self.skips[(framework_id, f"{f.name}: {reason}")] += 1
                return False
        return True

    def refusing(self, agent_id: str) -> Collection[str]:
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

    def roll_back(self) -> int:
        """Undo every offer of this cycle (its allocator failed); how many there were."""
        m = self._m
        undone = 0
        for offers in self.made.values():
            for offer in offers:
                m.return_offer(offer)
                undone += 1
        self.made.clear()
        return undone

    def reasons(self) -> dict[str, dict[str, int]]:
        """Per framework, why candidates were not offered, with counts (for ``mezzo state``).
        Refuse filters are not counted here: the state shows them directly."""
        out: dict[str, dict[str, int]] = {}
        for (fid, reason), n in self.skips.items():
            out.setdefault(fid, {})[reason] = n
        return out


@dataclass(slots=True)
class CycleTotals:
    """Counters over every cycle this master ran, across leadership terms (metrics)."""

    cycles: int = 0
    seconds: float = 0.0
    offers_made: int = 0
    failed: int = 0


class Allocation:
    """The allocation cycles of one leadership term. See the module docstring.

    ``run()`` is one cycle and can be called directly (the tests and the benchmarks
    do); ``request(prompt=...)`` asks for one through the timer; ``cancel()`` ends
    the term's timers.
    """

    def __init__(
        self, state: ClusterState, recovery: Recovery, *, interval: float, totals: CycleTotals
    ) -> None:
        self.state = state
        self.recovery = recovery
        self.totals = totals
        self.timer = AllocationTimer(state.clock, interval, self.run)
        self.request = self.timer.request
        self.last_cycle: dict[str, Any] = {}
        """What the latest cycle did, for ``mezzo state``."""
        self._offer_timer: Timer | None = None
        self._cancelled = False

    def run(self) -> None:
        """One allocation cycle: expire, let the allocator offer, send the offers."""
        state = self.state
        if self._cancelled or self.recovery.holding:
            return  # offers resume when recovery ends (it requests a cycle)
        started = time.perf_counter()
        now = state.now()
        state.refusals.expire(now)
        state.expire_offers(now)
        cycle = Cycle(state, now)
        if not state.allocator.allocate(cycle):
            undone = cycle.roll_back()
            self.totals.failed += 1
            log.warning(
                "allocation cycle rolled back: the allocator failed",
                allocator=state.allocator.name,
                offers_undone=undone,
            )
            state.request_allocation()
        sent = 0
        observe = state.observe
        outbox = state.outbox
        for fid, offers in cycle.made.items():
            record = state.frameworks[fid]
            wire = [self._offer_message(o) for o in offers]
            outbox.scheduler(record.conn).resource_offers(wire)
            sent += len(wire)
            observe.mezzo_offers_sent(framework_id=fid, offers=wire)
        self._arm_timers()
        elapsed = time.perf_counter() - started
        totals = self.totals
        totals.cycles += 1
        totals.seconds += elapsed
        totals.offers_made += sent
        self.last_cycle = {
            "at": time.time(),
            "seconds": round(elapsed, 6),
            "offers": sent,
            "agents_refused_by_all": cycle.fully_refused_agents,
            "agents_below_min_offer": cycle.agents_below_min_offer,
            "not_offered": cycle.reasons(),
        }
        if sent:
            log.debug("allocation cycle", offers=sent, seconds=round(elapsed, 4))

    def _offer_message(self, offer: OfferRecord) -> Offer:
        agent = self.state.agents[offer.agent_id]
        fid = offer.framework_id
        return Offer(
            offer_id=offer.id,
            framework_id=fid,
            agent_id=agent.id,
            hostname=agent.info.hostname,
            resources=offer.resources,
            attributes=agent.info.attributes or {},
            executor_ids=[eid for (f, eid) in agent.executors if f == fid],
            # Tested here, not in offer_room: this runs for every offer of every cycle.
            long_task_room=None if agent.long_limit is None else offer_room(agent, offer.resources),
        )

    def _arm_timers(self) -> None:
        state = self.state
        nxt = state.refusals.next_expiry()
        if nxt is not None:
            self.timer.request_at(nxt)
        expiry = state.offer_book.next_expiry()
        if expiry is not None and self._offer_timer is None:
            self._offer_timer = state.clock.call_at(expiry, self._offer_timeout_fired)

    def _offer_timeout_fired(self) -> None:
        self._offer_timer = None
        self.state.expire_offers(self.state.now())
        self._arm_timers()

    def cancel(self) -> None:
        """End of the term: no cycle runs any more."""
        self._cancelled = True
        self.timer.cancel()
        if self._offer_timer is not None:
            self._offer_timer.cancel()
            self._offer_timer = None
