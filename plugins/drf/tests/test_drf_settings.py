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
    assert "frameworks, roles" in e.problem


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
