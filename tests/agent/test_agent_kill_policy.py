"""The master's own kills (revocation, paper §3.3) on a real agent: ``kill_task``
with a :class:`KillPolicy` whose grace replaces the agent's ``kill_grace_period``
and whose reason and message go on the task's TASK_KILLING and TASK_KILLED updates.

Every kill here goes over the wire from a scripted master, like the master's."""

from __future__ import annotations

import asyncio
import math
import time
from types import SimpleNamespace

import pytest
from agent_harness import (
    FRAMEWORK,
    ScriptedMaster,
    agent_config,
    command_task,
    executor_task,
    name,
    pid_alive,
    run,
    running_agent,
    sandbox_of,
    wait_until,
)
from mezzo.agent.agent import Agent, _grace_of
from mezzo.wire.ttypes import KillPolicy, TaskState, TaskStatus

WHY = "revoked: framework F above its guarantee"
LONG_GRACE = 30.0
"""The agent's kill_grace_period where the policy's must be used instead: a test
that waited for it would time out."""


def revoke(grace: float | None = 0.3, reason: str = "revoked", message: str = WHY) -> KillPolicy:
    return KillPolicy(grace_seconds=grace, reason=reason, message=message)


def by_state(master: ScriptedMaster, task_id: str, state: str) -> list[TaskStatus]:
    return [s for s in master.updates(task_id) if name(s.state) == state]


def assert_revoked(status: TaskStatus) -> None:
    assert status.reason == "revoked", status
    assert status.message.startswith("revoked: framework F"), status


STUBBORN = "trap '' TERM; echo $$ > pid; sleep 60"
"""Ignores SIGTERM (and so does its sleep: the disposition is inherited)."""


async def _started_stubborn(master: ScriptedMaster, agent, task_id: str) -> int:
    master.agent.run_task(FRAMEWORK, command_task(task_id, STUBBORN))
    await master.wait_state(task_id, "TASK_RUNNING")
    box = sandbox_of(agent, "fw-1", task_id)
    await wait_until(lambda: (box / "pid").exists() and (box / "pid").read_text().strip(), what=f"{task_id}'s pid")
    return int((box / "pid").read_text())


# -- command tasks ---------------------------------------------------------


def test_stubborn_command_task_is_killed_after_the_policys_grace_not_the_agents(tmp_path):
    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(tmp_path, master.address, kill_grace_period=LONG_GRACE)) as agent:
            pid = await _started_stubborn(master, agent, "stubborn")
            t0 = time.monotonic()
            master.agent.kill_task("fw-1", "stubborn", revoke(0.3))
            final = await master.wait_final("stubborn", timeout=10)
            elapsed = time.monotonic() - t0
            assert name(final.state) == "TASK_KILLED", final
            assert elapsed < 10, elapsed  # far from the agent's 30 s
            assert master.states("stubborn") == ["TASK_STARTING", "TASK_RUNNING", "TASK_KILLING", "TASK_KILLED"]
            killing = by_state(master, "stubborn", "TASK_KILLING")
            killed = by_state(master, "stubborn", "TASK_KILLED")
            assert killing and killed
            for s in killing + killed:  # retries included: stamped once, before the first send
                assert_revoked(s)
                assert s.message.count(WHY) == 1, s.message
                assert s.source == "agent"
            # The task's own message follows the revocation's.
            assert killed[0].message.startswith(WHY + "; ") and "after a kill request" in killed[0].message
            # The updates before the kill are untouched.
            for s in by_state(master, "stubborn", "TASK_STARTING") + by_state(master, "stubborn", "TASK_RUNNING"):
                assert s.reason != "revoked" and not (s.message or "").startswith("revoked")
            await wait_until(lambda: not pid_alive(pid), 2, "the stubborn task's process to die")
            await wait_until(lambda: not agent.kill_reasons, 2, "the kill reason to be dropped")
        await master.close()

    run(main())


def test_polite_command_task_killed_with_the_policy(tmp_path):
    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(tmp_path, master.address, kill_grace_period=LONG_GRACE)) as agent:
            master.agent.run_task(FRAMEWORK, command_task("polite", "sleep 60"))
            await master.wait_state("polite", "TASK_RUNNING")
            t0 = time.monotonic()
            master.agent.kill_task("fw-1", "polite", revoke(5.0))
            final = await master.wait_final("polite")
            assert time.monotonic() - t0 < 4  # SIGTERM sufficed: no grace waited for
            assert name(final.state) == "TASK_KILLED"
            assert_revoked(final)
            assert_revoked(by_state(master, "polite", "TASK_KILLING")[0])
            await wait_until(lambda: not agent.kill_reasons, 2, "the kill reason to be dropped")
        await master.close()

    run(main())


