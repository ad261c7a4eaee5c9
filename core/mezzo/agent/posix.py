"""The ``posix`` isolator and killing a container's process tree without cgroups.

``posix`` enforces nothing: a container's first process is started as the leader
of a new session (``start_new_session=True``), so the container's processes are
that session and process group plus whatever they fork. That is enough to find
and kill them, which is all this module does::

    procs = snapshot(leader_pid)          # before asking the task to stop
    os.killpg(leader_pid, signal.SIGTERM)  # ... grace period ...
    kill_tree(leader_pid, also=procs)      # SIGKILL whatever is left

Error handling: everything here works from ``/proc`` and tolerates processes
vanishing while we look at them. The weak spot of posix isolation is a process
that both leaves the session (``setsid``) and outlives its parent: once it is
re-parented to init nothing links it to the container any more. Taking a
:func:`snapshot` *before* the first signal catches those that had already
escaped; isolators with cgroups close the gap for real.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable
from dataclasses import dataclass

from ..hookspecs import Isolator

PROC = "/proc"


class PosixIsolator(Isolator):
    name = "posix"
    description = "no enforcement: each container is its own session and process group"


@dataclass(frozen=True)
class ProcessEntry:
    """One line of ``/proc/<pid>/stat``, the fields we need."""

    pid: int
    ppid: int
    pgrp: int
    session: int
    state: str
    start_time: int
    """Clock ticks after boot; with ``pid`` it names a process without reuse ambiguity."""


def read_stat(pid: int) -> ProcessEntry | None:
    """Parse ``/proc/<pid>/stat``; None when the process is gone."""
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except OSError:
        return None
    # The command name is in parentheses and may itself contain ')' and spaces.
    rest = raw.rpartition(")")[2].split()
    try:
        return ProcessEntry(
            pid=pid,
            state=rest[0],
            ppid=int(rest[1]),
            pgrp=int(rest[2]),
            session=int(rest[3]),
            start_time=int(rest[19]),
        )
    except (IndexError, ValueError):
        return None


def process_table() -> dict[int, ProcessEntry]:
    """Every live process on the host (zombies excluded: signalling them is moot)."""
    table: dict[int, ProcessEntry] = {}
    try:
        names = os.listdir(PROC)
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        entry = read_stat(int(name))
        if entry is not None and entry.state not in ("Z", "X"):
            table[entry.pid] = entry
    return table


def container_processes(leader: int, table: dict[int, ProcessEntry] | None = None) -> set[ProcessEntry]:
    """The processes of the container whose first process is ``leader``.

    Members are the leader's session and process group, plus every descendant of
    a member (which catches children that called ``setsid`` while their parent
    is alive). The agent itself is never included.
    """
    table = process_table() if table is None else table
    me = os.getpid()
    members = {pid for pid, e in table.items() if pid == leader or e.pgrp == leader or e.session == leader}
    children: dict[int, list[int]] = {}
    for pid, e in table.items():
        children.setdefault(e.ppid, []).append(pid)
    stack = list(members)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in members:
                members.add(child)
                stack.append(child)
    members.discard(me)
    return {table[pid] for pid in members}


def snapshot(leader: int) -> set[ProcessEntry]:
    """The container's processes right now; pass to :func:`kill_tree` as ``also``."""
    return container_processes(leader)


