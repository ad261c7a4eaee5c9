"""Minimum offer size (``master.min_offer``, paper §4.6), without sockets: the key is
checked when the configuration loads, each agent's minimum is the configured one
capped by its total, and an allocation cycle holds back agents on which less than
their minimum is free, counting them for ``mezzo state``.

The starvation it prevents, end to end with a real master, is in tests/test_min_offer.py.
"""

from __future__ import annotations


import pytest
from mezzo import AgentInfo, FrameworkInfo, Resources, TaskState, TaskStatus
from mezzo.config import MasterConfig, from_dict, load, parse_min_offer
from mezzo.errors import ConfigError
from mezzo.master import Master
from mezzo.master.ports import ManualClock
from mezzo.master.allocation import effective_min_offer
from mezzo.master.state_view import snapshot
from mezzo.plugins import load_plugins

from .test_master_connections import RecordingConnection
from .test_master_recovery import running

# ----------------------------------------------------------------- configuration


def test_min_offer_is_off_by_default():
    assert from_dict({}).master.min_offer == ""
    assert parse_min_offer("") is None


def test_min_offer_loads_from_the_file_and_from_overrides(tmp_path):
    path = tmp_path / "mezzo.toml"
    path.write_text('[master]\nmin_offer = "cpus:2;mem:1024"\n')
    assert load(path).master.min_offer == "cpus:2;mem:1024"
    assert load(path, {"master.min_offer": "cpus:4"}).master.min_offer == "cpus:4"
    assert parse_min_offer("cpus:2; mem:1024") == Resources(cpus=2, mem=1024)


def test_a_minimum_of_zeros_asks_for_nothing():
    assert parse_min_offer("cpus:0;mem:0") is None


@pytest.mark.parametrize("value, message", [
    ("cpus:two", "master.min_offer: resource 'cpus': 'two' is not a number"),
    ("cpus", "master.min_offer: cannot parse 'cpus': expected NAME:VALUE"),
    ("cpus:-1", "master.min_offer: resource 'cpus': -1.0 is negative"),
    ("cpus:1;ports:[31000-31009]", ("master.min_offer: only scalar resources (cpus, mem, disk, ...) can make "
                                    "a minimum, not ranges such as ports")),
    (4, "master.min_offer: expected a string, got int 4"),
])
def test_a_bad_min_offer_is_an_error_naming_the_key(value, message):
    with pytest.raises(ConfigError) as ei:
        from_dict({"master": {"min_offer": value}})
    assert str(ei.value) == message


def test_a_master_built_from_a_bad_config_in_code_refuses_to_start():
    with pytest.raises(ConfigError, match=r"^master\.min_offer: "):
        Master(MasterConfig(min_offer="cpus:lots"), load_plugins(), clock=ManualClock())


# ----------------------------------------------------------- the effective minimum


def test_no_minimum_configured_means_no_minimum_per_agent():
    assert effective_min_offer(None, Resources(cpus=4, mem=1024)) is None


def test_the_minimum_applies_as_is_to_an_agent_that_has_it():
    assert effective_min_offer(Resources(cpus=2, mem=512), Resources(cpus=4, mem=1024, disk=100)) \
        == Resources(cpus=2, mem=512)


def test_the_minimum_is_capped_by_the_agents_total_resource_by_resource():
    # Smaller than the minimum in cpus: offered when all its cpus are free.
    assert effective_min_offer(Resources(cpus=4, mem=512), Resources(cpus=2.5, mem=1024)) \
        == Resources(cpus=2.5, mem=512)


def test_a_resource_the_agent_does_not_have_is_not_waited_for():
    assert effective_min_offer(Resources(cpus=2, gpus=1), Resources(cpus=4, mem=1024)) == Resources(cpus=2)
    assert effective_min_offer(Resources(gpus=1), Resources(cpus=4, mem=1024)) is None


def test_capping_is_exact_in_thousandths():
    got = effective_min_offer(Resources(cpus=0.3), Resources(cpus=0.1) + Resources(cpus=0.2))
    assert got.milli("cpus") == 300


# ------------------------------------------------------------ the allocation cycle


def make_master(min_offer: str) -> Master:
    m = Master(MasterConfig(allocation_interval=0.01, min_offer=min_offer), load_plugins(), clock=ManualClock())
    m.lead()
    return m


@pytest.fixture
def masters():
    made: list[Master] = []

    def make(min_offer: str = "") -> Master:
        m = make_master(min_offer)
        made.append(m)
        return m

    yield make
    for m in made:
        m.term.close()


