"""The revocation policy component kind (paper §3.3) and the built-in ``fair-share``:
never below a guarantee, newest task first, no more than wanted, most-over holder
first; selected by ``[master.revocation_policy] name`` and created at master start-up."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mezzo.config import MasterConfig, RevocationPolicyConfig, from_dict
from mezzo.errors import ConfigError
from mezzo.guarantees import above_guarantee, meets_guarantee
from mezzo.hookspecs import HeldTask, Holder, RevocationPolicy, Starved, Victim
from mezzo.master.master import Master
from mezzo.plugins import load_plugins
from mezzo.resources import Resources
from mezzo.revocation import FairSharePolicy

R = Resources


def policy() -> FairSharePolicy:
    return load_plugins(entry_points=False).registry.create(
        "revocation_policy", "fair-share", {}, key="master.revocation_policy.fair-share")


def task(tid: str, started: float, agent: str = "a1", **res: float) -> HeldTask:
    return HeldTask(task_id=tid, agent_id=agent, resources=R(**res), started_at=started, long=False)


def holder(fid: str, tasks: list[HeldTask], guaranteed: Resources | None = None,
           extra: Resources | None = None) -> Holder:
    guaranteed = guaranteed or R()
    allocated = extra or R()
    for t in tasks:
        allocated = allocated + t.resources
    return Holder(framework_id=fid, allocated=allocated, guaranteed=guaranteed, tasks=tasks)


def starved(fid: str, waiting: float = 60.0, **wants: float) -> Starved:
    return Starved(framework_id=fid, wants=R(**wants), waiting_seconds=waiting)


def ids(victims: list[Victim]) -> list[tuple[str, str]]:
    return [(v.framework_id, v.task_id) for v in victims]


# ----------------------------------------------------------- the contract


def test_fair_share_is_a_registered_revocation_policy():
    p = policy()
    assert isinstance(p, RevocationPolicy) and p.kind == "revocation_policy"
    assert load_plugins(entry_points=False).registry.names("revocation_policy") == ["fair-share"]


def test_contract_dataclasses_are_frozen():
    s = starved("s", cpus=1)
    with pytest.raises(AttributeError):
        s.waiting_seconds = 3  # type: ignore[misc]


def test_fair_share_takes_no_settings_and_names_an_unknown_one():
    reg = load_plugins(entry_points=False).registry
    with pytest.raises(ConfigError) as ei:
        reg.create("revocation_policy", "fair-share", {"aggressive": True},
                   key="master.revocation_policy.fair-share")
    assert ei.value.key == "master.revocation_policy.fair-share.aggressive"


# ----------------------------------------------------------- fair-share


def test_nothing_to_do_without_starved_frameworks():
    assert policy().select([], [holder("A", [task("t1", 1, cpus=1)])]) == []


def test_nothing_when_no_holder_is_above_its_guarantee():
    holders = [
        holder("A", [task("a1", 1, cpus=1), task("a2", 2, cpus=1)], guaranteed=R(cpus=2)),   # exactly at it
        holder("B", [task("b1", 1, cpus=1)], guaranteed=R(cpus=4)),                          # below it
    ]
    assert policy().select([starved("S", cpus=1)], holders) == []


def test_a_holder_above_its_guarantee_in_one_resource_is_above_it():
    # Dominant-share sense (mezzo.guarantees): 4 cpus against 1 guaranteed is above the
    # guarantee although mem is below it; cpu-heavy tasks must not make it immune.
    h = holder("A", [task("a1", 1, cpus=2, mem=10), task("a2", 2, cpus=2, mem=10)], guaranteed=R(cpus=1, mem=100))
    assert ids(policy().select([starved("S", cpus=1)], [h])) == [("A", "a2")]


def test_a_holder_at_or_below_its_guarantee_loses_nothing():
    at = holder("A", [task("a1", 1, cpus=2, mem=10), task("a2", 2, cpus=2, mem=10)], guaranteed=R(cpus=4, mem=100))
    below = holder("B", [task("b1", 1, cpus=1, mem=10)], guaranteed=R(cpus=2, mem=100))
    assert policy().select([starved("S", cpus=1)], [at, below]) == []


def test_a_task_is_taken_only_if_the_holder_still_meets_its_guarantee():
    # 3 cpus against 2 guaranteed: taking the 2-cpu task would leave 1 < 2; the 1-cpu one leaves 2.
    h = holder("A", [task("big", 9, cpus=2), task("small", 1, cpus=1)], guaranteed=R(cpus=2))
    assert ids(policy().select([starved("S", cpus=5)], [h])) == [("A", "small")]


def test_the_want_is_covered_once_one_of_its_resources_is():
    # Getting 2 cpus meets a guarantee of cpus:2;mem:4096 in the dominant-share sense.
    h = holder("A", [task(f"t{i}", i, cpus=1, mem=256) for i in range(6)])
    assert len(policy().select([starved("S", cpus=2, mem=4096)], [h])) == 2


def test_newest_task_first():
    h = holder("A", [task("old", 1, cpus=1), task("new", 30, cpus=1), task("mid", 20, cpus=1)])
    assert ids(policy().select([starved("S", cpus=1)], [h])) == [("A", "new")]
    assert ids(policy().select([starved("S", cpus=2)], [h])) == [("A", "new"), ("A", "mid")]


def test_stops_once_wants_are_covered():
    h = holder("A", [task(f"t{i}", i, cpus=1) for i in range(10)])
    assert len(policy().select([starved("S", cpus=2.5)], [h])) == 3
    assert len(policy().select([starved("S", cpus=1)], [h])) == 1


def test_never_below_the_guarantee():
    h = holder("A", [task("t1", 1, cpus=1), task("t2", 2, cpus=1), task("t3", 3, cpus=1)], guaranteed=R(cpus=2))
    assert ids(policy().select([starved("S", cpus=10)], [h])) == [("A", "t3")]


def test_a_task_that_would_cross_the_guarantee_is_skipped_for_a_smaller_one():
    h = holder("A", [task("big", 9, cpus=2), task("small", 1, cpus=1)], guaranteed=R(cpus=1.5))
    # Excess is 1.5 cpus: the newest (2 cpus) would cross it, the older 1-cpu task does not.
    assert ids(policy().select([starved("S", cpus=2)], [h])) == [("A", "small")]


def test_only_tasks_holding_something_wanted():
    h = holder("A", [task("cpu-only", 9, cpus=1), task("mem", 1, mem=512)])
    assert ids(policy().select([starved("S", mem=256)], [h])) == [("A", "mem")]


def test_most_over_guarantee_holder_first():
    a = holder("A", [task("a1", 5, cpus=1), task("a2", 6, cpus=1)], guaranteed=R(cpus=1))   # 1 over
    b = holder("B", [task("b1", 1, cpus=1), task("b2", 2, cpus=1), task("b3", 3, cpus=1)])  # 3 over
    assert ids(policy().select([starved("S", cpus=1)], [a, b])) == [("B", "b3")]
    # Re-ranked after every pick: B drops to 1 over after two picks, then ties with A (A wins by id).
    assert ids(policy().select([starved("S", cpus=3)], [a, b])) == [("B", "b3"), ("B", "b2"), ("A", "a2")]


def test_excess_is_ranked_by_its_dominant_share_not_raw_units():
    # A's excess is larger in raw units (2000 MB) but only a fifth of what is held of
    # anything; B's is 4 of the 5 cpus held: B is further over.
    a = holder("A", [task("a1", 1, cpus=1, mem=2000)])
    b = holder("B", [task("b1", 1, cpus=4, mem=10)])
    c = holder("C", [], guaranteed=R(), extra=R(mem=8000))
    assert ids(policy().select([starved("S", cpus=1, mem=10)], [a, b, c])) == [("B", "b1")]


def test_several_starved_longest_waiting_first_and_no_task_twice():
    h = holder("A", [task("t1", 1, cpus=1), task("t2", 2, cpus=1)])
    short, long_ = starved("S1", waiting=10, cpus=1), starved("S2", waiting=50, cpus=1)
    victims = policy().select([short, long_], [h])
    assert ids(victims) == [("A", "t2"), ("A", "t1")]
    assert "for framework S2" in victims[0].reason and "for framework S1" in victims[1].reason
    only_one = holder("A", [task("t1", 1, cpus=1)])
    victims = policy().select([short, long_], [only_one])
    assert ids(victims) == [("A", "t1")] and "for framework S2" in victims[0].reason


def test_starved_frameworks_lose_no_tasks():
    s_holding = holder("S", [task("s1", 9, cpus=4)])
    assert policy().select([starved("S", cpus=1)], [s_holding]) == []
    other = starved("T", waiting=1, cpus=1)
    assert policy().select([starved("S", cpus=1), other], [s_holding, holder("T", [task("x", 1, cpus=1)])]) == []


def test_victims_name_agent_and_a_readable_reason():
    h = holder("A", [task("t1", 1, agent="agent-7", cpus=2)], guaranteed=R(cpus=1), extra=R(cpus=1))
    (v,) = policy().select([starved("S", waiting=42, cpus=1)], [h])
    assert (v.framework_id, v.task_id, v.agent_id) == ("A", "t1", "agent-7")
    assert v.reason == "framework A above its guarantee by cpus:2 (guaranteed cpus:1); revoked for framework S, starved 42 s"


def test_uncoverable_wants_still_get_what_can_be_taken():
    h = holder("A", [task("t1", 1, cpus=1)])
    assert ids(policy().select([starved("S", cpus=5)], [h])) == [("A", "t1")]


# ----------------------------------------------------------- properties

amount = st.integers(min_value=0, max_value=4).map(float)


@st.composite
def scenarios(draw):
    nh = draw(st.integers(1, 4))
    holders = []
    for i in range(nh):
        tasks = [task(f"t{i}.{j}", draw(st.integers(0, 5)), cpus=draw(amount), mem=draw(amount) * 256)
                 for j in range(draw(st.integers(0, 5)))]
        g = R(cpus=draw(amount), mem=draw(amount) * 256) if draw(st.booleans()) else R()
        holders.append(holder(f"F{i}", tasks, guaranteed=g, extra=R(cpus=draw(amount))))
    names = draw(st.lists(st.sampled_from([f"F{i}" for i in range(nh)] + ["X", "Y"]), max_size=3, unique=True))
    starving = [Starved(n, R(cpus=draw(amount) + 0.5, mem=draw(amount) * 128), float(draw(st.integers(0, 100))))
                for n in names]
    return starving, holders


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_property_guarantees_hold_and_no_more_than_wanted(scenario):
    starving, holders = scenario
    victims = policy().select(starving, holders)
    by_fid = {h.framework_id: h for h in holders}
    starving_ids = {s.framework_id for s in starving}
    assert len(set(ids(victims))) == len(victims)  # no task twice
    for h in holders:
        mine = [v for v in victims if v.framework_id == h.framework_id]
        if not mine:
            continue
        assert h.framework_id not in starving_ids
        held = {t.task_id: t for t in h.tasks}
        left = h.allocated
        for v in mine:
            assert v.task_id in held and v.agent_id == held[v.task_id].agent_id
            left = left - held[v.task_id].resources
            assert meets_guarantee(left, h.guaranteed), "a holder was brought below its guarantee"
        assert above_guarantee(h.allocated, h.guaranteed), "a holder at or below its guarantee lost a task"
    # No more than needed: before each starved framework's last victim, no resource of its want was covered.
    for s in starving:
        got = [v for v in victims if re.search(rf"for framework {re.escape(s.framework_id)},", v.reason)]
        taken = R()
        for v in got[:-1]:
            taken = taken + next(t for t in by_fid[v.framework_id].tasks if t.task_id == v.task_id).resources
        if got:
            assert all(taken.milli(name) < m for name, m in s.wants.scalars.items())


# ----------------------------------------------------------- config and start-up


def test_config_default_and_settings_tables():
    assert from_dict({}).master.revocation_policy.name == "fair-share"
    c = from_dict({"master": {"revocation_policy": {"name": "mine", "mine": {"k": 1}}}})
    assert c.master.revocation_policy.selected_settings() == {"k": 1}


def test_config_as_a_bare_string_says_how_to_write_it():
    with pytest.raises(ConfigError) as ei:
        from_dict({"master": {"revocation_policy": "fair-share"}})
    assert ei.value.key == "master.revocation_policy"
    assert "name = 'fair-share'" in str(ei.value)


def test_master_creates_the_selected_policy_at_start_up():
    m = Master(MasterConfig(), load_plugins())
    assert isinstance(m.revocation_policy, FairSharePolicy)


def test_unknown_policy_is_a_start_up_error_naming_the_key_and_installed_ones():
    with pytest.raises(ConfigError) as ei:
        Master(MasterConfig(revocation_policy=RevocationPolicyConfig(name="kill-all")), load_plugins())
    assert ei.value.key == "master.revocation_policy.name"
    assert "'kill-all' is not installed" in str(ei.value) and "fair-share" in str(ei.value)


def test_settings_of_the_policy_are_checked_at_start_up():
    cfg = RevocationPolicyConfig(settings={"fair-share": {"x": 1}})
    with pytest.raises(ConfigError) as ei:
        Master(MasterConfig(revocation_policy=cfg), load_plugins())
    assert ei.value.key == "master.revocation_policy.fair-share.x"
    typo = RevocationPolicyConfig(settings={"fair-shar": {}})
    with pytest.raises(ConfigError) as ei:
        Master(MasterConfig(revocation_policy=typo), load_plugins())
    assert ei.value.key == "master.revocation_policy.fair-shar"


def mezzo(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "mezzo", *args], check=False, capture_output=True, text=True,
                          timeout=timeout)


def test_mezzo_plugins_lists_fair_share():
    r = mezzo("plugins", "--json")
    assert r.returncode == 0, r.stderr
    components = {(c["kind"], c["name"]) for row in json.loads(r.stdout) for c in row["components"]}
    assert ("revocation_policy", "fair-share") in components
    text = mezzo("plugins")
    assert re.search(r"revocation_policy\s+fair-share", text.stdout)


def test_mezzo_master_with_an_unknown_policy_exits_naming_the_key(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[master]\nlisten = "127.0.0.1:0"\n[master.revocation_policy]\nname = "kill-all"\n')
    r = mezzo("master", "--config", str(cfg), timeout=20)
    assert r.returncode == 2
    assert "master.revocation_policy.name" in r.stderr and "'kill-all' is not installed" in r.stderr
    assert "fair-share" in r.stderr
