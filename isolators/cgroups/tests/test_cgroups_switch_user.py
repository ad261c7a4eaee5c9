"""The cgroups isolators with a command run as another user (``agent.switch_user``).

Joining a cgroup takes root, so the isolators' ``preexec`` functions must run before the
containerizer drops to the task's user: a command run as ``nobody`` is still in its
container's cgroups, under its limits. Both ways the containerizer switches are checked:
the forked child dropping after the preexec functions (no exit wrapper), and ``setpriv``
under the exit wrapper, which stays root in the same cgroups.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from mezzo.agent.containerizer import Containerizer
from mezzo.agent.users import resolve
from mezzo_isolator_cgroups import v1

MB = 1024 * 1024


def _uid(pid: int) -> int:
    """The real uid of ``pid`` (-1 if it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("Uid:"))
    except (OSError, StopIteration):
        return -1


@pytest.mark.parametrize("exit_wrapper", [False, True], ids=["dropped-in-child", "setpriv-under-wrapper"])
def test_a_command_run_as_nobody_is_in_its_cgroups_under_its_limits(cgroot, harness, tmp_path, exit_wrapper):
    cpu, mem = harness.cpu(cgroot), harness.mem(cgroot)
    containerizer = Containerizer([mem, cpu])
    nobody = resolve("nobody")

    async def main():
        c = harness.container(
            ["/bin/sh", "-c", "id -u > who; cat /proc/self/cgroup > cgroups; exec sleep 30"],
            "cpus:0.5;mem:64",
        )
        c.launch.user = nobody
        os.chown(c.sandbox, nobody.uid, nobody.gid)  # the agent gives the sandbox to the user
        box = Path(c.sandbox)
        exit_file = str(tmp_path / f"{c.container_id}.mezzo-exit") if exit_wrapper else None
        running = await containerizer.launch(
            c, stdout=f"{c.sandbox}/stdout", stderr=f"{c.sandbox}/stderr", exit_file=exit_file
        )
        try:
            for _ in range(500):
                if (box / "cgroups").exists() and (box / "cgroups").stat().st_size:
                    break
                await asyncio.sleep(0.01)
            assert (box / "who").read_text() == f"{nobody.uid}\n", (box / "stderr").read_text()
            memory = harness.cgroup("memory", cgroot, c)
            members = {pid: _uid(pid) for pid in v1.procs(memory)}
            # The command, as nobody, is in the container's memory cgroup; under the exit
            # wrapper so is the wrapper, as root.
            assert sorted(members.values()) == ([0, nobody.uid] if exit_wrapper else [nobody.uid]), members
            assert sorted(v1.procs(harness.cgroup("cpu", cgroot, c))) == sorted(members)
            assert f"/{cgroot}/{c.container_id}" in (box / "cgroups").read_text()
            usage = {**await cpu.usage(c), **await mem.usage(c)}
            assert (usage["cpu_shares"], usage["mem_limit_bytes"]) == (512, 64 * MB)
            assert (box / "stdout").stat().st_uid == nobody.uid
        finally:
            await harness.end(containerizer, c, running)

    asyncio.run(main())
