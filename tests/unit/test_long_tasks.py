"""Long and short tasks (paper §4.4), in process and without sockets: the bound per
agent, the room offers carry, launch validation, and the short-task limit.

End to end (a real agent killing a real short task) in tests/test_long_tasks.py.
"""

from __future__ import annotations

from collections import deque

import pytest
from mezzo import AgentInfo, CommandInfo, FrameworkInfo, Resources, TaskInfo, TaskState, TaskStatus
from mezzo.config import from_dict
from mezzo.errors import ConfigError
from mezzo.master import Master
from mezzo.master.ports import ManualClock
from mezzo.master.long_tasks import long_task_limit
from mezzo.plugins import load_plugins
from mezzo.wire.ttypes import Filters, RunningTask

from .test_master_connections import RecordingConnection


def make_master(**keys) -> Master:
    m = Master(from_dict({"master": {"allocation_interval": 0.01, **keys}}).master, load_plugins(), clock=ManualClock())
    m.lead()
    return m


@pytest.fixture
def master():
    m = make_master(long_task_fraction=0.5, short_task_max=10)
    yield m
    m.term.close()


def add_agent(master: Master, cpus: float = 4) -> tuple[str, RecordingConnection]:
    conn = RecordingConnection("agent")
    master.service.register_agent(conn, AgentInfo(hostname="h1", port=5051, resources=Resources(cpus=cpus, mem=4096)))
    return conn.called("registered")[0][0], conn


def next_offer(master: Master, sched: RecordingConnection):
    sched.calls.clear()
    master.term.allocation.run()
    ((batch,),) = sched.called("resource_offers")
    (offer,) = batch
    return offer


def task(tid: str, agent_id: str, cpus: float, long: bool = False) -> TaskInfo:
    return TaskInfo(task_id=tid, agent_id=agent_id, resources=Resources(cpus=cpus, mem=128),
                    command=CommandInfo(value="sleep 60"), long=long)


def launch(master: Master, sched: RecordingConnection, offer, tasks) -> dict[str, tuple[str, str]]:
    """Launch ``tasks`` on ``offer``; the master's refusals, by task id."""
    sched.calls.clear()
    master.service.launch_tasks(sched, "F", [offer.offer_id], tasks, Filters(refuse_seconds=0))
    return {s.task_id: (TaskState(s.state).name, s.reason) for (s,) in sched.called("status_update")}


@pytest.fixture
def framework(master):
    agent_id, agent_conn = add_agent(master)
    sched = RecordingConnection("scheduler")
    master.service.register_framework(sched, FrameworkInfo(name="f", framework_id="F"))
    return agent_id, agent_conn, sched


def test_the_bound_is_the_fraction_of_each_scalar_rounded_down():
    assert long_task_limit(0.5, Resources(cpus=4, mem=4096)) == Resources(cpus=2, mem=2048)
    assert long_task_limit(1 / 3, Resources(cpus=1)) == Resources(cpus=0.333)
    assert long_task_limit(0.5, Resources(cpus=4, ranges={"ports": [(1, 10)]})) == Resources(cpus=2)
    assert long_task_limit(1.0, Resources(cpus=4)) is None


@pytest.mark.parametrize("bad", [0, 1.5])
def test_the_fraction_must_be_in_0_1(bad):
    with pytest.raises(ConfigError) as ei:
        from_dict({"master": {"long_task_fraction": bad}})
    assert ei.value.key == "master.long_task_fraction" and "(0, 1]" in str(ei.value)


def test_offers_carry_the_room_left_for_long_tasks(master, framework):
    agent_id, _, sched = framework
    offer = next_offer(master, sched)
    assert Resources.of(offer.long_task_room) == Resources(cpus=2, mem=2048)
    assert launch(master, sched, offer, [task("long-1", agent_id, 1.5, long=True), task("short-1", agent_id, 1)]) == {}
    offer = next_offer(master, sched)
    assert Resources.of(offer.resources).get("cpus") == 1.5
    # 0.5 cpus of room left; and the room is within the offer.
    assert Resources.of(offer.long_task_room) == Resources(cpus=0.5, mem=1920)


