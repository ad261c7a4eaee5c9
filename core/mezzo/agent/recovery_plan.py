"""What a restarted agent does with what its checkpoint holds: a pure recovery plan.

:func:`plan_recovery` takes the replayed journal (:class:`~.checkpoint.CheckpointState`)
and what the agent found alive on the host, and returns a :class:`RecoveryPlan`: which
containers to kill, which executors and command tasks to take back, which tasks to
fail and why, which update streams to restore, what to forget. It has no side effects;
:meth:`Agent._recover <mezzo.agent.agent.Agent>` carries the plan out::

    leaders = posix.session_leaders_in(unrecorded_sandboxes(state))   # the one look at the host
    plan = plan_recovery(state, found={sandbox: leaders[...] ...})

Rules, in the order they apply:

1. *Unrecorded pids.* A container journaled without a pid (the agent died while
   launching it) whose leader was found in its sandbox is taken to be that process
   (:attr:`RecoveryPlan.found_pids`, journaled).
2. *Frameworks being shut down.* Everything left of them is killed and forgotten;
   nothing is reported (their scheduler asked for it, and nobody acknowledges them).
3. *Executors.* One is taken back with its framework's ``FrameworkInfo``, unless its
   own record or its framework's is damaged or its framework's record is missing: it is
   then killed, and each of its tasks counts as damaged.
4. *Tasks*, each by the first rule that fits:

   a. unacknowledged updates (and the latest update) go back into its stream;
   b. its terminal update was acknowledged: forgotten;
   c. no ``TaskInfo`` and a terminal update being delivered (a rejection): only the stream;
   d. it cannot be taken back (damaged, its record, its framework's, its container's or
      its executor's record missing): its process is killed and it fails with reason
      :data:`CHECKPOINT_UNREADABLE`, unless its end is being reported already; its record
      is kept while that failure is delivered (if its framework is known);
   e. its end is being reported: kept, with nothing running;
   f. a command task: taken back in its container; an executor's task: given back to
      its executor (handed over already, or queued until the executor re-registers).

   A task taken back whose latest update is a TASK_KILLING with a reason (a kill of
   the master's own, a revocation) keeps that reason and message for its end.
5. *Frameworks* left with nothing are forgotten.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from .. import is_terminal
from ..wire.ttypes import ExecutorInfo, FrameworkInfo, TaskInfo, TaskState, TaskStatus
from .checkpoint import EXECUTOR, TASK, CheckpointState, ContainerEntry, TaskEntry

CHECKPOINT_UNREADABLE = "checkpoint_unreadable"
"""``TaskStatus.reason`` of a task that a restarted agent could not take back."""

TaskKey = tuple[str, str]
"""``(framework_id, task_id)``."""


@dataclass(frozen=True)
class FoundPid:
    """The leader of a container journaled without a pid, found on the host."""

    framework_id: str
    ident: str
    """The task id of a command task, the executor id of an executor."""
    kind: str
    """:data:`~.checkpoint.TASK` or :data:`~.checkpoint.EXECUTOR` (as journaled)."""
    container_id: str
    pid: int
    start_time: int


@dataclass(frozen=True)
class Kill:
    """A journaled container the agent does not take back: what is left of it is killed."""

    container: ContainerEntry
    framework_id: str
    what: str
    """``task T`` or ``executor E``, for the log."""


@dataclass(frozen=True)
class ShutDown:
    """A framework that was being shut down: killed (see :attr:`RecoveryPlan.kills`) and forgotten."""

    framework_id: str
    task_ids: list[str]
    executor_ids: list[str]


@dataclass(frozen=True)
class DamagedExecutor:
    """An executor whose checkpoint cannot be used: killed and forgotten, its tasks failed."""

    framework_id: str
    executor_id: str
    why: str


@dataclass
class ExecutorResumption:
    """A custom executor taken back, waiting for its driver to re-register."""

    framework_id: str
    info: ExecutorInfo
    container: ContainerEntry
    tasks: list[tuple[TaskInfo, bool]] = field(default_factory=list)
    """Its unfinished tasks, each with whether it was handed to the executor already."""
    token: str = ""
    """The secret its process registers with (see :attr:`.ExecutorRun.token`)."""


@dataclass(frozen=True)
class CommandResumption:
    """A command task taken back in the container an earlier agent started."""

    framework_id: str
    info: TaskInfo
    container: ContainerEntry
    latest: TaskStatus | None


@dataclass(frozen=True)
class StreamRestoration:
    """A task's update stream as journaled: ``pending`` goes out again, in order."""

    key: TaskKey
    pending: list[TaskStatus]
    seen: set[str]
    latest: TaskStatus | None


