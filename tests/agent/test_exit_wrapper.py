"""The exit wrapper (``containerizer.exit_wrapped``) records a container's exit status
for a restarted agent and otherwise behaves like running the command directly: same
return code, same signal deaths, same shell environment for shell commands."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from mezzo.agent.containerizer import exit_wrapped, read_exit_file
from mezzo.agent.exit_wrapper import command_reachable


def run(argv, tmp_path, **kw):
    exit_file = tmp_path / "exit"
    proc = subprocess.run(exit_wrapped(argv, str(exit_file)), capture_output=True, text=True, timeout=10, **kw)
    return proc, read_exit_file(str(exit_file))


@pytest.mark.parametrize("argv", [["/bin/sh", "-c", "echo out; echo err >&2; exit 3"],
                                  ["sh", "-c", "echo out; echo err >&2; exit 3"]])
def test_exit_status_and_output_are_those_of_the_command(argv, tmp_path):
    proc, recorded = run(argv, tmp_path)
    assert (proc.returncode, recorded) == (3, 3)
    assert (proc.stdout, proc.stderr) == ("out\n", "err\n")


def test_a_shell_command_sees_the_environment_of_sh_c(tmp_path):
    proc, recorded = run(["/bin/sh", "-c", 'echo "$0" "$#"; trap'], tmp_path)
    assert recorded == 0
    # $0 as under `/bin/sh -c`, no positional parameters, and none of the wrapper's traps.
    assert proc.stdout == "/bin/sh 0\n"


def test_a_program_that_cannot_be_found_is_the_shell_s_127(tmp_path):
    proc, recorded = run(["/bin/sh", "-c", "no-such-program-xyz"], tmp_path)
    assert (proc.returncode, recorded) == (127, 127)
    assert "no-such-program-xyz: not found" in proc.stderr


@pytest.mark.parametrize("shell", [True, False])
def test_a_command_killed_by_a_signal_kills_the_wrapper_with_it(shell, tmp_path):
    exit_file = tmp_path / "exit"
    argv = ["/bin/sh", "-c", "sleep 30"] if shell else ["sleep", "30"]
    proc = subprocess.Popen(exit_wrapped(argv, str(exit_file)), start_new_session=True,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    # Until the command's process has reset the wrapper's handlers, a signal would be
    # taken by the wrapper's shell code in it and lost (test_kill_window.py).
    while not (_children(proc.pid) and command_reachable(proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=10) == -signal.SIGTERM
    assert read_exit_file(str(exit_file)) == -signal.SIGTERM


def test_a_command_that_handles_sigterm_finishes_with_its_own_status(tmp_path):
    exit_file = tmp_path / "exit"
    ready = tmp_path / "ready"
    cmd = f"trap 'exit 7' TERM; touch {ready}; while :; do sleep 0.05; done"
    proc = subprocess.Popen(exit_wrapped(["/bin/sh", "-c", cmd], str(exit_file)), start_new_session=True)
    deadline = time.monotonic() + 10
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=10) == 7
    assert read_exit_file(str(exit_file)) == 7


def _children(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return f.read().split()
    except OSError:
        return []
