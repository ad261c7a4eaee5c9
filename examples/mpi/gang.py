"""Gathering offers until an MPI job's ranks all fit: the gang.

Pure logic with an injectable clock, so every rule is testable on its own: which
offers are held, when the gang is complete, how its ranks are placed, when it has
waited too long and for how long what it gives back is refused.

Offers of one agent are pooled: a rank may take its cpus from one and its memory from
another, launched on both at once. On a busy cluster an agent's free resources come in
pieces (what was free when the gang's first offer there came, then each task's share as
it ends: a cpu with half a rank's memory), and no piece alone may fit a rank.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mezzo import Offer, Resources

BACKOFF_MAX = 60.0
"""The longest a gang that gave up refuses what it held (seconds)."""


def ranks_in(resources: Resources, per_rank: Resources) -> int:
    """How many ranks of ``per_rank`` fit in ``resources``."""
    count = 0
    left = resources
    while per_rank.fits_in(left):
        left = left - per_rank
        count += 1
    return count


def pooled(offers: list[Offer]) -> Resources:
    """What ``offers`` (of one agent) hold together."""
    return sum((Resources.of(o.resources) for o in offers), Resources())


@dataclass
class Gang:
    """The offers held for one job of ``ranks`` ranks of ``per_rank`` each.

    ``hold_timeout``: seconds without a slot more than the gang held before, after which
    it gives up (:meth:`expired`); ``rng`` and ``clock`` are for the tests."""

    ranks: int
    per_rank: Resources
    hold_timeout: float
    rng: random.Random = field(default_factory=random.Random)
    clock: Callable[[], float] = time.monotonic
    held: dict[str, Offer] = field(default_factory=dict)
    """Offers held, by id, in the order they came."""
    since: float | None = None
    """When the first offer now held came (None: none held)."""
    most: int = 0
    """The most ranks the offers held fit at once since :attr:`since`."""
    grew_at: float | None = None
    """When :attr:`most` last grew (None: none held)."""
    tries: int = 0
    """How many times the gang gave up."""

    def __post_init__(self) -> None:
        if self.ranks < 1:
            raise ValueError(f"an MPI job has at least one rank, not {self.ranks}")
        if not self.per_rank:
            raise ValueError("a rank needs some resources (cpus, mem)")

    def hold(self, offer: Offer) -> bool:
        """Hold ``offer`` if, with the offers held on its agent, it fits a rank more;
        False if it does not (decline it)."""
        before = pooled([o for o in self.held.values() if o.agent_id == offer.agent_id])
        if ranks_in(before + Resources.of(offer.resources), self.per_rank) == ranks_in(before, self.per_rank):
            return False
        if not self.held:
            self.since = self.clock()
        self.held[offer.offer_id] = offer
        # Growth is a new high: an offer rescinded and offered again is no progress.
        if (slots := self.slots) > self.most:
            self.most, self.grew_at = slots, self.clock()
        return True

    def rescinded(self, offer_id: str) -> None:
        """The master took an offer back."""
        self.held.pop(offer_id, None)
        if not self.held:
            self._forget()

    def _by_agent(self) -> dict[str, list[Offer]]:
        """The offers held, by agent, agents in the order of their first offer."""
        out: dict[str, list[Offer]] = {}
        for o in self.held.values():
            out.setdefault(o.agent_id, []).append(o)
        return out

    @property
    def slots(self) -> int:
        """Ranks that fit in the offers held, each agent's pooled."""
        return sum(ranks_in(pooled(offers), self.per_rank) for offers in self._by_agent().values())

    @property
    def complete(self) -> bool:
        return self.slots >= self.ranks

    def placement(self) -> list[tuple[list[Offer], int]]:
        """Ranks per agent (with the offers held there, to launch on together), filling
        agents in the order their first offer came (rank 0 on the first). Only agents
        that get a rank are listed; call when :attr:`complete`."""
        placed: list[tuple[list[Offer], int]] = []
        left = self.ranks
        for offers in self._by_agent().values():
            if left == 0:
                break
            count = min(left, ranks_in(pooled(offers), self.per_rank))
            placed.append((offers, count))
            left -= count
        if left:
            raise ValueError(f"the offers held fit {self.ranks - left} of {self.ranks} ranks")
        return placed

    def expired(self) -> bool:
        """Whether the gang, incomplete, has gained no slot for ``hold_timeout``.

        Not the time since its first offer: a gang still growing is not stuck, it is
        gathering on a busy cluster where slots free one at a time, and giving back what
        it has would only start it over behind everyone. Two gangs that each hold part
        of what both need stop growing, and both give up after ``hold_timeout``. The
        master's ``offer_timeout`` still bounds how long any one offer is held."""
        return (
            self.grew_at is not None
            and not self.complete
            and self.clock() - self.grew_at >= self.hold_timeout
        )

    def give_back(self) -> None:
        """Forget every offer held (they are void: the connection they came on is gone)."""
        self.held.clear()
        self._forget()

    def _forget(self) -> None:
        self.since = self.grew_at = None
        self.most = 0

    def give_up(self) -> tuple[list[str], float]:
        """Let go of everything held: the offer ids to decline and how long to stay away
        from offers, random in [1, 2) times ``hold_timeout`` doubled for each earlier try
        (at most :data:`BACKOFF_MAX`), so that two gangs stop colliding."""
        ids = list(self.held)
        self.held.clear()
        self._forget()
        backoff = min(BACKOFF_MAX, self.hold_timeout * (2**self.tries) * self.rng.uniform(1.0, 2.0))
        self.tries += 1
        return ids, backoff

    def take(self) -> tuple[list[tuple[list[Offer], int]], list[str]]:
        """The placement and the held offers it does not use (to decline); empties the gang."""
        placed = self.placement()
        used = {o.offer_id for offers, _ in placed for o in offers}
        unused = [oid for oid in self.held if oid not in used]
        self.held.clear()
        self._forget()
        return placed, unused
