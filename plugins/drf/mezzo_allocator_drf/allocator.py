"""DRFAllocator: weighted Dominant Resource Fairness, the paper's fair-sharing module (§3.3).

Enable it in ``mezzo.toml`` (it is also the default allocator)::

    [master.allocator]
    name = "drf"
    [master.allocator.drf]
    roles = { analytics = 2.0 }          # weight by FrameworkInfo.role
    frameworks = { "nightly-etl" = 0.5 } # weight by FrameworkInfo.name; beats the role's
    guarantees = { roles = { mpi = 0.25 }, frameworks = { "nightly" = 0.1 } }

Policy
------
Each agent of a cycle is offered, whole, to the active framework with the lowest
*weighted dominant share* (dominant share / weight; ties go to the framework that
registered first) among those the master allows (``cycle.may_offer``). The offer
counts toward that framework at once (the master calls :meth:`allocated` from
inside ``cycle.offer``), so the next agent sees the new order: over a cycle this is
DRF's progressive filling at agent granularity.

Guarantees (for revocation, paper §3.3): with a ``guarantees`` table, a framework's
guaranteed share is its configured fraction (by name, else by role, else 0) of the
cluster total, rounded down per resource. The configured fractions must sum to at
most 1 (checked at start-up, each role counted once); several registered frameworks
of one guaranteed role can still add up to more, which is logged as a warning when
it happens. Without a ``guarantees`` table, a framework's guaranteed share is the
cluster total times its weight over the sum of the weights of all registered
frameworks, rounded down per resource, so the guarantees always fit the cluster
together. Subclasses that sort frameworks into tiers (strict priority) guarantee
this only to the best tier that has any framework; other tiers get nothing.

Error handling: settings are validated in ``__init__`` with
:class:`~mezzo.errors.ConfigError` naming the dotted key (see :mod:`.weights`).
Notifications about unknown framework ids (``allocated``, ``recovered``,
``remove_framework``, ...) are ignored: the master may race a removal against a
late recovery and that must not take the allocator down.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

import structlog

from mezzo.hookspecs import AllocationCycle, Allocator
from mezzo.resources import SCALE, Resources
from mezzo.setting_checks import subkey

from .sorter import DRFSorter
from .weights import Guarantees, Weights

if TYPE_CHECKING:
    from mezzo.wire.ttypes import FrameworkInfo

log = structlog.get_logger("mezzo.allocator.drf", component="allocator")

SETTINGS = ("frameworks", "guarantees", "roles")


class DRFAllocator(Allocator):
    """Weighted DRF over an incrementally sorted framework order. See the module docstring.

    Extension points for allocators built on it (``strict-priority`` and ``lottery``
    are), public API of this package:

    - :attr:`known_settings` and :meth:`configure`: the settings table and how it is read;
    - :meth:`configure_guarantees`: reads the shared ``guarantees`` table;
    - :meth:`placement`: a framework's weight and tier (lower tiers are served first).

    Everything else (the sorter, the bookkeeping of shares and guarantees) is this
    class's own, reached through the :class:`~mezzo.hookspecs.Allocator` methods.
    """

    name = "drf"
    description = "weighted Dominant Resource Fairness (weights by role or framework name)"
    known_settings: ClassVar[tuple[str, ...]] = SETTINGS

    guarantees: Guarantees | None = None
    """Configured guarantees, or None for weight-proportional ones (set by :meth:`configure`)."""

    def __init__(self, settings: Mapping[str, Any], *, key: str) -> None:
        super().__init__(settings, key=key)
        self.configure(settings, key)
        # Configured guarantee (a fraction of the cluster) and name of each registered
        # framework; only kept when ``guarantees`` is configured.
        self._guaranteed: dict[str, tuple[Fraction, str]] = {}
        self._sorter = DRFSorter()
        # Exact weights so guarantees computed from them never overshoot the total.
        self._placements: dict[str, tuple[Fraction, int]] = {}
        self._tier_weight: dict[int, Fraction] = {}
        self._tier_count: dict[int, int] = {}

    # -- extension points -------------------------------------------------

    def configure(self, settings: Mapping[str, Any], key: str) -> None:
        """Read this component's settings table (``key`` is its dotted TOML key),
        already checked to hold only :attr:`known_settings`; raise
        :class:`~mezzo.errors.ConfigError` naming the key of a bad value. Called once,
        from ``__init__``, before anything else is set up."""
        self.weights = Weights.parse({k: v for k, v in settings.items() if k != "guarantees"}, key=key)
        self.configure_guarantees(settings, key)

    def configure_guarantees(self, settings: Mapping[str, Any], key: str) -> None:
        """Read the ``guarantees`` table, the same for every allocator built on this one
        (subclasses with settings of their own call it from their :meth:`configure`)."""
        if "guarantees" in settings:
            self.guarantees = Guarantees.parse(settings["guarantees"], key=subkey(key, "guarantees"))

    def placement(self, info: FrameworkInfo) -> tuple[float, int]:
        """(weight, tier) of a framework, asked once when it registers: frameworks of a
        lower tier are offered first, and shares compare within a tier, by weight. DRF
        puts everyone in tier 0."""
        return self.weights.of(info), 0

    # -- notifications ----------------------------------------------------

    def add_framework(self, framework_id: str, info: FrameworkInfo) -> None:
        weight, tier = self.placement(info)
        self._forget_placement(framework_id)
        self._placements[framework_id] = (Fraction(weight), tier)
        self._tier_weight[tier] = self._tier_weight.get(tier, Fraction(0)) + Fraction(weight)
        self._tier_count[tier] = self._tier_count.get(tier, 0) + 1
        self._sorter.add(framework_id, weight=weight, tier=tier)
        if self.guarantees is not None:
            self._add_guarantee(framework_id, info)

    def remove_framework(self, framework_id: str) -> None:
        self._forget_placement(framework_id)
        self._guaranteed.pop(framework_id, None)
        self._sorter.remove(framework_id)

    def activate(self, framework_id: str) -> None:
        self._sorter.activate(framework_id)

    def deactivate(self, framework_id: str) -> None:
        self._sorter.deactivate(framework_id)

    def add_agent(self, agent_id: str, total: Resources) -> None:
        self._sorter.add_total(total.scalars or {})

    def remove_agent(self, agent_id: str, total: Resources) -> None:
        self._sorter.remove_total(total.scalars or {})

    def allocated(self, framework_id: str, resources: Resources) -> None:
        self._sorter.allocated(framework_id, resources.scalars or {})

    def recovered(self, framework_id: str, resources: Resources) -> None:
        self._sorter.recovered(framework_id, resources.scalars or {})

    # -- the cycle ----------------------------------------------------------

    def allocate(self, cycle: AllocationCycle) -> None:
        """Offer each agent to the first framework in key order that the master allows.

        This is the hot loop of a cycle (agents × frameworks refused by filters), so a
        framework that declined the agent costs one set-membership test against
        ``cycle.refusing(agent)``, and only the others a ``may_offer`` call. The order is
        the sorter's live list, and ``cycle.offer`` re-positions the chosen framework
        (through :meth:`allocated`) before the next agent is walked. Iteration stops
        right after an offer, so the list moving under it is harmless.
        """
        order = self._sorter.order()  # re-sorts here, once, if agents came or went
        if not order:
            return
        may_offer = cycle.may_offer
        offer = cycle.offer
        refusing = cycle.refusing
        for agent_id in cycle.agents():
            refused = refusing(agent_id)
            for fid in order:
                if fid in refused:
                    continue
                if may_offer(fid, agent_id):
                    offer(fid, agent_id)
                    break

    # -- reading ------------------------------------------------------------

    def guaranteed_share(self, framework_id: str) -> Resources:
        if self.guarantees is not None:
            guaranteed = self._guaranteed.get(framework_id)
            return self._share(guaranteed[0]) if guaranteed else Resources()
        placement = self._placements.get(framework_id)
        if placement is None:
            return Resources()
        weight, tier = placement
        if tier != min(self._tier_count):
            return Resources()
        return self._share(weight / self._tier_weight[tier])

    def dominant_share(self, framework_id: str) -> float:
        return self._sorter.dominant_share(framework_id)

    def order(self) -> list[str]:
        """Active framework ids in the order the next agent would be offered (a copy)."""
        return list(self._sorter.order())

    # -- internals ----------------------------------------------------------

    def _share(self, fraction: Fraction) -> Resources:
        """``fraction`` of the cluster total, each scalar floored exactly to a thousandth,
        so shares whose fractions sum to at most 1 sum to at most the total."""
        if not fraction:
            return Resources()
        return Resources({name: (m * fraction // 1) / SCALE for name, m in self._sorter.total.items()})

    def _add_guarantee(self, framework_id: str, info: FrameworkInfo) -> None:
        assert self.guarantees is not None
        self._guaranteed.pop(framework_id, None)
        fraction = self.guarantees.of(info)
        if not fraction:
            return
        self._guaranteed[framework_id] = (fraction, info.name)
        total = sum((f for f, _ in self._guaranteed.values()), Fraction(0))
        if total > 1:
            log.warning(
                "guarantees of the registered frameworks exceed the cluster; they cannot all be met",
                total=float(total),
                frameworks={f"{name} ({fid})": float(f) for fid, (f, name) in self._guaranteed.items()},
            )

    def _forget_placement(self, framework_id: str) -> None:
        old = self._placements.pop(framework_id, None)
        if old is None:
            return
        weight, tier = old
        left = self._tier_count[tier] - 1
        if left:
            self._tier_count[tier] = left
            self._tier_weight[tier] -= weight
        else:
            del self._tier_count[tier]
            del self._tier_weight[tier]
