"""The agent's checkpoint journal on its own: round trips, compaction, damage, reboots."""

from __future__ import annotations

import os

import mezzo
import pytest
from mezzo.agent import checkpoint
from mezzo.agent.checkpoint import Checkpoint, WorkDirBusy
from mezzo.wire.ttypes import CommandInfo, ExecutorInfo, FrameworkInfo, TaskInfo, TaskState, TaskStatus

FW = FrameworkInfo(name="fw", framework_id="fw-1")


def _task(tid: str, executor: bool = False) -> TaskInfo:
    info = TaskInfo(task_id=tid, name=tid, agent_id="a1", resources=mezzo.Resources(cpus=0.5, mem=32))
    if executor:
        info.executor = ExecutorInfo(executor_id="ex", command=CommandInfo(value="run-executor"),
                                     resources=mezzo.Resources(cpus=0.1, mem=16), framework_id="fw-1")
    else:
        info.command = CommandInfo(value=f"echo {tid}")
    return info


def _status(tid: str, state: int, uuid: str, data: bytes | None = None) -> TaskStatus:
    return TaskStatus(task_id=tid, framework_id="fw-1", state=state, uuid=uuid, source="agent",
                      agent_id="a1", timestamp=1.5, data=data)


def _populate(cp: Checkpoint) -> None:
    cp.begin(31234, "a1")
    cp.framework(FW)
    cp.task("fw-1", _task("cmd"), container_id="c1", sandbox="/box/c1")
    cp.update(_status("cmd", TaskState.TASK_STARTING, "u1"))
    cp.pid("fw-1", "cmd", checkpoint.TASK, 4242, 777)
    cp.update(_status("cmd", TaskState.TASK_RUNNING, "u2"))
    cp.ack("fw-1", "cmd", "u1")
    cp.executor("fw-1", _task("e1", executor=True).executor, "c2", "/box/c2", token="t0ken")
    cp.pid("fw-1", "ex", checkpoint.EXECUTOR, 4343, 888)
    cp.task("fw-1", _task("e1", executor=True), executor_id="ex", launched=False)
    cp.task("fw-1", _task("e2", executor=True), executor_id="ex", launched=True)
    cp.launched("fw-1", "e1")
    cp.update(_status("e2", TaskState.TASK_FINISHED, "u3", data=b"x" * 1000))
    cp.task("fw-1", _task("gone"), container_id="c3", sandbox="/box/c3")
    cp.update(_status("gone", TaskState.TASK_FINISHED, "u4"))
    cp.ack("fw-1", "gone", "u4")
    cp.task_gone("fw-1", "gone")


def _check_populated(state: checkpoint.CheckpointState) -> None:
    assert (state.agent_id, state.port, state.boot_id) == ("a1", 31234, checkpoint.boot_id())
    assert state.frameworks == {"fw-1": FW}
    assert set(state.tasks) == {("fw-1", "cmd"), ("fw-1", "e1"), ("fw-1", "e2")}
    cmd = state.tasks[("fw-1", "cmd")]
    assert cmd.info == _task("cmd") and cmd.executor_id == ""
    assert cmd.container == checkpoint.ContainerEntry("c1", "/box/c1", 4242, 777)
    assert [s.uuid for s in cmd.updates] == ["u2"] and cmd.latest.uuid == "u2"
    assert cmd.seen == {"u1", "u2"} and cmd.damaged is None
    e1, e2 = state.tasks[("fw-1", "e1")], state.tasks[("fw-1", "e2")]
    assert e1.executor_id == "ex" and e1.launched and e1.container is None and not e1.updates
    assert e2.launched and e2.updates == [_status("e2", TaskState.TASK_FINISHED, "u3", data=b"x" * 1000)]
    (ex,) = state.executors.values()
    assert ex.info == _task("e1", executor=True).executor
    assert ex.container == checkpoint.ContainerEntry("c2", "/box/c2", 4343, 888)
    assert ex.token == "t0ken"  # else a restarted agent would let any process register as it
    assert not state.problems


def test_a_journal_replays_into_what_was_written(tmp_path):
    cp = Checkpoint(str(tmp_path))
    _populate(cp)
    _check_populated(cp.state)  # the live state is what a replay gives
    cp.close()
    _check_populated(Checkpoint(str(tmp_path)).load())