def signal_group(leader: int, sig: int) -> bool:
    """Send ``sig`` to the process group led by ``leader``; False if it is gone."""
    try:
        os.killpg(leader, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def group_exists(leader: int) -> bool:
    """True while any process is left in the group led by ``leader``."""
    try:
        os.killpg(leader, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def kill_tree(leader: int, also: Iterable[ProcessEntry] = (), start_time: int | None = None) -> int:
    """SIGKILL every process of the container led by ``leader``; returns how many.

    The tree is first frozen with SIGSTOP and re-scanned until no new member
    appears, so a process forking in a loop cannot outrun us. ``also`` holds
    entries from an earlier :func:`snapshot`; each is killed only if the same
    process (pid and start time) is still alive.

    ``start_time`` (of the leader, when known) guards against pid reuse for a
    leader that is not our child: if ``leader`` now names another process,
    nothing of the container can be left (the kernel does not reuse a pid while
    a process still has it as its session or group id) and nothing is killed.
    """
    if start_time is not None and identify(leader, start_time) == OTHER:
        return 0
    me = os.getpid()
    stopped: dict[int, ProcessEntry] = {}
    for _ in range(20):
        table = process_table()
        found = container_processes(leader, table)
        for e in also:
            live = table.get(e.pid)
            if live is not None and live.start_time == e.start_time and e.pid != me:
                found.add(live)
        fresh = [e for e in found if e.pid not in stopped]
        if not fresh:
            break
        for e in fresh:
            stopped[e.pid] = e
            _send(e.pid, signal.SIGSTOP)
    for pid in stopped:
        _send(pid, signal.SIGKILL)
    # Stopped processes die on SIGKILL; SIGCONT is not needed but is harmless
    # for any that a race left stopped and alive.
    for pid in stopped:
        _send(pid, signal.SIGCONT)
    return len(stopped)


SAME = "same"
GONE = "gone"
OTHER = "other"


def identify(pid: int, start_time: int) -> str:
    """Whether the process that started at ``start_time`` as ``pid`` is still alive:
    :data:`SAME`, :data:`GONE` (exited; a zombie counts as exited) or :data:`OTHER`
    (the pid now names a later process)."""
    entry = read_stat(pid)
    if entry is None:
        return GONE
    if entry.start_time != start_time:
        return OTHER
    return GONE if entry.state in ("Z", "X") else SAME


def caught_signals(pid: int) -> int | None:
    """The signals ``pid`` catches, as a bit mask (bit ``N - 1`` for signal N; the
    ``SigCgt`` line of ``/proc/<pid>/status``); None when the process is gone."""
    try:
        with open(f"{PROC}/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"SigCgt:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        return None
    return None


def executable(pid: int) -> str:
    """The program ``pid`` runs (``/proc/<pid>/exe``); empty when unreadable or gone."""
    try:
        return os.readlink(f"{PROC}/{pid}/exe")
    except OSError:
        return ""


def children(pid: int) -> list[int]:
    """The live child processes of ``pid`` (empty when it is gone)."""
    try:
        with open(f"{PROC}/{pid}/task/{pid}/children", "rb") as f:
            return [int(p) for p in f.read().split()]
    except FileNotFoundError:
        if not os.path.exists(f"{PROC}/{pid}"):
            return []
    except (OSError, ValueError):
        pass
    # Kernels without CONFIG_PROC_CHILDREN: scan the table.
    return [e.pid for e in process_table().values() if e.ppid == pid]


def working_dir(pid: int) -> str:
    """Where ``pid`` works (``/proc/<pid>/cwd``, symlinks resolved; `` (deleted)`` appended
    by the kernel if the directory was removed); empty when unreadable or gone."""
    try:
        return os.readlink(f"{PROC}/{pid}/cwd")
    except OSError:
        return ""


def environment_value(pid: int, name: str) -> str | None:
    """The value of ``name`` in the environment ``pid`` was started with
    (``/proc/<pid>/environ``); None when it is not set, unreadable or the process gone."""
    try:
        with open(f"{PROC}/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return None
    prefix = name.encode() + b"="
    for item in data.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix) :].decode("utf-8", "surrogateescape")
    return None


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def age(entry: ProcessEntry) -> float:
    """Seconds since the process of ``entry`` started (0 if the uptime is unreadable)."""
    try:
        with open(f"{PROC}/uptime", "rb") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return max(0.0, uptime - entry.start_time / _CLOCK_TICKS)


def session_leaders_in(directories: Iterable[str]) -> dict[str, ProcessEntry]:
    """Live session leaders whose working directory is one of ``directories``.

    How the agent finds a container whose pid it did not get to record: the
    container's first process leads its own session and starts in its sandbox.
    """
    wanted = {os.path.realpath(d) for d in directories}
    found: dict[str, ProcessEntry] = {}
    if not wanted:
        return found
    for pid, entry in process_table().items():
        if entry.session != pid:
            continue
        try:
            cwd = os.readlink(f"{PROC}/{pid}/cwd")
        except OSError:
            continue
        if cwd in wanted:
            found[cwd] = entry
    return found


def _send(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def describe_exit(returncode: int) -> tuple[int, str]:
    """``(exit status, text)`` for a ``Popen.returncode``: shell convention,
    128 + N for death by signal N."""
    if returncode < 0:
        sig = -returncode
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return 128 + sig, f"killed by signal {name}"
    return returncode, f"exited with status {returncode}"
