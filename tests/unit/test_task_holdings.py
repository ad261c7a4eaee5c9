"""What a framework's tasks hold, kept summed incrementally (``TaskTable``) for the
revocation monitor's ``holding()``: it must always equal summing from scratch, through
every way tasks come and go (launch, end, re-registration, adoption of orphans,
framework removal) and every dict operation.
"""

from __future__ import annotations


import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mezzo import AgentInfo, CommandInfo, FrameworkInfo, Resources, TaskInfo, TaskState, TaskStatus
from mezzo.config import from_dict
from mezzo.master import Master
from mezzo.master.state import ClusterState
from mezzo.master.ports import ManualClock
from mezzo.master.records import TaskRecord, TaskTable
from mezzo.master.revocation_monitor import holding
from mezzo.plugins import load_plugins
from mezzo.wire.ttypes import ExecutorInfo, Filters, RunningTask

from .test_master_connections import RecordingConnection


def scratch(tasks) -> Resources:
    total = Resources()
    for t in tasks.values():
        total = total + t.resources
    return total


def scratch_holding(state: ClusterState, record, *, offers: bool = True) -> Resources:
    """``holding()`` as it was: summed task by task."""
    total = scratch(record.tasks)
    for offer in record.offers.values() if offers else ():
        total = total + offer.resources
    for agent_id, eid in {(t.agent_id, t.executor_id) for t in record.tasks.values() if t.executor_id}:
        agent = state.agents.get(agent_id)
        ex = agent.executors.get((record.id, eid)) if agent is not None else None
        if ex is not None:
            total = total + Resources.of(ex.resources)
    return total


def check(table: TaskTable) -> None:
    assert table.held() == scratch(table)
    assert set(table.executors()) == {(t.agent_id, t.executor_id) for t in table.values() if t.executor_id}


# -- the table on its own ----------------------------------------------------------

resources = st.builds(
    lambda cpus, mem, ports: Resources(cpus=cpus, mem=mem, ranges={"ports": ports} if ports else None),
    st.sampled_from([0, 0.5, 1, 2.25]),
    st.sampled_from([0, 128, 1000]),
    st.lists(st.tuples(st.integers(31000, 31010), st.integers(0, 3)).map(lambda p: (p[0], p[0] + p[1])),
             max_size=2),
)


def make_task(tid: str, agent: str, res: Resources, executor: str) -> TaskRecord:
    info = TaskInfo(task_id=tid, agent_id=agent, resources=res, command=CommandInfo(value="true"),
                    executor=ExecutorInfo(executor_id=executor) if executor else None)
    return TaskRecord(framework_id="F", agent_id=agent, info=info, resources=res)


task_ids = st.sampled_from([f"t{i}" for i in range(6)])
tasks = st.builds(make_task, task_ids, st.sampled_from(["a1", "a2"]), resources, st.sampled_from(["", "e1", "e2"]))
ops = st.one_of(
    st.tuples(st.just("set"), tasks),
    st.tuples(st.just("pop"), task_ids),
    st.tuples(st.just("del"), task_ids),
    st.tuples(st.just("popitem"), st.none()),
    st.tuples(st.just("setdefault"), tasks),
    st.tuples(st.just("update"), st.lists(tasks, max_size=3)),
    st.tuples(st.just("clear"), st.none()),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(ops, max_size=30))
def test_the_sums_equal_summing_from_scratch_after_any_operations(operations):
    table = TaskTable()
    for op, arg in operations:
        if op == "set":
            table[arg.id] = arg
        elif op == "pop":
            assert table.pop(arg, None) is None or arg not in table
        elif op == "del":
            if arg in table:
                del table[arg]
            else:
                with pytest.raises(KeyError):
                    del table[arg]
        elif op == "popitem":
            if table:
                table.popitem()
        elif op == "setdefault":
            table.setdefault(arg.id, arg)
        elif op == "update":
            table.update({t.id: t for t in arg})
        else:
            table.clear()
        check(table)
    check(table.copy())


def test_pop_of_a_missing_task_without_default_raises():
    with pytest.raises(KeyError):
        TaskTable().pop("nope")


# -- in the master -----------------------------------------------------------------


@pytest.fixture
def master():
    config = from_dict({"master": {"revocation_delay": 2.0, "allocation_interval": 0.01}}).master
    m = Master(config, load_plugins(), clock=ManualClock())
    m.lead()
    yield m
    m.term.close()


def assert_consistent(master: Master) -> None:
    for record in master.state.frameworks.values():
        assert isinstance(record.tasks, TaskTable)
        check(record.tasks)
        assert holding(master.state, record) == scratch_holding(master.state, record)
        assert holding(master.state, record, offers=False) == scratch_holding(master.state, record, offers=False)


