"""Settings of [master.allocator.drf]: every error names its dotted key."""

from __future__ import annotations

import math

import pytest

from mezzo.errors import ConfigError
from mezzo_allocator_drf import DRFAllocator

KEY = "master.allocator.drf"


def error(settings) -> ConfigError:
    with pytest.raises(ConfigError) as exc:
        DRFAllocator(settings, key=KEY)
    return exc.value


def test_empty_and_valid_settings():
    DRFAllocator({}, key=KEY)
    a = DRFAllocator({"roles": {"analytics": 2, "*": 0.5}, "frameworks": {"etl": 1.5}}, key=KEY)
    assert a.weights.roles == {"analytics": 2.0, "*": 0.5}
    assert a.weights.frameworks == {"etl": 1.5}


def test_unknown_setting():
    e = error({"role": {"a": 1}})
    assert e.key == f"{KEY}.role"
    assert "frameworks, guarantees, roles" in e.problem


@pytest.mark.parametrize("name", ["roles", "frameworks"])
def test_weight_table_must_be_a_table(name):
    e = error({name: 2.0})
    assert e.key == f"{KEY}.{name}"
    assert "table" in e.problem


@pytest.mark.parametrize("bad", [0, -1, math.inf, math.nan, "2", True, [1], {"x": 1}])
def test_weights_must_be_positive_finite_numbers(bad):
    e = error({"roles": {"analytics": bad}})
    assert e.key == f"{KEY}.roles.analytics"
    assert "positive finite number" in e.problem


def test_names_that_are_not_bare_keys_are_quoted():
    e = error({"frameworks": {"team.a etl": -2}})
    assert e.key == f'{KEY}.frameworks."team.a etl"'
    assert str(e).startswith(f'{KEY}.frameworks."team.a etl": ')


def test_key_comes_from_the_caller():
    with pytest.raises(ConfigError) as exc:
        DRFAllocator({"nope": 1}, key="elsewhere.drf")
    assert exc.value.key == "elsewhere.drf.nope"


# -- guarantees -------------------------------------------------------------


def test_valid_guarantees():
    from fractions import Fraction

    a = DRFAllocator(
        {
            "roles": {"mpi": 2},
            "guarantees": {"roles": {"mpi": 0.25}, "frameworks": {"nightly": 0.1, "all": 0.65}},
        },
        key=KEY,
    )
    assert a.weights.roles == {"mpi": 2.0}  # weights are read alongside
    assert a.guarantees is not None
    assert a.guarantees.roles == {"mpi": Fraction(1, 4)}
    assert a.guarantees.frameworks == {"nightly": Fraction(1, 10), "all": Fraction(13, 20)}
    # exactly 1 as written (0.7 + 0.2 + 0.1 is not 1 in binary floats) and a whole 1 are fine
    DRFAllocator({"guarantees": {"frameworks": {"a": 0.7, "b": 0.2, "c": 0.1}}}, key=KEY)
    DRFAllocator({"guarantees": {"roles": {"everything": 1}}}, key=KEY)
    empty = DRFAllocator({"guarantees": {}}, key=KEY).guarantees
    assert empty is not None and empty.roles == {}
    assert DRFAllocator({}, key=KEY).guarantees is None


@pytest.mark.parametrize("bad", [0, -0.1, 1.5, 2, math.inf, math.nan, "0.5", True, [0.5], {"x": 1}])
@pytest.mark.parametrize("table", ["roles", "frameworks"])
def test_guarantees_must_be_fractions(table, bad):
    e = error({"guarantees": {table: {"mpi": bad}}})
    assert e.key == f"{KEY}.guarantees.{table}.mpi"
    assert "guarantee must be a number in (0, 1]" in e.problem


def test_guarantees_unknown_subkey_and_shape():
    e = error({"guarantees": {"role": {"mpi": 0.1}}})
    assert e.key == f"{KEY}.guarantees.role"
    assert "unknown setting (known: frameworks, roles)" in e.problem
    e = error({"guarantees": 0.5})
    assert e.key == f"{KEY}.guarantees" and "table" in e.problem
    e = error({"guarantees": {"roles": 0.5}})
    assert e.key == f"{KEY}.guarantees.roles" and "table" in e.problem
    e = error({"guarantees": {"frameworks": {"team.a etl": 2}}})
    assert e.key == f'{KEY}.guarantees.frameworks."team.a etl"'


def test_guarantees_that_do_not_fit_together_are_refused():
    e = error({"guarantees": {"roles": {"mpi": 0.6}, "frameworks": {"nightly": 0.5}}})
    assert e.key == f"{KEY}.guarantees"
    assert "sum to 1.1" in e.problem
    assert "cannot all be met at once" in e.problem


def test_unknown_settings_are_refused_by_the_component_contract():
    """DRF declares its settings (known_settings); the base Component refuses the rest,
    and so does every allocator built on DRF, with its own list."""
    e = error({"rols": {"a": 1}})
    assert e.key == f"{KEY}.rols"
    assert e.problem == "unknown setting for allocator 'drf' (known: frameworks, guarantees, roles)"
    e = error(["not", "a", "table"])
    assert e.key == KEY and "expected a table" in e.problem
