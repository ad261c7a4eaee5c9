"""A re-registering agent unknown to this master (after a failover) is taken at its
word only as far as its total goes (``AgentLifecycle._adopt``): an executor listed twice
is taken once, and tasks and executors that do not fit in what is left of the agent's
total are not adopted but killed on the agent, reason ``agent_overcommitted``.

The fuzzer's minimal cases are in tests/unit/test_fuzz_master_service.py; these check
what the agent and the frameworks are told.
"""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from mezzo import (
    AgentInfo,
    CommandInfo,
    ExecutorInfo,
    FrameworkInfo,
    Resources,
    TaskInfo,
    TaskState,
    TaskStatus,
)
from mezzo.master.agent_lifecycle import OVERCOMMITTED
from mezzo.wire.ttypes import RunningTask

from .test_fuzz_master_service import assert_every_resource_in_one_place
from .test_master_connections import RecordingConnection

FID = "F1"


@pytest.fixture
def master(taking_over_master):
    return taking_over_master


def agent_info(cpus: float) -> AgentInfo:
    return AgentInfo(agent_id="A1", hostname="h", port=5051, resources=Resources(cpus=cpus, mem=1024))


def executor(eid: str, cpus: float) -> ExecutorInfo:
    return ExecutorInfo(
        executor_id=eid, framework_id=FID, command=CommandInfo(value="x"), resources=Resources(cpus=cpus)
    )


def command_task(tid: str, cpus: float) -> RunningTask:
    task = TaskInfo(
        task_id=tid, agent_id="A1", resources=Resources(cpus=cpus), command=CommandInfo(value="y")
    )
    return RunningTask(
        framework_id=FID, task=task, latest=TaskStatus(task_id=tid, state=TaskState.TASK_RUNNING, uuid="u")
    )


def executor_task(tid: str, cpus: float, ex: ExecutorInfo) -> RunningTask:
    task = TaskInfo(task_id=tid, agent_id="A1", resources=Resources(cpus=cpus), executor=ex)
    return RunningTask(
        framework_id=FID, task=task, latest=TaskStatus(task_id=tid, state=TaskState.TASK_RUNNING, uuid="u")
    )


def reregister(master, tasks, executors) -> RecordingConnection:
    conn = RecordingConnection("agent")
    with capture_logs() as logs:
        master.service.reregister_agent(
            conn, agent_info(4), tasks, executors, [FrameworkInfo(name="f", framework_id=FID)]
        )
    conn.logs = logs
    return conn


def warnings(conn) -> list[dict]:
    return [e for e in conn.logs if e["log_level"] == "warning"]


def test_an_executor_listed_twice_is_taken_once_and_the_repeat_logged(master):
    conn = reregister(master, [], [executor("e", 1), executor("e", 1)])
    agent = master.state.agents["A1"]
    assert agent.free == Resources(cpus=3, mem=1024)
    assert list(agent.executors) == [(FID, "e")]
    assert_every_resource_in_one_place(master)
    (warning,) = warnings(conn)
    assert "listed an executor twice" in warning["event"]
    assert (warning["agent"], warning["executor"]) == ("A1", "e")
    # It ends once: its resources come back once, and no more.
    master.service.executor_exited(conn, "A1", FID, "e", 0, "")
    assert agent.free == agent.total


def test_tasks_beyond_the_total_are_killed_on_the_agent_not_adopted(master):
    conn = reregister(master, [command_task("t1", 3), command_task("t2", 2), command_task("t3", 1)], [])
    agent = master.state.agents["A1"]
    assert set(agent.tasks) == {(FID, "t1"), (FID, "t3")}  # t2 did not fit in the 1 cpu left
    assert agent.free == Resources(mem=1024)
    assert_every_resource_in_one_place(master)
    assert master.state.frameworks[FID].tasks.keys() == {"t1", "t3"}
    ((fid, tid, kill),) = conn.called("kill_task")
    assert (fid, tid, kill.reason) == (FID, "t2", OVERCOMMITTED)
    assert kill.grace_seconds is None  # the agent's own grace period
    assert "agent A1" in kill.message and "cpus 2 > 1 available" in kill.message
    (warning,) = warnings(conn)
    assert warning["agent"] == "A1" and warning["task"] == "t2"
    assert conn.called("reregistered") == [("A1",)]
    # The agent's kill updates go on to the framework; the master holds nothing for t2.
    done = TaskStatus(
        task_id="t2",
        state=TaskState.TASK_KILLED,
        framework_id=FID,
        agent_id="A1",
        reason=OVERCOMMITTED,
        uuid="k",
    )
    master.service.status_update(conn, done)
    assert agent.free == Resources(mem=1024)
    assert_every_resource_in_one_place(master)


def test_a_refused_task_whose_kill_was_lost_with_the_link_is_killed_again(master):
    report = [command_task("t1", 3), command_task("t2", 2)]
    conn = reregister(master, report, [])
    assert [t for _, t, _ in conn.called("kill_task")] == ["t2"]
    master.service.connection_lost(conn)  # before the agent got to the kill
    again = RecordingConnection("agent again")
    master.service.reregister_agent(again, agent_info(4), report, [], [])
    ((fid, tid, kill),) = again.called("kill_task")
    assert (fid, tid, kill.reason) == (FID, "t2", OVERCOMMITTED)
    assert set(master.state.agents["A1"].tasks) == {(FID, "t1")}
    assert_every_resource_in_one_place(master)


def test_an_executor_that_does_not_fit_is_not_adopted_and_its_tasks_are_killed(master):
    big, small = executor("big", 3), executor("small", 1)
    tasks = [executor_task("in-big", 0.5, big), executor_task("in-small", 0.5, small)]
    conn = reregister(master, tasks, [executor("first", 2), big, small])
    agent = master.state.agents["A1"]
    assert set(agent.executors) == {(FID, "first"), (FID, "small")}
    assert set(agent.tasks) == {(FID, "in-small")}
    assert agent.free == Resources(cpus=0.5, mem=1024)
    assert_every_resource_in_one_place(master)
    assert [(tid, kill.reason) for _fid, tid, kill in conn.called("kill_task")] == [("in-big", OVERCOMMITTED)]
    logged = {(w.get("executor"), w.get("task")) for w in warnings(conn)}
    assert logged == {("big", None), (None, "in-big")}
    # When the refused executor exits, nothing comes back that was never taken.
    master.service.executor_exited(conn, "A1", FID, "big", 0, "")
    assert agent.free == Resources(cpus=0.5, mem=1024)
    assert agent.free.fits_in(agent.total)


def test_ended_tasks_hold_nothing_and_are_not_refused(master):
    ended = command_task("done", 8)
    ended.latest.state = TaskState.TASK_FINISHED
    conn = reregister(master, [ended, command_task("t", 4)], [])
    agent = master.state.agents["A1"]
    assert set(agent.tasks) == {(FID, "t")} and conn.called("kill_task") == []
