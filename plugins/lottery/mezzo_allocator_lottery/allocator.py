"""LotteryAllocator: lottery scheduling of freed resources (paper §4.3).

Enable it in ``mezzo.toml``::

    [master.allocator]
    name = "lottery"
    [master.allocator.lottery]
    weights = { roles = { analytics = 3.0 }, frameworks = { "nightly-etl" = 0.5 } }
    seed = 42                    # optional: a reproducible sequence of draws (tests)

Policy
------
Each agent of a cycle is offered, whole, to one framework drawn at random among the
active frameworks the master allows to take it (``cycle.may_offer``), with odds
proportional to the frameworks' weights: framework *i* wins with probability
``w_i / sum(w_j)`` over the eligible *j*. Unlike DRF, the draw does not look at what
a framework already holds, so every framework keeps receiving freed resources at a
rate set by its weight. Weights come from the same ``roles`` / ``frameworks`` tables
as ``drf`` (:class:`mezzo_allocator_drf.Weights`); the default weight is 1.0.

Cost
----
The cumulative weights of the active frameworks are rebuilt only when a framework
registers, leaves, activates or deactivates, at most once per cycle. An agent then
costs one random number, one bisection and one ``may_offer`` when the winner may take
it. Only when it may not does the allocator draw again (see :meth:`_redraw`):

1. a few more draws from the whole table (cheap: most agents are declined by few);
2. a few draws among the frameworks that have not declined the agent
   (``cycle.refusing``, a set-membership test each) nor been asked already;
3. ``may_offer`` for each remaining candidate, and one draw among those that may.

Every stage draws from the weights restricted to a superset of the eligible
frameworks and accepts only an eligible one, so the winner is always distributed
exactly ``w_i / sum(eligible w_j)``. ``may_offer`` is asked at most once per
(framework, agent) in a cycle, so the reasons counted for ``mezzo state`` are not
inflated by redraws.

Reproducibility: the draws come from a :class:`random.Random` owned by the
allocator, seeded with ``seed`` when set (from the OS otherwise). Given the same
seed, the same framework events and the same order of agents, the offers are the
same. The master's agent order is shuffled per cycle, so in a real cluster the seed
fixes the sequence of draws, not which agent goes where.

Guarantees (revocation, paper §3.3) and dominant shares are DRF's: a framework is
guaranteed the cluster total times its weight over the sum of all registered
frameworks' weights, rounded down, which is also what the lottery gives it on
average when every framework keeps wanting resources.

Error handling: settings are validated in ``__init__``; problems raise
:class:`~mezzo.errors.ConfigError` naming the dotted key, e.g.
``master.allocator.lottery.weights.roles.batch: weight must be a positive finite
number, got -1``. Notifications about unknown framework ids are ignored, as in DRF.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from collections.abc import Callable, Collection, Mapping
from itertools import accumulate
from typing import TYPE_CHECKING, Any

from mezzo.errors import ConfigError
from mezzo.hookspecs import AllocationCycle
from mezzo.setting_checks import expect_table, kind_of, subkey
from mezzo_allocator_drf import DRFAllocator, Weights

if TYPE_CHECKING:
    from mezzo.wire.ttypes import FrameworkInfo

SETTINGS = ("guarantees", "seed", "weights")

REDRAWS = 4
"""Draws per stage of :meth:`LotteryAllocator._redraw` before it moves to the next stage."""


def parse_seed(value: Any, key: str) -> int | None:
    # TOML integers only: a seed of 1.5 or true is a typo.
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(key, f"seed must be an integer, got {kind_of(value)}")
    return value


def _draw(
    fids: list[str], cum: list[float], rnd: Callable[[], float], eligible: Callable[[str], bool], tries: int
) -> str | None:
    """Up to ``tries`` weighted draws from ``fids`` (cumulative weights ``cum``);
    the first eligible winner, or None."""
    total, last = cum[-1], len(cum) - 1
    for _ in range(tries):
        i = bisect_right(cum, rnd() * total)
        fid = fids[min(i, last)]  # rnd() * total may round up to total
        if eligible(fid):
            return fid
    return None


class LotteryAllocator(DRFAllocator):
    """Weighted lottery over the eligible active frameworks. See the module docstring.

    Built on :class:`~mezzo_allocator_drf.DRFAllocator` for the share bookkeeping
    (dominant shares, guarantees, tolerance of unknown ids); only the choice of the
    framework for each agent differs.
    """

    name = "lottery"
    description = "lottery scheduling: each free agent goes to a framework drawn with odds by weight"
    known_settings = SETTINGS

    def __init__(self, settings: Mapping[str, Any], *, key: str) -> None:
        super().__init__(settings, key=key)
        self._rng = random.Random(self.seed)
        self._weight: dict[str, float] = {}
        """Weight of every registered framework."""
        self._active: dict[str, None] = {}
        """Active framework ids, in the order they (re)joined the lottery (a dict: ordered set)."""
        self._stale = True
        self._fids: list[str] = []
        self._weights: list[float] = []
        self._cum: list[float] = []

    def configure(self, settings: Mapping[str, Any], key: str) -> None:
        wkey = subkey(key, "weights")
        self.weights = Weights.parse(expect_table(settings.get("weights", {}), wkey, "a table"), key=wkey)
        self.seed = parse_seed(settings.get("seed"), subkey(key, "seed"))
        self.configure_guarantees(settings, key)

    # -- notifications (the DRF bookkeeping, plus the lottery's membership) ----

    def add_framework(self, framework_id: str, info: FrameworkInfo) -> None:
        super().add_framework(framework_id, info)
        self._weight[framework_id] = self.weights.of(info)
        self._active[framework_id] = None  # like DRF: (re-)adding makes it active
        self._stale = True

    def remove_framework(self, framework_id: str) -> None:
        super().remove_framework(framework_id)
        if self._weight.pop(framework_id, None) is not None:
            self._active.pop(framework_id, None)
            self._stale = True

    def activate(self, framework_id: str) -> None:
        super().activate(framework_id)
        if framework_id in self._weight and framework_id not in self._active:
            self._active[framework_id] = None
            self._stale = True

    def deactivate(self, framework_id: str) -> None:
        super().deactivate(framework_id)
        if framework_id in self._active:
            del self._active[framework_id]
            self._stale = True

    # -- the cycle ----------------------------------------------------------

    def allocate(self, cycle: AllocationCycle) -> None:
        """Offer each agent to a framework drawn by weight among those that may take it.

        The hot path is one draw and one ``may_offer`` per agent; see :meth:`_redraw`
        for what happens when the winner may not take the agent.
        """
        if self._stale:
            self._rebuild()
        fids, cum = self._fids, self._cum
        if not fids:
            return
        total, last = cum[-1], len(fids) - 1
        rnd = self._rng.random
        may_offer = cycle.may_offer
        offer = cycle.offer
        refusing = cycle.refusing
        for agent_id in cycle.agents():
            refused = refusing(agent_id)
            i = bisect_right(cum, rnd() * total)
            fid = fids[min(i, last)]
            if fid not in refused and may_offer(fid, agent_id):
                offer(fid, agent_id)
                continue
            other = self._redraw(agent_id, fid, refused, may_offer)
            if other is not None:
                offer(other, agent_id)

    def _redraw(
        self, agent_id: str, first: str, refused: Collection[str], may_offer: Callable[[str, str], bool]
    ) -> str | None:
        """The framework to offer ``agent_id`` to after the first winner, ``first``,
        could not take it; None when no active framework may. The three stages of the
        module docstring, each a rejection sampler over a smaller superset of the
        eligible frameworks, so the result keeps the exact weighted odds."""
        verdicts: dict[str, bool] = {first: False}

        def eligible(fid: str) -> bool:
            ok = verdicts.get(fid)
            if ok is None:
                ok = verdicts[fid] = fid not in refused and may_offer(fid, agent_id)
            return ok

        rnd = self._rng.random
        # 1. More tickets from the whole lottery.
        fid = _draw(self._fids, self._cum, rnd, eligible, REDRAWS)
        if fid is not None:
            return fid
        # 2. Only the frameworks that did not decline the agent and were not asked yet.
        cand: list[str] = []
        weights: list[float] = []
        for fid, w in zip(self._fids, self._weights, strict=True):
            if fid not in refused and fid not in verdicts:
                cand.append(fid)
                weights.append(w)
        if not cand:
            return None
        fid = _draw(cand, list(accumulate(weights)), rnd, eligible, REDRAWS)
        if fid is not None:
            return fid
        # 3. Ask about each remaining candidate; draw among those that may take the agent.
        ok = [(f, w) for f, w in zip(cand, weights, strict=True) if eligible(f)]
        if not ok:
            return None
        return _draw([f for f, _ in ok], list(accumulate(w for _, w in ok)), rnd, eligible, 1)

    # -- reading ------------------------------------------------------------

    def order(self) -> list[str]:
        """The active framework ids, in lottery-table order (a copy). The lottery has
        no preference order: every draw is independent."""
        return list(self._active)

    def odds(self, framework_id: str) -> float:
        """The probability that ``framework_id`` wins an agent every active framework
        may take: its weight over the active frameworks' total (0.0 if inactive)."""
        if framework_id not in self._active:
            return 0.0
        return self._weight[framework_id] / sum(self._weight[f] for f in self._active)

    # -- internals ----------------------------------------------------------

    def _rebuild(self) -> None:
        fids = list(self._active)
        weights = [self._weight[f] for f in fids]
        if weights:
            # Scaled so the largest weight is 1: sums of huge weights cannot overflow.
            top = max(weights)
            weights = [w / top for w in weights]
        self._fids = fids
        self._weights = weights
        self._cum = list(accumulate(weights))
        self._stale = False
