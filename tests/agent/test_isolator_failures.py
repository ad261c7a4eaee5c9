"""An isolator that raises: each failed call is counted once by the agent's PluginGuard,
and the agent carries on with its tasks as the contract says (a failed prepare or
isolate fails the launch naming the isolator; the other failures change nothing else)."""

from __future__ import annotations

import asyncio
import os
from typing import ClassVar

from agent_harness import FRAMEWORK, ScriptedMaster, agent_config, command_task, name, run, running_agent

from mezzo.agent import statistics
from mezzo.agent.containerizer import Containerizer
from mezzo.hookspecs import Container, ContainerLaunch, Isolator, hookimpl
from mezzo.plugin_guard import PluginGuard
from mezzo.plugins import load_plugins
from mezzo.testing import wait_for_async
from mezzo.resources import Resources


class _Broken(Isolator):
    """Raises in every method named in ``failing``; counts the calls it gets."""

    name = "test/broken"
    failing: ClassVar[set[str]] = set()
    calls: ClassVar[list[str]] = []

    def _maybe_fail(self, method: str) -> None:
        self.calls.append(method)
        if method in self.failing:
            raise RuntimeError(f"{method} broke")

    async def recover(self, containers):
        self._maybe_fail("recover")

    async def prepare(self, container):
        self._maybe_fail("prepare")

    async def isolate(self, container):
        self._maybe_fail("isolate")

    async def update(self, container, resources):
        self._maybe_fail("update")

    async def usage(self, container):
        self._maybe_fail("usage")
        return {"broken_measure": 1.0}

    async def limitation(self, container):
        self._maybe_fail("limitation")
        return None

    async def cleanup(self, container):
        self._maybe_fail("cleanup")


class _Plugin:
    @hookimpl
    def mezzo_register_components(self, registry):
        registry.add(_Broken)


def _broken(*methods: str) -> None:
    _Broken.failing = set(methods)
    _Broken.calls = []


def _config(tmp_path, master):
    # No periodic statistics report: the test counts the usage calls it makes.
    return agent_config(tmp_path, master.address, isolation=["posix", "test/broken"], statistics_interval=0)


def test_failures_after_the_launch_are_counted_once_per_call_and_change_nothing_else(tmp_path):
    async def main():
        _broken("recover", "usage", "limitation", "cleanup")
        master = await ScriptedMaster().start()
        plugins = load_plugins(entry_points=False, extra=(_Plugin(),))
        async with running_agent(_config(tmp_path, master), plugins) as agent:
            assert agent.plugin_failures == {"isolator/test/broken.recover": 1}
            master.agent.run_task(FRAMEWORK, command_task("slow", "sleep 30"))
            await master.wait_state("slow", "TASK_RUNNING")
            assert await statistics.collect(agent) == []  # its only measurement failed
            for tid in ("t1", "t2", "t3"):
                master.agent.run_task(FRAMEWORK, command_task(tid, f"echo {tid}"))
            for tid in ("t1", "t2", "t3"):
                final = await master.wait_final(tid)
                assert name(final.state) == "TASK_FINISHED" and final.data == f"{tid}\n".encode()
            master.agent.kill_task("fw-1", "slow")
            assert name((await master.wait_final("slow")).state) == "TASK_KILLED"
            await asyncio.sleep(0.1)
            assert agent.plugin_failures == {
                "isolator/test/broken.recover": 1,
                "isolator/test/broken.usage": 1,
                "isolator/test/broken.limitation": 4,
                "isolator/test/broken.cleanup": 4,
            }
            assert agent.containerizer.guard is agent.plugin_guard
            # Consistent: every task ended and was forgotten, and a new one runs.
            assert not agent.tasks and not agent.frameworks
            master.agent.run_task(FRAMEWORK, command_task("after", "true"))
            assert name((await master.wait_final("after")).state) == "TASK_FINISHED"
        await master.close()

    run(main())


def test_a_failed_prepare_or_isolate_fails_the_launch_and_is_counted_once(tmp_path):
    async def main():
        _broken()
        master = await ScriptedMaster().start()
        plugins = load_plugins(entry_points=False, extra=(_Plugin(),))
        async with running_agent(_config(tmp_path, master), plugins) as agent:
            for method in ("prepare", "isolate"):
                _broken(method)
                for tid in (f"{method}-1", f"{method}-2"):
                    master.agent.run_task(FRAMEWORK, command_task(tid, "touch ran"))
                    final = await master.wait_final(tid)
                    assert name(final.state) == "TASK_FAILED" and final.reason == "container_launch_failed"
                    assert f"isolator 'test/broken' failed to {method}" in final.message
                    assert f"{method} broke" in final.message
            assert agent.plugin_failures == {"isolator/test/broken.prepare": 2, "isolator/test/broken.isolate": 2}
            # An isolator that failed to isolate had prepared: it is cleaned up (and one
            # that failed to prepare is not, as the contract says).
            assert _Broken.calls == ["prepare", "isolate", "cleanup"] * 2
            _broken()
            master.agent.run_task(FRAMEWORK, command_task("fine", "true"))
            assert name((await master.wait_final("fine")).state) == "TASK_FINISHED"
            # The agent forgets the task once the master's acknowledgement reaches it, a
            # turn or more after the master saw the update.
            await wait_for_async(lambda: not agent.tasks, 5, "the agent to forget the finished task")
            assert len(agent.plugin_failures) == 2 and not agent.tasks
        await master.close()

    run(main())


def test_update_and_a_failing_preexec_function_are_counted_too(tmp_path):
    async def main():
        _broken("update")
        guard = PluginGuard()
        broken = _Broken({}, key="agent.isolators.test/broken")
        containerizer = Containerizer([broken], guard)
        box = str(tmp_path)
        container = Container(container_id="c1", framework_id="f", executor_id="e", resources=Resources(),
                              sandbox=box, launch=ContainerLaunch(argv=["true"], env=dict(os.environ), cwd=box))
        await containerizer.update(container, Resources(cpus=1))
        await containerizer.update(container, Resources(cpus=2))
        assert container.resources == Resources(cpus=2)  # still told, whatever the isolator did
        assert guard.counts() == {"isolator/test/broken.update": 2}

        _broken()
        failing = Container(container_id="c2", framework_id="f", executor_id="e", resources=Resources(),
                            sandbox=box, launch=ContainerLaunch(argv=["true"], env=dict(os.environ), cwd=box,
                                                                preexec=[]))

        class _Preexec(_Broken):
            name = "test/preexec"

            async def prepare(self, container):
                container.launch.preexec.append(_fail_in_child)

        containerizer = Containerizer([_Preexec({}, key="k")], guard)
        try:
            await containerizer.launch(failing, stdout=f"{box}/out", stderr=f"{box}/err")
        except Exception as exc:
            assert "'test/preexec' failed in the container's process before exec" in str(exc)
        else:
            raise AssertionError("the launch should have failed")
        finally:
            containerizer.close()
        assert guard.counts()["isolator/test/preexec.preexec"] == 1

    run(main())


def _fail_in_child() -> None:
    os.open("/nonexistent/for-the-test", os.O_RDONLY)
