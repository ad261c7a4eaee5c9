"""Ordering, failure, clean-up and recovery of the cgroups isolators with mezzo's containerizer."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import mezzo
from mezzo import CommandInfo, Resources, TaskInfo
from mezzo.agent.containerizer import Containerizer, LaunchError
from mezzo.testing import LocalProcessCluster
from mezzo_isolator_cgroups import v1


def test_a_failed_prepare_cleans_up_the_isolators_before_it(cgroot, harness):
    """isolation = [cgroups/mem, cgroups/cpu]: cpu's prepare fails because its cpuacct
    cgroup already exists (someone else's, with a process in it). mem's cgroup is
    removed, and so is the cpu cgroup that cpu's prepare had made before it failed;
    the foreign one and its process are left alone."""
    containerizer = Containerizer([harness.mem(cgroot), harness.cpu(cgroot)])
    c = harness.container(["sleep", "30"], "cpus:1;mem:64")
    foreign = harness.cgroup("cpuacct", cgroot, c)
    v1.create(foreign)
    squatter = subprocess.Popen(["sleep", "30"], preexec_fn=v1.joiner([foreign]))  # noqa: PLW1509
    try:
        with pytest.raises(LaunchError) as err:
            asyncio.run(harness.launch(containerizer, c))
        assert str(err.value).startswith("isolator 'cgroups/cpu' failed to prepare the container: cgroup ")
        assert "already exists" in str(err.value)
        assert c.pid is None  # nothing was started
        assert not v1.exists(harness.cgroup("memory", cgroot, c))
        if harness.mounts["cpu"] != harness.mounts["cpuacct"]:
            assert not v1.exists(harness.cgroup("cpu", cgroot, c))  # cpu's own partial work undone
        assert v1.procs(foreign) == [squatter.pid]
    finally:
        squatter.kill()
        squatter.wait()
    asyncio.run(v1.destroy([foreign]))


class LaunchOne(mezzo.Scheduler):
    def __init__(self) -> None:
        self.launched = False
        self.final: mezzo.TaskStatus | None = None
        self.done = threading.Event()

    def resource_offers(self, driver, offers):
        for offer in offers:
            if self.launched:
                driver.decline_offer(offer.offer_id)
                continue
            self.launched = True
            driver.launch_tasks(
                [offer.offer_id],
                [
                    TaskInfo(
                        task_id="t",
                        name="t",
                        agent_id=offer.agent_id,
                        resources=Resources(cpus=1, mem=64),
                        command=CommandInfo(value="true"),
                    )
                ],
            )

    def status_update(self, driver, status):
        if mezzo.is_terminal(status.state):
            self.final = status
            self.done.set()


def test_the_agent_fails_the_task_naming_the_isolator(cgroot, harness, tmp_path):
    """A real agent with isolation [posix, cgroups/cpu, cgroups/mem], whose memory
    hierarchy is no longer a cgroup hierarchy under the root (a tmpfs mounted over
    it): mem's prepare fails, cpu's cgroups are removed, the task is TASK_FAILED."""
    memory_root = os.path.join(harness.mounts["memory"], cgroot)
    os.makedirs(memory_root)
    subprocess.run(["mount", "-t", "tmpfs", "mezzo-test", memory_root], check=True)
    tables = {f'agent.isolators."{name}"': {"root": cgroot} for name in ("cgroups/cpu", "cgroups/mem")}
    sched = LaunchOne()
    try:
        with LocalProcessCluster(
            1,
            directory=str(tmp_path / "cluster"),
            master={"allocation_interval": 0.05},
            agent={"isolation": ["posix", "cgroups/cpu", "cgroups/mem"]},
            tables=tables,
            agent_resources="cpus:2;mem:1024",
        ) as cluster:
            driver = mezzo.SchedulerDriver(sched, mezzo.FrameworkInfo(name="cgroups-order"), cluster.master)
            driver.start()
            try:
                assert sched.done.wait(30), cluster.log_tail("agent-1")
            finally:
                driver.stop()
    finally:
        subprocess.run(["umount", "-l", memory_root], check=True)
    final = sched.final
    assert final is not None
    assert mezzo.state_name(final.state) == "TASK_FAILED", final
    assert final.reason == "container_launch_failed"
    assert final.message.startswith("isolator 'cgroups/mem' failed to prepare the container: ")
    assert "not in a cgroup hierarchy" in final.message
    assert not v1.children(harness.mounts["cpu"], cgroot)
    assert not v1.children(harness.mounts["cpuacct"], cgroot)


def test_cleanup_kills_what_escaped_the_session_and_is_idempotent(cgroot, harness):
    cpu, mem = harness.cpu(cgroot), harness.mem(cgroot)
    containerizer = Containerizer([cpu, mem])

    async def main() -> int:
        # The leader ends once its child has left the session (setsid, then it writes its pid).
        escape = (
            'setsid /bin/sh -c "echo \\$\\$ > tmp && mv tmp escaped && exec sleep 30" &'
            " while [ ! -e escaped ]; do sleep 0.01; done"
        )
        c = harness.container(["/bin/sh", "-c", escape], "cpus:1;mem:64")
        running = await harness.launch(containerizer, c)
        assert await running.wait() == 0
        escaped = int(Path(c.sandbox, "escaped").read_text())
        assert harness.alive(escaped)
        assert running.kill() == 0  # the agent's session-based kill cannot see it
        assert await containerizer.destroy(c) == []
        assert await containerizer.destroy(c) == []  # again: nothing to do, no error
        assert await cpu.usage(c) == {} and await mem.usage(c) == {}
        return escaped

    escaped = asyncio.run(main())
    try:
        assert not harness.alive(escaped)
    finally:
        harness.kill(escaped)


def test_recover_removes_the_containers_the_agent_no_longer_knows(cgroot, harness):
    old = Containerizer([harness.cpu(cgroot), harness.mem(cgroot)])

    async def main() -> None:
        kept = harness.container(["sleep", "30"], "cpus:1;mem:64")
        stale = harness.container(["sleep", "30"], "cpus:1;mem:64")
        running = {c.container_id: await harness.launch(old, c) for c in (kept, stale)}
        # A new agent (new isolators) that recovered only `kept` from its checkpoint.
        cpu, mem = harness.cpu(cgroot), harness.mem(cgroot)
        new = Containerizer([cpu, mem])
        await new.recover([kept])
        assert await asyncio.wait_for(running[stale.container_id].wait(), 5) == -9
        for controller in ("cpu", "cpuacct", "memory"):
            assert v1.children(harness.mounts[controller], cgroot) == [kept.container_id]
        assert running[kept.container_id].returncode is None
        assert (await mem.usage(kept))["mem_limit_bytes"] == 64 << 20
        await harness.end(new, kept, running[kept.container_id])

    asyncio.run(main())


def test_containers_of_another_root_are_not_touched(cgroot, harness):
    """Two agents on one machine, each with its own root, do not recover each other."""
    mine = Containerizer([harness.cpu(cgroot)])
    other_root = f"{cgroot}-other"

    async def main() -> None:
        c = harness.container([sys.executable, "-c", "import time; time.sleep(30)"], "cpus:1")
        running = await harness.launch(mine, c)
        try:
            await Containerizer([harness.cpu(other_root)]).recover([])
            assert running.returncode is None
            assert v1.children(harness.mounts["cpu"], cgroot) == [c.container_id]
        finally:
            await harness.end(mine, c, running)

    asyncio.run(main())
