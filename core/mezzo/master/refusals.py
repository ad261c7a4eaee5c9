"""Refuse filters: "do not offer these resources of this agent to this framework
for N seconds" (paper §3.5; 5 s by default).

A decline, the unused part of an accepted offer and a timed-out offer each leave
one. The rules:

- A refusal covers the resources that were refused: once more is free on the
  agent than the framework refused, the refusal is gone and that framework may be
  offered the agent again at once. A refusal never hides resources the framework
  never saw.
- Refusals of one agent by one framework add up, each part keeping its own expiry:
  the framework is not offered the agent while what is free there fits in the sum
  of the parts not yet expired. Declining half an agent for 60 s and the other half
  for 1 s keeps the agent from the framework for 1 s; then the 60 s half alone no
  longer covers what is free, and the whole agent is offered. (Apache Mesos keeps
  a filter per decline and filters an agent only while one filter alone covers
  what is free: it would offer that agent again at once.)
- What a framework gives back is not "more" for its own refusals. The master puts
  it back in the free pool (:meth:`~RefuseFilters.free_grew`) before refusing it
  (:meth:`~RefuseFilters.add`), and that growth ends the framework's earlier
  refusal; ``add`` takes the parts it ended back in, unless the new refusal covers
  the pool by itself (the revocation monitor's hold after a task's end: that growth
  was not given back by the framework).

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

A refusal is listed with the sum of its parts and the earliest expiry among them.
:meth:`expire` (the master calls it at the start of every cycle) drops the parts
whose time is up, and the refusal with them unless the parts left still cover the
agent's free pool as last reported. Shrinking is not reported, so that pool may be
larger than the real one: the check may end a refusal early (the framework sees
the agent sooner), never late. The earliest pending expiry is exposed so the master
can run an allocation exactly when resources become offerable again.

Parts are summed: what a framework gives back was in its offers, not free, so it
is not counted twice. The exception is the revocation monitor's hold, a refusal of
the whole free pool, added to a refusal the framework already has there: the pool
may then grow by up to the overlap unseen by that framework, until the shorter of
the two ends (a hold lasts seconds).
"""

from __future__ import annotations

import heapq
import math

from ..resources import Resources

Part = tuple[float, Resources]
"""One refusal's part: (loop time it expires, resources refused)."""