@dataclass(frozen=True)
class TaskFailure:
    """A task that cannot be taken back (rule 4d)."""

    key: TaskKey
    info: TaskInfo | None
    problem: str
    """Why, for the log and the TASK_FAILED message."""
    report: bool
    """True: report TASK_FAILED; False: its end is being reported already."""
    keep_record: bool
    """Its record stays (with nothing running) until its end is acknowledged."""
    journal_damaged: bool
    """Its journal entry is marked damaged: the failure settles it."""


@dataclass
class RecoveryPlan:
    """What :func:`plan_recovery` decided; carried out by the agent in field order."""

    agent_id: str = ""
    found_pids: list[FoundPid] = field(default_factory=list)
    shut_down: list[ShutDown] = field(default_factory=list)
    damaged_executors: list[DamagedExecutor] = field(default_factory=list)
    kills: list[Kill] = field(default_factory=list)
    frameworks: dict[str, FrameworkInfo] = field(default_factory=dict)
    """Frameworks taken back (those with something left)."""
    executors: list[ExecutorResumption] = field(default_factory=list)
    command_tasks: list[CommandResumption] = field(default_factory=list)
    streams: list[StreamRestoration] = field(default_factory=list)
    forget_tasks: list[TaskKey] = field(default_factory=list)
    """Reported and acknowledged: nothing left of them."""
    failures: list[TaskFailure] = field(default_factory=list)
    reporting: list[tuple[TaskKey, TaskInfo]] = field(default_factory=list)
    """Tasks whose end is being reported: their record stays, nothing runs."""
    kill_reasons: dict[TaskKey, tuple[str, str]] = field(default_factory=dict)
    forget_frameworks: list[str] = field(default_factory=list)


def unrecorded_sandboxes(state: CheckpointState) -> list[str]:
    """Sandboxes of the containers journaled without a pid: where to look for their leaders."""
    missing = [t.container for t in state.tasks.values() if t.container is not None and not t.container.pid]
    missing += [ex.container for ex in state.executors.values() if not ex.container.pid]
    return [c.sandbox for c in missing]


def plan_recovery(state: CheckpointState, found: Mapping[str, tuple[int, int]] | None = None) -> RecoveryPlan:
    """The plan for ``state`` (not modified). ``found`` maps the sandbox of a container
    journaled without a pid (:func:`unrecorded_sandboxes`) to the ``(pid, start_time)`` of
    the live session leader found in it. See the module docstring for the rules."""
    plan = RecoveryPlan(agent_id=state.agent_id)
    containers = _containers_with_found_pids(state, found or {}, plan)

    # Rule 2: frameworks being shut down.
    gone = set(state.shutting_down)
    for fid in sorted(gone):
        tasks = [tid for (f, tid) in state.tasks if f == fid]
        executors = [eid for (f, eid) in state.executors if f == fid]
        plan.shut_down.append(ShutDown(fid, tasks, executors))
        for tid in tasks:
            _kill(plan, containers.get((TASK, fid, tid)), fid, f"task {tid}")
        for eid in executors:
            _kill(plan, containers.get((EXECUTOR, fid, eid)), fid, f"executor {eid}")
    known = {fid: info for fid, info in state.frameworks.items() if fid not in gone}

    # Rule 3: executors.
    resumed: dict[tuple[str, str], ExecutorResumption] = {}
    executor_damage: dict[tuple[str, str], str] = {}
    for (fid, eid), ex in state.executors.items():
        if fid in gone:
            continue
        container = containers[(EXECUTOR, fid, eid)]
        why = (
            ex.damaged
            or state.damaged_frameworks.get(fid)
            or (None if fid in known and ex.info is not None else "its framework's record is missing")
        )
        if why is not None:
            plan.damaged_executors.append(DamagedExecutor(fid, eid, why))
            _kill(plan, container, fid, f"executor {eid}")
            executor_damage[(fid, eid)] = why
            continue
        assert ex.info is not None
        resumed[(fid, eid)] = ExecutorResumption(fid, ex.info, container, token=ex.token)
    plan.executors = list(resumed.values())

    # Rule 4: tasks.
    alive: set[str] = {fid for fid, _eid in resumed}
    for key, t in state.tasks.items():
        fid, tid = key
        if fid in gone:
            continue
        decided = _plan_task(
            plan, state, key, t, containers.get((TASK, fid, tid)), known, resumed, executor_damage
        )
        if decided:
            alive.add(fid)

    # Rule 5: frameworks with nothing left.
    plan.frameworks = {fid: info for fid, info in known.items() if fid in alive}
    plan.forget_frameworks = [fid for fid in known if fid not in alive]
    return plan