def test_compaction_keeps_the_state_and_bounds_the_journal(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint.journal, "COMPACT_MIN_RECORDS", 1024)
    cp = Checkpoint(str(tmp_path))
    _populate(cp)
    path = tmp_path / "meta" / "journal"
    sizes = []
    for i in range(3000):  # tasks come and go; only the populated ones stay live
        tid = f"t{i}"
        cp.task("fw-1", _task(tid), container_id=f"c{i}", sandbox=f"/box/{i}")
        cp.update(_status(tid, TaskState.TASK_FINISHED, f"v{i}"))
        cp.ack("fw-1", tid, f"v{i}")
        cp.task_gone("fw-1", tid)
        sizes.append(path.stat().st_size)
    assert max(sizes) < 1024 * 700, max(sizes)  # compacted on the way
    assert sizes[-1] < sizes[len(sizes) // 2 - 1] or min(sizes[1000:]) < max(sizes[:1000])
    _check_populated(cp.state)
    cp.close()
    _check_populated(Checkpoint(str(tmp_path)).load())
    assert not (tmp_path / "meta" / "journal.new").exists()


def test_a_record_cut_short_at_the_end_is_dropped_quietly(tmp_path):
    cp = Checkpoint(str(tmp_path))
    _populate(cp)
    cp.update(_status("cmd", TaskState.TASK_FINISHED, "u9", data=b"y" * 5000))
    cp.close()
    path = tmp_path / "meta" / "journal"
    path.write_bytes(path.read_bytes()[:-100])  # the agent died writing its last record
    state = Checkpoint(str(tmp_path)).load()
    _check_populated_but_problems(state)
    (problem,) = state.problems
    assert str(path) in problem and "incomplete" in problem and "never acted upon" in problem


def _check_populated_but_problems(state):
    problems, state.problems = state.problems, []
    _check_populated(state)
    state.problems = problems


def test_a_damaged_header_loses_that_record_only(tmp_path):
    cp = Checkpoint(str(tmp_path))
    _populate(cp)
    offset = os.path.getsize(tmp_path / "meta" / "journal")
    cp.task("fw-1", _task("extra"), container_id="c9", sandbox="/box/c9")
    cp.update(_status("cmd", TaskState.TASK_FINISHED, "u9"))
    cp.close()
    path = tmp_path / "meta" / "journal"
    data = bytearray(path.read_bytes())
    data[offset + 25] ^= 0xFF  # inside the header of the "extra" task record
    path.write_bytes(bytes(data))
    state = Checkpoint(str(tmp_path)).load()
    (problem,) = state.problems
    assert str(path) in problem and f"bytes {offset}-" in problem and "lost" in problem and "reading on" in problem
    assert ("fw-1", "extra") not in state.tasks
    assert state.tasks[("fw-1", "cmd")].latest.uuid == "u9"  # the record after it was read


def test_a_damaged_payload_marks_its_task_damaged(tmp_path):
    cp = Checkpoint(str(tmp_path))
    _populate(cp)
    offset = os.path.getsize(tmp_path / "meta" / "journal")
    cp.update(_status("cmd", TaskState.TASK_RUNNING, "u5", data=b"z" * 100))
    cp.close()
    path = tmp_path / "meta" / "journal"
    data = bytearray(path.read_bytes())
    data[-50] ^= 0xFF  # inside the TaskStatus of that update
    path.write_bytes(bytes(data))
    state = Checkpoint(str(tmp_path)).load()
    (problem,) = state.problems
    assert str(path) in problem and f"offset {offset}" in problem and "task 'cmd'" in problem
    cmd = state.tasks[("fw-1", "cmd")]
    assert cmd.damaged and "checksum" in cmd.damaged and str(path) in cmd.damaged
    assert cmd.container.pid == 4242  # still known, so the agent can kill it


def test_a_journal_from_another_boot_is_discarded(tmp_path, monkeypatch):
    cp = Checkpoint(str(tmp_path))
    _populate(cp)
    cp.close()
    other = tmp_path / "boot_id"
    other.write_text("00000000-1111-2222-3333-444444444444\n")
    monkeypatch.setattr(checkpoint.journal, "BOOT_ID_PATH", str(other))
    state = Checkpoint(str(tmp_path)).load()
    assert state.empty() and not state.tasks and state.port == 0


def test_an_unreadable_journal_is_reported_not_raised(tmp_path):
    (tmp_path / "meta" / "journal").mkdir(parents=True)
    state = Checkpoint(str(tmp_path)).load()
    assert state.empty()
    (problem,) = state.problems
    assert "cannot read the checkpoint" in problem and str(tmp_path / "meta" / "journal") in problem


def test_garbage_is_reported_not_raised(tmp_path):
    path = tmp_path / "meta" / "journal"
    path.parent.mkdir()
    path.write_bytes(os.urandom(3000) + b"MZ" + os.urandom(100))
    state = Checkpoint(str(tmp_path)).load()
    assert state.empty() and state.problems
    assert all(str(path) in p for p in state.problems)


def test_disabled_checkpoint_writes_nothing(tmp_path):
    cp = Checkpoint(str(tmp_path), enabled=False)
    cp.lock()
    _populate(cp)
    assert not (tmp_path / "meta").exists()
    assert cp.load().empty()


def test_one_agent_per_work_dir(tmp_path):
    first = Checkpoint(str(tmp_path))
    first.lock()
    with pytest.raises(WorkDirBusy, match=f"pid {os.getpid()}"):
        Checkpoint(str(tmp_path)).lock()
    first.unlock()
    Checkpoint(str(tmp_path)).lock()
