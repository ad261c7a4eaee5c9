"""The exit wrapper: the shell that records how a container's command ended.

An agent restarted while a container runs cannot ``wait()`` for it (the container is
not its child), so with checkpointing the containerizer starts the command under a small
``/bin/sh`` script, :data:`EXIT_WRAPPER`, which writes the command's exit status to a
file next to the sandbox (:func:`exit_file_for`) and exits the way the command did::

    argv = exit_wrapped(["/bin/sh", "-c", "make test"], "/work/.../runs/C.mezzo-exit")
    ...                                   # the process runs and ends
    read_exit_file("/work/.../runs/C.mezzo-exit")   # -> 0, 2, -15 (killed by SIGTERM), or None

Trust. When the task runs as another user (``agent.switch_user``) the wrapper still runs
as the agent's user (root) and only the command runs as the task's user (the
containerizer puts ``setpriv`` between them). So that user can neither signal the wrapper
nor write its file: the file is in the ``runs`` directory above the sandbox, which is the
agent's and 0711, not in the sandbox, which is the user's (a symlink planted there would
have the root wrapper write through it). The status a restarted agent reads is the one
the wrapper saw. The wrapper's one variable of its own that it does not set from its
arguments, ``__mezzo_signal``, is cleared first: the task's environment could hold it.

Signals. The wrapper leads the container's session, so a signal to the process group
reaches it as well as the command. It traps HUP, INT and TERM to outlive them, and a trap
of a shell only runs once the foreground command has ended; so a command that handles
SIGTERM gets to finish, and the wrapper then exits with its status. Two moments when a
signal could be lost are handled here:

- *Before the command starts.* A signal that arrives after the traps are set but before
  the command is started is recorded, and the command is then not started at all: the
  wrapper records ``128 + N`` and dies of that signal. (Before the traps are set, the
  shell's default action kills the wrapper, which ends the container as well.)
- *While the command's process is being forked.* A forked child starts with the
  wrapper's signal handlers, and until it has reset them a signal that reaches it is
  taken by the shell's handler and then forgotten: the command never sees it. No shell
  can close that gap (it cannot block signals around a fork), so the agent waits for
  it to pass before it sends SIGTERM: :func:`signals_reach_command` tells, from
  ``/proc``, whether a signal to the group now reaches the command
  (:meth:`~mezzo.agent.containerizer.RunningContainer.terminate` uses it).

SIGKILL of the group kills the wrapper before it writes anything: no exit file means
"killed". The command runs with the default disposition of every signal (exec resets
caught ones, and the subshell of :data:`SHELL_EXIT_WRAPPER` resets its traps). The cost
is one more ``/bin/sh`` process per container; the shell also notes a command killed by
a signal ("Terminated") on the container's stderr.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass

from . import posix
from .work_dir import open_no_follow

EXIT_FILE = ".mezzo-exit"
"""Where, in its sandbox, agents before :func:`exit_file_for` had a container's exit status
recorded (still read for containers such an agent launched, see :mod:`.container_run`)."""
EXIT_SUFFIX = ".mezzo-exit"


def exit_file_for(sandbox: str) -> str:
    """Where the exit wrapper of the container in ``sandbox`` records its status:
    ``runs/<container_id>.mezzo-exit``, beside the sandbox in a directory only the agent
    may write (see the module docstring)."""
    return os.path.normpath(sandbox) + EXIT_SUFFIX


def _exit_wrapper(start: str, *, before_start: str = "") -> str:
    """The wrapper script around ``start``, the shell text that runs the command.

    ``before_start`` is shell text run between setting the traps and deciding whether
    to start the command: empty in production, a hook for tests to stop the wrapper at
    that moment."""
    return f"""__mezzo_signal=; trap '__mezzo_signal=1' HUP; trap '__mezzo_signal=2' INT; trap '__mezzo_signal=15' TERM