class _AgentRefusals:
    """The refusals of one agent.

    ``by_framework`` maps framework id -> (earliest expiry of its parts, their sum);
    ``parts`` lists the parts of the refusals that have more than one (a refusal
    of one part is its ``by_framework`` entry); ``free`` is the agent's free pool
    as last reported, never smaller than the real one.
    """

    __slots__ = ("by_framework", "parts", "free", "_common")

    def __init__(self, free: Resources) -> None:
        self.by_framework: dict[str, tuple[float, Resources]] = {}
        self.parts: dict[str, list[Part]] | None = None
        self.free = free
        self._common: Resources | None = None

    def parts_of(self, framework_id: str) -> list[Part]:
        """The parts of the framework's refusal (empty when it has none)."""
        if self.parts is not None:
            parts = self.parts.get(framework_id)
            if parts is not None:
                return parts
        entry = self.by_framework.get(framework_id)
        return [entry] if entry is not None else []

    def put(self, framework_id: str, parts: list[Part]) -> None:
        """List the framework's refusal as ``parts`` (not empty; it has none yet)."""
        if len(parts) == 1:
            until, resources = parts[0]
        else:
            until = min(u for u, _ in parts)
            resources = Resources()
            for _, r in parts:
                resources = resources + r
            if self.parts is None:
                self.parts = {}
            self.parts[framework_id] = parts
        first = not self.by_framework
        self.by_framework[framework_id] = (until, resources)
        if first:
            self._common = resources
        elif self._common is not None:
            self._common = self._common.intersection(resources)

    def remove(self, framework_id: str) -> None:
        if self.by_framework.pop(framework_id, None) is not None:
            self._common = None  # recomputed when next needed
            if self.parts is not None:
                self.parts.pop(framework_id, None)

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

    __slots__ = ("_by_agent", "_by_framework", "_expiries", "_count", "_lapsed")

    def __init__(self) -> None:
        self._by_agent: dict[str, _AgentRefusals] = {}
        self._by_framework: dict[str, set[str]] = {}
        self._expiries: list[tuple[float, str, str]] = []
        self._count = 0
        # What the last free_grew ended: (agent id, free pool, framework id -> parts),
        # for the add() that may follow it (see the module docstring).
        self._lapsed: tuple[str, Resources, dict[str, list[Part]]] | None = None

    def __len__(self) -> int:
        return self._count

    def add(
        self, framework_id: str, agent_id: str, resources: Resources, until: float, free: Resources
    ) -> None:
        """Refuse ``resources`` of ``agent_id`` for ``framework_id`` until loop time
        ``until``; ``free`` is the agent's free pool now (with ``resources`` back in
        it, reported by :meth:`free_grew` first). A second refusal of the same agent
        adds a part to the first: both hold while ``free`` fits in their sum, each
        until its own expiry. A refusal that does not cover ``free`` is not kept:
        more is free than the framework saw, so it may be offered the agent again."""
        if not math.isfinite(until):
            until = math.inf
        agent = self._by_agent.get(agent_id)
        entry = agent.by_framework.get(framework_id) if agent is not None else None
        if agent is not None and entry is not None:  # a refusal in force: this part joins it
            held = agent.parts_of(framework_id)
        elif free.fits_in(resources):  # the common case: a first refusal that covers the pool
            held = []
        else:
            held = self._take_lapsed(framework_id, agent_id, free)
            if not held:
                return  # more is free than the framework refused
        total = resources
        for _, r in held:
            total = total + r
        if held and not free.fits_in(total):
            self._remove(framework_id, agent_id)
            return
        if agent is None:
            agent = self._by_agent[agent_id] = _AgentRefusals(free)
        agent.free = free
        if entry is None:
            self._count += 1
            self._by_framework.setdefault(framework_id, set()).add(agent_id)
        else:
            agent.remove(framework_id)
        agent.put(framework_id, [*held, (until, resources)])
        if until != math.inf:
            heapq.heappush(self._expiries, (until, framework_id, agent_id))

    def _take_lapsed(self, framework_id: str, agent_id: str, free: Resources) -> list[Part]:
        """The parts of the framework's refusal that the growth to ``free`` just ended
        (the resources it gives back now), or none."""
        lapsed = self._lapsed
        if lapsed is None or lapsed[0] != agent_id or not (lapsed[1] is free or lapsed[1] == free):
            return []
        return lapsed[2].pop(framework_id, [])

    def free_grew(self, agent_id: str, free: Resources) -> None:
        """The agent's free pool grew to ``free``: refusals it no longer fits in lapse."""
        self._lapsed = None
        agent = self._by_agent.get(agent_id)
        if agent is None:
            return
        agent.free = free
        if free.fits_in(agent.common()):
            return
        ended: dict[str, list[Part]] = {}
        for fid, (_, refused) in list(agent.by_framework.items()):
            if not free.fits_in(refused):
                ended[fid] = agent.parts_of(fid)
                self._remove(fid, agent_id)
        self._lapsed = (agent_id, free, ended)

    def of_agent(self, agent_id: str) -> dict[str, tuple[float, Resources]] | None:
        """The agent's refusals (framework id -> (earliest expiry of its parts, their
        sum)), for tight loops. Read-only; exact right after :meth:`expire`."""
        agent = self._by_agent.get(agent_id)
        return agent.by_framework if agent is not None else None

    def refuses(self, framework_id: str, agent_id: str, now: float) -> bool:
        """True when the framework refuses what is free on the agent at loop time
        ``now``. Exact right after :meth:`expire` with the same ``now`` (before it, a
        refusal whose first part ran out says False though its others may hold)."""
        agent = self._by_agent.get(agent_id)
        entry = agent.by_framework.get(framework_id) if agent is not None else None
        return entry is not None and entry[0] > now

    def agents_refused_by(self, framework_id: str) -> int:
        """How many agents the framework refuses now (for ``mezzo state``)."""
        return len(self._by_framework.get(framework_id, ()))

    def refused_agents(
        self, framework_id: str, now: float, limit: int
    ) -> tuple[int, list[tuple[str, float]]]:
        """How many agents the framework refuses, and ``limit`` of them with the seconds
        from loop time ``now`` until their refusal has surely lapsed (its last part
        expires; ``inf``: until the framework revives), soonest first. O(agents it
        refuses), for "why pending" (:mod:`.why_pending`)."""
        ids = self._by_framework.get(framework_id, ())
        found = []
        for agent_id in ids:
            agent = self._by_agent.get(agent_id)
            if agent is not None:
                until = max(u for u, _ in agent.parts_of(framework_id))
                found.append((agent_id, until - now))
        return len(ids), heapq.nsmallest(limit, found, key=lambda pair: pair[1])

    def refused_by_all(self, agent_id: str, frameworks: int) -> bool:
        """True when ``frameworks`` distinct frameworks refuse the agent. Exact right
        after :meth:`expire` with the number of registered frameworks (refusals of
        frameworks that left are cleared with them)."""
        agent = self._by_agent.get(agent_id)
        return agent is not None and frameworks > 0 and len(agent.by_framework) >= frameworks

    def clear_framework(self, framework_id: str) -> None:
        """Drop every refusal of a framework (revive, removal)."""
        self._lapsed = None
        for agent_id in list(self._by_framework.get(framework_id, ())):
            self._remove(framework_id, agent_id)

    def clear_agent(self, agent_id: str) -> None:
        """Drop every refusal of an agent (agent removed)."""
        self._lapsed = None
        agent = self._by_agent.get(agent_id)
        if agent is not None:
            for fid in list(agent.by_framework):
                self._remove(fid, agent_id)

    def expire(self, now: float) -> int:
        """Drop the parts whose time is up; a refusal whose other parts no longer
        cover the agent's free pool goes with them. Return how many refusals went."""
        self._lapsed = None
        dropped = 0
        heap = self._expiries
        while heap and heap[0][0] <= now:
            _, fid, aid = heapq.heappop(heap)
            agent = self._by_agent.get(aid)
            entry = agent.by_framework.get(fid) if agent is not None else None
            if agent is None or entry is None or entry[0] > now:
                continue  # stale: its refusal is gone, or this part already went
            parts = agent.parts.get(fid) if agent.parts is not None else None
            if parts is None:  # one part, and it is over: the common case
                self._remove(fid, aid)
                dropped += 1
                continue
            left = [part for part in parts if part[0] > now]
            total = Resources()
            for _, r in left:
                total = total + r
            agent.remove(fid)
            if left and agent.free.fits_in(total):
                agent.put(fid, left)
            else:
                self._forget(fid, aid, agent)
                dropped += 1
        return dropped

    def next_expiry(self) -> float | None:
        """Loop time of the earliest pending expiry of a part (stale heap entries included)."""
        return self._expiries[0][0] if self._expiries else None

    def _remove(self, framework_id: str, agent_id: str) -> None:
        agent = self._by_agent.get(agent_id)
        if agent is None or framework_id not in agent.by_framework:
            return
        agent.remove(framework_id)
        self._forget(framework_id, agent_id, agent)

    def _forget(self, framework_id: str, agent_id: str, agent: _AgentRefusals) -> None:
        """Update the indexes for a refusal already taken out of ``agent``."""
        self._count -= 1
        if not agent.by_framework:
            del self._by_agent[agent_id]
        agents = self._by_framework.get(framework_id)
        if agents is not None:
            agents.discard(agent_id)
            if not agents:
                del self._by_framework[framework_id]
