"""The book of outstanding offers.

An offer holds every free resource of one agent for one framework. While it is
outstanding its resources belong to neither the agent's free pool nor any task:
they count toward the framework's share (paper §3.5), which is why the master
calls ``allocator.allocated`` when an offer is made and ``recovered`` when it is
declined, rescinded or only partly used.

All offers share one timeout, so creation order is expiry order: a FIFO queue
gives the next offer to rescind in O(1), with removed offers skipped lazily.
"""

from __future__ import annotations

import itertools
import math
from collections import deque

from ..resources import Resources
from .records import AgentRecord, FrameworkRecord, OfferRecord


class OfferBook:
    """Outstanding offers by id, indexed on their framework and agent records too."""

    __slots__ = ("_prefix", "_ids", "_timeout", "offers", "_expiry_queue")

    def __init__(self, id_prefix: str, timeout: float) -> None:
        self._prefix = id_prefix
        self._ids = itertools.count(1)
        self._timeout = timeout if timeout > 0 else math.inf
        self.offers: dict[str, OfferRecord] = {}
        self._expiry_queue: deque[OfferRecord] = deque()

    def __len__(self) -> int:
        return len(self.offers)

    def get(self, offer_id: str) -> OfferRecord | None:
        return self.offers.get(offer_id)

    def create(
        self, framework: FrameworkRecord, agent: AgentRecord, resources: Resources, now: float
    ) -> OfferRecord:
        """Record a new offer of ``resources`` (already taken from ``agent.free``)."""
        offer = OfferRecord(
            id=f"{self._prefix}-O{next(self._ids)}",
            framework_id=framework.id,
            agent_id=agent.id,
            resources=resources,
            expires_at=now + self._timeout,
        )
        self.offers[offer.id] = offer
        framework.offers[offer.id] = offer
        agent.offers[offer.id] = offer
        if self._timeout != math.inf:
            self._expiry_queue.append(offer)
        return offer

    def remove(
        self, offer: OfferRecord, framework: FrameworkRecord | None, agent: AgentRecord | None
    ) -> None:
        """Forget ``offer``; the caller returns its resources where they belong."""
        if self.offers.pop(offer.id, None) is None:
            return
        if framework is not None:
            framework.offers.pop(offer.id, None)
        if agent is not None:
            agent.offers.pop(offer.id, None)

    def expired(self, now: float) -> list[OfferRecord]:
        """Outstanding offers whose timeout has passed, oldest first."""
        out = []
        q = self._expiry_queue
        while q and q[0].expires_at <= now:
            offer = q.popleft()
            if offer.id in self.offers:
                out.append(offer)
        return out

    def next_expiry(self) -> float | None:
        q = self._expiry_queue
        while q and q[0].id not in self.offers:
            q.popleft()
        return q[0].expires_at if q else None