__mezzo_exit_file=$1; shift
{before_start}
if [ -z "$__mezzo_signal" ]; then {start}; __mezzo_status=$?; else __mezzo_status=$((128 + __mezzo_signal)); fi
echo $__mezzo_status >"$__mezzo_exit_file"
case $__mezzo_status in 129|130|137|138|140|141|142|143) trap - HUP INT TERM; kill -$((__mezzo_status - 128)) $$;; esac
exit $__mezzo_status"""


_START_ARGV = '"$@"'
_START_SHELL = '(__mezzo_command=$1; shift; unset __mezzo_exit_file; eval "$__mezzo_command")'

EXIT_WRAPPER = _exit_wrapper(_START_ARGV)
"""``/bin/sh -c EXIT_WRAPPER mezzo-exit FILE ARGV...``: runs ARGV and writes its exit status
to FILE; a command killed by one of the common signals makes the wrapper die of the same
signal, so the agent that started it sees the same return code as without the wrapper.
See the module docstring for signals."""

SHELL_EXIT_WRAPPER = _exit_wrapper(_START_SHELL)
"""``/bin/sh -c SHELL_EXIT_WRAPPER /bin/sh FILE COMMAND``: :data:`EXIT_WRAPPER` for a
shell command (what ``/bin/sh -c COMMAND`` would run). COMMAND runs in a subshell of
the wrapper, a fork without an exec, instead of in a second ``/bin/sh``: that second
shell cost about 1 ms of CPU per task and a third of the short-task throughput
(``bench/short_tasks.py``). The subshell resets the wrapper's traps, so COMMAND sees
default signal dispositions, ``$0`` is ``/bin/sh`` and there are no positional
parameters, as under ``/bin/sh -c``. Differences a command can notice: shell
errors read ``eval: ...`` and the variable ``__mezzo_command`` is set.
"""


def exit_wrapped(argv: Sequence[str], exit_file: str) -> list[str]:
    """``argv`` under the exit wrapper that writes its status to ``exit_file``."""
    if len(argv) == 3 and argv[0] == "/bin/sh" and argv[1] == "-c":
        return ["/bin/sh", "-c", SHELL_EXIT_WRAPPER, "/bin/sh", exit_file, argv[2]]
    return ["/bin/sh", "-c", EXIT_WRAPPER, "mezzo-exit", exit_file, *argv]


_RERAISED = {129: -1, 130: -2, 137: -9, 138: -10, 140: -12, 141: -13, 142: -14, 143: -15}


def read_exit_file(path: str) -> int | None:
    """The return code recorded in an exit file (negative: the wrapper died of that
    signal, as :data:`EXIT_WRAPPER` does), or None if there is none or it is unreadable."""
    try:
        with os.fdopen(open_no_follow(path), "rb") as f:
            text = f.read(32)
        status = int(text.strip())
    except (OSError, ValueError):
        return None
    return _RERAISED.get(status, status)


# -- when a signal to the group reaches the command --------------------------------

FORK_WINDOW_MAX = 0.5
"""Seconds after which a child of the wrapper is taken to have reset the wrapper's handlers
whatever ``/proc`` says (a command that traps exactly what the wrapper traps looks, to
``/proc``, like a child that has not reset them yet; resetting takes microseconds)."""

_TERM = 1 << (signal.SIGTERM - 1)


@dataclass(frozen=True)
class ProcessSignals:
    """What ``/proc`` says about one process, as far as :func:`signals_reach_command` cares."""

    caught: int
    """Bit ``N - 1`` set when the process catches signal N (``SigCgt``)."""
    exe: str
    """The program it runs (``/proc/<pid>/exe``; empty if unreadable)."""
    has_children: bool
    age: float
    """Seconds since it started."""

    @classmethod
    def of(cls, pid: int) -> ProcessSignals | None:
        """Read them for ``pid``; None when it is gone."""
        caught = posix.caught_signals(pid)
        entry = posix.read_stat(pid)
        if caught is None or entry is None or entry.state in ("Z", "X"):
            return None
        return cls(
            caught=caught,
            exe=posix.executable(pid),
            has_children=bool(posix.children(pid)),
            age=posix.age(entry),
        )


def signals_reach_command(wrapper: ProcessSignals | None, children: Sequence[ProcessSignals]) -> bool:
    """Whether a signal sent now to the process group of a container led by the exit
    wrapper reaches its command, rather than being taken by the wrapper's handlers.

    ``wrapper`` is the container's leader (None once it is gone), ``children`` its child
    processes. Pure: the caller reads ``/proc`` (:meth:`ProcessSignals.of`). The answer
    only turns from False to True as the wrapper goes on (once True, it stays True), so
    acting on a True answer a little later is safe:

    - no wrapper: nothing is left to take the signal;
    - the wrapper does not catch SIGTERM yet: its traps are not set and it would die of
      the signal; but by the time the signal arrives it may have moved on to forking the
      command, so wait;
    - no child: the command is not started yet (or has ended and the wrapper is exiting);
    - each child must have left the fork window: it catches other signals than the
      wrapper does, runs another program, has children of its own (it ran commands, so it
      has reset its handlers) or is older than :data:`FORK_WINDOW_MAX`.
    """
    if wrapper is None:
        return True
    if not wrapper.caught & _TERM:
        return False
    if not children:
        return False
    return all(_left_fork_window(child, wrapper) for child in children)


def _left_fork_window(child: ProcessSignals, wrapper: ProcessSignals) -> bool:
    return (
        child.caught != wrapper.caught
        or child.exe != wrapper.exe
        or child.has_children
        or child.age >= FORK_WINDOW_MAX
    )


def command_reachable(leader: int) -> bool:
    """:func:`signals_reach_command` for the container led by ``leader``, read from ``/proc``."""
    wrapper = ProcessSignals.of(leader)
    if wrapper is None:
        return True
    children = [s for s in (ProcessSignals.of(pid) for pid in posix.children(leader)) if s is not None]
    return signals_reach_command(wrapper, children)
