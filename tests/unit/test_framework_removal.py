"""Removing a framework tells only the agents that hold something of it.

Every agent used to get ``shutdown_framework`` for every removed framework: when the
200 frameworks of a 20,000-agent cluster left at once, the master sent 4,000,000
messages and its loop stalled 11 s. An agent forgets a framework once nothing of it
runs there, so the others have nothing to shut down. What must still be told: the
agents running its tasks, and those still running one of its executors after its
tasks ended.
"""

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

from .test_master_connections import RecordingConnection


@pytest.fixture
def master():
    m = Master(MasterConfig(allocation_interval=0.01), load_plugins(), clock=ManualClock())
    m.lead()
    yield m
    m.term.close()


def test_only_agents_with_its_tasks_or_executors_are_told_to_shut_a_framework_down(master):
    agents = {}
    for i in range(6):
        conn = RecordingConnection(f"agent-{i}")
        master.service.register_agent(
            conn, AgentInfo(hostname=f"h{i}", port=5051, resources=Resources(cpus=2, mem=512))
        )
        ((aid,),) = conn.called("registered")
        agents[aid] = conn
    fw = RecordingConnection("scheduler")
    master.service.register_framework(fw, FrameworkInfo(name="f"))
    ((fid, _),) = fw.called("registered")
    master.term.allocation.run()
    offers = {o.agent_id: o for (batch,) in fw.called("resource_offers") for o in batch}
    ids = sorted(agents)
    command_host, executor_host, finished_host = ids[0], ids[1], ids[2]
    executor = ExecutorInfo(
        executor_id="ex", command=CommandInfo(value="run-executor"), resources=Resources(cpus=0.1, mem=16)
    )

    def launch(agent_id: str, task_id: str, **kind) -> None:
        task = TaskInfo(task_id=task_id, agent_id=agent_id, resources=Resources(cpus=0.5, mem=64), **kind)
        master.service.launch_tasks(fw, fid, [offers[agent_id].offer_id], [task], Filters(refuse_seconds=0))

    launch(command_host, "t-command", command=CommandInfo(value="sleep 100"))
    launch(executor_host, "t-executor", executor=executor)
    launch(finished_host, "t-finished", executor=executor)
    # The task on finished_host ends; its executor stays there.
    status = TaskStatus(task_id="t-finished", state=TaskState.TASK_FINISHED, framework_id=fid, uuid="u1")
    master.service.status_update(agents[finished_host], status)
    assert master.state.agents[finished_host].executors

    master.service.unregister_framework(fw, fid)

    told = {aid for aid, conn in agents.items() if conn.called("shutdown_framework")}
    assert told == {command_host, executor_host, finished_host}
    for aid in told:
        assert agents[aid].called("shutdown_framework") == [(fid,)]
    # What the framework held is free again everywhere, executors included.
    for aid in ids:
        record = master.state.agents[aid]
        assert not record.executors and not record.tasks
        assert record.free == record.total
    assert fid not in master.state.executor_hosts


def test_an_executor_host_that_is_lost_is_forgotten_with_it(master):
    conn = RecordingConnection("agent")
    master.service.register_agent(
        conn, AgentInfo(hostname="h", port=5051, resources=Resources(cpus=2, mem=512))
    )
    ((aid,),) = conn.called("registered")
    fw = RecordingConnection("scheduler")
    master.service.register_framework(fw, FrameworkInfo(name="f"))
    ((fid, _),) = fw.called("registered")
    master.term.allocation.run()
    ((offer,),) = [batch for (batch,) in fw.called("resource_offers")]
    ex = ExecutorInfo(executor_id="ex", command=CommandInfo(value="e"), resources=Resources(cpus=0.1, mem=16))
    task = TaskInfo(task_id="t", agent_id=aid, resources=Resources(cpus=0.5, mem=64), executor=ex)
    master.service.launch_tasks(fw, fid, [offer.offer_id], [task], Filters(refuse_seconds=0))
    assert master.state.executor_hosts == {fid: {aid}}
    master.term.agents.remove(master.state.agents[aid], "test")
    assert master.state.executor_hosts == {}


def test_ids_are_not_a_sequence_one_can_squat(master):
    """A framework that registers with an id the master does not know is taken for one
    of an earlier master's. With ids that were only a sequence, anyone could register
    the next one first; now the next id carries a tag keyed by a secret of the term,
    and the master never hands out an id in use."""
    fw = RecordingConnection("scheduler")
    master.service.register_framework(fw, FrameworkInfo(name="first"))
    ((first, _),) = fw.called("registered")
    prefix, seq, tag = first.rsplit("-", 2)
    assert seq == "0000" and len(tag) == 12
    # The attacker guesses the next id the old way, and with the old tag.
    squatter = RecordingConnection("squatter")
    for guess in (f"{prefix}-0001", f"{prefix}-0001-{tag}"):
        master.service.register_framework(squatter, FrameworkInfo(name="squat", framework_id=guess))
        squatter.tag = None
    victim = RecordingConnection("victim")
    master.service.register_framework(victim, FrameworkInfo(name="victim"))
    ((vid, _),) = victim.called("registered")
    assert vid.startswith(f"{prefix}-0001-") and vid not in (f"{prefix}-0001", f"{prefix}-0001-{tag}")
    assert master.state.frameworks[vid].info.name == "victim"
    # Another term (another key) tags the same sequence differently.
    other = Master(MasterConfig(), load_plugins(), clock=ManualClock())
    other.lead()
    try:
        assert other.state._tag("F0") != master.state._tag("F0")
    finally:
        other.term.close()
