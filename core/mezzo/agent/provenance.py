"""Which journaled processes a restarted agent takes for its containers', and so may signal.

The journal names each container's first process (its leader) by pid and start time
(``/proc/<pid>/stat`` field 22). The start time tells that process from a later one
reusing its pid (:func:`.posix.identify`: adoption and :func:`.posix.kill_tree` leave a
reused pid alone), but not from a process the agent never started: ``/proc`` is
world-readable, so a journal the agent did not write can name any process with its true
start time, or the pid of a session leader that exited while its session lives on (a
daemon's), whose members :func:`.posix.kill_tree` would kill as the container's leftovers.
The work dir's checks (:mod:`.work_dir`) keep anyone else from writing the journal; this
is the second line::

    for left in disown_strangers(state, work_dir):     # before planning the recovery
        log.warning("...", pid=left.pid, why=left.why)

A journaled container is tied to what the agent started when:

- its sandbox is where this agent puts it (:meth:`.Sandbox.path_for` under its work dir);
  otherwise the entry is marked damaged: recovery does not take it back and fails its tasks;
- its leader, if alive with the journaled start time, leads its own session (every
  container's leader is started with ``start_new_session``) and works in that sandbox
  (the exit wrapper leading a checkpointed container never changes directory);
- its leader, if gone, left only processes of the container in its session and process
  group: each works in the sandbox or carries ``MEZZO_SANDBOX`` naming it in its
  environment, which the container's processes inherit.

A container that is not tied keeps no pid: nothing signals or adopts the process, and
recovery carries on as for a container journaled without one (it looks for its leader in
its sandbox). :func:`disown_strangers` returns one :class:`Stranger` for each, for the log.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from . import posix
from .checkpoint import CheckpointState, ContainerEntry, ExecutorEntry, TaskEntry
from .sandbox import InvalidId, Sandbox, check_id

SANDBOX_VARIABLE = "MEZZO_SANDBOX"
"""The environment variable naming its sandbox that every container's processes inherit."""


@dataclass(frozen=True)
class Stranger:
    """A journaled container the agent leaves alone: what the journal says and why."""

    framework_id: str
    what: str
    """``task T`` or ``executor E``."""
    pid: int
    """The pid journaled (0: none)."""
    why: str
    misplaced: bool
    """Its sandbox is not the agent's: the entry is marked damaged, not only its pid dropped."""


def disown_strangers(state: CheckpointState, work_dir: str) -> list[Stranger]:
    """Drop from ``state`` every journaled pid that cannot be tied to a container this agent
    started under ``work_dir``, and mark damaged each entry whose sandbox is not where the
    agent puts it (see the module docstring). Returns what was left alone and why. Looks at
    ``/proc``; never signals anything."""
    work = os.path.abspath(work_dir)
    table: dict[int, posix.ProcessEntry] = {}

    def processes() -> dict[int, posix.ProcessEntry]:
        if not table:
            table.update(posix.process_table())  # read once, and only if a leader is gone
        return table

    entries: list[tuple[str, str, ContainerEntry, TaskEntry | ExecutorEntry]] = [
        (fid, tid, t.container, t) for (fid, tid), t in state.tasks.items() if t.container is not None
    ]
    entries += [(fid, eid, ex.container, ex) for (fid, eid), ex in state.executors.items()]
    out: list[Stranger] = []
    for fid, ident, container, entry in entries:
        what = f"executor {ident}" if isinstance(entry, ExecutorEntry) else f"task {ident}"
        home, misplaced = _home(work, fid, ident, container)
        why = misplaced or (
            _untied(container.pid, container.start_time, home, processes) if container.pid else None
        )
        if why is None:
            continue
        out.append(Stranger(fid, what, container.pid, why, misplaced is not None))
        container.pid, container.start_time = 0, 0
        if misplaced is not None:
            entry.damaged = entry.damaged or misplaced
    return out


def is_sandbox(path: str, work_dir: str) -> bool:
    """True if ``path`` is laid out as a sandbox under ``work_dir`` (where recovery may look
    for a container's leader by its working directory)."""
    work = os.path.abspath(work_dir)
    rel = os.path.relpath(path, work).split(os.sep) if path else []
    if len(rel) != 6 or rel[0] != "frameworks" or rel[2] != "executors" or rel[4] != "runs":
        return False
    try:
        return Sandbox.path_for(work, rel[1], rel[3], rel[5]) == path
    except InvalidId:
        return False


def _home(work: str, framework_id: str, ident: str, container: ContainerEntry) -> tuple[str, str | None]:
    """Where the container's processes work: its sandbox, or (for an entry rebuilt from a
    ``pid`` record alone, container id unknown) the ``runs`` directory above its sandboxes;
    and why the entry's sandbox is not the agent's, if it is not."""
    try:
        check_id("framework id", framework_id)
        check_id("executor id", ident)
        if not container.container_id:
            if container.sandbox:
                return "", f"its sandbox {container.sandbox!r} has no container id"
            return os.path.realpath(
                os.path.join(work, "frameworks", framework_id, "executors", ident, "runs")
            ), None
        expected = Sandbox.path_for(work, framework_id, ident, container.container_id)
    except InvalidId as exc:
        return "", f"its ids cannot name a sandbox ({exc})"
    if container.sandbox != expected:
        return "", f"its sandbox {container.sandbox!r} is not where this agent puts it ({expected!r})"
    return os.path.realpath(expected), None


def _untied(
    pid: int, start_time: int, home: str, processes: Callable[[], dict[int, posix.ProcessEntry]]
) -> str | None:
    """Why the process journaled as ``pid`` (started at ``start_time``) is not a container's
    leader working in ``home``, or None: it is, or the pid names a later process (which
    adoption and :func:`.posix.kill_tree` tell by its start time and leave alone)."""
    if pid <= 1 or pid == os.getpid():
        return f"pid {pid} cannot lead a container"
    entry = posix.read_stat(pid)
    if entry is None or entry.state in ("Z", "X"):
        return _leftovers_problem(pid, home, processes())
    if entry.start_time != start_time:
        return None
    if entry.session != pid:
        return (
            f"it does not lead its own session (its session is {entry.session}), as a container's leader does"
        )
    cwd = posix.working_dir(pid)
    if not _inside(cwd, home):
        return f"it works in {cwd or '(unreadable)'!r}, not in the container's sandbox {home!r}"
    return None


def _leftovers_problem(leader: int, home: str, table: dict[int, posix.ProcessEntry]) -> str | None:
    """Why the processes left in the session and group of ``leader`` (gone), which would be
    killed as the container's leftovers, are not all the container's; None if they are (or
    there are none)."""
    for entry in sorted(posix.container_processes(leader, table), key=lambda e: e.pid):
        cwd = posix.working_dir(entry.pid)
        if _inside(cwd, home):
            continue
        named = posix.environment_value(entry.pid, SANDBOX_VARIABLE)
        if named is not None and _inside(os.path.realpath(named), home):
            continue
        return (
            f"its leader is gone and process {entry.pid}, left in its session or group, works in "
            f"{cwd or '(unreadable)'!r} and has no {SANDBOX_VARIABLE} naming the sandbox {home!r}"
        )
    return None


def _inside(path: str, directory: str) -> bool:
    return bool(path) and (path == directory or path.startswith(directory + os.sep))
