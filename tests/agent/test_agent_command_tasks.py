"""Command tasks on a real agent, driven by a scripted master over loopback."""

from __future__ import annotations

import asyncio
import os
import time
from typing import ClassVar

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
    sandbox_of,
    wait_until,
)
from mezzo.agent import Agent
from mezzo.errors import ConfigError, MezzoError
from mezzo.hookspecs import Isolator, hookimpl
from mezzo.plugins import load_plugins
from mezzo.services import AGENT


def test_registers_and_reports_its_resources(tmp_path):
    async def main():
        master = await ScriptedMaster(agent_id="a-42").start()
        async with running_agent(agent_config(tmp_path, master.address, attributes={"rack": "r1"})) as agent:
            assert agent.agent_id == "a-42"
            host, port = agent.address.split(":")
            assert host == "127.0.0.1" and int(port) == agent.port > 0
            (info,) = master.called("register_agent")[0:1][0]
            assert info.agent_id == "" and info.port == agent.port and info.hostname == "test-host"
            assert info.attributes == {"rack": "r1"}
            assert info.resources.scalars["cpus"] == 4000 and info.resources.scalars["mem"] == 4096000
        await master.close()

    run(main())


def test_keeps_dialling_until_the_master_appears(tmp_path):
    async def main():
        probe = await ScriptedMaster().start()
        port = probe.port
        await probe.close()
        async with running_agent(agent_config(tmp_path, f"127.0.0.1:{port}"), register=False) as agent:
            await asyncio.sleep(0.3)
            assert not agent.registered.is_set()
            master = await ScriptedMaster(port=port).start()
            assert await agent.wait_registered(5) == "agent-1"
            await master.close()

    run(main())


def test_twenty_command_tasks_finish_with_output_in_their_sandboxes(tmp_path):
    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(tmp_path, master.address)) as agent:
            ids = [f"t{i:02d}" for i in range(20)]
            for tid in ids:
                master.agent.run_task(FRAMEWORK, command_task(tid, 'echo "hello from $MEZZO_TASK_ID"; echo oops >&2'))
            for tid in ids:
                final = await master.wait_final(tid)
                assert name(final.state) == "TASK_FINISHED", final
                assert final.exit_code == 0
                assert final.data == f"hello from {tid}\n".encode()  # the tail of stdout
            for tid in ids:
                assert master.states(tid) == ["TASK_STARTING", "TASK_RUNNING", "TASK_FINISHED"]
                for s in master.updates(tid):
                    assert s.agent_id == "agent-1" and s.framework_id == "fw-1" and s.source == "agent"
                    assert s.executor_id == tid and s.uuid and s.timestamp > 0
                box = sandbox_of(agent, "fw-1", tid)
                assert (box / "stdout").read_text() == f"hello from {tid}\n"
                assert (box / "stderr").read_text() == "oops\n"
            # Every terminal update acknowledged: the agent forgets the tasks.
            await wait_until(lambda: not agent.tasks and not agent.frameworks, what="tasks forgotten")
        await master.close()

    run(main())


def test_nonzero_exit_fails_the_task_with_its_exit_code(tmp_path):
    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(tmp_path, master.address)):
            master.agent.run_task(FRAMEWORK, command_task("bad", "exit 3"))
            master.agent.run_task(FRAMEWORK, command_task("nosuch", "/no/such/program", shell=False))
            master.agent.run_task(FRAMEWORK, command_task("argv", "/bin/echo", shell=False, arguments=["a b", "c"],
                                                          environment={"X": "1"}))
            final = await master.wait_final("bad")
            assert name(final.state) == "TASK_FAILED"
            assert final.exit_code == 3
            assert final.message == "command exited with status 3"
            final = await master.wait_final("nosuch")
            assert name(final.state) == "TASK_FAILED" and final.reason == "container_launch_failed"
            assert "/no/such/program" in final.message
            assert name((await master.wait_final("argv")).state) == "TASK_FINISHED"
        await master.close()

    run(main())


