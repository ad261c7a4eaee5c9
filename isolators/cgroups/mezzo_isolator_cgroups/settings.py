"""Reading an isolator's TOML table: each problem is a ConfigError on the dotted key.

Usage::

    reject_unknown(settings, key, ("root", "cfs_quota"))
    quota = boolean(settings, key, "cfs_quota", False)
    period = integer(settings, key, "cfs_period_us", 100_000, low=1_000, high=1_000_000)

``key`` is the table's key (``agent.isolators.cgroups/cpu``); an error names the
setting under it, e.g. ``agent.isolators.cgroups/cpu.cfs_period_us: expected an
integer from 1000 to 1000000, got 10``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from mezzo.errors import ConfigError
from mezzo.setting_checks import kind_of, subkey

from . import v1


def boolean(settings: Mapping[str, Any], key: str, name: str, default: bool) -> bool:
    value = settings.get(name, default)
    if not isinstance(value, bool):
        raise ConfigError(subkey(key, name), f"expected true or false, got {kind_of(value)}")
    return value


def integer(settings: Mapping[str, Any], key: str, name: str, default: int, *, low: int, high: int) -> int:
    value = settings.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(
            subkey(key, name), f"expected an integer from {low} to {high}, got {kind_of(value)}"
        )
    return value


def number(settings: Mapping[str, Any], key: str, name: str, default: float, *, low: float) -> float:
    value = settings.get(name, default)
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not is_number or not math.isfinite(value) or value < low:
        raise ConfigError(subkey(key, name), f"expected a number of at least {low:g}, got {kind_of(value)}")
    return float(value)


def cgroup_root(settings: Mapping[str, Any], key: str, default: str = "mezzo") -> str:
    """The ``root`` setting: the parent cgroup of the containers' cgroups in each hierarchy."""
    value = settings.get("root", default)
    if not isinstance(value, str):
        raise ConfigError(subkey(key, "root"), f"expected a string, got {kind_of(value)}")
    problem = v1.valid_root(value)
    if problem is not None:
        raise ConfigError(subkey(key, "root"), problem)
    return value