def _plan_task(
    plan: RecoveryPlan,
    state: CheckpointState,
    key: TaskKey,
    t: TaskEntry,
    container: ContainerEntry | None,
    known: Mapping[str, FrameworkInfo],
    resumed: Mapping[tuple[str, str], ExecutorResumption],
    executor_damage: Mapping[tuple[str, str], str],
) -> bool:
    """Rule 4 for one task; True when the task keeps its framework alive (it has a record)."""
    fid, tid = key
    terminal = t.latest is not None and is_terminal(t.latest.state)
    if terminal and not t.updates:
        plan.forget_tasks.append(key)  # 4b
        return False
    if t.updates or t.latest is not None:
        plan.streams.append(StreamRestoration(key, list(t.updates), set(t.seen), t.latest))  # 4a
    damaged = t.damaged
    if damaged is None and t.executor_id and (fid, t.executor_id) in executor_damage:
        damaged = f"its executor's checkpoint is unusable: {executor_damage[(fid, t.executor_id)]}"
    if t.info is None and damaged is None and terminal:
        return False  # 4c: an answer (e.g. a rejection) still being delivered
    problem = _problem(state, t, damaged, terminal, fid in known, resumed)
    if problem is not None:  # 4d
        if not terminal and container is not None:
            _kill(plan, container, fid, f"task {tid}")
        keep = t.info is not None and fid in known
        plan.failures.append(
            TaskFailure(
                key,
                t.info,
                problem,
                report=not terminal,
                keep_record=keep,
                journal_damaged=t.damaged is not None,
            )
        )
        return keep
    assert t.info is not None
    if terminal:
        plan.reporting.append((key, t.info))  # 4e
        return True
    if not t.executor_id:  # 4f
        assert container is not None
        plan.command_tasks.append(CommandResumption(fid, t.info, container, t.latest))
    else:
        resumed[(fid, t.executor_id)].tasks.append((t.info, t.launched))
    latest = t.latest
    if latest is not None and latest.state == TaskState.TASK_KILLING and latest.reason:
        # A kill of the master's own (revocation) was under way: its end carries the same
        # reason and message (a command task's TASK_KILLING has no message of its own, so
        # that is the kill's). Its grace is not recorded; the agent's own applies.
        plan.kill_reasons[key] = (latest.reason, latest.message or "")
    return True


def _problem(
    state: CheckpointState,
    t: TaskEntry,
    damaged: str | None,
    terminal: bool,
    framework_known: bool,
    resumed: Mapping[tuple[str, str], ExecutorResumption],
) -> str | None:
    """Why a task cannot be taken back (rule 4d), or None."""
    problem = damaged or state.damaged_frameworks.get(t.framework_id)
    if problem is None and t.info is None:
        problem = "its task record is missing from the checkpoint"
    if problem is None and not framework_known:
        problem = "its framework's record is missing"
    if problem is None and not terminal and not t.executor_id and t.container is None:
        problem = "its container's record is missing"
    if problem is None and not terminal and t.executor_id and (t.framework_id, t.executor_id) not in resumed:
        problem = f"its executor {t.executor_id!r} is not in the checkpoint"
    return problem


def _containers_with_found_pids(
    state: CheckpointState, found: Mapping[str, tuple[int, int]], plan: RecoveryPlan
) -> dict[tuple[str, str, str], ContainerEntry]:
    """Every journaled container by ``(kind, framework_id, ident)``, with the pid found on
    the host for those journaled without one (rule 1)."""
    out: dict[tuple[str, str, str], ContainerEntry] = {}
    entries = [
        ((TASK, fid, tid), t.container) for (fid, tid), t in state.tasks.items() if t.container is not None
    ]
    entries += [((EXECUTOR, fid, eid), ex.container) for (fid, eid), ex in state.executors.items()]
    for (kind, fid, ident), c in entries:
        leader = found.get(c.sandbox) if not c.pid else None
        if leader is not None:
            c = replace(c, pid=leader[0], start_time=leader[1])
            plan.found_pids.append(FoundPid(fid, ident, kind, c.container_id, c.pid, c.start_time))
        out[(kind, fid, ident)] = c
    return out


def _kill(plan: RecoveryPlan, container: ContainerEntry | None, framework_id: str, what: str) -> None:
    if container is not None and container.pid:
        plan.kills.append(Kill(container, framework_id, what))