def test_kill_escalates_after_the_grace_period(tmp_path):
    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(tmp_path, master.address, kill_grace_period=1.0)) as agent:
            # Ignores SIGTERM (and so does its child, the disposition is inherited).
            master.agent.run_task(FRAMEWORK, command_task("stubborn", "trap '' TERM; echo $$ > pid; sleep 30"))
            master.agent.run_task(FRAMEWORK, command_task("polite", "sleep 30"))
            await master.wait_state("stubborn", "TASK_RUNNING")
            await master.wait_state("polite", "TASK_RUNNING")
            box = sandbox_of(agent, "fw-1", "stubborn")
            await wait_until(lambda: (box / "pid").exists() and (box / "pid").read_text().strip())
            t0 = time.monotonic()
            master.agent.kill_task("fw-1", "stubborn")
            master.agent.kill_task("fw-1", "polite")
            polite = await master.wait_final("polite")
            assert name(polite.state) == "TASK_KILLED" and time.monotonic() - t0 < 0.9  # SIGTERM sufficed
            final = await master.wait_final("stubborn")
            elapsed = time.monotonic() - t0
            assert name(final.state) == "TASK_KILLED"
            assert 1.0 <= elapsed < 4, elapsed
            assert master.states("stubborn") == ["TASK_STARTING", "TASK_RUNNING", "TASK_KILLING", "TASK_KILLED"]
            assert not pid_alive(int((box / "pid").read_text()))
        await master.close()

    run(main())


def test_no_process_is_left_behind(tmp_path):
    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(tmp_path, master.address)) as agent:
            # Killed: a background child in the group and one that left the session.
            master.agent.run_task(FRAMEWORK, command_task(
                "killed", "sleep 60 & echo $! > bg; setsid sleep 61 & echo $! > escaped; wait"))
            # Finished: its background child outlives the shell.
            master.agent.run_task(FRAMEWORK, command_task("exits", "sleep 62 & echo $! > bg; exit 0"))
            await master.wait_state("killed", "TASK_RUNNING")
            box = sandbox_of(agent, "fw-1", "killed")
            await wait_until(lambda: all((box / f).exists() and (box / f).read_text().strip() for f in ("bg", "escaped")))
            pids = [int((box / f).read_text()) for f in ("bg", "escaped")]
            assert all(pid_alive(p) for p in pids)
            master.agent.kill_task("fw-1", "killed")
            assert name((await master.wait_final("killed")).state) == "TASK_KILLED"
            await wait_until(lambda: not any(pid_alive(p) for p in pids), 2, "the task's processes to die")

            assert name((await master.wait_final("exits")).state) == "TASK_FINISHED"
            bg = int((sandbox_of(agent, "fw-1", "exits") / "bg").read_text())
            await wait_until(lambda: not pid_alive(bg), 2, "the background child to die")
        await master.close()

    run(main())


def test_unacknowledged_update_is_retried_until_acknowledged(tmp_path):
    async def main():
        master = await ScriptedMaster(auto_ack=False).start()
        async with running_agent(agent_config(tmp_path, master.address, status_update_retry=0.1)):
            master.agent.run_task(FRAMEWORK, command_task("t", "true"))
            await wait_until(lambda: len(master.updates("t")) >= 3, 3, "three sends of the first update")
            sends = master.updates("t")
            assert {s.uuid for s in sends} == {sends[0].uuid}  # the same update, again and again
            assert name(sends[0].state) == "TASK_STARTING"
            master.agent.status_update_acknowledged("fw-1", "t", "wrong-uuid")
            master.agent.status_update_acknowledged("fw-1", "t", sends[0].uuid)
            await wait_until(lambda: "TASK_RUNNING" in master.states("t"), 3)
            await asyncio.sleep(0.4)
            assert sum(1 for s in master.updates("t") if s.uuid == sends[0].uuid) <= len(sends) + 1
            n = sum(1 for s in master.updates("t") if s.uuid == sends[0].uuid)
            await asyncio.sleep(0.4)
            assert sum(1 for s in master.updates("t") if s.uuid == sends[0].uuid) == n
            master.auto_ack = True
            running = next(s for s in master.updates("t") if name(s.state) == "TASK_RUNNING")
            master.agent.status_update_acknowledged("fw-1", "t", running.uuid)
            assert name((await master.wait_final("t")).state) == "TASK_FINISHED"
        await master.close()

    run(main())


