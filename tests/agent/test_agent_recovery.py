"""Agent restart recovery with real processes: an agent daemon (``python -m mezzo agent``)
is SIGKILLed while a command task and a custom executor run, restarted on the same work
dir, and takes both back under the same agent id."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import mezzo
import pytest
from agent_harness import (
    FRAMEWORK,
    PYTHON_USER,
    ScriptedMaster,
    agent_config,
    command_task,
    name,
    pid_alive,
    run,
    running_agent,
    wait_until,
)
from mezzo.agent import Agent, checkpoint, posix
from mezzo.agent.checkpoint import Checkpoint
from mezzo.agent.containerizer import EXIT_FILE, exit_wrapped
from mezzo.agent.exit_wrapper import exit_file_for
from mezzo.agent.sandbox import Sandbox
from mezzo.errors import ConfigError
from mezzo.plugins import load_plugins
from mezzo.testing import to_toml
from mezzo.wire.ttypes import CommandInfo, ExecutorInfo, TaskInfo, TaskState, TaskStatus

HOLD_EXECUTOR = Path(__file__).parent / "hold_executor.py"


def _config(tmp_path: Path, master: str, **agent) -> Path:
    values = {
        "master": master,
        "listen": "127.0.0.1:0",
        "hostname": "test-host",
        "work_dir": str(tmp_path / "work"),
        "resources": "cpus:4;mem:4096;disk:1000",
        "kill_grace_period": 0.5,
        "executor_register_timeout": 20.0,
        "status_update_retry": 0.2,
        "reconnect_interval": 0.05,
        **agent,
    }
    path = tmp_path / "mezzo.toml"
    path.write_text(to_toml({"agent": values, "log": {"level": "debug"}}))
    return path


class AgentProcess:
    """``python -m mezzo agent`` in its own session, logging to a file."""

    def __init__(self, config: Path, log: Path) -> None:
        self.config = config
        self.log = log
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mezzo", "agent", "--config", str(self.config)],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
            )

    def kill(self, sig: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)
        self.proc.wait(20)

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _hold_task(task_id: str) -> TaskInfo:
    return TaskInfo(
        task_id=task_id, name=task_id, agent_id="agent-1",
        resources=mezzo.Resources(cpus=0.1, mem=16),
        executor=ExecutorInfo(
            executor_id="hold", framework_id=FRAMEWORK.framework_id,
            command=CommandInfo(value=sys.executable, arguments=[str(HOLD_EXECUTOR)], shell=False,
                                user=PYTHON_USER),
            resources=mezzo.Resources(cpus=0.1, mem=32),
        ),
    )


def _sandbox(work: Path, executor_id: str) -> Path:
    runs = work / "frameworks" / FRAMEWORK.framework_id / "executors" / executor_id / "runs"
    (box,) = (p for p in runs.iterdir() if p.is_dir())  # beside it: its <id>.mezzo-exit
    return box


def _terminal_uuids(master: ScriptedMaster, task_id: str) -> set[str]:
    return {s.uuid for s in master.updates(task_id) if mezzo.is_terminal(s.state)}


async def _wait_proc(predicate, agent: AgentProcess, what: str, timeout: float = 20.0):
    try:
        return await wait_until(predicate, timeout, what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- agent log:\n{agent.tail()}") from None


def test_sigkilled_agent_takes_back_its_command_task_and_executor(tmp_path):
    async def main():
        master = await ScriptedMaster().start()
        work = tmp_path / "work"
        agent = AgentProcess(_config(tmp_path, master.address), tmp_path / "agent.log")
        agent.start()
        try:
            await _wait_proc(lambda: master.called("register_agent"), agent, "the agent to register")
            # "wait" runs until the test creates its go file; "early" ends with status 3
            # while the agent is down; "exec" runs on a custom executor until released.
            master.agent.run_task(FRAMEWORK, command_task(
                "wait", "echo $$ >> pids; while [ ! -e go ]; do sleep 0.05; done; echo done"))
            master.agent.run_task(FRAMEWORK, command_task(
                "early", "while [ ! -e go-early ]; do sleep 0.05; done; exit 3"))
            master.agent.run_task(FRAMEWORK, _hold_task("exec"))
            for tid in ("wait", "early", "exec"):
                await _wait_proc(lambda t=tid: "TASK_RUNNING" in master.states(t), agent, f"{tid} to run")
            wait_box, early_box, exec_box = (_sandbox(work, e) for e in ("wait", "early", "hold"))
            pid = int((wait_box / "pids").read_text())
            executor_pid = int((exec_box / "launched.log").read_text().split()[1])
            port = int(master.called("register_agent")[0][0].port)
            assert (work / "meta" / "journal").stat().st_size > 0

            agent.kill(signal.SIGKILL)
            await wait_until(lambda: master.agent_conn is None or master.agent_conn.closed.done(), 10,
                             "the master to see the agent go")
            # While the agent is down: "early" ends (its exit status goes to its exit file),
            # the others keep running.
            (early_box / "go-early").touch()
            await wait_until(lambda: Path(exit_file_for(str(early_box))).exists(), 10, "early to end")
            assert pid_alive(pid) and pid_alive(executor_pid)
            before = len(master.calls)

            agent.start()
            await _wait_proc(lambda: master.called("reregister_agent"), agent, "the agent to re-register")
            assert not master.called("register_agent")[1:], "the restarted agent registered anew"
            info, tasks, executors, frameworks = master.called("reregister_agent")[0]
            assert info.agent_id == "agent-1" and info.port == port
            assert {r.task.task_id: name(r.latest.state) for r in tasks} == {
                "wait": "TASK_RUNNING", "exec": "TASK_RUNNING", "early": "TASK_FAILED"}
            assert [(e.framework_id, e.executor_id) for e in executors] == [("fw-1", "hold")]
            assert [f.framework_id for f in frameworks] == ["fw-1"]

            # The task that ended while the agent was down, with its real exit status.
            early = await master.wait_final("early")
            assert name(early.state) == "TASK_FAILED" and early.exit_code == 3, early
            assert early.message == "command exited with status 3"

            # The executor re-registers with the new agent process and finishes its task there.
            (exec_box / "release-exec").touch()
            final = await _wait_proc(lambda: master.final("exec"), agent, "exec to finish")
            assert name(final.state) == "TASK_FINISHED" and final.data == str(executor_pid).encode()
            assert (exec_box / "launched.log").read_text().splitlines() == [f"exec {executor_pid}"]

            # The command task was adopted, not restarted, and finishes exactly once.
            (wait_box / "go").touch()
            final = await _wait_proc(lambda: master.final("wait"), agent, "wait to finish")
            assert name(final.state) == "TASK_FINISHED" and final.exit_code == 0 and final.data == b"done\n"
            assert (wait_box / "pids").read_text().split() == [str(pid)]
            await asyncio.sleep(0.5)  # room for any duplicate to show up
            for tid in ("wait", "early", "exec"):
                assert len(_terminal_uuids(master, tid)) == 1, (tid, master.states(tid))
                assert master.states(tid)[-1] == name(master.final(tid).state)
            assert all(args[0].agent_id == "agent-1" for args in master.called("status_update")[before:])

            # A clean stop (SIGTERM) kills the executor and removes the checkpoint.
            agent.kill(signal.SIGTERM)
            assert not (work / "meta" / "journal").exists()
            await wait_until(lambda: not pid_alive(executor_pid), 10, "the executor to be killed")
        finally:
            agent.close()
            await master.close()

    run(main(), timeout=90)


# -- recovery branches, from a checkpoint written as a crashed agent leaves it ------------------


class CrashedAgent:
    """Writes the journal (and starts the containers) a SIGKILLed agent would have left."""

    def __init__(self, work: Path, agent_id: str = "agent-1") -> None:
        self.work = work
        self.cp = Checkpoint(str(work))
        self.cp.begin(0, agent_id)
        self.cp.framework(FRAMEWORK)
        self.procs: list[subprocess.Popen] = []

    def status(self, tid: str, state: str, *, acked: bool = True, executor_id: str | None = None,
               reason: str = "", message: str = "") -> TaskStatus:
        status = TaskStatus(task_id=tid, framework_id=FRAMEWORK.framework_id, state=getattr(TaskState, state),
                            uuid=uuid.uuid4().hex, source="agent", executor_id=executor_id or tid,
                            agent_id="agent-1", timestamp=time.time(), reason=reason, message=message)
        self.cp.update(status)
        if acked:
            self.cp.ack(FRAMEWORK.framework_id, tid, status.uuid)
        return status

    def spawn(self, box: Path, argv: list[str]) -> subprocess.Popen:
        box.mkdir(parents=True, exist_ok=True)
        with open(box / "stdout", "ab") as out, open(box / "stderr", "ab") as err:
            proc = subprocess.Popen(exit_wrapped(argv, str(box / EXIT_FILE)),
                                    cwd=box, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        self.procs.append(proc)
        return proc

    def command(self, tid: str, command: str, states: tuple[str, ...] = ("TASK_STARTING", "TASK_RUNNING"),
                *, start: bool = True, record_pid: bool = True) -> tuple[subprocess.Popen | None, Path]:
        cid = uuid.uuid4().hex
        box = Path(Sandbox.path_for(str(self.work), FRAMEWORK.framework_id, tid, cid))
        self.cp.task(FRAMEWORK.framework_id, command_task(tid, command), container_id=cid, sandbox=str(box))
        box.mkdir(parents=True)
        for state in states[:1]:
            self.status(tid, state)
        proc = self.spawn(box, ["/bin/sh", "-c", command]) if start else None
        if proc is not None and record_pid:
            self.cp.pid(FRAMEWORK.framework_id, tid, checkpoint.TASK, proc.pid, _start_time(proc.pid))
        for state in states[1:]:
            self.status(tid, state)
        return proc, box

    def crash(self) -> None:
        self.cp.close()
        self.cp.unlock()

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _start_time(pid: int) -> int:
    entry = posix.read_stat(pid)
    assert entry is not None
    return entry.start_time


def test_recovery_reports_each_task_by_what_became_of_its_process(tmp_path):
    async def main():
        master = await ScriptedMaster().start()
        go = tmp_path / "go"
        wait_go = f"while [ ! -e {go} ]; do sleep 0.05; done; echo done"
        crashed = CrashedAgent(tmp_path / "work")
        try:
            # Still running; its TASK_RUNNING had not been recorded yet.
            alive, _ = crashed.command("alive", wait_go, ("TASK_STARTING",))
            # Ended while the agent was down: reported from its exit file.
            ended, _ = crashed.command("ended", "echo bye; exit 0")
            # Killed with its wrapper (SIGKILL): no exit status to be had.
            lost, _ = crashed.command("lost", "sleep 30")
            # The agent died between starting it and recording its pid: found by its sandbox.
            nopid, _ = crashed.command("nopid", wait_go, ("TASK_STARTING",), record_pid=False)
            # The agent died launching it, before any process existed.
            crashed.command("never", "true", ("TASK_STARTING",), start=False)
            # Its end was sent but not acknowledged: sent again, the same update.
            reported, _ = crashed.command("reported", "true")
            reported.wait()
            finished = crashed.status("reported", "TASK_FINISHED", acked=False)
            # Was being killed: the kill goes on.
            crashed.command("killing", "sleep 30", ("TASK_STARTING", "TASK_RUNNING", "TASK_KILLING"))
            crashed.crash()
            ended.wait()
            os.killpg(lost.pid, signal.SIGKILL)
            lost.wait()

            async with running_agent(agent_config(tmp_path, master.address)) as agent:
                assert not master.called("register_agent")
                info, tasks, _executors, frameworks = master.called("reregister_agent")[0]
                assert info.agent_id == "agent-1" and [f.framework_id for f in frameworks] == ["fw-1"]
                assert {r.task.task_id for r in tasks} == {"alive", "ended", "lost", "nopid", "never",
                                                          "reported", "killing"}
                final = await master.wait_final("ended")
                assert name(final.state) == "TASK_FINISHED" and final.exit_code == 0 and final.data == b"bye\n"
                final = await master.wait_final("lost")
                assert name(final.state) == "TASK_FAILED" and final.reason == "container_lost", final
                assert "cannot tell how it ended" in final.message
                final = await master.wait_final("never")
                assert name(final.state) == "TASK_FAILED" and final.reason == "container_lost", final
                assert "died while launching" in final.message
                final = await master.wait_final("reported")
                assert final.uuid == finished.uuid and name(final.state) == "TASK_FINISHED"
                final = await master.wait_final("killing")
                assert name(final.state) == "TASK_KILLED", final
                await master.wait_state("alive", "TASK_RUNNING")
                await master.wait_state("nopid", "TASK_RUNNING")
                assert pid_alive(alive.pid) and pid_alive(nopid.pid)
                go.touch()
                for tid in ("alive", "nopid"):
                    final = await master.wait_final(tid)
                    assert name(final.state) == "TASK_FINISHED" and final.data == b"done\n", final
                for tid in ("alive", "ended", "lost", "nopid", "never", "reported", "killing"):
                    assert len(_terminal_uuids(master, tid)) == 1, (tid, master.states(tid))
                assert master.states("alive") == ["TASK_RUNNING", "TASK_FINISHED"]
                assert master.states("reported") == ["TASK_FINISHED"]
                assert master.states("killing") == ["TASK_KILLED"]
                await wait_until(lambda: not agent.tasks and not agent.frameworks, what="every task forgotten")
                assert not agent.checkpoint.state.tasks and not agent.checkpoint.state.frameworks
        finally:
            crashed.cleanup()
            await master.close()

    run(main(), timeout=60)


def test_a_revocation_under_way_keeps_its_reason_across_a_restart(tmp_path):
    async def main():
        master = await ScriptedMaster().start()
        crashed = CrashedAgent(tmp_path / "work")
        try:
            crashed.command("revoked", "sleep 30")
            why = ("revoked: framework F above its guarantee by cpus:1 (guaranteed cpus:1); "
                   "revoked for framework G")
            crashed.status("revoked", "TASK_KILLING", reason="revoked", message=why)
            crashed.command("asked", "sleep 30", ("TASK_STARTING", "TASK_RUNNING", "TASK_KILLING"))
            crashed.crash()
            async with running_agent(agent_config(tmp_path, master.address, kill_grace_period=0.3)):
                final = await master.wait_final("revoked")
                assert (name(final.state), final.reason) == ("TASK_KILLED", "revoked"), final
                assert final.message.startswith(why + "; "), final.message
                final = await master.wait_final("asked")  # its framework's own kill: no reason to keep
                assert name(final.state) == "TASK_KILLED" and final.reason != "revoked", final
        finally:
            crashed.cleanup()
            await master.close()

    run(main(), timeout=60)


@pytest.mark.parametrize("where", ["header", "payload"])
def test_unreadable_task_record_fails_the_task_and_kills_its_process(tmp_path, where):
    async def main():
        master = await ScriptedMaster(auto_ack=False).start()
        crashed = CrashedAgent(tmp_path / "work")
        try:
            good, _ = crashed.command("good", "sleep 30")
            journal = tmp_path / "work" / "meta" / "journal"
            crashed.cp.flush()
            offset = journal.stat().st_size
            bad, _ = crashed.command("bad", "sleep 30")
            crashed.crash()
            data = bytearray(journal.read_bytes())
            _magic, hlen, _plen, _hcrc, _pcrc = checkpoint.records.PREFIX.unpack_from(data, offset)
            # The record of task "bad": in its header (it cannot even be told whose it
            # is), or in its TaskInfo.
            data[offset + checkpoint.records.PREFIX.size + (10 if where == "header" else hlen + 10)] ^= 0xFF
            journal.write_bytes(bytes(data))
            async with running_agent(agent_config(tmp_path, master.address)) as agent:
                final = await master.wait_final("bad")
                assert name(final.state) == "TASK_FAILED" and final.reason == "checkpoint_unreadable", final
                if where == "payload":
                    assert str(journal) in final.message and "damaged" in final.message
                else:
                    assert "task record is missing" in final.message
                await wait_until(lambda: not pid_alive(bad.pid), what="the damaged task's process to be killed")
                # Until acknowledged, that failure is in the journal like any update (a second
                # crash now would send it again).
                entry = Checkpoint(str(tmp_path / "work")).load().tasks[("fw-1", "bad")]
                assert [u.uuid for u in entry.updates] == [final.uuid] and not entry.damaged
                master.auto_ack = True
                master.agent.status_update_acknowledged("fw-1", "bad", final.uuid)
                await wait_until(lambda: ("fw-1", "bad") not in agent.checkpoint.state.tasks,
                                 what="the acknowledged task to leave the journal")
                assert pid_alive(good.pid) and master.final("good") is None
                assert list(agent.tasks) == [("fw-1", "good")]
                master.agent.kill_task("fw-1", "good")
                assert name((await master.wait_final("good")).state) == "TASK_KILLED"
        finally:
            crashed.cleanup()
            await master.close()

    run(main())


def test_executor_that_does_not_come_back_is_killed_and_its_tasks_fail(tmp_path):
    async def main():
        master = await ScriptedMaster().start()
        crashed = CrashedAgent(tmp_path / "work")
        try:
            info = _hold_task("held")
            cid = uuid.uuid4().hex
            box = Path(Sandbox.path_for(str(tmp_path / "work"), "fw-1", "hold", cid))
            crashed.cp.executor("fw-1", info.executor, cid, str(box))
            silent = crashed.spawn(box, ["sleep", "30"])  # an executor that never re-registers
            crashed.cp.pid("fw-1", "hold", checkpoint.EXECUTOR, silent.pid, _start_time(silent.pid))
            crashed.cp.task("fw-1", info, executor_id="hold", launched=True)
            crashed.status("held", "TASK_RUNNING", executor_id="hold")
            # An executor that exited (status 5) while the agent was down, with a task unfinished.
            dead_info = _hold_task("orphan")
            dead_info.executor.executor_id = "dead"
            cid3 = uuid.uuid4().hex
            box3 = Path(Sandbox.path_for(str(tmp_path / "work"), "fw-1", "dead", cid3))
            crashed.cp.executor("fw-1", dead_info.executor, cid3, str(box3))
            dead = crashed.spawn(box3, ["sh", "-c", "exit 5"])
            crashed.cp.pid("fw-1", "dead", checkpoint.EXECUTOR, dead.pid, _start_time(dead.pid))
            crashed.cp.task("fw-1", dead_info, executor_id="dead", launched=True)
            crashed.status("orphan", "TASK_RUNNING", executor_id="dead")
            dead.wait()
            # A framework being shut down when the agent died: killed, nothing reported.
            crashed.cp.framework(mezzo.FrameworkInfo(name="other", framework_id="fw-2"))
            cid2 = uuid.uuid4().hex
            box2 = Path(Sandbox.path_for(str(tmp_path / "work"), "fw-2", "t2", cid2))
            crashed.cp.task("fw-2", command_task("t2", "sleep 30"), container_id=cid2, sandbox=str(box2))
            doomed = crashed.spawn(box2, ["sleep", "30"])
            crashed.cp.pid("fw-2", "t2", checkpoint.TASK, doomed.pid, _start_time(doomed.pid))
            crashed.cp.shutdown("fw-2")
            crashed.crash()

            async with running_agent(agent_config(tmp_path, master.address, executor_register_timeout=1.0)):
                _info, tasks, executors, frameworks = master.called("reregister_agent")[0]
                # ("orphan" and its executor may still be listed: their end is found out meanwhile.)
                assert {r.task.task_id for r in tasks} - {"orphan"} == {"held"}
                assert {(e.framework_id, e.executor_id) for e in executors} - {("fw-1", "dead")} == {
                    ("fw-1", "hold")}
                assert [f.framework_id for f in frameworks] == ["fw-1"]
                final = await master.wait_final("orphan")
                assert name(final.state) == "TASK_FAILED" and final.reason == "executor_exited", final
                assert final.message == "executor exited with status 5"
                # Its exit reaches the master too (held until the agent is registered).
                await wait_until(lambda: master.called("executor_exited"))
                assert master.called("executor_exited")[0] == ("agent-1", "fw-1", "dead", 5,
                                                               "executor exited with status 5")
                await wait_until(lambda: not pid_alive(doomed.pid), what="the shut-down framework's task to die")
                final = await master.wait_final("held")
                assert name(final.state) == "TASK_FAILED" and final.reason == "executor_reregister_timeout", final
                assert not pid_alive(silent.pid)
                await wait_until(lambda: len(master.called("executor_exited")) == 2)
                assert master.called("executor_exited")[1][:3] == ("agent-1", "fw-1", "hold")
                assert not master.updates("t2")
        finally:
            crashed.cleanup()
            await master.close()

    run(main())


def test_a_checkpoint_from_before_a_reboot_is_discarded(tmp_path, monkeypatch):
    async def main():
        master = await ScriptedMaster(agent_id="agent-2").start()
        crashed = CrashedAgent(tmp_path / "work", agent_id="agent-1")
        try:
            crashed.command("old", "sleep 30")
            crashed.crash()
            boot = tmp_path / "boot_id"
            boot.write_text("ffffffff-0000-0000-0000-000000000000\n")
            monkeypatch.setattr(checkpoint.journal, "BOOT_ID_PATH", str(boot))
            async with running_agent(agent_config(tmp_path, master.address)) as agent:
                assert agent.agent_id == "agent-2" and not master.called("reregister_agent")
                assert master.called("register_agent") and not agent.tasks and not master.updates()
        finally:
            crashed.cleanup()
            await master.close()

    run(main())


def test_two_agents_cannot_share_a_work_dir(tmp_path):
    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(tmp_path, master.address)):
            with pytest.raises(ConfigError, match="another agent"):
                await Agent(agent_config(tmp_path, master.address), load_plugins(entry_points=False)).start()
        await master.close()

    run(main())
