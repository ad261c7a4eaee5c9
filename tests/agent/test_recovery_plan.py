"""plan_recovery: every rule of what a restarted agent does with its checkpoint, on hand-built states.

The plan is pure: these tests build a replayed journal (``CheckpointState``) and what
was found alive on the host, and read the decision. The agent carrying it out is tested
end to end in test_agent_recovery.py and tests/test_agent_restart.py.
"""

from __future__ import annotations

import mezzo
from mezzo.agent.checkpoint import EXECUTOR, TASK, CheckpointState, ContainerEntry, ExecutorEntry, TaskEntry
from mezzo.agent.recovery_plan import (
    CommandResumption,
    FoundPid,
    Kill,
    StreamRestoration,
    plan_recovery,
    unrecorded_sandboxes,
)
from mezzo.wire.ttypes import CommandInfo, ExecutorInfo, FrameworkInfo, TaskInfo, TaskState, TaskStatus

RUNNING = TaskState.TASK_RUNNING
FINISHED = TaskState.TASK_FINISHED


def fw(fid: str = "fw-1") -> FrameworkInfo:
    return FrameworkInfo(name=fid, framework_id=fid)


def executor_info(eid: str = "ex") -> ExecutorInfo:
    return ExecutorInfo(executor_id=eid, command=CommandInfo(value="run-executor"),
                        resources=mezzo.Resources(cpus=0.1, mem=16), framework_id="fw-1")


def task_info(tid: str, eid: str = "") -> TaskInfo:
    info = TaskInfo(task_id=tid, name=tid, agent_id="a1", resources=mezzo.Resources(cpus=0.5, mem=32))
    if eid:
        info.executor = executor_info(eid)
    else:
        info.command = CommandInfo(value=f"echo {tid}")
    return info


def status(tid: str, state: int, uuid: str, fid: str = "fw-1", **kw) -> TaskStatus:
    return TaskStatus(task_id=tid, framework_id=fid, state=state, uuid=uuid, **kw)


def container(cid: str, pid: int = 100, start: int = 7) -> ContainerEntry:
    return ContainerEntry(cid, f"/box/{cid}", pid, start)


def command(tid: str, fid: str = "fw-1", *, pid: int = 100, updates=(), latest=None, **kw) -> TaskEntry:
    updates = list(updates)
    return TaskEntry(fid, tid, task_info(tid), container=container(f"c-{tid}", pid), updates=updates,
                     latest=latest if latest is not None else (updates[-1] if updates else None), **kw)


def executor_task(tid: str, eid: str = "ex", fid: str = "fw-1", *, launched: bool = True, updates=(),
                  **kw) -> TaskEntry:
    updates = list(updates)
    return TaskEntry(fid, tid, task_info(tid, eid), executor_id=eid, launched=launched, updates=updates,
                     latest=updates[-1] if updates else None, **kw)


def executor(eid: str = "ex", fid: str = "fw-1", *, pid: int = 200, **kw) -> ExecutorEntry:
    return ExecutorEntry(fid, eid, executor_info(eid), container(f"c-{eid}", pid), **kw)


def state(*entries, frameworks=("fw-1",), **kw) -> CheckpointState:
    s = CheckpointState(agent_id="agent-1", frameworks={fid: fw(fid) for fid in frameworks}, **kw)
    for e in entries:
        if isinstance(e, TaskEntry):
            s.tasks[(e.framework_id, e.task_id)] = e
        else:
            s.executors[(e.framework_id, e.executor_id)] = e
    return s


def failure(plan, tid: str):
    (found,) = [f for f in plan.failures if f.key[1] == tid]
    return found


# -- the agent and the host ------------------------------------------------------------


def test_the_agent_id_is_the_journaled_one():
    assert plan_recovery(state()).agent_id == "agent-1"


def test_a_container_journaled_without_a_pid_is_looked_for_in_its_sandbox():
    s = state(command("t1", pid=0), executor(pid=0), command("t2"))
    assert unrecorded_sandboxes(s) == ["/box/c-t1", "/box/c-ex"]


def test_a_container_whose_leader_was_found_is_taken_back_with_that_pid():
    plan = plan_recovery(state(command("t1", pid=0, updates=[status("t1", RUNNING, "u1")])),
                         found={"/box/c-t1": (4242, 99)})
    assert plan.found_pids == [FoundPid("fw-1", "t1", TASK, "c-t1", 4242, 99)]
    (resumed,) = plan.command_tasks
    assert (resumed.container.pid, resumed.container.start_time) == (4242, 99)


