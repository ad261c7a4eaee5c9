"""Fixtures for the cgroups isolators' tests, which drive the real kernel.

Tests that need cgroups take the ``cgroot`` fixture: it skips the test (saying
why) when this process cannot manage cgroup v1 (not root, a controller not
mounted), and otherwise hands out a parent cgroup of its own,
``mezzo/test-<pid>-<n>``, so that a test never touches another run's cgroups
(other test runs may share the machine). When the test ends the fixture checks
that nothing is left under it in any hierarchy, removes whatever is (killing its
processes) and fails the test if it had to. A session check does the same for
every ``mezzo/test-<pid>-*`` of this run.

``harness`` builds containers and runs them through mezzo's real containerizer
(prepare, fork and exec with the isolators' ``preexec``, isolate, cleanup).
Handed out as fixtures so the tests work under any pytest import mode.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import sys
import uuid
from pathlib import Path

import pytest

from mezzo.agent.containerizer import Containerizer, RunningContainer
from mezzo.hookspecs import Container, ContainerLaunch
from mezzo.resources import Resources
from mezzo_isolator_cgroups import CpuIsolator, MemIsolator, v1

CONTROLLERS = {
    "cpu": ["cpu.shares", "cpu.stat", "cpu.cfs_quota_us", "cpu.cfs_period_us"],
    "cpuacct": ["cpuacct.usage", "cpuacct.stat"],
    "memory": ["memory.limit_in_bytes", "memory.oom_control", "cgroup.event_control"],
}

try:
    MOUNTS = v1.require(CONTROLLERS)
    UNAVAILABLE = None
except v1.CgroupsUnavailable as exc:
    MOUNTS = {}
    UNAVAILABLE = f"needs cgroup v1 as root: {exc}"

_roots = itertools.count(1)
PREFIX = f"test-{os.getpid()}-"


def _leftovers(root: str) -> dict[str, list[str]]:
    return {
        mount: v1.children(mount, root)
        for mount in dict.fromkeys(MOUNTS.values())
        if v1.children(mount, root)
    }


def _scrub(root: str) -> dict[str, list[str]]:
    """Remove everything under ``root`` (and ``root``); return what was left there."""
    left = _leftovers(root)
    for mount, names in left.items():
        cgs = [v1.Cgroup(mount, os.path.join(mount, root, n)) for n in names]
        asyncio.run(v1.destroy(cgs))
    for mount in dict.fromkeys(MOUNTS.values()):
        v1.remove_if_empty(mount, root)
    return left


@pytest.fixture
def cgroot():
    """A fresh parent cgroup name for this test; skips where cgroups cannot be managed."""
    if UNAVAILABLE:
        pytest.skip(UNAVAILABLE)
    root = f"mezzo/{PREFIX}{next(_roots)}"
    yield root
    left = _scrub(root)
    assert not left, f"the test left cgroups behind under {root}: {left}"


@pytest.fixture(scope="session", autouse=True)
def nothing_left_behind():
    """After every test of this run: no cgroup of ours under any ``mezzo/`` parent."""
    yield
    if UNAVAILABLE:
        return
    left = {}
    for mount in dict.fromkeys(MOUNTS.values()):
        for name in v1.children(mount, "mezzo"):
            if name.startswith(PREFIX):
                left[f"{mount}/mezzo/{name}"] = v1.children(mount, f"mezzo/{name}")
                _scrub(f"mezzo/{name}")
        v1.remove_if_empty(mount, "mezzo")  # fails quietly if another run still uses it
    assert not left, f"cgroups left behind by this test run: {left}"


class Harness:
    """Containers run through the real containerizer with cgroups isolators."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.mounts = MOUNTS

    def cpu(self, root: str, **settings) -> CpuIsolator:
        return CpuIsolator({"root": root, **settings}, key="agent.isolators.cgroups/cpu")

    def mem(self, root: str, **settings) -> MemIsolator:
        return MemIsolator({"root": root, **settings}, key="agent.isolators.cgroups/mem")

    def container(self, argv: list[str], resources: str, container_id: str | None = None) -> Container:
        cid = container_id or uuid.uuid4().hex
        sandbox = self.tmp / cid
        sandbox.mkdir()
        return Container(
            container_id=cid,
            framework_id="fw",
            executor_id=f"task-{cid[:6]}",
            resources=Resources.parse(resources),
            sandbox=str(sandbox),
            launch=ContainerLaunch(argv=list(argv), env=dict(os.environ), cwd=str(sandbox)),
        )

    async def launch(self, containerizer: Containerizer, container: Container) -> RunningContainer:
        return await containerizer.launch(
            container, stdout=f"{container.sandbox}/stdout", stderr=f"{container.sandbox}/stderr"
        )

    async def end(self, containerizer: Containerizer, container: Container, running: RunningContainer) -> int:
        """What the agent does when a container ends: kill the session, wait, clean up."""
        running.kill()
        code = await running.wait()
        errors = await containerizer.destroy(container)
        assert not errors, errors
        return code

    def cgroup(self, controller: str, root: str, container: Container | str) -> v1.Cgroup:
        cid = container if isinstance(container, str) else container.container_id
        return v1.Cgroup.of(self.mounts[controller], controller, root, cid)

    @staticmethod
    def python(code: str) -> list[str]:
        return [sys.executable, "-c", code]

    @staticmethod
    def alive(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
        except OSError:
            return False

    @staticmethod
    def kill(pid: int) -> None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture
def harness(tmp_path):
    return Harness(tmp_path)


SPINNER = (
    "import os, sys\nif len(sys.argv) > 1: os.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass"
)
HOG = "b = []\nwhile True: b.append(b'x' * (1 << 20))"


@pytest.fixture
def programs():
    """Small Python programs: ``spinner`` (CPU-bound; argv[1] pins it to that CPU) and
    ``hog`` (allocates and touches 1 MB after 1 MB until killed)."""
    return {"spinner": SPINNER, "hog": HOG}
