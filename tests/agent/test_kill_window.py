"""A kill sent just after a container starts reaches its command (``exit_wrapper``).

The exit wrapper traps HUP, INT and TERM. A SIGTERM that arrives after its traps are set
but before the command started, or while the command's process is being forked (the child
still runs the wrapper's handlers), used to be swallowed: the task then ran until the kill
grace period ran out. The wrapper now records a signal that arrives before it starts the
command and does not start it; the agent sends SIGTERM only once it would reach the
command (:func:`signals_reach_command`). The rules first, then real processes stopped at
each of those moments, then many kills right after launch.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time

import pytest
from agent_harness import FRAMEWORK, ScriptedMaster, agent_config, command_task, name, run, running_agent

from mezzo.agent import exit_wrapper
from mezzo.agent.containerizer import RunningContainer
from mezzo.agent.exit_wrapper import (
    ProcessSignals,
    _exit_wrapper,
    command_reachable,
    read_exit_file,
    signals_reach_command,
)
from mezzo.hookspecs import Container, ContainerLaunch
from mezzo.resources import Resources

TRAPS = (1 << 0) | (1 << 1) | (1 << 14) | (1 << 16)  # HUP, INT, TERM (the wrapper's traps) and CHLD
SH = "/usr/bin/dash"


def proc(caught: int = TRAPS, exe: str = SH, has_children: bool = False, age: float = 0.0) -> ProcessSignals:
    return ProcessSignals(caught=caught, exe=exe, has_children=has_children, age=age)


# -- the rules of signals_reach_command ----------------------------------------------


def test_a_container_whose_wrapper_is_gone_has_nothing_left_to_swallow_a_signal():
    assert signals_reach_command(None, [])


def test_a_wrapper_that_has_not_set_its_traps_yet_is_waited_for():
    # It would die of SIGTERM now, but may be forking the command by the time it arrives.
    assert not signals_reach_command(proc(caught=1 << 16), [])


def test_a_wrapper_that_has_not_started_its_command_is_waited_for():
    assert not signals_reach_command(proc(), [])


def test_a_child_that_still_runs_the_wrapper_s_handlers_is_in_the_fork_window():
    assert not signals_reach_command(proc(), [proc()])


def test_a_child_that_reset_the_wrapper_s_handlers_gets_the_signal():
    assert signals_reach_command(proc(), [proc(caught=1 << 16)])


def test_a_child_running_another_program_gets_the_signal():
    assert signals_reach_command(proc(), [proc(exe="/usr/bin/sleep")])


def test_a_child_with_children_of_its_own_has_run_commands_so_it_reset_its_handlers():
    # A shell command that traps exactly what the wrapper traps looks like the fork window...
    assert signals_reach_command(proc(), [proc(has_children=True)])


def test_a_child_older_than_the_fork_window_gets_the_signal():
    # ... and so does one old enough: resetting the handlers takes microseconds.
    assert signals_reach_command(proc(), [proc(age=exit_wrapper.FORK_WINDOW_MAX)])


# -- real processes, stopped at each moment ------------------------------------------


def _wrapper(tmp_path, start: str = '"$@"', before_start: str = "") -> tuple[subprocess.Popen, str]:
    exit_file = str(tmp_path / "exit")
    script = _exit_wrapper(start, before_start=before_start)
    process = subprocess.Popen(["/bin/sh", "-c", script, "mezzo-exit", exit_file, "sh", "-c",
                                f"touch {tmp_path}/started; sleep 30"],
                               start_new_session=True, stderr=subprocess.DEVNULL)
    return process, exit_file


def _wait_stopped(pid: int) -> None:
    deadline = time.monotonic() + 10
    while _state(pid) != "T":
        assert time.monotonic() < deadline, "the wrapper did not stop"
        time.sleep(0.005)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rpartition(")")[2].split()[0]


def test_a_sigterm_after_the_traps_but_before_the_command_ends_the_wrapper_at_once(tmp_path):
    # The wrapper stops itself between setting its traps and starting the command; the
    # SIGTERM waits for it, pending, and is taken when it goes on.
    process, exit_file = _wrapper(tmp_path, before_start="kill -STOP $$")
    _wait_stopped(process.pid)
    os.killpg(process.pid, signal.SIGTERM)
    os.killpg(process.pid, signal.SIGCONT)
    assert process.wait(timeout=5) == -signal.SIGTERM
    assert read_exit_file(exit_file) == -signal.SIGTERM
    assert not (tmp_path / "started").exists()  # the command was never started


def test_the_agent_waits_for_a_command_being_started_before_it_sends_sigterm(tmp_path):
    # The wrapper stops itself after deciding to start the command: a SIGTERM now would be
    # taken by the wrapper alone and the command would run its 30 s. terminate() waits
    # until the command exists with its own handlers, then signals it.
    async def main():
        process, exit_file = _wrapper(tmp_path, start='kill -STOP $$; "$@"')
        _wait_stopped(process.pid)
        box = str(tmp_path)
        container = Container(container_id="c1", framework_id="f", executor_id="e", resources=Resources(),
                              sandbox=box, launch=ContainerLaunch(argv=["sh"], env={}, cwd=box), pid=process.pid)
        running = RunningContainer(container, process, exit_file=exit_file)
        running.terminate()
        await asyncio.sleep(0.1)
        assert process.poll() is None and not (tmp_path / "started").exists()  # nothing sent yet
        os.kill(process.pid, signal.SIGCONT)
        t0 = time.monotonic()
        assert await asyncio.wait_for(running.wait(), 5) == -signal.SIGTERM
        assert time.monotonic() - t0 < 2
        assert read_exit_file(exit_file) == -signal.SIGTERM

    run(main())


FORK_WINDOW = r"""
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: None)  # the leader's handler, as the wrapper's trap
release_r, release_w = os.pipe()
pid = os.fork()
if pid == 0:
    os.read(release_r, 1)  # still with the leader's handlers: the fork window
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    print("reset", flush=True)
    time.sleep(30)
    os._exit(0)
