"""Refuse filters: "do not offer these resources of this agent to this framework
for N seconds" (paper §3.5; 5 s by default).

A decline, the unused part of an accepted offer and a timed-out offer each leave
one. A refusal covers the resources that were refused: if more becomes free on the
agent than was refused, the agent is offered again at once (Apache Mesos behaves
the same way), so a refusal never hides resources the framework never saw.

Refusals are indexed by agent because the allocation cycle works agent by agent:
for one agent it asks about many frameworks. Two questions must be cheap:

- does framework F refuse what is free on agent A? (one dict look-up);
- does *every* framework refuse it? Then the agent is left out of the cycle in
  O(1) instead of being checked against each framework. That is the steady state
  of Apache Mesos' ``DeclineOffers`` benchmark (every framework declines every
  agent for good), and of any cluster whose frameworks have all they want. For it
  each agent keeps the intersection of its refusals: the free resources are refused
  by all when there is a refusal per framework and the free part fits in it.

Expired refusals are dropped in bulk by :meth:`RefuseFilters.expire` (the master
calls it at the start of every cycle) and the earliest expiry is exposed so the
master can run an allocation exactly when resources become offerable again.
"""

from __future__ import annotations

import heapq
import math

from ..resources import Resources


class _AgentRefusals:
    """The refusals of one agent: framework id -> (until, resources)."""

    __slots__ = ("by_framework", "_common")

    def __init__(self) -> None:
        self.by_framework: dict[str, tuple[float, Resources]] = {}
        self._common: Resources | None = None

    def add(self, framework_id: str, until: float, resources: Resources) -> None:
        prev = self.by_framework.get(framework_id)
        if prev is not None:
            # A second refusal of the same agent widens the first: both were declined.
            resources = prev[1] + resources
            until = max(until, prev[0])
            self._common = None  # a widened refusal can widen the intersection
        elif self._common is not None or not self.by_framework:
            self._common = resources if not self.by_framework else self._common.intersection(resources)
        self.by_framework[framework_id] = (until, resources)

    def remove(self, framework_id: str) -> None:
        if self.by_framework.pop(framework_id, None) is not None:
            self._common = None

    def common(self) -> Resources:
        """What every refusal of this agent covers."""
        if self._common is None:
            it = iter(self.by_framework.values())
            common = next(it)[1]
            for _, r in it:
                common = common.intersection(r)
            self._common = common
        return self._common


class RefuseFilters:
    """Active refusals, indexed by agent and by framework."""

    __slots__ = ("_by_agent", "_by_framework", "_expiries", "_count")

    def __init__(self) -> None:
        self._by_agent: dict[str, _AgentRefusals] = {}
        self._by_framework: dict[str, set[str]] = {}
        self._expiries: list[tuple[float, str, str]] = []
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, framework_id: str, agent_id: str, resources: Resources, until: float) -> None:
        """Refuse ``resources`` of ``agent_id`` for ``framework_id`` until loop time ``until``."""
        if not math.isfinite(until):
            until = math.inf
        agent = self._by_agent.get(agent_id)
        if agent is None:
            agent = self._by_agent[agent_id] = _AgentRefusals()
        if framework_id not in agent.by_framework:
            self._count += 1
        agent.add(framework_id, until, resources)
        self._by_framework.setdefault(framework_id, set()).add(agent_id)
        if until != math.inf:
            heapq.heappush(self._expiries, (until, framework_id, agent_id))

    def of_agent(self, agent_id: str) -> dict[str, tuple[float, Resources]] | None:
        """The agent's refusals (framework id -> (until, resources)), for tight loops.
        Read-only; may include entries expired since the last :meth:`expire`."""
        agent = self._by_agent.get(agent_id)
        return agent.by_framework if agent is not None else None

    def refuses(self, framework_id: str, agent_id: str, free: Resources, now: float) -> bool:
        """True when ``free`` on the agent is still covered by an unexpired refusal."""
        agent = self._by_agent.get(agent_id)
        if agent is None:
            return False
        entry = agent.by_framework.get(framework_id)
        return entry is not None and entry[0] > now and free.fits_in(entry[1])

    def refused_by_all(self, agent_id: str, free: Resources, frameworks: int) -> bool:
        """True when ``frameworks`` distinct frameworks refuse all of ``free``.

        Exact when called right after :meth:`expire` with the number of registered
        frameworks (refusals of frameworks that left are cleared with them)."""
        agent = self._by_agent.get(agent_id)
        if agent is None or len(agent.by_framework) < frameworks or frameworks == 0:
            return False
        return free.fits_in(agent.common())

    def clear_framework(self, framework_id: str) -> None:
        """Drop every refusal of a framework (revive, removal)."""
        for agent_id in self._by_framework.pop(framework_id, ()):
            self._remove(framework_id, agent_id)

    def clear_agent(self, agent_id: str) -> None:
        """Drop every refusal of an agent (agent removed)."""
        agent = self._by_agent.pop(agent_id, None)
        if agent is None:
            return
        for fid in agent.by_framework:
            self._count -= 1
            agents = self._by_framework.get(fid)
            if agents is not None:
                agents.discard(agent_id)

    def expire(self, now: float) -> int:
        """Drop refusals whose time is up; return how many were dropped."""
        dropped = 0
        heap = self._expiries
        while heap and heap[0][0] <= now:
            _, fid, aid = heapq.heappop(heap)
            agent = self._by_agent.get(aid)
            entry = agent.by_framework.get(fid) if agent is not None else None
            if entry is not None and entry[0] <= now:
                self._remove(fid, aid)
                agents = self._by_framework.get(fid)
                if agents is not None:
                    agents.discard(aid)
                    if not agents:
                        del self._by_framework[fid]
                dropped += 1
        return dropped

    def next_expiry(self) -> float | None:
        """Loop time of the earliest pending expiry (stale heap entries included)."""
        return self._expiries[0][0] if self._expiries else None

    def _remove(self, framework_id: str, agent_id: str) -> None:
        agent = self._by_agent.get(agent_id)
        if agent is None or framework_id not in agent.by_framework:
            return
        agent.remove(framework_id)
        self._count -= 1
        if not agent.by_framework:
            del self._by_agent[agent_id]
