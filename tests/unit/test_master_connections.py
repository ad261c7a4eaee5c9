"""The master binds connections to who registered on them, without sockets: calls are
accepted only for the frameworks and agents registered on the calling connection,
including connections that carry several agents."""

from __future__ import annotations


import pytest

from mezzo import (
    AgentInfo,
    CommandInfo,
    ExecutorInfo,
    Filters,
    FrameworkInfo,
    Resources,
    TaskInfo,
    TaskState,
    TaskStatus,
)
from mezzo.config import MasterConfig
from mezzo.master import Master
from mezzo.master.ports import ManualClock
from mezzo.plugins import load_plugins


class RecordingConnection:
    """Stands in for an rpc Connection: records the calls the master makes on it."""

    def __init__(self, name: str) -> None:
        self.peer = name
        self.tag = None
        self.calls: list[tuple[str, tuple]] = []
        self.closed = False

    def remote(self, schema):
        conn = self

        class _Stub:
            def __getattr__(self, method):
                assert method in schema.methods, method
                return lambda *args: conn.calls.append((method, args))

        return _Stub()

    def close(self) -> None:
        self.closed = True

    held = 0
    """Holds on reading (``hold_reading``) not released yet. The double serves only
    the calls a test makes, so holding only counts."""

    def hold_reading(self):
        self.held += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.held -= 1

        return release

    def called(self, method: str) -> list[tuple]:
        return [args for m, args in self.calls if m == method]


@pytest.fixture
def master():
    m = Master(MasterConfig(allocation_interval=0.01), load_plugins(), clock=ManualClock())
    yield m
    m.term.close()


def agent_info(name: str) -> AgentInfo:
    return AgentInfo(hostname=name, port=5051, resources=Resources(cpus=4, mem=1024))


def test_one_connection_may_carry_several_agents(master):
    shared, other = RecordingConnection("shared"), RecordingConnection("other")
    master.service.register_agent(shared, agent_info("a"))
    master.service.register_agent(shared, agent_info("b"))
    master.service.register_agent(other, agent_info("c"))
    (a_id,), (b_id,) = shared.called("registered")
    ((c_id,),) = other.called("registered")
    assert {a_id, b_id} == set(shared.tag.agent_ids) and other.tag.agent_ids == {c_id}

    fw = RecordingConnection("scheduler")
    master.service.register_framework(fw, FrameworkInfo(name="f"))
    ((fid, _),) = fw.called("registered")
    master.term.allocation.run()
    offers = {o.agent_id: o for (batch,) in fw.called("resource_offers") for o in batch}
    executor = ExecutorInfo(executor_id="e1", command=CommandInfo(value="run-executor"), resources=Resources(cpus=0.1))
    for agent_id, task_id in ((a_id, "t"), (b_id, "t-b")):
        task = TaskInfo(task_id=task_id, agent_id=agent_id, resources=Resources(cpus=1), executor=executor)
        master.service.launch_tasks(fw, fid, [offers[agent_id].offer_id], [task], Filters(refuse_seconds=0))

    # An agent-side call naming an agent of this connection is accepted ...
    master.service.executor_to_framework(shared, b_id, fid, "e1", b"hi")
    assert fw.called("framework_message") == [(b_id, "e1", b"hi")]
    # ... one naming an agent of another connection is not, nor one naming none on a shared connection.
    master.service.executor_to_framework(other, a_id, fid, "e1", b"spoofed")
    master.service.executor_to_framework(shared, "", fid, "e1", b"ambiguous")
    assert len(fw.called("framework_message")) == 1

    status = TaskStatus(task_id="t", state=TaskState.TASK_RUNNING, framework_id=fid, agent_id=a_id, uuid="u1")
    master.service.status_update(other, status)
    assert fw.called("status_update") == []
    master.service.status_update(shared, status)
    assert [s.agent_id for (s,) in fw.called("status_update")] == [a_id]

    # Losing the shared connection disconnects both of its agents, not the third.
    master.service.connection_lost(shared)
    assert {aid: a.connected for aid, a in master.state.agents.items()} == {a_id: False, b_id: False, c_id: True}


def test_agent_moving_to_a_new_connection_leaves_the_old_one_for_the_others(master):
    shared, fresh = RecordingConnection("shared"), RecordingConnection("fresh")
    master.service.register_agent(shared, agent_info("a"))
    master.service.register_agent(shared, agent_info("b"))
    (a_id,), (b_id,) = shared.called("registered")
    info = agent_info("a")
    info.agent_id = a_id
    master.service.reregister_agent(fresh, info, [], [])
    assert shared.tag.agent_ids == {b_id} and not shared.closed
    assert fresh.tag.agent_ids == {a_id}
    info_b = agent_info("b")
    info_b.agent_id = b_id
    master.service.reregister_agent(fresh, info_b, [], [])
    assert shared.closed and shared.tag is None  # it speaks for nobody any more


def test_a_framework_connection_cannot_speak_for_another_framework(master):
    one, two = RecordingConnection("one"), RecordingConnection("two")
    master.service.register_framework(one, FrameworkInfo(name="one"))
    master.service.register_framework(two, FrameworkInfo(name="two"))
    ((fid_one, _),) = one.called("registered")
    master.service.kill_task(two, fid_one, "t")
    assert two.called("error") and "not registered on this connection" in two.called("error")[0][0]
    master.service.register_framework(two, FrameworkInfo(name="again"))
    assert "already framework" in two.called("error")[-1][0]


def test_a_kill_of_a_task_the_master_does_not_know_is_answered_task_lost_task_unknown(master):
    sched = RecordingConnection("scheduler")
    master.service.register_framework(sched, FrameworkInfo(name="f"))
    ((fid, _),) = sched.called("registered")
    master.service.kill_task(sched, fid, "ghost")
    ((status,),) = sched.called("status_update")
    assert (status.task_id, status.state, status.reason) == ("ghost", TaskState.TASK_LOST, "task_unknown")
    assert status.source == "master" and "no such running task" in status.message


def test_an_agent_with_more_than_any_agent_may_have_is_refused_and_the_state_stays_renderable(master):
    """An agent of 2^63-1 thousandths of a cpu was accepted, and the cluster's totals then
    overflowed every share computed from them: mezzo state answered an error for as long
    as it stayed, and guaranteed shares failed."""
    from mezzo.master.state_view import render_state
    from mezzo.wire.ttypes import Resources as WireResources

    huge = RecordingConnection("huge")
    master.service.register_agent(huge, AgentInfo(hostname="h", port=5051,
                                                  resources=WireResources(scalars={"cpus": 2**63 - 1})))
    ((message,),) = huge.called("error")
    assert message.startswith("register_agent: resources: cpus 9.22337e+15 is more than an agent may have")
    assert master.state.agents == {} and huge.tag is None
    many = RecordingConnection("many")
    ports = {"ports": [ttypes_range(2 * i, 2 * i) for i in range(65_537)]}
    master.service.register_agent(many, AgentInfo(hostname="h", port=5051,
                                                  resources=WireResources(scalars={"cpus": 1000}, ranges=ports)))
    assert "65,537 ranges are more than an agent may have" in many.called("error")[0][0]
    master.service.register_agent(RecordingConnection("ok"), agent_info("ok"))
    assert len(master.state.agents) == 1 and render_state(master).startswith("{")


def ttypes_range(begin: int, end: int):
    from mezzo.wire.ttypes import Range

    return Range(begin, end)
