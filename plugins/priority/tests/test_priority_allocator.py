"""StrictPriorityAllocator: levels first, weighted DRF within a level, guarantees, settings."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mezzo.errors import ConfigError
from mezzo.resources import Resources
from mezzo.wire.ttypes import FrameworkInfo
from mezzo_allocator_drf import DRFAllocator
from mezzo_allocator_priority import StrictPriorityAllocator

KEY = "master.allocator.strict-priority"
SETTINGS = {"roles": {"prod": 10, "batch": -5}, "frameworks": {"pager": 20}, "default_level": 0}


def make(frameworks, agents=0, conf=SETTINGS):
    a = StrictPriorityAllocator(conf, key=KEY)
    for spec in frameworks:
        name, _, role = spec.partition(":")
        a.add_framework(name, FrameworkInfo(name=name, role=role or "*"))
    for i in range(agents):
        a.add_agent(f"a{i}", Resources(cpus=4, mem=4096))
    return a


def free_agents(n):
    return {f"a{i}": Resources(cpus=4, mem=4096) for i in range(n)}


def test_levels_from_name_role_and_default():
    a = make([])
    assert a.level_of(FrameworkInfo(name="pager", role="batch")) == 20
    assert a.level_of(FrameworkInfo(name="x", role="prod")) == 10
    assert a.level_of(FrameworkInfo(name="x", role="batch")) == -5
    assert a.level_of(FrameworkInfo(name="x", role="other")) == 0


def test_higher_level_takes_every_agent_it_may(mezzo_scripted_cycle):
    a = make(["low:batch", "mid", "high:prod"], agents=4)
    cycle = mezzo_scripted_cycle(a, free_agents(4))
    a.allocate(cycle)
    assert [f for f, _ in cycle.offers] == ["high"] * 4


def test_lower_level_gets_an_agent_only_when_no_higher_framework_may(mezzo_scripted_cycle):
    a = make(["low:batch", "mid", "high:prod"], agents=4)
    refused = {("high", "a1"), ("high", "a2"), ("mid", "a2"), ("high", "a3"), ("mid", "a3"), ("low", "a3")}
    cycle = mezzo_scripted_cycle(a, free_agents(4), refused)
    a.allocate(cycle)
    assert cycle.offers == [("high", "a0"), ("mid", "a1"), ("low", "a2")]


def test_inactive_higher_level_yields_to_lower(mezzo_scripted_cycle):
    a = make(["low:batch", "high:prod"], agents=2)
    a.deactivate("high")
    cycle = mezzo_scripted_cycle(a, free_agents(2))
    a.allocate(cycle)
    assert [f for f, _ in cycle.offers] == ["low", "low"]


def test_weighted_drf_within_a_level(mezzo_scripted_cycle):
    conf = {**SETTINGS, "weights": {"frameworks": {"p2": 3}}}
    a = make(["p1:prod", "p2:prod", "low:batch"], agents=8, conf=conf)
    cycle = mezzo_scripted_cycle(a, free_agents(8))
    a.allocate(cycle)
    got = [f for f, _ in cycle.offers]
    assert got.count("p2") == 6 and got.count("p1") == 2 and "low" not in got


def test_guarantees_go_to_the_highest_level_present():
    a = make(["low:batch", "p1:prod", "p2:prod"], agents=2)
    assert a.guaranteed_share("p1") == Resources(cpus=4, mem=4096)
    assert a.guaranteed_share("p2") == Resources(cpus=4, mem=4096)
    assert a.guaranteed_share("low") == Resources()
    a.remove_framework("p1")
    a.remove_framework("p2")
    assert a.guaranteed_share("low") == Resources(cpus=8, mem=8192)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(-2, 2), st.sampled_from([0.5, 1.0, 2.5])), min_size=1, max_size=10))
def test_guarantees_fit_the_cluster(frameworks):
    conf = {
        "frameworks": {f"f{i}": lvl for i, (lvl, _) in enumerate(frameworks)},
        "weights": {"frameworks": {f"f{i}": w for i, (_, w) in enumerate(frameworks)}},
    }
    a = make([f"f{i}" for i in range(len(frameworks))], agents=3, conf=conf)
    total = Resources(cpus=12, mem=3 * 4096)
    summed = Resources()
    for i in range(len(frameworks)):
        summed = summed + a.guaranteed_share(f"f{i}")
    assert summed.fits_in(total)
    assert summed.milli("cpus") >= total.milli("cpus") - len(frameworks)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(-2, 2), min_size=1, max_size=8),
    st.lists(st.tuples(st.integers(0, 7), st.integers(1, 4_000)), max_size=30),
)
def test_order_is_level_then_weighted_share(levels, allocations):
    conf = {"frameworks": {f"f{i}": lvl for i, lvl in enumerate(levels)}}
    a = make([f"f{i}" for i in range(len(levels))], agents=1, conf=conf)
    for i, cpus in allocations:
        if i < len(levels):
            a.allocated(f"f{i}", Resources(cpus=cpus / 1000))
    expected = sorted(range(len(levels)), key=lambda i: (-levels[i], a.dominant_share(f"f{i}"), i))
    assert a.order() == [f"f{i}" for i in expected]


def test_is_the_drf_allocator_underneath():
    assert issubclass(StrictPriorityAllocator, DRFAllocator)


# ---------------------------------------------------------------- settings


def error(conf) -> ConfigError:
    with pytest.raises(ConfigError) as exc:
        StrictPriorityAllocator(conf, key=KEY)
    return exc.value


@pytest.mark.parametrize(
    "conf, key",
    [
        ({"level": 1}, f"{KEY}.level"),
        ({"default_level": 1.5}, f"{KEY}.default_level"),
        ({"default_level": True}, f"{KEY}.default_level"),
        ({"roles": 3}, f"{KEY}.roles"),
        ({"roles": {"prod": "high"}}, f"{KEY}.roles.prod"),
        ({"frameworks": {"my fw": 2.0}}, f'{KEY}.frameworks."my fw"'),
        ({"weights": 2}, f"{KEY}.weights"),
        ({"weights": {"levels": {}}}, f"{KEY}.weights.levels"),
        ({"weights": {"roles": {"prod": 0}}}, f"{KEY}.weights.roles.prod"),
        ({"weights": {"frameworks": {"x": -1.0}}}, f"{KEY}.weights.frameworks.x"),
    ],
)
def test_settings_errors_name_the_key(conf, key):
    assert error(conf).key == key


def test_registered_through_the_entry_point():
    import mezzo.plugins as p

    plugins = p.load_plugins()
    rows = [r for r in plugins.describe() if any(c["name"] == "strict-priority" for c in r["components"])]
    assert len(rows) == 1 and rows[0]["distribution"].startswith("mezzo-allocator-priority")
    created = plugins.registry.create(
        "allocator", "strict-priority", {"default_level": 3}, key="master.allocator"
    )
    assert isinstance(created, StrictPriorityAllocator) and created.default_level == 3


def test_configured_guarantees_apply_across_levels_and_are_checked():
    conf = {**SETTINGS, "guarantees": {"roles": {"batch": 0.25}, "frameworks": {"pager": 0.5}}}
    a = make(["pager", "etl:batch", "web"], agents=2, conf=conf)
    # A configured guarantee holds whatever the framework's level (batch is below prod).
    assert a.guaranteed_share("etl") == Resources(cpus=2, mem=2048)
    assert a.guaranteed_share("pager") == Resources(cpus=4, mem=4096)
    assert a.guaranteed_share("web") == Resources()
    with pytest.raises(ConfigError) as err:
        StrictPriorityAllocator({"guarantees": {"roles": {"a": 0.6, "b": 0.6}}}, key=KEY)
    assert err.value.key == f"{KEY}.guarantees" and "cannot all be met" in str(err.value)