def test_kill_without_a_policy_is_unchanged(tmp_path):
    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(tmp_path, master.address, kill_grace_period=1.0)) as agent:
            await _started_stubborn(master, agent, "plain")
            t0 = time.monotonic()
            master.agent.kill_task("fw-1", "plain")
            final = await master.wait_final("plain")
            elapsed = time.monotonic() - t0
            assert name(final.state) == "TASK_KILLED"
            assert 0.9 <= elapsed < 6, elapsed  # the agent's grace
            for s in master.updates("plain"):
                assert s.reason != "revoked" and not (s.message or "").startswith("revoked"), s
            assert final.message.startswith("command ") and "after a kill request" in final.message
            assert not agent.kill_reasons
        await master.close()

    run(main())


def test_a_policy_with_only_a_reason_keeps_the_agents_grace_and_one_with_only_a_grace_stamps_nothing(tmp_path):
    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(tmp_path, master.address, kill_grace_period=1.0)) as agent:
            await _started_stubborn(master, agent, "reason-only")
            await _started_stubborn(master, agent, "grace-only")
            t0 = time.monotonic()
            master.agent.kill_task("fw-1", "reason-only", revoke(None))
            master.agent.kill_task("fw-1", "grace-only", KillPolicy(grace_seconds=0.2))
            grace_only = await master.wait_final("grace-only")
            assert name(grace_only.state) == "TASK_KILLED"
            for s in master.updates("grace-only"):
                assert s.reason != "revoked" and not (s.message or "").startswith("revoked"), s
            reason_only = await master.wait_final("reason-only")
            assert time.monotonic() - t0 >= 0.9  # unset grace: the agent's
            assert name(reason_only.state) == "TASK_KILLED"
            assert_revoked(reason_only)
            assert_revoked(by_state(master, "reason-only", "TASK_KILLING")[0])
            await wait_until(lambda: not agent.kill_reasons, 2, "the kill reason to be dropped")
        await master.close()

    run(main())


def test_malformed_graces_are_ignored_over_the_wire(tmp_path):
    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(tmp_path, master.address, kill_grace_period=1.0)) as agent:
            graces = {"negative": -1.0, "nan": math.nan, "inf": math.inf, "neg-inf": -math.inf}
            pids = {tid: await _started_stubborn(master, agent, tid) for tid in graces}
            t0 = time.monotonic()
            for tid, grace in graces.items():
                master.agent.kill_task("fw-1", tid, revoke(grace))
            for tid in graces:
                final = await master.wait_final(tid)
                assert name(final.state) == "TASK_KILLED", (tid, final)
                assert_revoked(final)  # the rest of the policy still holds
            elapsed = time.monotonic() - t0
            assert 0.9 <= elapsed < 6, elapsed  # the agent's grace: neither at once nor never
            await wait_until(lambda: not any(pid_alive(p) for p in pids.values()), 2, "the tasks to die")
            # The agent is still fine.
            master.agent.run_task(FRAMEWORK, command_task("after", "true"))
            assert name((await master.wait_final("after")).state) == "TASK_FINISHED"
        await master.close()

    run(main())


@pytest.mark.parametrize(("grace", "expected"), [
    (0.3, 0.3), (0, 0.0), (0.0, 0.0), (2, 2.0), (1e6, 1e6),
    (None, None), (-0.1, None), (-1, None), (math.nan, None), (math.inf, None), (-math.inf, None),
    (True, None), ("1", None),
])
def test_grace_of(grace, expected):
    got = _grace_of(KillPolicy(grace_seconds=grace))
    assert got == expected and (got is None or type(got) is float)


def test_grace_of_no_policy():
    assert _grace_of(None) is None
    assert _grace_of(KillPolicy()) is None


