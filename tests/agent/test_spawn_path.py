"""Where the containerizer forks: a launch that only execs the local shell starts on the
event loop (vfork, no thread); anything with a preexec function, a user to become, an
isolator's wrapper or another program goes to the spawner threads. Both paths start
the same process, and fail the same way."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from mezzo.agent.containerizer import Containerizer, LaunchError, read_exit_file, spawns_on_loop
from mezzo.agent.exit_wrapper import exit_wrapped
from mezzo.hookspecs import Container, ContainerLaunch, RunAs
from mezzo.resources import Resources

SHELL = ["/bin/sh", "-c", "echo hi"]


def _launch(argv, **kw) -> ContainerLaunch:
    return ContainerLaunch(
        argv=list(argv), env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, cwd="/", **kw
    )


@pytest.mark.parametrize(
    ("argv", "launch", "become_user", "expected"),
    [
        (SHELL, _launch(SHELL), None, True),
        (exit_wrapped(SHELL, "/x.mezzo-exit"), _launch(SHELL), None, True),
        # The wrapper checks a program other than the shell first (a stat, maybe on NFS).
        (exit_wrapped(["/usr/bin/env"], "/x.mezzo-exit"), _launch(["/usr/bin/env"]), None, False),
        (["/usr/bin/env"], _launch(["/usr/bin/env"]), None, False),
        (SHELL, _launch(SHELL, preexec=[lambda: None]), None, False),
        (SHELL, _launch(SHELL), RunAs(name="nobody", uid=65534, gid=65534, groups=(), home="/"), False),
        (
            ["/usr/bin/lxc-execute", "--", *SHELL],
            _launch(SHELL, wrapper=["/usr/bin/lxc-execute", "--"]),
            None,
            False,
        ),
    ],
    ids=[
        "shell",
        "wrapped-shell",
        "wrapped-program",
        "program",
        "preexec",
        "become-user",
        "isolator-wrapper",
    ],
)
def test_only_a_plain_exec_of_the_shell_spawns_on_the_loop(argv, launch, become_user, expected):
    assert spawns_on_loop(argv, launch, become_user) is expected


def _container(box: str, cid: str, launch: ContainerLaunch) -> Container:
    return Container(
        container_id=cid, framework_id="f", executor_id="e", resources=Resources(), sandbox=box, launch=launch
    )


def _spawn_threads() -> set[int]:
    """The spawner threads alive now (another test's may still be winding down)."""
    return {t.ident or 0 for t in threading.enumerate() if t.name.startswith("mezzo-spawn")}


def test_a_shell_task_starts_without_a_thread_and_a_preexec_one_on_a_spawner_thread(tmp_path):
    async def main():
        box = str(tmp_path)
        containerizer = Containerizer([])
        before = _spawn_threads()
        try:
            exit_file = f"{box}/c1.mezzo-exit"
            launch = ContainerLaunch(argv=["/bin/sh", "-c", "echo hi; exit 3"], env={}, cwd=box)
            running = await containerizer.launch(
                _container(box, "c1", launch), stdout=f"{box}/out", stderr=f"{box}/err", exit_file=exit_file
            )
            assert _spawn_threads() <= before, "a shell launch starts no spawner thread"
            assert await running.wait() == 3
            assert read_exit_file(exit_file) == 3
            assert open(f"{box}/out").read() == "hi\n"

            marker = f"{box}/preexec-ran"
            launch = ContainerLaunch(
                argv=["/bin/sh", "-c", "echo there"],
                env={},
                cwd=box,
                preexec=[lambda: os.close(os.open(marker, os.O_CREAT | os.O_WRONLY, 0o600))],
            )
            running = await containerizer.launch(
                _container(box, "c2", launch), stdout=f"{box}/out2", stderr=f"{box}/err2"
            )
            assert _spawn_threads() - before, "a launch with a preexec function forks on a spawner thread"
            assert await running.wait() == 0
            assert os.path.exists(marker) and open(f"{box}/out2").read() == "there\n"
        finally:
            containerizer.close()

    asyncio.run(main())


def test_a_launch_that_fails_on_the_loop_is_a_launch_error_naming_the_program(tmp_path):
    async def main():
        box = str(tmp_path)
        containerizer = Containerizer([])
        try:
            launch = ContainerLaunch(argv=["/bin/sh", "-c", "true"], env={}, cwd=f"{box}/missing")
            assert spawns_on_loop(launch.argv, launch, None)
            with pytest.raises(LaunchError, match=r"cannot start '/bin/sh': No such file or directory"):
                await containerizer.launch(
                    _container(box, "c1", launch), stdout=f"{box}/out", stderr=f"{box}/err"
                )
        finally:
            containerizer.close()

    asyncio.run(main())
