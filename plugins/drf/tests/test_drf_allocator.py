"""DRFAllocator: the per-agent walk, guarantees, tolerance, and registration."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mezzo.resources import Resources
from mezzo_allocator_drf import DRFAllocator

KEY = "master.allocator.drf"


def make(settings=None, frameworks=(), agents=0, info=None):
    from mezzo.wire.ttypes import FrameworkInfo

    a = DRFAllocator(settings or {}, key=KEY)
    for name in frameworks:
        role = "*"
        if ":" in name:
            name, role = name.split(":")
        a.add_framework(name, FrameworkInfo(name=name, role=role))
    for i in range(agents):
        a.add_agent(f"a{i}", Resources(cpus=4, mem=4096))
    return a


def free_agents(n):
    return {f"a{i}": Resources(cpus=4, mem=4096) for i in range(n)}


def test_each_agent_goes_to_the_lowest_share_framework(mezzo_scripted_cycle):
    a = make(frameworks=["f1", "f2", "f3"], agents=6)
    a.allocated("f1", Resources(cpus=4, mem=4096))  # f1 already holds an agent's worth
    cycle = mezzo_scripted_cycle(a, free_agents(5))
    a.allocate(cycle)
    # f2 and f3 catch up first (ties by registration), then all three take turns.
    assert cycle.offers == [("f2", "a0"), ("f3", "a1"), ("f1", "a2"), ("f2", "a3"), ("f3", "a4")]
    # One may_offer per agent: nobody is filtered, so the walk stops at the first.
    assert len(cycle.asked) == 5
    assert a.dominant_share("f1") == 2 / 6


def test_filtered_framework_is_skipped_and_unwanted_agent_left(mezzo_scripted_cycle):
    a = make(frameworks=["f1", "f2"], agents=3)
    refused = {("f1", "a0"), ("f1", "a2"), ("f2", "a2")}
    cycle = mezzo_scripted_cycle(a, free_agents(3), refused)
    a.allocate(cycle)
    assert cycle.offers == [("f2", "a0"), ("f1", "a1")]
    assert cycle.free("a2")  # nobody may take it: not offered
    # The refusing set answered for a2; may_offer was not asked about it.
    assert not [pair for pair in cycle.asked if pair[1] == "a2"]


def test_frameworks_that_declined_an_agent_are_skipped_without_asking(mezzo_scripted_cycle):
    names = [f"f{i:02d}" for i in range(40)]
    a = make(frameworks=names, agents=1)
    refused = {(n, "a0") for n in names[:30]}
    cycle = mezzo_scripted_cycle(a, free_agents(1), refused)
    a.allocate(cycle)
    assert cycle.offers == [("f30", "a0")]
    # The refusing set answered for the first 30; may_offer was asked once.
    assert cycle.asked == [("f30", "a0")]


def test_weights_steer_offers(mezzo_scripted_cycle):
    a = make({"roles": {"big": 3}}, frameworks=["small", "large:big"], agents=8)
    cycle = mezzo_scripted_cycle(a, free_agents(8))
    a.allocate(cycle)
    got = [f for f, _ in cycle.offers]
    assert got.count("large") == 6 and got.count("small") == 2


def test_framework_name_weight_beats_role_weight():
    a = make({"roles": {"r": 3}, "frameworks": {"special": 0.5}})
    from mezzo.wire.ttypes import FrameworkInfo

    assert a.weights.of(FrameworkInfo(name="special", role="r")) == 0.5
    assert a.weights.of(FrameworkInfo(name="other", role="r")) == 3.0
    assert a.weights.of(FrameworkInfo(name="other", role="x")) == 1.0


def test_inactive_frameworks_get_no_offers(mezzo_scripted_cycle):
    a = make(frameworks=["f1", "f2"], agents=2)
    a.deactivate("f1")
    cycle = mezzo_scripted_cycle(a, free_agents(2))
    a.allocate(cycle)
    assert cycle.offers == [("f2", "a0"), ("f2", "a1")]
    a.activate("f1")
    assert a.order() == ["f1", "f2"]


def test_agents_joining_cause_one_resort_at_the_next_cycle(mezzo_scripted_cycle):
    a = make(frameworks=[f"f{i}" for i in range(20)])
    resorts = a._sorter.resorts
    for i in range(2_000):
        a.add_agent(f"a{i}", Resources(cpus=1, mem=1))
    assert a._sorter.resorts == resorts
    a.allocate(mezzo_scripted_cycle(a, {}))
    assert a._sorter.resorts == resorts + 1


def test_unknown_frameworks_are_tolerated():
    a = make(frameworks=["f1"], agents=1)
    a.allocated("ghost", Resources(cpus=1))
    a.recovered("ghost", Resources(cpus=1))
    a.remove_framework("ghost")
    a.activate("ghost")
    a.deactivate("ghost")
    assert a.dominant_share("ghost") == 0.0
    assert a.guaranteed_share("ghost") == Resources()
    assert a.order() == ["f1"]


def test_removed_framework_leaves_order_and_guarantees():
    a = make(frameworks=["f1", "f2"], agents=2)
    assert a.guaranteed_share("f1") == Resources(cpus=4, mem=4096)
    a.remove_framework("f2")
    assert a.order() == ["f1"]
    assert a.guaranteed_share("f1") == Resources(cpus=8, mem=8192)


def test_guarantees_are_weighted_shares():
    a = make({"frameworks": {"b": 3}}, frameworks=["a", "b"], agents=1)
    assert a.guaranteed_share("a") == Resources(cpus=1, mem=1024)
    assert a.guaranteed_share("b") == Resources(cpus=3, mem=3072)


@settings(max_examples=200, deadline=None)
@given(
    weights=st.lists(st.floats(0.001, 1000, allow_nan=False), min_size=1, max_size=12),
    cpus=st.integers(1, 10**6),
    mem=st.integers(1, 10**9),
)
def test_guarantees_fit_the_cluster(weights, cpus, mem):
    from mezzo.wire.ttypes import FrameworkInfo

    names = {f"f{i}": w for i, w in enumerate(weights)}
    a = DRFAllocator({"frameworks": names}, key=KEY)
    for n in names:
        a.add_framework(n, FrameworkInfo(name=n))
    total = Resources(cpus=cpus / 1000, mem=mem / 1000)
    a.add_agent("a0", total)
    summed = Resources()
    for n in names:
        summed = summed + a.guaranteed_share(n)
    assert summed.fits_in(total)
    # Rounding down loses at most one thousandth per framework and resource.
    for r in ("cpus", "mem"):
        assert total.milli(r) - summed.milli(r) <= len(names)


def test_full_cycle_at_benchmark_scale_completes(mezzo_scripted_cycle):
    """10,000 agents x 1,000 frameworks, every framework filtered for the first
    agents it would be walked to: a sanity run, no timing asserted."""
    a = make(frameworks=[f"f{i}" for i in range(1_000)], agents=10_000)
    refused = {(f"f{i}", f"a{j}") for j in range(0, 10_000, 7) for i in range(50)}
    cycle = mezzo_scripted_cycle(a, free_agents(10_000), refused)
    a.allocate(cycle)
    assert len(cycle.offers) == 10_000
    got: dict[str, int] = {}
    for f, _ in cycle.offers:
        got[f] = got.get(f, 0) + 1
    assert set(got.values()) == {10}  # progressive filling: equal shares at the end


def test_registered_through_the_entry_point():
    import mezzo.plugins as p

    plugins = p.load_plugins()
    rows = [r for r in plugins.describe() if any(c["name"] == "drf" for c in r["components"])]
    assert len(rows) == 1 and rows[0]["distribution"].startswith("mezzo-allocator-drf")
    created = plugins.registry.create("allocator", "drf", {"roles": {"x": 2}}, key="master.allocator")
    assert isinstance(created, DRFAllocator)