def test_stamp_kill_reason_rules():
    """Only TASK_KILLING and TASK_KILLED are stamped; the entry goes at any terminal update."""
    key = ("fw-1", "t")
    fake = SimpleNamespace(kill_reasons={key: ("revoked", WHY)})

    def stamp(state, reason="", message="", task_id="t"):
        s = TaskStatus(task_id=task_id, framework_id="fw-1", state=state, reason=reason, message=message)
        Agent._stamp_kill_reason(fake, s)
        return s

    s = stamp(TaskState.TASK_RUNNING, message="up")
    assert (s.reason, s.message) == ("", "up") and key in fake.kill_reasons
    s = stamp(TaskState.TASK_KILLING)
    assert (s.reason, s.message) == ("revoked", WHY) and key in fake.kill_reasons
    s = stamp(TaskState.TASK_KILLED, task_id="other", message="m")
    assert (s.reason, s.message) == ("", "m")  # another task
    s = stamp(TaskState.TASK_KILLED, reason="x", message="command killed")
    assert (s.reason, s.message) == ("revoked", f"{WHY}; command killed")
    assert not fake.kill_reasons

    fake.kill_reasons[key] = ("revoked", WHY)
    s = stamp(TaskState.TASK_FINISHED, message="done")
    assert (s.reason, s.message) == ("", "done") and not fake.kill_reasons
    fake.kill_reasons[key] = ("revoked", WHY)
    s = stamp(TaskState.TASK_FAILED, reason="command_failed", message="exit 1")
    assert (s.reason, s.message) == ("command_failed", "exit 1") and not fake.kill_reasons

    # An empty reason keeps the update's own; an empty message keeps the update's own.
    fake.kill_reasons[key] = ("", WHY)
    s = stamp(TaskState.TASK_KILLING, reason="own")
    assert (s.reason, s.message) == ("own", WHY)
    fake.kill_reasons[key] = ("revoked", "")
    s = stamp(TaskState.TASK_KILLED, message="own message")
    assert (s.reason, s.message) == ("revoked", "own message") and not fake.kill_reasons


# -- custom executors --------------------------------------------------------


def test_stubborn_executor_is_killed_whole_after_the_policys_grace(tmp_path, executor_script):
    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(tmp_path, master.address, kill_grace_period=LONG_GRACE)) as agent:
            for tid, mode in (("b", "stubborn"), ("c", "")):
                master.agent.run_task(FRAMEWORK, executor_task(tid, executor_script, mode))
            for tid in "bc":
                await master.wait_state(tid, "TASK_RUNNING")
            t0 = time.monotonic()
            master.agent.kill_task("fw-1", "b", revoke(0.3))
            b = await master.wait_final("b", timeout=10)
            elapsed = time.monotonic() - t0
            assert elapsed < 10, elapsed  # far from the agent's 30 s
            assert name(b.state) == "TASK_KILLED" and b.source == "agent"
            assert_revoked(b)
            assert b.message.startswith(WHY + "; ") and "executor was killed" in b.message
            assert "0.3s grace" in b.message, b.message  # the policy's grace, not the agent's
            # The executor's other task fails with it, unstamped: only "b" was revoked.
            c = await master.wait_final("c")
            assert name(c.state) == "TASK_FAILED" and c.reason == "executor_terminated"
            assert not c.message.startswith("revoked"), c.message
            await wait_until(lambda: master.called("executor_exited"))
            (_aid, _fid, eid, status, message) = master.called("executor_exited")[0]
            assert eid == "exec-1" and status == 137 and "not killed within the 0.3s" in message
            assert "kill b" in (sandbox_of(agent, "fw-1", "exec-1") / "executor.log").read_text()
            await wait_until(lambda: not agent.kill_reasons, 2, "the kill reason to be dropped")
        await master.close()

    run(main())


def test_polite_executor_task_killed_with_the_policy(tmp_path, executor_script):
    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(tmp_path, master.address, kill_grace_period=LONG_GRACE)) as agent:
            for tid in ("a", "other"):
                master.agent.run_task(FRAMEWORK, executor_task(tid, executor_script))
                await master.wait_state(tid, "TASK_RUNNING")
            master.agent.kill_task("fw-1", "a", revoke(0.3))
            a = await master.wait_final("a")
            assert name(a.state) == "TASK_KILLED" and a.source == "executor"
            assert (a.reason, a.message) == ("revoked", WHY)  # the executor gave no message of its own
            await wait_until(lambda: not agent.kill_reasons, 2, "the kill reason to be dropped")
            # The executor did its job: past the policy's grace it is still up, its other task too.
            await asyncio.sleep(0.6)
            assert not master.called("executor_exited")
            assert master.states("other") == ["TASK_RUNNING"]
        await master.close()

    run(main())


FINISH_ON_KILL = r'''
"""On kill_task, reports its task TASK_FINISHED (it finished during the grace)."""
import mezzo
from mezzo import TaskState, TaskStatus


class FinishOnKill(mezzo.Executor):
    def launch_task(self, driver, task):
        driver.send_status_update(TaskStatus(task_id=task.task_id, state=TaskState.TASK_RUNNING))

    def kill_task(self, driver, task_id):
        driver.send_status_update(TaskStatus(task_id=task_id, state=TaskState.TASK_FINISHED, message="done anyway"))


mezzo.ExecutorDriver(FinishOnKill(), reconnect_interval=0.1).run()
'''