def test_reregisters_with_its_tasks_after_losing_the_master(tmp_path):
    async def main():
        master = await ScriptedMaster().start()
        port = master.port
        async with running_agent(agent_config(tmp_path, master.address)) as agent:
            master.agent.run_task(FRAMEWORK, command_task("long", "sleep 30"))
            master.agent.run_task(FRAMEWORK, command_task("short", "sleep 0.5"))
            await master.wait_state("long", "TASK_RUNNING")
            await master.wait_state("short", "TASK_RUNNING")
            await master.close()
            await wait_until(lambda: not agent.registered.is_set(), what="the agent to notice")
            await asyncio.sleep(1.0)  # "short" finishes while nobody listens
            master2 = await ScriptedMaster(port=port).start()
            await agent.wait_registered(5)
            info, running, executors, frameworks = master2.called("reregister_agent")[0]
            assert info.agent_id == "agent-1" and info.port == agent.port
            assert sorted(r.task.task_id for r in running) == ["long", "short"]
            assert {r.framework_id for r in running} == {"fw-1"}
            latest = {r.task.task_id: name(r.latest.state) for r in running}
            assert latest == {"long": "TASK_RUNNING", "short": "TASK_FINISHED"}
            assert executors == []
            assert [f.framework_id for f in frameworks] == ["fw-1"]  # the new master learns its failover timeout
            final = await master2.wait_final("short")
            assert name(final.state) == "TASK_FINISHED"
            master2.agent.kill_task("fw-1", "long")
            assert name((await master2.wait_final("long")).state) == "TASK_KILLED"
            await master2.close()

    run(main())


def test_bad_calls_are_answered_not_raised(tmp_path):
    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(tmp_path, master.address)) as agent:
            master.agent.kill_task("fw-1", "ghost")
            lost = await master.wait_final("ghost")
            assert name(lost.state) == "TASK_LOST" and lost.reason == "task_unknown"
            assert lost.message == "kill_task: the agent knows no such task"

            master.agent.run_task(FRAMEWORK, command_task("dup", "sleep 30"))
            await master.wait_state("dup", "TASK_RUNNING")
            master.agent.run_task(FRAMEWORK, command_task("dup", "true"))
            await wait_until(lambda: "TASK_ERROR" in [name(s.state) for s in master.updates("dup")])
            error = next(s for s in master.updates("dup") if name(s.state) == "TASK_ERROR")
            assert error.message == "duplicate task id on agent"

            evil = command_task("../../etc", "true")
            master.agent.run_task(FRAMEWORK, evil)
            assert name((await master.wait_final("../../etc")).state) == "TASK_ERROR"
            neither = command_task("neither", "true")
            neither.command = None
            master.agent.run_task(FRAMEWORK, neither)
            assert name((await master.wait_final("neither")).state) == "TASK_ERROR"

            # Still the original task, untouched.
            assert master.states("dup")[:2] == ["TASK_STARTING", "TASK_RUNNING"]
            master.agent.kill_task("fw-1", "dup")
            await master.wait_state("dup", "TASK_KILLED")
            assert agent.registered.is_set()
        await master.close()

    run(main())


def test_malformed_and_oversized_frames_leave_the_agent_serving(tmp_path):
    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(tmp_path, master.address, max_frame_bytes=4096)) as agent:
            host, port = agent.address.split(":")
            for junk in (b"\x00\x00\x00\x05hello", b"\x7f\xff\xff\xff" + b"x" * 100):
                reader, writer = await asyncio.open_connection(host, int(port))
                writer.write(junk)
                await writer.drain()
                assert await asyncio.wait_for(reader.read(), 5) == b""  # the agent hung up
                writer.close()
            # A master-only call from a stranger is ignored.
            from mezzo.rpc import connect
            from mezzo.services import AGENT, EXECUTOR
            stranger = await connect(host, int(port), EXECUTOR, object())
            stranger.remote(AGENT).run_task(FRAMEWORK, command_task("sneaky", "true"))
            await asyncio.sleep(0.2)
            stranger.close()
            assert master.updates("sneaky") == []
            master.agent.run_task(FRAMEWORK, command_task("after", "echo ok"))
            assert name((await master.wait_final("after")).state) == "TASK_FINISHED"
        await master.close()

    run(main())


def test_shutdown_framework_kills_its_tasks(tmp_path):
    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(tmp_path, master.address)) as agent:
            master.agent.run_task(FRAMEWORK, command_task("a", "echo $$ > pid; exec sleep 30"))
            await master.wait_state("a", "TASK_RUNNING")
            box = sandbox_of(agent, "fw-1", "a")
            await wait_until(lambda: (box / "pid").exists() and (box / "pid").read_text().strip())
            pid = int((box / "pid").read_text())
            master.agent.shutdown_framework("fw-1")
            await wait_until(lambda: not pid_alive(pid), 3, "the task to die")
            await wait_until(lambda: not agent.frameworks, 3, "the framework to be forgotten")
            assert master.final("a") is None  # nobody acknowledges updates of a framework that is gone
        await master.close()

    run(main())


