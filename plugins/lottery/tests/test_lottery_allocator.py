"""LotteryAllocator: weighted odds, who may never win, reproducibility, shares, registration."""

from __future__ import annotations

from collections import Counter

import pytest

from mezzo.resources import Resources
from mezzo.wire.ttypes import FrameworkInfo
from mezzo_allocator_drf import DRFAllocator
from mezzo_allocator_lottery import LotteryAllocator

KEY = "master.allocator.lottery"


def make(settings=None, frameworks=(), agents=0, seed=1):
    """``frameworks``: names, ``name:role`` to set a role."""
    a = LotteryAllocator({"seed": seed, **(settings or {})}, key=KEY)
    for spec in frameworks:
        name, _, role = spec.partition(":")
        a.add_framework(name, FrameworkInfo(name=name, role=role or "*"))
    for i in range(agents):
        a.add_agent(f"a{i}", Resources(cpus=4, mem=4096))
    return a


def free_agents(n):
    return {f"a{i}": Resources(cpus=4, mem=4096) for i in range(n)}


def winners(cycle) -> Counter:
    return Counter(f for f, _ in cycle.offers)


def test_weights_one_and_three_win_a_quarter_and_three_quarters(mezzo_scripted_cycle):
    a = make({"weights": {"roles": {"big": 3}}}, frameworks=["small", "large:big"], agents=1)
    got: Counter[str] = Counter()
    for _ in range(4_000):  # 4,000 cycles of one free agent: one draw each
        cycle = mezzo_scripted_cycle(a, free_agents(1))
        a.allocate(cycle)
        got.update(winners(cycle))
    assert sum(got.values()) == 4_000
    assert abs(got["small"] / 4_000 - 0.25) <= 0.03, got


def test_one_draw_per_agent_and_one_may_offer_when_nobody_is_filtered(mezzo_scripted_cycle):
    a = make(frameworks=[f"f{i}" for i in range(100)], agents=2_000)
    cycle = mezzo_scripted_cycle(a, free_agents(2_000))
    a.allocate(cycle)
    assert len(cycle.offers) == 2_000
    assert len(cycle.asked) == 2_000


def test_framework_name_weight_beats_role_weight(mezzo_scripted_cycle):
    a = make(
        {"weights": {"roles": {"r": 3}, "frameworks": {"special": 0.5}}},
        frameworks=["special:r", "other:r", "plain"],
    )
    assert a.weights.of(FrameworkInfo(name="special", role="r")) == 0.5
    assert a.odds("special") == pytest.approx(0.5 / 4.5)
    assert a.odds("other") == pytest.approx(3 / 4.5)
    assert a.odds("plain") == pytest.approx(1 / 4.5)


# ---------------------------------------------------------------- who may win


def test_frameworks_that_declined_an_agent_never_win_it(mezzo_scripted_cycle):
    a = make(
        {"weights": {"frameworks": {"heavy": 100}}}, frameworks=["heavy", "light1", "light2"], agents=300
    )
    refused = {("heavy", f"a{i}") for i in range(300)} | {("light1", f"a{i}") for i in range(0, 300, 2)}
    cycle = mezzo_scripted_cycle(a, free_agents(300), refused)
    a.allocate(cycle)
    assert len(cycle.offers) == 300
    assert not set(cycle.offers) & refused
    # A framework in cycle.refusing is skipped by membership, never asked about.
    assert not set(cycle.asked) & refused


def test_frameworks_that_may_offer_rules_out_never_win(filtered_cycle):
    # Ruled out by may_offer only (an offer filter, a disconnection): not in refusing().
    a = make(
        {"weights": {"frameworks": {"heavy": 100}}}, frameworks=["heavy", "light1", "light2"], agents=300
    )
    refused = {("heavy", f"a{i}") for i in range(300)} | {("light1", f"a{i}") for i in range(0, 300, 2)}
    cycle = filtered_cycle(a, free_agents(300), refused)
    a.allocate(cycle)
    assert len(cycle.offers) == 300
    assert not set(cycle.offers) & refused
    # Redraws never ask twice about the same pair (the master counts each "no").
    assert len(cycle.asked) == len(set(cycle.asked))


@pytest.mark.parametrize("cycle_kind", ["mezzo_scripted_cycle", "filtered_cycle"])
def test_odds_among_the_eligible_stay_proportional_to_weight(cycle_kind, request):
    # 40 frameworks; on every agent the 36 heaviest are out, which forces every stage of
    # the redraw. The 4 left (weights 1, 1, 1, 3) must still win 1/6, 1/6, 1/6, 1/2.
    names = [f"f{i:02d}" for i in range(40)]
    weights = {n: 50.0 for n in names[:36]} | {"f36": 1, "f37": 1, "f38": 1, "f39": 3}
    a = make({"weights": {"frameworks": weights}}, frameworks=names, agents=6_000, seed=7)
    refused = {(n, f"a{j}") for j in range(6_000) for n in names[:36]}
    cycle = request.getfixturevalue(cycle_kind)(a, free_agents(6_000), refused)
    a.allocate(cycle)
    got = winners(cycle)
    assert sum(got.values()) == 6_000 and set(got) == {"f36", "f37", "f38", "f39"}
    for n in ("f36", "f37", "f38"):
        assert abs(got[n] / 6_000 - 1 / 6) <= 0.03, got
    assert abs(got["f39"] / 6_000 - 1 / 2) <= 0.03, got


