"""StrictPriorityAllocator: priority levels, weighted DRF within a level (paper §3.3).

Enable it in ``mezzo.toml``::

    [master.allocator]
    name = "strict-priority"
    [master.allocator.strict-priority]
    default_level = 0                       # frameworks matched by nothing below
    roles = { production = 10, batch = 0 }  # level by FrameworkInfo.role
    frameworks = { "pager-duty" = 20 }      # level by FrameworkInfo.name; beats the role's
    weights = { roles = { batch = 2.0 } }   # DRF weights within a level (as [master.allocator.drf])

Policy
------
Higher level number = higher priority. Each agent goes to the highest level that has
an active framework the master allows (``cycle.may_offer``) to take it; within that
level, to the framework with the lowest weighted dominant share. A lower level
therefore gets an agent only when no framework of any higher level may take it
(all declined it recently, filtered it, or want no offers).

This is :class:`~mezzo_allocator_drf.DRFAllocator` with each framework's sort key
prefixed by its negated level (the DRF sorter's *tier*), so one incrementally
sorted list serves every level and the per-agent walk is the DRF one.

Guarantees (revocation, paper §3.3): the frameworks of the highest level that has
any registered framework share the whole cluster by weight (total × weight / sum of
that level's weights, rounded down); every lower level is guaranteed nothing, so a
starving higher-priority framework may have lower-level tasks revoked.

A framework's level and weight are fixed when it registers; editing the TOML takes
effect for frameworks that register after the master restarts.

Error handling: every setting is validated in ``__init__``; problems raise
:class:`~mezzo.errors.ConfigError` naming the dotted key, e.g.
``master.allocator.strict-priority.roles.batch: level must be an integer, got float 1.5``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mezzo.errors import ConfigError
from mezzo.setting_checks import expect_table, kind_of, subkey
from mezzo_allocator_drf import DRFAllocator, Weights

if TYPE_CHECKING:
    from mezzo.wire.ttypes import FrameworkInfo

SETTINGS = ("default_level", "frameworks", "guarantees", "roles", "weights")


def parse_level(value: Any, key: str) -> int:
    # TOML integers only: a level of 1.5 or true is a typo, not a priority.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(key, f"level must be an integer, got {kind_of(value)}")
    return value


class StrictPriorityAllocator(DRFAllocator):
    """Strict priority between levels, weighted DRF inside one. See the module docstring."""

    name = "strict-priority"
    description = "strict priority levels by role or framework name, weighted DRF within a level"
    known_settings = SETTINGS

    def configure(self, settings: Mapping[str, Any], key: str) -> None:
        self.default_level = parse_level(settings.get("default_level", 0), subkey(key, "default_level"))
        levels: dict[str, dict[str, int]] = {}
        for name in ("roles", "frameworks"):
            tkey = subkey(key, name)
            table = expect_table(settings.get(name, {}), tkey, f"a table of <{name[:-1]}> = <level>")
            levels[name] = {k: parse_level(v, subkey(tkey, str(k))) for k, v in table.items()}
        self.role_levels = levels["roles"]
        self.framework_levels = levels["frameworks"]
        self.configure_guarantees(settings, key)
        wkey = subkey(key, "weights")
        self.weights = Weights.parse(expect_table(settings.get("weights", {}), wkey, "a table"), key=wkey)

    def level_of(self, info: FrameworkInfo) -> int:
        """The framework's level: its name's entry, else its role's, else ``default_level``."""
        level = self.framework_levels.get(info.name)
        if level is None:
            level = self.role_levels.get(info.role or "*", self.default_level)
        return level

    def placement(self, info: FrameworkInfo) -> tuple[float, int]:
        # The sorter serves low tiers first; negate so the highest level comes first.
        return self.weights.of(info), -self.level_of(info)