class _RefusingMaster(ScriptedMaster):
    def register_agent(self, conn, info):
        self._record(conn, "register_agent", info)
        conn.remote(AGENT).error("register_agent: refused by test")


def test_master_error_stops_the_agent(tmp_path):
    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(tmp_path, master.address)) as agent:
            master.agent.run_task(FRAMEWORK, command_task("t", "sleep 30"))
            await master.wait_state("t", "TASK_RUNNING")
            master.agent.error("agent refused: test")
            await asyncio.wait_for(agent.stopped.wait(), 5)
            assert agent.error_message == "agent refused: test"
            assert not agent.frameworks or all(not fw.command_tasks for fw in agent.frameworks.values())
        await master.close()

        refusing = await _RefusingMaster().start()
        async with running_agent(agent_config(tmp_path, refusing.address), register=False) as agent:
            with pytest.raises(MezzoError, match="refused by test"):
                await agent.wait_registered(5)
        await refusing.close()

    run(main())


class _Recording(Isolator):
    name = "test/recording"
    events: ClassVar[list[str]] = []

    async def prepare(self, container):
        self.events.append(f"prepare {container.executor_id}")
        container.launch.env["FROM_ISOLATOR"] = "yes"

    async def isolate(self, container):
        assert container.pid
        self.events.append(f"isolate {container.executor_id}")

    async def cleanup(self, container):
        self.events.append(f"cleanup {container.executor_id}")


class _Failing(Isolator):
    name = "test/failing"

    async def prepare(self, container):
        if container.executor_id == "doomed":
            raise RuntimeError("no room at the inn")
        if container.executor_id == "doomed-in-child":
            container.launch.preexec.append(_enter_nowhere)


def _enter_nowhere():
    """A preexec function that fails in the child, as entering a namespace that is gone would."""
    os.open("/nonexistent/netns", os.O_RDONLY)


class _Plugin:
    @hookimpl
    def mezzo_register_components(self, registry):
        registry.add(_Recording)
        registry.add(_Failing)


def test_isolators_run_in_order_and_a_failing_one_fails_the_launch(tmp_path):
    async def main():
        _Recording.events.clear()
        plugins = load_plugins(entry_points=False, extra=(_Plugin(),))
        master = await ScriptedMaster().start()
        config = agent_config(tmp_path, master.address, isolation=["posix", "test/recording", "test/failing"])
        async with running_agent(config, plugins) as agent:
            master.agent.run_task(FRAMEWORK, command_task("ok", "echo $FROM_ISOLATOR"))
            assert name((await master.wait_final("ok")).state) == "TASK_FINISHED"
            assert (sandbox_of(agent, "fw-1", "ok") / "stdout").read_text() == "yes\n"
            master.agent.run_task(FRAMEWORK, command_task("doomed", "true"))
            final = await master.wait_final("doomed")
            assert name(final.state) == "TASK_FAILED" and final.reason == "container_launch_failed"
            assert "test/failing" in final.message and "no room at the inn" in final.message
            # Failing between fork and exec: the message still names the isolator and the error.
            master.agent.run_task(FRAMEWORK, command_task("doomed-in-child", "true"))
            final = await master.wait_final("doomed-in-child")
            assert name(final.state) == "TASK_FAILED" and final.reason == "container_launch_failed"
            assert "'test/failing' failed in the container's process before exec" in final.message
            assert "/nonexistent/netns" in final.message
        assert _Recording.events == [
            "prepare ok", "isolate ok", "cleanup ok",
            "prepare doomed", "cleanup doomed",
            "prepare doomed-in-child", "cleanup doomed-in-child",
        ]
        await master.close()

    run(main())


def test_unknown_isolator_is_a_startup_error(tmp_path):
    config = agent_config(tmp_path, "127.0.0.1:1", isolation=["posix", "cgroups/cpu"])
    with pytest.raises(ConfigError) as err:
        Agent(config, load_plugins(entry_points=False))
    assert "cgroups/cpu" in str(err.value) and "posix" in str(err.value)
    assert "mezzo-isolator-cgroups" in str(err.value)
