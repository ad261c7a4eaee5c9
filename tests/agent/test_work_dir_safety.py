"""The agent's work dir is its own: created private, refused when someone else could have
put something in it, and a forged checkpoint journal cannot make a restarted agent signal
a process it did not start. Real directories, real processes, the real agent."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import uuid
from pathlib import Path

import pytest
from agent_harness import (
    FRAMEWORK,
    ScriptedMaster,
    agent_config,
    command_task,
    name,
    pid_alive,
    run,
    running_agent,
)
from structlog.testing import capture_logs

from mezzo.agent import Agent, checkpoint, posix
from mezzo.agent.checkpoint import Checkpoint
from mezzo.agent.sandbox import Sandbox
from mezzo.errors import ConfigError
from mezzo.plugins import load_plugins
from mezzo.wire.ttypes import FrameworkInfo, TaskState, TaskStatus

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _refusal(config) -> str:
    """The one-line ConfigError an agent with ``config`` refuses to start with."""
    agent = Agent(config, load_plugins(entry_points=False))
    with pytest.raises(ConfigError) as refused:
        asyncio.run(agent.start())
    assert refused.value.key == "agent.work_dir"
    message = str(refused.value)
    assert "\n" not in message
    return message


def _private_dir(path: Path, mode: int = 0o700) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(mode)
    return path


# -- creation -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "switch_user",
    [False, pytest.param(True, marks=pytest.mark.skipif(os.geteuid() != 0, reason="only root switches users"))],
)
def test_a_fresh_work_dir_is_created_0700_with_its_parents_and_sandboxes_0750(tmp_path, switch_user):
    """Tasks running as the agent's user: everything private. Tasks running as their
    users (``agent.switch_user``, the agent root): the work dir and the directories down to
    the sandboxes 0711 (passable, not listable), the sandbox the task user's, 0750."""
    work = tmp_path / "new" / "parent" / "work"

    async def main():
        master = await ScriptedMaster().start()
        # The modes are set, not left to the umask: even a strict one keeps sandboxes 0750.
        umask = os.umask(0o077)
        try:
            config = agent_config(tmp_path, master.address, work_dir=str(work), switch_user=switch_user)
            async with running_agent(config):
                master.agent.run_task(FRAMEWORK, command_task("t1", "echo hi"))
                final = await master.wait_final("t1")
        finally:
            os.umask(umask)
            await master.close()
        return final

    final = run(main())
    assert name(final.state) == "TASK_FINISHED", final
    for created in (tmp_path / "new", tmp_path / "new" / "parent", work / "meta"):
        assert _mode(created) == 0o700, created
    assert _mode(work) == (0o711 if switch_user else 0o700)
    (box,) = (p for p in work.glob("frameworks/fw-1/executors/t1/runs/*") if p.is_dir())
    assert _mode(box) == 0o750
    assert box.stat().st_uid == (NOBODY if switch_user else os.geteuid())
    for level in list(box.parents)[:5]:  # runs, up to frameworks/
        assert _mode(level) == (0o711 if switch_user else 0o750), level
        assert level.stat().st_uid == os.geteuid()
    assert (box / "stdout").read_text() == "hi\n"


# -- refusals ---------------------------------------------------------------------------


@needs_root
@pytest.mark.parametrize("where", ["", "meta", "meta/journal"])
def test_a_work_dir_owned_by_another_uid_is_refused(tmp_path, where):
    work = _private_dir(tmp_path / "work")
    _private_dir(work / "meta")
    (work / "meta" / "journal").write_bytes(b"")
    target = work / where if where else work
    os.chown(target, NOBODY, NOBODY)
    message = _refusal(agent_config(tmp_path, "127.0.0.1:1"))
    assert f"{str(target)!r} is owned by uid {NOBODY}, not by this agent (uid 0)" in message, message
    assert "chown it or pick another agent.work_dir" in message


@needs_root
def test_a_work_dir_below_a_directory_of_another_uid_is_refused(tmp_path):
    # Its owner could rename the work dir away and put a symlink there after the checks.
    theirs = _private_dir(tmp_path / "theirs", 0o755)
    os.chown(theirs, NOBODY, NOBODY)
    message = _refusal(agent_config(tmp_path, "127.0.0.1:1", work_dir=str(theirs / "work")))
    assert f"{str(theirs)!r}, above the work dir, is owned by uid {NOBODY}" in message, message
    assert not (theirs / "work").exists()


def test_a_group_writable_work_dir_is_refused(tmp_path):
    work = _private_dir(tmp_path / "work", 0o770)
    message = _refusal(agent_config(tmp_path, "127.0.0.1:1"))
    assert f"{str(work)!r} is writable by group or others (mode 0770): chmod go-w it" in message, message


