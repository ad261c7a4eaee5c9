"""cgroups/mem on the real kernel: a hog is OOM-killed at its limit and its task fails
with reason memory_limit; limits follow the container's resources."""

from __future__ import annotations

import asyncio
import sys
import threading

import mezzo
from mezzo import CommandInfo, Resources, TaskInfo
from mezzo.agent.containerizer import Containerizer
from mezzo.testing import LocalProcessCluster, wait_for
from mezzo_isolator_cgroups import v1

MB = 1 << 20


class RunOnce(mezzo.Scheduler):
    """Launches ``tasks`` ({id: (resources, python code)}) on the first offer; records finals."""

    def __init__(self, tasks: dict[str, tuple[str, str]]) -> None:
        self.tasks = tasks
        self.launched = False
        self.finals: dict[str, mezzo.TaskStatus] = {}
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
                        task_id=tid,
                        name=tid,
                        agent_id=offer.agent_id,
                        resources=Resources.parse(res),
                        command=CommandInfo(value=sys.executable, arguments=["-c", code], shell=False),
                    )
                    for tid, (res, code) in self.tasks.items()
                ],
            )

    def status_update(self, driver, status):
        if mezzo.is_terminal(status.state):
            self.finals[status.task_id] = status
            if len(self.finals) == len(self.tasks):
                self.done.set()


def test_a_memory_hog_fails_with_memory_limit_and_a_small_task_finishes(cgroot, harness, programs, tmp_path):
    tables = {f'agent.isolators."{name}"': {"root": cgroot} for name in ("cgroups/cpu", "cgroups/mem")}
    sched = RunOnce(
        {
            "hog": ("cpus:0.5;mem:64", programs["hog"]),
            "small": ("cpus:0.5;mem:64", "b = b'x' * (8 << 20)\nprint('done', len(b))"),
        }
    )
    with LocalProcessCluster(
        1,
        directory=str(tmp_path / "cluster"),
        master={"allocation_interval": 0.05},
        agent={"isolation": ["posix", "cgroups/cpu", "cgroups/mem"]},
        tables=tables,
        agent_resources="cpus:2;mem:1024",
    ) as cluster:
        driver = mezzo.SchedulerDriver(sched, mezzo.FrameworkInfo(name="cgroups-mem"), cluster.master)
        driver.start()
        try:
            assert sched.done.wait(30), f"finals so far: {sched.finals}\n{cluster.log_tail('agent-1')}"
        finally:
            driver.stop()
        hog, small = sched.finals["hog"], sched.finals["small"]
        assert mezzo.state_name(hog.state) == "TASK_FAILED", hog
        assert hog.reason == "memory_limit"
        assert hog.message.startswith(
            "memory limit of 64 MB reached: the kernel's OOM killer ended the container"
        )
        assert mezzo.state_name(small.state) == "TASK_FINISHED", small
        # Both containers' cgroups went with them, before the agent stopped.
        wait_for(
            lambda: not any(v1.children(m, cgroot) for m in harness.mounts.values()),
            5,
            "the containers' cgroups to be removed",
        )


def test_an_oom_ends_the_whole_container(cgroot, harness, programs, tmp_path):
    """The OOM killer kills the biggest process; the isolator kills the rest, so a
    shell waiting for a sleeper does not outlive its hog."""
    (tmp_path / "hog.py").write_text(programs["hog"])
    iso = harness.mem(cgroot)
    containerizer = Containerizer([iso])

    async def main():
        c = harness.container(
            ["/bin/sh", "-c", f"sleep 30 & {sys.executable} {tmp_path / 'hog.py'}; wait"], "cpus:1;mem:48"
        )
        running = await harness.launch(containerizer, c)
        code = await asyncio.wait_for(running.wait(), 10)
        usage = await iso.usage(c)
        limitation = await containerizer.limitation(c)
        running.kill()
        assert not await containerizer.destroy(c)
        return code, usage, limitation

    code, usage, limitation = asyncio.run(main())
    assert code == -9
    # Our SIGKILL may beat the OOM killer to its victim, so oom_kill may stay 0.
    assert usage["mem_limit_hits"] > 0 and usage["mem_limit_bytes"] == 48 * MB
    assert limitation is not None and limitation.reason == "memory_limit"
    assert limitation.message.startswith("memory limit of 48 MB reached")


def test_limits_follow_the_resources(cgroot, harness, tmp_path):
    cpu, mem = harness.cpu(cgroot, cfs_quota=True), harness.mem(cgroot)
    containerizer = Containerizer([cpu, mem])
    ready = tmp_path / "ready"
    holder = f"import time\nb = b'x' * (80 << 20)\nopen({str(ready)!r}, 'w').close()\ntime.sleep(30)"

    async def limits(c) -> tuple[float, float, float]:
        u = {**await cpu.usage(c), **await mem.usage(c)}
        return u["cpu_shares"], u["cpus_limit"], u["mem_limit_bytes"] / MB

    async def main():
        c = harness.container(harness.python(holder), "cpus:0.5;mem:256")
        running = await harness.launch(containerizer, c)
        try:
            assert await limits(c) == (512, 0.5, 256)
            await containerizer.update(c, Resources.parse("cpus:2;mem:512"))  # a task came
            assert await limits(c) == (2048, 2, 512)
            await containerizer.update(c, Resources.parse("cpus:0.25;mem:160"))  # tasks went
            assert await limits(c) == (256, 0.25, 160)
            while not ready.exists():
                await asyncio.sleep(0.02)
            # Below what the process holds: the kernel refuses, the old limit stays, nothing raises.
            await mem.update(c, Resources.parse("cpus:0.25;mem:48"))
            assert await limits(c) == (256, 0.25, 160)
            assert running.returncode is None
            assert await containerizer.limitation(c) is None
        finally:
            await harness.end(containerizer, c, running)

    asyncio.run(main())