def test_a_found_executor_leader_is_recorded_as_an_executor_pid():
    plan = plan_recovery(state(executor(pid=0)), found={"/box/c-ex": (4343, 5)})
    assert plan.found_pids == [FoundPid("fw-1", "ex", EXECUTOR, "c-ex", 4343, 5)]
    assert plan.executors[0].container.pid == 4343


def test_the_journal_is_not_modified():
    s = state(command("t1", pid=0), shutting_down={"fw-1"})
    plan_recovery(s, found={"/box/c-t1": (4242, 99)})
    assert s.tasks[("fw-1", "t1")].container.pid == 0 and s.shutting_down == {"fw-1"}


# -- rule 2: frameworks being shut down ---------------------------------------------------


def test_whatever_is_left_of_a_framework_being_shut_down_is_killed_and_forgotten():
    s = state(command("t1", updates=[status("t1", RUNNING, "u1")]), executor(), executor_task("t2"),
              shutting_down={"fw-1"})
    plan = plan_recovery(s)
    assert [(g.framework_id, g.task_ids, g.executor_ids) for g in plan.shut_down] == [("fw-1", ["t1", "t2"], ["ex"])]
    assert [k.what for k in plan.kills] == ["task t1", "executor ex"]
    # Nothing is reported, restored or taken back.
    assert not (plan.failures or plan.streams or plan.command_tasks or plan.executors or plan.frameworks)


# -- rule 3: executors ------------------------------------------------------------------


def test_an_executor_of_a_known_framework_is_taken_back_with_its_tasks():
    s = state(executor(), executor_task("t1", launched=True), executor_task("t2", launched=False))
    plan = plan_recovery(s)
    (ex,) = plan.executors
    assert ex.info.executor_id == "ex" and ex.container.pid == 200
    assert [(t.task_id, launched) for t, launched in ex.tasks] == [("t1", True), ("t2", False)]
    assert plan.frameworks == {"fw-1": fw()} and not plan.kills


def test_an_executor_whose_record_is_damaged_is_killed_and_its_tasks_fail():
    s = state(executor(damaged="its executor record at offset 9 is damaged"), executor_task("t1"))
    plan = plan_recovery(s)
    assert [(d.executor_id, d.why) for d in plan.damaged_executors] == [
        ("ex", "its executor record at offset 9 is damaged")]
    assert plan.kills == [Kill(container("c-ex", 200), "fw-1", "executor ex")]
    f = failure(plan, "t1")
    assert f.problem == "its executor's checkpoint is unusable: its executor record at offset 9 is damaged"
    assert f.report and f.keep_record and not f.journal_damaged


def test_an_executor_whose_framework_record_is_missing_is_killed():
    plan = plan_recovery(state(executor(), frameworks=()))
    assert [d.why for d in plan.damaged_executors] == ["its framework's record is missing"]
    assert [k.what for k in plan.kills] == ["executor ex"] and not plan.executors


def test_an_executor_whose_framework_record_is_damaged_is_killed():
    plan = plan_recovery(state(executor(), damaged_frameworks={"fw-1": "unreadable"}))
    assert [d.why for d in plan.damaged_executors] == ["unreadable"]


# -- rule 4: tasks ----------------------------------------------------------------------


def test_unacknowledged_updates_go_back_into_the_task_s_stream_in_order():
    updates = [status("t1", TaskState.TASK_STARTING, "u1"), status("t1", RUNNING, "u2")]
    plan = plan_recovery(state(command("t1", updates=updates, seen={"u0", "u1", "u2"})))
    assert plan.streams == [StreamRestoration(("fw-1", "t1"), updates, {"u0", "u1", "u2"}, updates[-1])]


def test_a_task_whose_end_was_acknowledged_is_forgotten():
    plan = plan_recovery(state(command("t1", latest=status("t1", FINISHED, "u9"))))
    assert plan.forget_tasks == [("fw-1", "t1")]
    assert not (plan.streams or plan.command_tasks or plan.reporting)
    assert plan.forget_frameworks == ["fw-1"]  # nothing else left of it


