"""The allocator as the master calls it: every call through the plugin guard.

The allocator plugin hears of every move of resources (``allocated``,
``recovered``, agents and frameworks coming and going) and runs each cycle
(``allocate``). The master's own records are the truth; the allocator keeps a
view of them for its policy. So a notification that raises is reported
(:class:`~mezzo.plugin_guard.PluginGuard`) and the master carries on: its records
stay consistent, and the worst outcome is a policy working from a stale view. A
cycle that raises is different, since it may have made offers half-way: the
caller learns it from :meth:`GuardedAllocator.allocate` returning False and rolls
the cycle back (:mod:`.allocation`). Queries that raise answer "nothing" (no
guarantee, a share of 0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..resources import Resources

if TYPE_CHECKING:
    from ..hookspecs import AllocationCycle, Allocator
    from ..plugin_guard import PluginGuard
    from ..wire.ttypes import FrameworkInfo

_NOTHING = Resources()


class GuardedAllocator:
    """Wraps one :class:`~mezzo.hookspecs.Allocator`; same methods, none of them raises."""

    __slots__ = ("inner", "_guard", "name")

    def __init__(self, allocator: Allocator, guard: PluginGuard) -> None:
        self.inner = allocator
        """The plugin's own object (for its state output, and for tests)."""
        self._guard = guard
        self.name = allocator.name

    def allocate(self, cycle: AllocationCycle) -> bool:
        """Run the policy for one cycle; False if it raised (reported already)."""
        try:
            self.inner.allocate(cycle)
        except Exception as exc:
            self._guard.failed(self.inner, "allocate", exc)
            return False
        return True

    # Notifications: the hot ones (allocated, recovered) run per offer and per task,
    # so each is a plain try/except around the call rather than a generic wrapper.

    def allocated(self, framework_id: str, resources: Resources) -> None:
        try:
            self.inner.allocated(framework_id, resources)
        except Exception as exc:
            self._guard.failed(self.inner, "allocated", exc, framework=framework_id)

    def recovered(self, framework_id: str, resources: Resources) -> None:
        try:
            self.inner.recovered(framework_id, resources)
        except Exception as exc:
            self._guard.failed(self.inner, "recovered", exc, framework=framework_id)

    def add_framework(self, framework_id: str, info: FrameworkInfo) -> None:
        self._guard.call(self.inner, "add_framework", framework_id, info, default=None)

    def remove_framework(self, framework_id: str) -> None:
        self._guard.call(self.inner, "remove_framework", framework_id, default=None)

    def activate(self, framework_id: str) -> None:
        self._guard.call(self.inner, "activate", framework_id, default=None)

    def deactivate(self, framework_id: str) -> None:
        self._guard.call(self.inner, "deactivate", framework_id, default=None)

    def add_agent(self, agent_id: str, total: Resources) -> None:
        self._guard.call(self.inner, "add_agent", agent_id, total, default=None)

    def remove_agent(self, agent_id: str, total: Resources) -> None:
        self._guard.call(self.inner, "remove_agent", agent_id, total, default=None)

    # Queries.

    def guaranteed_share(self, framework_id: str) -> Resources:
        share = self._guard.call(self.inner, "guaranteed_share", framework_id, default=_NOTHING)
        return share if isinstance(share, Resources) else _NOTHING

    def dominant_share(self, framework_id: str) -> float:
        share = self._guard.call(self.inner, "dominant_share", framework_id, default=0.0)
        return float(share) if isinstance(share, (int, float)) else 0.0