def launch_some(master: Master, sched: RecordingConnection, fid: str, prefix: str, executor: str = "") -> list[str]:
    master.term.allocation.run()
    launched = []
    for (batch,) in sched.called("resource_offers"):
        for offer in batch:
            if offer.offer_id not in master.state.frameworks[fid].offers:
                continue
            tasks = [TaskInfo(task_id=f"{prefix}-{len(launched) + i}", agent_id=offer.agent_id,
                              resources=Resources(cpus=1, mem=256, ranges={"ports": [(31000 + i, 31000 + i)]}),
                              command=None if executor else CommandInfo(value="sleep 60"),
                              executor=ExecutorInfo(executor_id=executor, command=CommandInfo(value="x"),
                                                    resources=Resources(cpus=0.5, mem=64)) if executor else None)
                     for i in range(2)]
            launched += [t.task_id for t in tasks]
            master.service.launch_tasks(sched, fid, [offer.offer_id], tasks, Filters(refuse_seconds=0))
    sched.calls.clear()
    return launched


def test_holdings_follow_launches_ends_and_framework_removal(master):
    agents = []
    for i in range(3):
        conn = RecordingConnection(f"agent-{i}")
        master.service.register_agent(conn, AgentInfo(hostname=f"h{i}", port=5051,
                                               resources=Resources(cpus=4, mem=4096, ranges={"ports": [(31000, 31010)]})))
        agents.append((conn.called("registered")[0][0], conn))
    a, b = RecordingConnection("A"), RecordingConnection("B")
    master.service.register_framework(a, FrameworkInfo(name="A", framework_id="A"))
    master.service.register_framework(b, FrameworkInfo(name="B", framework_id="B"))
    launched = launch_some(master, a, "A", "a") + launch_some(master, b, "B", "b", executor="ex")
    assert launched
    assert_consistent(master)
    master.term.allocation.run()  # offers outstanding count too
    assert_consistent(master)
    # Ends, reported by the agents.
    by_agent = {aid: conn for aid, conn in agents}
    for record in list(master.state.frameworks.values()):
        for task in list(record.tasks.values())[:1]:
            master.service.status_update(by_agent[task.agent_id], TaskStatus(
                task_id=task.id, state=TaskState.TASK_FINISHED, framework_id=record.id, agent_id=task.agent_id,
                uuid=f"u-{task.id}"))
            assert task.id not in record.tasks
    assert_consistent(master)
    # An agent lost: its tasks go.
    master.term.agents.remove(master.state.agents[agents[0][0]], "test")
    assert_consistent(master)
    # A framework removed: all its tasks go.
    record = master.state.frameworks["B"]
    table = record.tasks
    master.service.unregister_framework(b, "B")
    assert "B" not in master.state.frameworks and len(table) == 0 and table.held() == Resources()
    assert list(table.executors()) == []
    assert_consistent(master)


def test_holdings_of_tasks_adopted_from_a_reregistering_agent_and_orphans(master):
    sched = RecordingConnection("scheduler")
    master.service.register_framework(sched, FrameworkInfo(name="F", framework_id="F"))
    conn = RecordingConnection("agent")
    info = AgentInfo(agent_id="A1", hostname="h1", port=5051, resources=Resources(cpus=8, mem=8192))

    def running(fid, tid, state=TaskState.TASK_RUNNING, executor=""):
        return RunningTask(framework_id=fid, task=TaskInfo(
            task_id=tid, agent_id="A1", resources=Resources(cpus=1, mem=100), command=CommandInfo(value="x"),
            executor=ExecutorInfo(executor_id=executor, framework_id=fid) if executor else None),
            latest=TaskStatus(task_id=tid, state=state, uuid="u"))

    tasks = [running("F", "f1"), running("F", "f2", executor="e"), running("F", "done", TaskState.TASK_FINISHED),
             running("G", "g1")]  # G: a framework the agent gives no info for (an orphan)
    executors = [ExecutorInfo(executor_id="e", framework_id="F", resources=Resources(cpus=0.5, mem=32))]
    master.service.reregister_agent(conn, info, tasks, executors, [FrameworkInfo(name="F", framework_id="F")])
    assert set(master.state.frameworks["F"].tasks) == {"f1", "f2"}
    assert holding(master.state, master.state.frameworks["F"], offers=False) == Resources(cpus=2.5, mem=232)
    assert_consistent(master)
    # G registers: its orphaned task joins it.
    g = RecordingConnection("G")
    master.service.register_framework(g, FrameworkInfo(name="G", framework_id="G"))
    assert set(master.state.frameworks["G"].tasks) == {"g1"}
    assert_consistent(master)
    # The agent comes back without f1: it is released.
    master.service.reregister_agent(conn, info, [tasks[1], tasks[3]], executors, [])
    assert set(master.state.frameworks["F"].tasks) == {"f2"}
    assert_consistent(master)
