"""Custom executors on a real agent: a Python executor speaking the wire protocol directly."""

from __future__ import annotations

import asyncio
import time

import pytest
from agent_harness import (
    FRAMEWORK,
    ScriptedMaster,
    agent_config,
    executor_task,
    name,
    run,
    running_agent,
    sandbox_of,
    wait_until,
)
from mezzo.wire.ttypes import CommandInfo


def _log_lines(agent) -> list[str]:
    path = sandbox_of(agent, "fw-1", "exec-1") / "executor.log"
    return path.read_text().splitlines() if path.exists() else []


def test_executor_gets_tasks_relays_messages_and_its_exit_fails_the_rest(tmp_path, executor_script):
    async def main():
        master = await ScriptedMaster().start()
        port = master.port
        async with running_agent(agent_config(tmp_path, master.address)) as agent:
            master.agent.run_task(FRAMEWORK, executor_task("quick", executor_script, "finish"))
            master.agent.run_task(FRAMEWORK, executor_task("slow", executor_script))
            assert name((await master.wait_final("quick")).state) == "TASK_FINISHED"
            await master.wait_state("slow", "TASK_RUNNING")
            lines = _log_lines(agent)
            assert lines[0] == "registered exec-1 fw-1 agent-1"
            assert "launch quick" in lines and "launch slow" in lines
            for s in master.updates():
                assert s.source == "executor" and s.executor_id == "exec-1" and s.agent_id == "agent-1"
            # The executor's uuids reach the master unchanged and are acknowledged back to it.
            await wait_until(lambda: sum(1 for l in _log_lines(agent) if l.startswith("ack ")) == 3)
            acked = {l.split()[2] for l in _log_lines(agent) if l.startswith("ack ")}
            assert acked == {s.uuid for s in master.updates()}
            box = sandbox_of(agent, "fw-1", "exec-1")
            assert (box / "tasks" / "quick").is_dir() and (box / "tasks" / "slow").is_dir()

            master.agent.framework_to_executor("fw-1", "exec-1", b"ping")
            await wait_until(lambda: master.called("executor_to_framework"))
            assert master.called("executor_to_framework")[0] == ("agent-1", "fw-1", "exec-1", b"echo:ping")

            # Failover: the new master learns of the executor and its task.
            await master.close()
            await wait_until(lambda: not agent.registered.is_set())
            master = await ScriptedMaster(port=port).start()
            await agent.wait_registered(5)
            _info, running, executors, frameworks = master.called("reregister_agent")[0]
            assert [r.task.task_id for r in running] == ["slow"]
            assert [name(r.latest.state) for r in running] == ["TASK_RUNNING"]
            assert [(e.executor_id, e.framework_id) for e in executors] == [("exec-1", "fw-1")]

            master.agent.run_task(FRAMEWORK, executor_task("fatal", executor_script, "exit"))
            for tid in ("slow", "fatal"):
                final = await master.wait_final(tid)
                assert name(final.state) == "TASK_FAILED", final
                assert final.reason == "executor_exited"
                assert final.message == "executor exited with status 3"
            await wait_until(lambda: master.called("executor_exited"))
            assert master.called("executor_exited") == [
                ("agent-1", "fw-1", "exec-1", 3, "executor exited with status 3")
            ]
            await wait_until(lambda: not agent.frameworks, what="the framework to be forgotten")
        await master.close()

    run(main())


def test_stuck_kill_takes_the_executor_down(tmp_path, executor_script):
    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(tmp_path, master.address, kill_grace_period=0.5)):
            for tid, mode in (("a", ""), ("b", "stubborn"), ("c", "")):
                master.agent.run_task(FRAMEWORK, executor_task(tid, executor_script, mode))
            for tid in "abc":
                await master.wait_state(tid, "TASK_RUNNING")
            master.agent.kill_task("fw-1", "a")
            killed = await master.wait_final("a")
            assert name(killed.state) == "TASK_KILLED" and killed.source == "executor"
            t0 = time.monotonic()
            master.agent.kill_task("fw-1", "b")
            b = await master.wait_final("b")
            assert 0.5 <= time.monotonic() - t0 < 3
            assert name(b.state) == "TASK_KILLED" and b.source == "agent"
            c = await master.wait_final("c")
            assert name(c.state) == "TASK_FAILED" and c.reason == "executor_terminated"
            await wait_until(lambda: master.called("executor_exited"))
            (_aid, _fid, eid, status, message) = master.called("executor_exited")[0]
            assert eid == "exec-1" and status == 137 and "not killed within" in message
        await master.close()

    run(main())