def offered_cpus(sched: RecordingConnection) -> list[tuple[str, float]]:
    """(agent id, cpus) of every offer made so far, in order."""
    return [(o.agent_id, o.resources.get("cpus")) for (batch,) in sched.called("resource_offers") for o in batch]


def busy_agent(master: Master, fid: str, aid: str, cpus: float, used: float) -> RecordingConnection:
    """An agent of ``cpus`` cpus that comes back running a task of ``used`` cpus of ``fid``'s."""
    conn = RecordingConnection(aid)
    info = AgentInfo(agent_id=aid, hostname=f"host-{aid}", port=5051, resources=Resources(cpus=cpus, mem=1024))
    tasks = [running(fid, f"t-{aid}", aid, cpus=used)] if used else []
    master.service.reregister_agent(conn, info, tasks, [], [FrameworkInfo(name="f", framework_id=fid)])
    return conn


def finish(master: Master, agent: RecordingConnection, fid: str, aid: str) -> None:
    master.service.status_update(agent, TaskStatus(task_id=f"t-{aid}", state=TaskState.TASK_FINISHED,
                                           framework_id=fid, agent_id=aid, uuid=f"u-{aid}"))


def test_each_agent_holds_its_capped_minimum(masters):
    master = masters("cpus:4;mem:512")
    conn = RecordingConnection("agents")
    master.service.register_agent(conn, AgentInfo(hostname="big", port=5051, resources=Resources(cpus=8, mem=4096)))
    master.service.register_agent(conn, AgentInfo(hostname="small", port=5051, resources=Resources(cpus=2, mem=4096)))
    by_host = {a.hostname: a.min_offer for a in master.state.agents.values()}
    assert by_host == {"big": Resources(cpus=4, mem=512), "small": Resources(cpus=2, mem=512)}
    assert all(a.min_offer is None for a in masters("").state.agents.values())


def test_an_agent_is_held_back_until_its_minimum_is_free(masters):
    master = masters("cpus:4")
    sched = RecordingConnection("scheduler")
    master.service.register_framework(sched, FrameworkInfo(name="f", framework_id="F1"))
    a1 = busy_agent(master, "F1", "A1", cpus=4, used=1)   # 3 of its 4 cpus free
    busy_agent(master, "F1", "A2", cpus=4, used=0)        # entirely free
    master.term.allocation.run()
    assert offered_cpus(sched) == [("A2", 4.0)]
    assert master.term.allocation.last_cycle["agents_below_min_offer"] == 1
    state = snapshot(master)
    assert state["master"]["min_offer"] == {"cpus": 4.0}
    assert state["last_allocation"]["agents_below_min_offer"] == 1

    finish(master, a1, "F1", "A1")  # the cpu comes back: now 4 are free
    master.term.allocation.run()
    assert offered_cpus(sched) == [("A2", 4.0), ("A1", 4.0)]
    assert master.term.allocation.last_cycle["agents_below_min_offer"] == 0


def test_an_agent_smaller_than_the_minimum_is_offered_when_entirely_free(masters):
    master = masters("cpus:4")
    sched = RecordingConnection("scheduler")
    master.service.register_framework(sched, FrameworkInfo(name="f", framework_id="F1"))
    tiny = busy_agent(master, "F1", "T", cpus=2, used=0.5)
    master.term.allocation.run()
    assert offered_cpus(sched) == [] and master.term.allocation.last_cycle["agents_below_min_offer"] == 1
    finish(master, tiny, "F1", "T")
    master.term.allocation.run()
    assert offered_cpus(sched) == [("T", 2.0)]


def test_without_a_minimum_any_free_amount_is_offered(masters):
    master = masters("")
    sched = RecordingConnection("scheduler")
    master.service.register_framework(sched, FrameworkInfo(name="f", framework_id="F1"))
    busy_agent(master, "F1", "A1", cpus=4, used=3)
    master.term.allocation.run()
    assert offered_cpus(sched) == [("A1", 1.0)]
    assert master.term.allocation.last_cycle["agents_below_min_offer"] == 0
    assert snapshot(master)["master"]["min_offer"] is None


def test_other_resources_than_the_minimum_names_do_not_count(masters):
    # Memory is not in the minimum: an agent with all its memory but 3 of 4 cpus free waits.
    master = masters("cpus:4")
    sched = RecordingConnection("scheduler")
    master.service.register_framework(sched, FrameworkInfo(name="f", framework_id="F1"))
    busy_agent(master, "F1", "A1", cpus=4, used=1)
    master.term.allocation.run()
    assert offered_cpus(sched) == []
    assert master.state.agents["A1"].free.get("mem") == 1024 - 64