print(pid, flush=True)
sys.stdin.readline()
os.write(release_w, b"x")
os.waitpid(pid, 0)
"""


def test_command_reachable_reads_the_fork_window_from_proc(monkeypatch):
    monkeypatch.setattr(exit_wrapper, "FORK_WINDOW_MAX", 60.0)  # however slow the machine is today
    leader = subprocess.Popen([sys.executable, "-c", FORK_WINDOW], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    try:
        child = int(leader.stdout.readline())
        assert not command_reachable(leader.pid)
        leader.stdin.write("go\n")
        leader.stdin.flush()
        assert leader.stdout.readline().strip() == "reset"
        assert command_reachable(leader.pid)
        os.kill(child, signal.SIGTERM)
        assert leader.wait(timeout=5) == 0
        assert command_reachable(leader.pid)  # gone
    finally:
        if leader.poll() is None:
            os.killpg(leader.pid, signal.SIGKILL)
            leader.wait()


# -- many kills right after launch ---------------------------------------------------


@pytest.mark.parametrize("shell", [True, False])
def test_tasks_killed_as_they_start_end_well_before_the_grace_period(tmp_path, shell):
    # Kills at random moments of the first milliseconds of 40 tasks: before the process
    # exists, as the wrapper starts, as it forks the command. Each must end by SIGTERM,
    # not by the SIGKILL of the 10 s grace period.
    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(tmp_path, master.address, kill_grace_period=10.0)):
            ids = [f"t{i:02d}" for i in range(40)]
            t0 = time.monotonic()
            for tid in ids:
                task = command_task(tid, "sleep 30") if shell else \
                    command_task(tid, "sleep", arguments=["30"], shell=False)
                master.agent.run_task(FRAMEWORK, task)
                await asyncio.sleep(random.uniform(0, 0.004))
                master.agent.kill_task("fw-1", tid)
            for tid in ids:
                final = await master.wait_final(tid, timeout=15)
                assert name(final.state) == "TASK_KILLED", final
            assert time.monotonic() - t0 < 8
        await master.close()

    run(main(), timeout=60)