def test_executor_that_never_registers_is_killed(tmp_path, executor_script):
    async def main():
        master = await ScriptedMaster().start()
        config = agent_config(tmp_path, master.address, executor_register_timeout=0.5)
        async with running_agent(config):
            silent = executor_task("t1", executor_script)
            silent.executor.command = CommandInfo(value="sleep 30")
            master.agent.run_task(FRAMEWORK, silent)
            second = executor_task("t2", executor_script)
            second.executor.command = silent.executor.command
            master.agent.run_task(FRAMEWORK, second)
            await asyncio.sleep(0.1)
            master.agent.kill_task("fw-1", "t2")  # still queued: killed at once
            t2 = await master.wait_final("t2")
            assert name(t2.state) == "TASK_KILLED"
            t1 = await master.wait_final("t1")
            assert name(t1.state) == "TASK_FAILED" and t1.reason == "executor_register_timeout"
            await wait_until(lambda: master.called("executor_exited"))
            assert master.called("executor_exited")[0][3] == 137
        await master.close()

    run(main())


def test_shutdown_framework_shuts_its_executor_down(tmp_path, executor_script):
    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(tmp_path, master.address)) as agent:
            master.agent.run_task(FRAMEWORK, executor_task("t", executor_script))
            await master.wait_state("t", "TASK_RUNNING")
            master.agent.shutdown_framework("fw-1")
            await wait_until(lambda: not agent.frameworks, 3, "the framework to be gone")
            assert "shutdown" in _log_lines(agent)
            assert master.final("t") is None and master.called("executor_exited") == []
        await master.close()

    run(main())


DRIVER_EXECUTOR = r"""
import mezzo
from mezzo import TaskState, TaskStatus


class Worker(mezzo.Executor):
    def launch_task(self, driver, task):
        driver.send_status_update(TaskStatus(task_id=task.task_id, state=TaskState.TASK_RUNNING))
        if task.data == b"finish":
            driver.send_status_update(TaskStatus(task_id=task.task_id, state=TaskState.TASK_FINISHED))

    def kill_task(self, driver, task_id):
        driver.send_status_update(TaskStatus(task_id=task_id, state=TaskState.TASK_KILLED))

    def framework_message(self, driver, data):
        driver.send_framework_message(b"echo:" + data)


mezzo.ExecutorDriver(Worker()).run()
"""


def test_the_executor_driver_works_against_the_agent(tmp_path):
    pytest.importorskip("mezzo.driver.executor")
    script = tmp_path / "driver_executor.py"
    script.write_text(DRIVER_EXECUTOR)

    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(tmp_path, master.address)) as agent:
            master.agent.run_task(FRAMEWORK, executor_task("a", script, "finish"))
            master.agent.run_task(FRAMEWORK, executor_task("b", script))
            assert name((await master.wait_final("a")).state) == "TASK_FINISHED"
            await master.wait_state("b", "TASK_RUNNING")
            master.agent.framework_to_executor("fw-1", "exec-1", b"hi")
            await wait_until(lambda: master.called("executor_to_framework"))
            assert master.called("executor_to_framework")[0][3] == b"echo:hi"
            master.agent.kill_task("fw-1", "b")
            assert name((await master.wait_final("b")).state) == "TASK_KILLED"
            master.agent.shutdown_framework("fw-1")
            await wait_until(lambda: not agent.frameworks, 5, "the executor to shut down")
        await master.close()

    run(main())
