"""Settings of [master.allocator.lottery]: every error names its dotted key."""

from __future__ import annotations

import math

import pytest

from mezzo import config
from mezzo.errors import ConfigError
from mezzo_allocator_lottery import LotteryAllocator

KEY = "master.allocator.lottery"


def error(settings) -> ConfigError:
    with pytest.raises(ConfigError) as exc:
        LotteryAllocator(settings, key=KEY)
    return exc.value


def test_empty_and_valid_settings():
    a = LotteryAllocator({}, key=KEY)
    assert a.seed is None
    a = LotteryAllocator(
        {"seed": -3, "weights": {"roles": {"analytics": 3, "*": 0.5}, "frameworks": {"etl": 1.5}}}, key=KEY
    )
    assert a.seed == -3
    assert a.weights.roles == {"analytics": 3.0, "*": 0.5}
    assert a.weights.frameworks == {"etl": 1.5}


def test_settings_from_toml():
    conf = config.from_dict(
        {
            "master": {
                "allocator": {"name": "lottery", "lottery": {"seed": 9, "weights": {"roles": {"batch": 3}}}}
            }
        }
    )
    a = LotteryAllocator(conf.master.allocator.selected_settings(), key=KEY)
    assert a.seed == 9 and a.weights.roles == {"batch": 3.0}


@pytest.mark.parametrize(
    "settings, key",
    [
        ({"sead": 1}, f"{KEY}.sead"),
        ({"roles": {"a": 1}}, f"{KEY}.roles"),  # drf's layout: here they live under weights
        ({"seed": 1.5}, f"{KEY}.seed"),
        ({"seed": True}, f"{KEY}.seed"),
        ({"seed": "42"}, f"{KEY}.seed"),
        ({"weights": 2}, f"{KEY}.weights"),
        ({"weights": {"x": -1}}, f"{KEY}.weights.x"),  # a role straight under weights
        ({"weights": {"roles": 3}}, f"{KEY}.weights.roles"),
        ({"weights": {"roles": {"x": -1}}}, f"{KEY}.weights.roles.x"),
        ({"weights": {"frameworks": {"x": 0}}}, f"{KEY}.weights.frameworks.x"),
        ({"weights": {"frameworks": {"my fw": math.inf}}}, f'{KEY}.weights.frameworks."my fw"'),
        ({"weights": {"roles": {"x": math.nan}}}, f"{KEY}.weights.roles.x"),
        ({"weights": {"roles": {"x": True}}}, f"{KEY}.weights.roles.x"),
        ({"weights": {"roles": {"x": "3"}}}, f"{KEY}.weights.roles.x"),
    ],
)
def test_settings_errors_name_the_key(settings, key):
    e = error(settings)
    assert e.key == key
    assert str(e).startswith(f"{key}: ")


def test_messages_say_what_is_wrong():
    assert (
        "unknown setting for allocator 'lottery' (known: guarantees, seed, weights)"
        in error({"sead": 1}).problem
    )
    assert "unknown setting (known: frameworks, roles)" in error({"weights": {"x": -1}}).problem
    assert "positive finite number, got -1" in error({"weights": {"roles": {"x": -1}}}).problem
    assert "seed must be an integer, got float 1.5" in error({"seed": 1.5}).problem


def test_key_comes_from_the_caller():
    with pytest.raises(ConfigError) as exc:
        LotteryAllocator({"nope": 1}, key="elsewhere.lottery")
    assert exc.value.key == "elsewhere.lottery.nope"


def test_guarantees_are_drf_s():
    from mezzo.resources import Resources
    from mezzo.wire.ttypes import FrameworkInfo

    a = LotteryAllocator({"guarantees": {"roles": {"mpi": 0.5}}}, key=KEY)
    a.add_framework("f1", FrameworkInfo(name="solver", role="mpi"))
    a.add_framework("f2", FrameworkInfo(name="etl"))
    a.add_agent("a1", Resources(cpus=8, mem=1000))
    assert a.guaranteed_share("f1") == Resources(cpus=4, mem=500)
    assert a.guaranteed_share("f2") == Resources()
    with pytest.raises(ConfigError) as err:
        LotteryAllocator({"guarantees": {"frameworks": {"x": 1.5}}}, key=KEY)
    assert err.value.key == f"{KEY}.guarantees.frameworks.x"
