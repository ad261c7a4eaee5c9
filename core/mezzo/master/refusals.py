"""Refuse filters: "do not offer these resources of this agent to this framework
for N seconds" (paper §3.5; 5 s by default).

A decline, the unused part of an accepted offer and a timed-out offer each leave
one. A refusal covers the resources that were refused: once more is free on the
agent than a framework refused, that framework may be offered the agent again at
once (Apache Mesos behaves the same way), so a refusal never hides resources the
framework never saw.

The allocation cycle asks about refusals for every candidate (agent, framework)
pair, so the answer must not cost a resource comparison each time. The store keeps
one invariant instead: **every refusal it holds covers what is free on its agent**.
The master reports each growth of an agent's free pool (:meth:`free_grew`) and
the refusals it no longer fits in lapse there and then; free pools that shrink
(an offer, a launch) keep every refusal valid. Then:

- "does F refuse agent A?" is a dict look-up plus an expiry check;
- "which frameworks refuse A?" is the agent's dict itself (an allocator that has
  walked past many refusers switches to membership tests against it);
- "does every framework refuse A?" is a length check, so an agent that all
  frameworks declined leaves the cycle in O(1). That is the steady state of
  Apache Mesos' ``DeclineOffers`` benchmark and of any cluster whose frameworks
  have all they want.

To keep :meth:`free_grew` O(1) in the common case, each agent also keeps the
intersection of its refusals: a free pool that fits in it fits in all of them.

Expired refusals are dropped in bulk by :meth:`expire` (the master calls it at the
start of every cycle) and the earliest expiry is exposed so the master can run an
allocation exactly when resources become offerable again.
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

    def put(self, framework_id: str, until: float, resources: Resources) -> None:
        first = not self.by_framework
        self.by_framework[framework_id] = (until, resources)
        if first:
            self._common = resources
        elif self._common is not None:
            self._common = self._common.intersection(resources)

    def remove(self, framework_id: str) -> None:
        if self.by_framework.pop(framework_id, None) is not None:
            self._common = None  # recomputed when next needed

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
    """Active refusals, indexed by agent and by framework. See the module docstring."""

    __slots__ = ("_by_agent", "_by_framework", "_expiries", "_count")

    def __init__(self) -> None:
        self._by_agent: dict[str, _AgentRefusals] = {}
        self._by_framework: dict[str, set[str]] = {}
        self._expiries: list[tuple[float, str, str]] = []
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, framework_id: str, agent_id: str, resources: Resources, until: float,
            free: Resources) -> None:
        """Refuse ``resources`` of ``agent_id`` for ``framework_id`` until loop time
        ``until``; ``free`` is the agent's free pool now (with ``resources`` back in
        it). A second refusal of the same agent widens the first (both were declined).
        A refusal that does not cover ``free`` is not kept: more is free than the
        framework saw, so it may be offered the agent again."""
        if not math.isfinite(until):
            until = math.inf
        agent = self._by_agent.get(agent_id)
        prev = agent.by_framework.get(framework_id) if agent is not None else None
        if prev is not None:
            resources = prev[1] + resources
            until = max(until, prev[0])
        if not free.fits_in(resources):
            if prev is not None:
                self._remove(framework_id, agent_id)
            return
        if agent is None:
            agent = self._by_agent[agent_id] = _AgentRefusals()
        if prev is None:
            self._count += 1
            self._by_framework.setdefault(framework_id, set()).add(agent_id)
        else:
            agent.remove(framework_id)
        agent.put(framework_id, until, resources)
        if until != math.inf:
            heapq.heappush(self._expiries, (until, framework_id, agent_id))

    def free_grew(self, agent_id: str, free: Resources) -> None:
        """The agent's free pool grew to ``free``: refusals it no longer fits in lapse."""
        agent = self._by_agent.get(agent_id)
        if agent is None or free.fits_in(agent.common()):
            return
        for fid, (_, refused) in list(agent.by_framework.items()):
            if not free.fits_in(refused):
                self._remove(fid, agent_id)

    def of_agent(self, agent_id: str) -> dict[str, tuple[float, Resources]] | None:
        """The agent's refusals (framework id -> (until, resources)), for tight loops.
        Read-only; entries may have expired since the last :meth:`expire`."""
        agent = self._by_agent.get(agent_id)
        return agent.by_framework if agent is not None else None

    def refuses(self, framework_id: str, agent_id: str, now: float) -> bool:
        """True when the framework refuses what is free on the agent at loop time ``now``."""
        agent = self._by_agent.get(agent_id)
        entry = agent.by_framework.get(framework_id) if agent is not None else None
        return entry is not None and entry[0] > now

    def agents_refused_by(self, framework_id: str) -> int:
        """How many agents the framework refuses now (for ``mezzo state``)."""
        return len(self._by_framework.get(framework_id, ()))

    def refused_by_all(self, agent_id: str, frameworks: int) -> bool:
        """True when ``frameworks`` distinct frameworks refuse the agent. Exact right
        after :meth:`expire` with the number of registered frameworks (refusals of
        frameworks that left are cleared with them)."""
        agent = self._by_agent.get(agent_id)
        return agent is not None and frameworks > 0 and len(agent.by_framework) >= frameworks

    def clear_framework(self, framework_id: str) -> None:
        """Drop every refusal of a framework (revive, removal)."""
        for agent_id in list(self._by_framework.get(framework_id, ())):
            self._remove(framework_id, agent_id)

    def clear_agent(self, agent_id: str) -> None:
        """Drop every refusal of an agent (agent removed)."""
        agent = self._by_agent.get(agent_id)
        if agent is not None:
            for fid in list(agent.by_framework):
                self._remove(fid, agent_id)

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
        agents = self._by_framework.get(framework_id)
        if agents is not None:
            agents.discard(agent_id)
            if not agents:
                del self._by_framework[framework_id]
