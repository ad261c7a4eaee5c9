"""Refuse filters: "do not offer these resources of this agent to this framework
for N seconds" (paper §3.5; 5 s by default).

A decline, the unused part of an accepted offer and a timed-out offer each leave
one. A refusal covers the resources that were refused: if more becomes free on the
agent than was refused, the agent is offered again at once (Apache Mesos behaves
the same way), so a refusal never hides resources the framework never saw.

Look-ups are O(1) per (framework, agent) pair because the allocation cycle asks for
every candidate pair. Expired refusals are dropped lazily on look-up and in bulk by
:meth:`RefuseFilters.expire`; the earliest expiry is exposed so the master can run
an allocation exactly when resources become offerable again.
"""

from __future__ import annotations

import heapq
import math

from ..resources import Resources


class RefuseFilters:
    """Active refusals keyed by (framework id, agent id)."""

    __slots__ = ("_refused", "_by_framework", "_expiries")

    def __init__(self) -> None:
        self._refused: dict[tuple[str, str], tuple[float, Resources]] = {}
        self._by_framework: dict[str, set[str]] = {}
        self._expiries: list[tuple[float, str, str]] = []

    def __len__(self) -> int:
        return len(self._refused)

    def add(self, framework_id: str, agent_id: str, resources: Resources, until: float) -> None:
        """Refuse ``resources`` of ``agent_id`` for ``framework_id`` until loop time ``until``."""
        if not math.isfinite(until):
            until = math.inf
        key = (framework_id, agent_id)
        prev = self._refused.get(key)
        if prev is not None:
            # A second refusal of the same agent widens the first: both were declined.
            resources = prev[1] + resources
            until = max(until, prev[0])
        self._refused[key] = (until, resources)
        self._by_framework.setdefault(framework_id, set()).add(agent_id)
        if until != math.inf:
            heapq.heappush(self._expiries, (until, framework_id, agent_id))

    def refuses(self, framework_id: str, agent_id: str, free: Resources, now: float) -> bool:
        """True when ``free`` on the agent is still covered by an unexpired refusal."""
        entry = self._refused.get((framework_id, agent_id))
        if entry is None:
            return False
        until, refused = entry
        if until <= now:
            self._drop(framework_id, agent_id)
            return False
        return free.fits_in(refused)

    def clear_framework(self, framework_id: str) -> None:
        """Drop every refusal of a framework (revive, removal)."""
        for agent_id in self._by_framework.pop(framework_id, ()):
            self._refused.pop((framework_id, agent_id), None)

    def clear_agent(self, agent_id: str, framework_ids) -> None:
        """Drop refusals of ``agent_id`` for the given frameworks (agent removed)."""
        for fid in framework_ids:
            if self._refused.pop((fid, agent_id), None) is not None:
                self._by_framework.get(fid, set()).discard(agent_id)

    def expire(self, now: float) -> int:
        """Drop refusals whose time is up; return how many were dropped."""
        dropped = 0
        heap = self._expiries
        while heap and heap[0][0] <= now:
            until, fid, aid = heapq.heappop(heap)
            entry = self._refused.get((fid, aid))
            if entry is not None and entry[0] <= now:
                self._drop(fid, aid)
                dropped += 1
        return dropped

    def next_expiry(self) -> float | None:
        """Loop time of the earliest pending expiry (stale heap entries included)."""
        return self._expiries[0][0] if self._expiries else None

    def _drop(self, framework_id: str, agent_id: str) -> None:
        self._refused.pop((framework_id, agent_id), None)
        agents = self._by_framework.get(framework_id)
        if agents is not None:
            agents.discard(agent_id)
            if not agents:
                del self._by_framework[framework_id]
