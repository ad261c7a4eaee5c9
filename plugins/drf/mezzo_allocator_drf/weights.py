"""DRF weights and guarantees from TOML, and the small helpers that validate component tables.

Usage::

    w = Weights.parse({"roles": {"analytics": 2}, "frameworks": {"spark": 3}},
                      key="master.allocator.drf")
    w.of(framework_info)          # 3.0 for "spark", 2.0 for other "analytics" frameworks, else 1.0

    g = Guarantees.parse({"roles": {"mpi": 0.25}}, key="master.allocator.drf.guarantees")
    g.of(framework_info)          # Fraction(1, 4) for "mpi" frameworks, else 0

Error handling: every problem raises :class:`mezzo.errors.ConfigError` whose key is
the dotted TOML key of the offending value, e.g.
``master.allocator.drf.roles.analytics: weight must be a positive finite number, got -1``.
Role and framework names that are not bare TOML keys are quoted in that key
(``roles."team.a"``) so it can be pasted back into the file.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, TypeVar

from mezzo.errors import ConfigError
from mezzo.setting_checks import expect_table, kind_of, reject_unknown, subkey

if TYPE_CHECKING:
    from mezzo.wire.ttypes import FrameworkInfo


def parse_weight(value: Any, key: str) -> float:
    # bool is an int in Python but never a weight in TOML.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(key, f"weight must be a positive finite number, got {kind_of(value)}")
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(key, f"weight must be a positive finite number, got {value!r}")
    return float(value)


V = TypeVar("V")


def _by_role_and_name(
    settings: Mapping[str, Any], key: str, parse_value: Callable[[Any, str], V], what: str
) -> dict[str, dict[str, V]]:
    """The ``roles`` and ``frameworks`` tables of ``settings`` (both optional, nothing
    else allowed), each value checked by ``parse_value``; ``what`` names a value in
    errors. Weights and guarantees share this layout."""
    reject_unknown(settings, key, ROLE_AND_NAME)
    tables: dict[str, dict[str, V]] = {}
    for name in ROLE_AND_NAME:
        tkey = subkey(key, name)
        table = expect_table(settings.get(name, {}), tkey, f"a table of <{name[:-1]}> = <{what}>")
        tables[name] = {k: parse_value(v, subkey(tkey, str(k))) for k, v in table.items()}
    return tables


ROLE_AND_NAME = ("frameworks", "roles")


@dataclass(frozen=True)
class Weights:
    """DRF weights by role and by framework name (``FrameworkInfo.name``).

    A framework's weight is its name's entry, else its role's, else 1.0: the more
    specific setting wins. A framework of weight 2 is entitled to twice the
    dominant share of a framework of weight 1.
    """

    roles: Mapping[str, float] = field(default_factory=dict)
    frameworks: Mapping[str, float] = field(default_factory=dict)

    def of(self, info: FrameworkInfo) -> float:
        w = self.frameworks.get(info.name)
        if w is None:
            w = self.roles.get(info.role or "*", 1.0)
        return w

    @classmethod
    def parse(cls, settings: Mapping[str, Any], *, key: str) -> Weights:
        """Validate a table holding ``roles`` and ``frameworks`` weight tables (both
        optional, nothing else allowed); ``key`` is that table's dotted TOML key."""
        expect_table(settings, key, "a table")
        tables = _by_role_and_name(settings, key, parse_weight, "weight")
        return cls(roles=tables["roles"], frameworks=tables["frameworks"])


def parse_fraction(value: Any, key: str) -> Fraction:
    """A guarantee: a finite number in (0, 1], as the exact decimal written in the TOML
    (``0.1`` is 1/10, not the binary float), so sums such as 0.7 + 0.2 + 0.1 are exactly 1."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(key, f"guarantee must be a number in (0, 1], got {kind_of(value)}")
    if not math.isfinite(value) or not 0 < value <= 1:
        raise ConfigError(key, f"guarantee must be a number in (0, 1], got {value!r}")
    return Fraction(repr(value)) if isinstance(value, float) else Fraction(value)


@dataclass(frozen=True)
class Guarantees:
    """Guaranteed fractions of the cluster by role and by framework name (paper §3.3).

    A framework's guarantee is its name's entry, else its role's, else 0. A role's
    entry applies to each framework of that role. The configured entries (each role
    counted once) must sum to at most 1, so they can all be met at once.
    """

    roles: Mapping[str, Fraction] = field(default_factory=dict)
    frameworks: Mapping[str, Fraction] = field(default_factory=dict)

    def of(self, info: FrameworkInfo) -> Fraction:
        g = self.frameworks.get(info.name)
        if g is None:
            g = self.roles.get(info.role or "*", Fraction(0))
        return g

    @classmethod
    def parse(cls, settings: Any, *, key: str) -> Guarantees:
        """Validate a ``guarantees`` table (``roles`` and ``frameworks``, both optional);
        ``key`` is that table's dotted TOML key."""
        expect_table(settings, key, "a table with roles and frameworks")
        tables = _by_role_and_name(settings, key, parse_fraction, "fraction")
        total = sum(tables["roles"].values(), Fraction(0)) + sum(tables["frameworks"].values(), Fraction(0))
        if total > 1:
            raise ConfigError(
                key,
                f"guarantees sum to {float(total):g} of the cluster, more than 1: "
                "they cannot all be met at once",
            )
        return cls(roles=tables["roles"], frameworks=tables["frameworks"])