def test_without_a_bound_offers_carry_no_room():
    m = make_master()
    try:
        add_agent(m)
        sched = RecordingConnection("scheduler")
        m.service.register_framework(sched, FrameworkInfo(name="f", framework_id="F"))
        assert next_offer(m, sched).long_task_room is None
    finally:
        m.term.close()


def test_a_long_task_bigger_than_the_room_left_is_refused(master, framework):
    agent_id, _, sched = framework
    offer = next_offer(master, sched)
    answers = launch(master, sched, offer, [
        task("long-a", agent_id, 1.5, long=True),
        task("long-b", agent_id, 1, long=True),     # 1.5 + 1 > 2: refused
        task("short", agent_id, 2),                 # short tasks may use anything
    ])
    assert answers == {"long-b": ("TASK_ERROR", "insufficient_long_task_room")}
    assert set(master.state.frameworks["F"].tasks) == {"long-a", "short"}


def test_the_room_comes_back_when_a_long_task_ends(master, framework):
    agent_id, agent_conn, sched = framework
    launch(master, sched, next_offer(master, sched), [task("long-1", agent_id, 2, long=True)])
    assert master.state.agents[agent_id].long_used == Resources(cpus=2, mem=128)
    master.service.status_update(agent_conn, TaskStatus(task_id="long-1", state=TaskState.TASK_FINISHED, framework_id="F",
                                                agent_id=agent_id, uuid="u1"))
    assert master.state.agents[agent_id].long_used == Resources()
    assert Resources.of(next_offer(master, sched).long_task_room) == Resources(cpus=2, mem=2048)


def test_long_tasks_reported_by_a_reregistering_agent_count(master):
    sched = RecordingConnection("scheduler")
    master.service.register_framework(sched, FrameworkInfo(name="f", framework_id="F"))
    conn = RecordingConnection("agent")
    info = AgentInfo(agent_id="A1", hostname="h1", port=5051, resources=Resources(cpus=4, mem=4096))
    running = [RunningTask(framework_id="F", task=task("svc", "A1", 1, long=True),
                           latest=TaskStatus(task_id="svc", state=TaskState.TASK_RUNNING, uuid="u"))]
    master.service.reregister_agent(conn, info, running, [], [FrameworkInfo(name="f", framework_id="F")])
    assert master.state.agents["A1"].long_used == Resources(cpus=1, mem=128)


def test_short_tasks_past_the_maximum_are_revoked_and_long_ones_are_not(master, framework):
    agent_id, agent_conn, sched = framework
    launch(master, sched, next_offer(master, sched), [
        task("short-1", agent_id, 1), task("long-1", agent_id, 1, long=True), task("short-2", agent_id, 1)])
    limit = master.term.short_tasks
    assert [t for _, _, t in limit.queue] == ["short-1", "short-2"]
    assert limit.check() == []  # not yet: the deadline is 10 s away
    # short-2 ended by itself; short-1 is past its deadline.
    master.service.status_update(agent_conn, TaskStatus(task_id="short-2", state=TaskState.TASK_FINISHED, framework_id="F",
                                                agent_id=agent_id, uuid="u2"))
    limit.queue = deque((master.state.now() - 1, f, t) for _, f, t in limit.queue)
    assert [t.id for t in limit.check()] == ["short-1"]
    ((fid, tid, kill),) = agent_conn.called("kill_task")
    assert (fid, tid, kill.reason) == ("F", "short-1", "revoked")
    assert "master.short_task_max (10 s)" in kill.message and kill.grace_seconds == 3.0
    assert master.metrics()["tasks_revoked"] == 1 and not limit.queue


def test_off_by_default():
    m = make_master()
    try:
        assert m.term.short_tasks is None
    finally:
        m.term.close()