def test_a_work_dir_under_a_world_writable_directory_is_refused_unless_sticky(tmp_path):
    shared = _private_dir(tmp_path / "shared", 0o777)
    config = agent_config(tmp_path, "127.0.0.1:1", work_dir=str(shared / "work"))
    message = _refusal(config)
    assert "above the work dir, is writable by group or others (mode 0777) without the sticky bit" in message
    shared.chmod(0o1777)  # like /tmp: others cannot rename what is ours in it

    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(tmp_path, master.address, work_dir=str(shared / "work"))):
            pass
        await master.close()

    run(main())
    assert _mode(shared / "work") == (0o711 if os.geteuid() == 0 else 0o700)  # root: tasks pass through


def test_a_symlinked_work_dir_is_refused(tmp_path):
    real = _private_dir(tmp_path / "real")
    (tmp_path / "work").symlink_to(real)
    message = _refusal(agent_config(tmp_path, "127.0.0.1:1"))
    assert f"{str(tmp_path / 'work')!r} is a symlink (to {str(real)!r})" in message, message
    assert not (real / "meta").exists()


@pytest.mark.parametrize("what", ["journal", "lock"])
def test_a_symlinked_journal_or_lock_is_refused_and_not_followed(tmp_path, what):
    meta = _private_dir(tmp_path / "work" / "meta")
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (meta / what).symlink_to(victim)
    message = _refusal(agent_config(tmp_path, "127.0.0.1:1"))
    assert f"{str(meta / what)!r} is a symlink" in message, message
    assert victim.read_text() == "precious\n"
    # Even without the start-up check, neither is opened through the link.
    cp = Checkpoint(str(tmp_path / "work"))
    if what == "journal":
        assert cp.load().empty() and "Too many levels of symbolic links" in cp.state.problems[0]
    else:
        cp.lock()  # logged, runs unlocked; the victim is not truncated
    assert victim.read_text() == "precious\n"


@pytest.mark.parametrize("planted", ["frameworks", "frameworks/fw-1", "frameworks/fw-1/executors/t1/runs"])
def test_a_symlink_planted_on_the_way_to_a_sandbox_fails_the_launch(tmp_path, planted):
    work = _private_dir(tmp_path / "work")
    link = work / planted
    _private_dir(link.parent, 0o750)
    elsewhere = _private_dir(tmp_path / "elsewhere")
    link.symlink_to(elsewhere)

    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(tmp_path, master.address)):
            master.agent.run_task(FRAMEWORK, command_task("t1", "echo escaped"))
            final = await master.wait_final("t1")
        await master.close()
        return final

    final = run(main())
    assert (name(final.state), final.reason) == ("TASK_FAILED", "sandbox_creation_failed"), final
    assert f"cannot create the sandbox: {str(link)!r} is a symlink (to {str(elsewhere)!r})" in final.message
    assert list(elsewhere.iterdir()) == []


def test_a_group_writable_directory_on_the_way_to_a_sandbox_fails_the_launch(tmp_path):
    work = _private_dir(tmp_path / "work")
    loose = _private_dir(work / "frameworks" / "fw-1", 0o770)

    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(tmp_path, master.address)):
            master.agent.run_task(FRAMEWORK, command_task("t1", "true"))
            final = await master.wait_final("t1")
        await master.close()
        return final

    final = run(main())
    assert final.reason == "sandbox_creation_failed", final
    assert f"{str(loose)!r} is writable by group or others (mode 0770)" in final.message


# -- a forged journal -----------------------------------------------------------------


def _start_time(pid: int) -> int:
    entry = posix.read_stat(pid)
    assert entry is not None
    return entry.start_time


def _status(cp: Checkpoint, framework_id: str, tid: str, state: str) -> None:
    status = TaskStatus(
        task_id=tid,
        framework_id=framework_id,
        state=getattr(TaskState, state),
        uuid=uuid.uuid4().hex,
        source="agent",
        executor_id=tid,
        agent_id="agent-1",
    )
    cp.update(status)
    cp.ack(framework_id, tid, status.uuid)


def _forge_task(
    cp: Checkpoint,
    work: Path,
    framework_id: str,
    tid: str,
    *,
    pid: int = 0,
    start_time: int = 0,
    sandbox: str | None = None,
) -> None:
    cid = uuid.uuid4().hex
    box = sandbox or Sandbox.path_for(str(work), framework_id, tid, cid)
    cp.task(framework_id, command_task(tid, "sleep 60"), container_id=cid, sandbox=box)
    _status(cp, framework_id, tid, "TASK_RUNNING")
    if pid:
        cp.pid(framework_id, tid, checkpoint.TASK, pid, start_time)