def test_agent_nobody_may_take_is_left_unoffered(mezzo_scripted_cycle):
    a = make(frameworks=["f1", "f2"], agents=3)
    refused = {("f1", "a1"), ("f2", "a1")}
    cycle = mezzo_scripted_cycle(a, free_agents(3), refused)
    a.allocate(cycle)
    assert sorted(ag for _, ag in cycle.offers) == ["a0", "a2"]
    assert cycle.free("a1")


def test_inactive_frameworks_never_win(mezzo_scripted_cycle):
    a = make({"weights": {"frameworks": {"idle": 1000}}}, frameworks=["idle", "busy"], agents=500)
    a.deactivate("idle")
    assert a.order() == ["busy"] and a.odds("idle") == 0.0
    cycle = mezzo_scripted_cycle(a, free_agents(500))
    a.allocate(cycle)
    assert winners(cycle) == Counter({"busy": 500})
    assert not [pair for pair in cycle.asked if pair[0] == "idle"]
    a.activate("idle")
    cycle = mezzo_scripted_cycle(a, free_agents(500))
    a.allocate(cycle)
    assert winners(cycle)["idle"] > 450  # odds 1000/1001


def test_removed_and_unknown_frameworks_never_win(mezzo_scripted_cycle):
    a = make(frameworks=["f1", "f2"], agents=50)
    a.remove_framework("f1")
    a.activate("f1")  # a late notification for a removed framework: ignored
    a.activate("ghost")
    cycle = mezzo_scripted_cycle(a, free_agents(50))
    a.allocate(cycle)
    assert winners(cycle) == Counter({"f2": 50})


def test_no_active_framework_offers_nothing(mezzo_scripted_cycle):
    a = make(frameworks=["f1"], agents=2)
    a.deactivate("f1")
    cycle = mezzo_scripted_cycle(a, free_agents(2))
    a.allocate(cycle)
    assert cycle.offers == [] and cycle.asked == []
    empty = make(agents=2)
    cycle = mezzo_scripted_cycle(empty, free_agents(2))
    empty.allocate(cycle)
    assert cycle.offers == []


# ---------------------------------------------------------------- reproducibility


def run(seed, mezzo_scripted_cycle, refused=()):
    a = make(frameworks=[f"f{i}" for i in range(10)], agents=200, seed=seed)
    cycle = mezzo_scripted_cycle(a, free_agents(200), refused)
    a.allocate(cycle)
    return cycle.offers


def test_same_seed_same_offers(mezzo_scripted_cycle):
    refused = {(f"f{i}", f"a{j}") for i in range(5) for j in range(0, 200, 3)}
    assert run(3, mezzo_scripted_cycle, refused) == run(3, mezzo_scripted_cycle, refused)
    assert run(3, mezzo_scripted_cycle) != run(4, mezzo_scripted_cycle)


def test_without_a_seed_the_draws_differ_between_allocators(mezzo_scripted_cycle):
    def unseeded():
        a = LotteryAllocator({}, key=KEY)
        for i in range(10):
            a.add_framework(f"f{i}", FrameworkInfo(name=f"f{i}"))
        cycle = mezzo_scripted_cycle(a, free_agents(200))
        a.allocate(cycle)
        return cycle.offers

    assert unseeded() != unseeded()  # 10**-200 to fail


# ---------------------------------------------------------------- shares


def test_dominant_share_and_guarantees_are_drfs():
    a = make({"weights": {"frameworks": {"b": 3}}}, frameworks=["a", "b"], agents=1)
    a.allocated("a", Resources(cpus=2, mem=1024))
    assert a.dominant_share("a") == 0.5
    assert a.dominant_share("b") == 0.0
    assert a.guaranteed_share("a") == Resources(cpus=1, mem=1024)
    assert a.guaranteed_share("b") == Resources(cpus=3, mem=3072)
    a.recovered("a", Resources(cpus=2, mem=1024))
    assert a.dominant_share("a") == 0.0
    assert a.dominant_share("ghost") == 0.0 and a.guaranteed_share("ghost") == Resources()


def test_offers_count_toward_the_share_at_once(mezzo_scripted_cycle):
    a = make(frameworks=["only"], agents=2)
    cycle = mezzo_scripted_cycle(a, free_agents(1))
    a.allocate(cycle)
    assert a.dominant_share("only") == 0.5


def test_is_the_drf_allocator_underneath():
    assert issubclass(LotteryAllocator, DRFAllocator)


def test_full_cycle_at_benchmark_scale_completes(mezzo_scripted_cycle):
    """10,000 agents x 1,000 frameworks, 50 frameworks declined every 7th agent:
    a sanity run, no timing asserted."""
    a = make(frameworks=[f"f{i}" for i in range(1_000)], agents=10_000)
    refused = {(f"f{i}", f"a{j}") for j in range(0, 10_000, 7) for i in range(50)}
    cycle = mezzo_scripted_cycle(a, free_agents(10_000), refused)
    a.allocate(cycle)
    assert len(cycle.offers) == 10_000
    assert not set(cycle.offers) & refused
    assert len(cycle.asked) < 10_500  # about one may_offer per agent


def test_registered_through_the_entry_point():
    import mezzo.plugins as p

    plugins = p.load_plugins()
    rows = [r for r in plugins.describe() if any(c["name"] == "lottery" for c in r["components"])]
    assert len(rows) == 1 and rows[0]["distribution"].startswith("mezzo-allocator-lottery")
    created = plugins.registry.create("allocator", "lottery", {"seed": 5}, key="master.allocator")
    assert isinstance(created, LotteryAllocator) and created.seed == 5