def test_task_that_finishes_during_the_grace_is_reported_finished_unstamped(tmp_path):
    pytest.importorskip("mezzo.driver.executor")
    script = tmp_path / "finish_on_kill.py"
    script.write_text(FINISH_ON_KILL)

    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(tmp_path, master.address, kill_grace_period=LONG_GRACE)) as agent:
            master.agent.run_task(FRAMEWORK, executor_task("f", script))
            await master.wait_state("f", "TASK_RUNNING")
            master.agent.kill_task("fw-1", "f", revoke(0.3))
            f = await master.wait_final("f")
            assert name(f.state) == "TASK_FINISHED"
            assert f.reason != "revoked" and f.message == "done anyway", f
            await wait_until(lambda: not agent.kill_reasons, 2, "the kill reason to be dropped")
            await asyncio.sleep(0.6)  # past the policy's grace: nothing left to kill
            assert not master.called("executor_exited")
        await master.close()

    run(main())


# -- a kill that arrives after the task's end was reported ----------------------


def test_policy_kill_after_the_terminal_update_leaves_nothing_behind(tmp_path):
    """A revocation crossing the task's end (terminal update sent, not yet
    acknowledged) must not leave a kill reason behind, to be stamped on a later
    task that reuses the id."""

    async def main():
        master = await ScriptedMaster(auto_ack=False).start()
        async with running_agent(agent_config(tmp_path, master.address, status_update_retry=5.0)) as agent:
            def ack_all():
                for s in master.updates("t"):
                    master.agent.status_update_acknowledged("fw-1", "t", s.uuid)

            master.agent.run_task(FRAMEWORK, command_task("t", "true"))
            for state in ("TASK_STARTING", "TASK_RUNNING"):
                await master.wait_state("t", state)
                ack_all()
            await master.wait_state("t", "TASK_FINISHED")
            master.agent.kill_task("fw-1", "t", revoke(0.3))  # crosses the end
            assert ("fw-1", "t") in agent.tasks  # its end is not acknowledged yet
            await asyncio.sleep(0.2)
            ack_all()
            await wait_until(lambda: ("fw-1", "t") not in agent.tasks, 5, "the task to be forgotten")
            assert name(master.final("t").state) == "TASK_FINISHED"
            assert not agent.kill_reasons, agent.kill_reasons

            # The same id again, killed by its framework: nothing about a revocation.
            master.auto_ack = True
            master.calls.clear()
            master.agent.run_task(FRAMEWORK, command_task("t", "sleep 60"))
            await master.wait_state("t", "TASK_RUNNING")
            master.agent.kill_task("fw-1", "t")
            final = await master.wait_final("t")
            assert name(final.state) == "TASK_KILLED"
            for s in master.updates("t"):
                assert s.reason != "revoked" and not (s.message or "").startswith("revoked"), s
        await master.close()

    run(main())


# -- a kill while the executor is being taken back (agent restarted) -----------------


def test_kill_of_a_recovering_executors_task_keeps_the_policys_grace():
    """Killed while its executor has yet to re-register after an agent restart: the
    kill is forwarded once the executor is back, with the policy's grace still."""
    from unittest import mock

    from mezzo.agent import executors
    from mezzo.wire.ttypes import ExecutorInfo, FrameworkInfo, TaskInfo

    async def main():
        agent = SimpleNamespace(agent_id="agent-1", config=SimpleNamespace(kill_grace_period=LONG_GRACE),
                                agent_info=lambda: None)
        run_ = executors.ExecutorRun(agent, FrameworkInfo(framework_id="fw-1", name="f"),
                                     ExecutorInfo(executor_id="exec-1"))
        run_.state = executors.RECOVERING
        run_.tasks["t"] = TaskInfo(task_id="t")
        run_.kill_task("t", 0.3)
        assert not run_._timers  # nothing to forward to yet
        remote = mock.Mock()
        conn = SimpleNamespace(remote=lambda schema: remote, peer="test", tag=None)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        run_.on_registered(conn)
        remote.kill_task.assert_called_once_with("t")
        timer = run_._timers["kill:t"]
        try:
            assert timer.when() - t0 < 5, "the agent's grace was used instead of the policy's"
        finally:
            for t in run_._timers.values():
                t.cancel()

    run(main())