def test_a_task_whose_end_is_being_reported_is_kept_with_nothing_running():
    plan = plan_recovery(state(command("t1", updates=[status("t1", FINISHED, "u9")])))
    assert plan.reporting == [(("fw-1", "t1"), task_info("t1"))]
    assert len(plan.streams) == 1 and not plan.command_tasks and not plan.kills
    assert plan.frameworks == {"fw-1": fw()}


def test_an_answer_still_being_delivered_keeps_only_its_stream():
    # E.g. a TASK_ERROR rejection: no TaskInfo was ever journaled.
    rejected = TaskEntry("fw-1", "bad", None, updates=[status("bad", TaskState.TASK_ERROR, "u1")])
    rejected.latest = rejected.updates[-1]
    plan = plan_recovery(state(rejected))
    assert [r.key for r in plan.streams] == [("fw-1", "bad")]
    assert not (plan.failures or plan.reporting) and plan.forget_frameworks == ["fw-1"]


def test_a_command_task_is_taken_back_in_its_container():
    latest = status("t1", RUNNING, "u2")
    plan = plan_recovery(state(command("t1", updates=[latest])))
    assert plan.command_tasks == [CommandResumption("fw-1", task_info("t1"), container("c-t1"), latest)]


def test_a_damaged_task_fails_and_its_process_is_killed():
    plan = plan_recovery(state(command("t1", updates=[status("t1", RUNNING, "u1")], damaged="checksum mismatch")))
    f = failure(plan, "t1")
    assert (f.problem, f.report, f.keep_record, f.journal_damaged) == ("checksum mismatch", True, True, True)
    assert plan.kills == [Kill(container("c-t1"), "fw-1", "task t1")]


def test_a_task_known_only_by_its_updates_fails_without_a_record():
    orphan = TaskEntry("fw-1", "t1", None, updates=[status("t1", RUNNING, "u1")])
    orphan.latest = orphan.updates[-1]
    f = failure(plan_recovery(state(orphan)), "t1")
    assert f.problem == "its task record is missing from the checkpoint" and f.report and not f.keep_record


def test_a_task_of_an_unknown_framework_fails_and_is_not_kept():
    plan = plan_recovery(state(command("t1", updates=[status("t1", RUNNING, "u1")]), frameworks=()))
    f = failure(plan, "t1")
    assert f.problem == "its framework's record is missing" and not f.keep_record
    assert not plan.frameworks


def test_a_task_of_a_damaged_framework_fails():
    plan = plan_recovery(state(command("t1"), damaged_frameworks={"fw-1": "unreadable framework"}))
    assert failure(plan, "t1").problem == "unreadable framework"


def test_a_command_task_without_its_container_record_fails():
    t = command("t1")
    t.container = None
    assert failure(plan_recovery(state(t)), "t1").problem == "its container's record is missing"


def test_an_executor_s_task_whose_executor_is_not_in_the_checkpoint_fails():
    assert failure(plan_recovery(state(executor_task("t1"))), "t1").problem == \
        "its executor 'ex' is not in the checkpoint"


def test_a_task_whose_end_is_being_reported_is_not_reported_failed_again():
    plan = plan_recovery(state(command("t1", updates=[status("t1", FINISHED, "u9")], damaged="damaged")))
    f = failure(plan, "t1")
    assert not f.report and f.keep_record
    assert not plan.kills  # it is over: nothing to kill


def test_a_revocation_under_way_keeps_its_reason_for_the_task_s_end():
    killing = status("t1", TaskState.TASK_KILLING, "u3", reason="revoked", message="freed for fw-2")
    plan = plan_recovery(state(command("t1", updates=[killing])))
    assert plan.kill_reasons == {("fw-1", "t1"): ("revoked", "freed for fw-2")}


def test_a_kill_of_the_framework_s_own_keeps_no_reason():
    plan = plan_recovery(state(command("t1", updates=[status("t1", TaskState.TASK_KILLING, "u3")])))
    assert plan.kill_reasons == {}


# -- rule 5: frameworks -------------------------------------------------------------------


def test_frameworks_left_with_nothing_are_forgotten():
    s = state(command("t1", updates=[status("t1", RUNNING, "u1")]), frameworks=("fw-1", "fw-2"))
    plan = plan_recovery(s)
    assert list(plan.frameworks) == ["fw-1"] and plan.forget_frameworks == ["fw-2"]