def test_a_forged_journal_cannot_make_a_restarted_agent_kill_an_unrelated_process(tmp_path):
    work = tmp_path / "work"
    elsewhere = _private_dir(tmp_path / "elsewhere")
    sleep = ["sleep", "60"]
    # Each is someone else's process the journal names, with its true start time where
    # that applies (anyone can read it from /proc):
    leader = subprocess.Popen(sleep, cwd=tmp_path, start_new_session=True)  # its own session
    plain = subprocess.Popen(sleep, cwd=tmp_path)  # in the test's session
    in_elsewhere = subprocess.Popen(sleep, cwd=elsewhere, start_new_session=True)
    # A daemon whose session leader has exited: the journal names the dead leader's pid,
    # and the daemon is what a kill of that session's leftovers would hit.
    spawner = subprocess.Popen(
        ["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"],
        cwd=tmp_path,
        start_new_session=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    daemon = int(spawner.communicate()[0])
    victims = {"leader": leader.pid, "plain": plain.pid, "in_elsewhere": in_elsewhere.pid, "daemon": daemon}
    try:
        cp = Checkpoint(str(work))
        cp.begin(0, "agent-1")
        cp.framework(FRAMEWORK)
        # Taken back and later killed (when the agent stops) if believed.
        _forge_task(cp, work, "fw-1", "adopt", pid=plain.pid, start_time=_start_time(plain.pid))
        # Found by its working directory if the journal's sandbox were believed.
        _forge_task(cp, work, "fw-1", "misplaced", sandbox=str(elsewhere))
        # A framework being shut down: whatever the journal names for it is killed at once.
        cp.framework(FrameworkInfo(name="other", framework_id="fw-2"))
        _forge_task(cp, work, "fw-2", "shut", pid=leader.pid, start_time=_start_time(leader.pid))
        _forge_task(cp, work, "fw-2", "session", pid=spawner.pid, start_time=_start_time(leader.pid))
        cp.shutdown("fw-2")
        cp.close()
        cp.unlock()

        async def main():
            master = await ScriptedMaster().start()
            with capture_logs() as logs:
                async with running_agent(agent_config(tmp_path, master.address)):
                    adopt = await master.wait_final("adopt")
                    misplaced = await master.wait_final("misplaced")
            await master.close()
            return adopt, misplaced, logs

        adopt, misplaced, logs = run(main())
        assert (name(adopt.state), adopt.reason) == ("TASK_FAILED", "container_lost"), adopt
        assert (name(misplaced.state), misplaced.reason) == ("TASK_FAILED", "checkpoint_unreadable"), (
            misplaced
        )
        assert "is not where this agent puts it" in misplaced.message
        left = {
            e.get("pid"): e["why"] for e in logs if e["event"].startswith("leaving alone what the checkpoint")
        }
        assert "does not lead its own session" in left[plain.pid]
        assert f"it works in {str(tmp_path)!r}, not in the container's sandbox" in left[leader.pid]
        assert f"its leader is gone and process {daemon}" in left[spawner.pid]
        assert "is not where this agent puts it" in left[None]
        for what, pid in victims.items():
            assert pid_alive(pid), what
    finally:
        for pid in victims.values():
            if pid_alive(pid):
                os.kill(pid, 9)
        for proc in (leader, plain, in_elsewhere):
            proc.wait()


def test_what_a_container_left_behind_is_still_killed_after_a_restart(tmp_path):
    """The other side: a container whose leader died while the agent was down, leaving
    processes in its session (one in its sandbox, one that moved out but carries
    MEZZO_SANDBOX), is still recognised as the agent's and cleaned up."""
    work = tmp_path / "work"
    cp = Checkpoint(str(work))
    cp.begin(0, "agent-1")
    cp.framework(FRAMEWORK)
    cid = uuid.uuid4().hex
    box = Path(Sandbox.path_for(str(work), "fw-1", "gone", cid))
    _private_dir(box, 0o750)
    script = "sleep 60 & echo $!; (cd /; exec sleep 60) & echo $!; wait"
    leader = subprocess.Popen(
        ["sh", "-c", script],
        cwd=box,
        start_new_session=True,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, MEZZO_SANDBOX=str(box)),
    )
    assert leader.stdout is not None
    left = [int(leader.stdout.readline()) for _ in range(2)]
    cp.task("fw-1", command_task("gone", "sleep 60"), container_id=cid, sandbox=str(box))
    _status(cp, "fw-1", "gone", "TASK_RUNNING")
    cp.pid("fw-1", "gone", checkpoint.TASK, leader.pid, _start_time(leader.pid))
    cp.close()
    cp.unlock()
    leader.kill()  # the leader alone: its children stay in its session
    leader.wait()
    try:
        assert all(pid_alive(pid) for pid in left)

        async def main():
            master = await ScriptedMaster().start()
            with capture_logs() as logs:
                async with running_agent(agent_config(tmp_path, master.address)):
                    final = await master.wait_final("gone")
            await master.close()
            return final, logs

        final, logs = run(main())
        assert (name(final.state), final.reason) == ("TASK_FAILED", "container_lost"), final
        assert not [e for e in logs if e["event"].startswith("leaving alone")]
        assert not any(pid_alive(pid) for pid in left)
    finally:
        for pid in left:
            if pid_alive(pid):
                os.kill(pid, 9)
