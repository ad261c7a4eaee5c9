"""What a checkpoint journal says: :class:`CheckpointState`, built by replaying its records.

Replaying is applying each record in turn (:meth:`CheckpointState.apply`); the live
journal applies every record it writes the same way, so its state is always what a
replay of the file would give. :meth:`CheckpointState.records` is the way back: the
records that rebuild a state from nothing, which is what compaction writes.

The kinds of record and what each changes:

========================  ==================================================================
``boot``                  boot id, agent id, port (first record of every journal)
``agent``                 the agent id the master assigned
``framework``             a framework's ``FrameworkInfo``; ``framework_gone`` forgets it
``shutdown``              the framework is being shut down (its leftovers are killed)
``task``                  a task's ``TaskInfo``: command task (container) or executor's
``launched``              an executor's task was handed to the executor
``pid``                   the pid and start time of a task's or executor's container
``update``                a status update, unacknowledged; ``ack`` acknowledges the oldest
``latest``                the latest update of a task whose updates are all acknowledged
``task_gone``             the task is forgotten
``executor``              a custom executor run; ``executor_gone`` forgets it
========================  ==================================================================

Damage (:func:`replay`): a record whose payload could not be decoded marks the task,
executor or framework its header names as *damaged* (:meth:`CheckpointState.damage`),
so that recovery kills what it can find of it and fails its tasks instead of dropping
them; a record that does not fit what came before it (an ack for a task never recorded)
is ignored. Each becomes a problem, never an exception.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ... import is_terminal
from ...wire.ttypes import ExecutorInfo, FrameworkInfo, TaskInfo, TaskStatus
from .records import DecodedRecord, Problem

TASK = "task"
"""``pid`` records: the container of a command task."""
EXECUTOR = "executor"
"""``pid`` records: the container of a custom executor."""
SEEN_KEPT = 1024
"""Uuids of a task's updates kept to recognise an executor's retries: the most recent
ones (besides the unacknowledged updates, always recognised). An executor retries only
what the agent has not acknowledged to it yet, the last few; keeping every uuid a task
ever had would make a long-lived, chatty task's entry grow with its history (35 bytes
an update, in the journal and in memory)."""


@dataclass
class ContainerEntry:
    """A container the agent started: where it lives and which process leads it."""

    container_id: str
    sandbox: str
    pid: int = 0
    start_time: int = 0
    """``/proc/<pid>/stat`` field 22 (clock ticks after boot); 0 while unknown."""


@dataclass
class TaskEntry:
    """A task the journal holds, until its terminal update is acknowledged."""

    framework_id: str
    task_id: str
    info: TaskInfo | None = None
    """None for a task known only by its updates (e.g. one the agent rejected)."""
    executor_id: str = ""
    """Empty for a command task."""
    launched: bool = False
    """Executor tasks: handed to the executor (``launch_task`` sent)."""
    container: ContainerEntry | None = None
    """Command tasks: their container."""
    updates: list[TaskStatus] = field(default_factory=list)
    """Unacknowledged updates, oldest (the one in flight) first."""
    latest: TaskStatus | None = None
    seen: set[str] = field(default_factory=set)
    """Uuids of the task's most recent updates (at most :data:`SEEN_KEPT`)."""
    damaged: str | None = None
    """Why this entry cannot be trusted (a damaged record named it), else None."""
    seen_order: deque[str] = field(default_factory=deque, repr=False, compare=False)
    """``seen`` oldest first (what goes when it is full)."""
    seen_chars: int = field(default=0, repr=False, compare=False)
    """Characters of the uuids in ``seen_order`` (to size the journal without encoding them)."""

    def saw(self, uuid: str) -> None:
        """Remember ``uuid``, forgetting the oldest beyond :data:`SEEN_KEPT`."""
        if uuid in self.seen:
            return
        self.seen.add(uuid)
        self.seen_order.append(uuid)
        self.seen_chars += len(uuid)
        if len(self.seen_order) > SEEN_KEPT:
            oldest = self.seen_order.popleft()
            self.seen.discard(oldest)
            self.seen_chars -= len(oldest)


@dataclass
class ExecutorEntry:
    """A custom executor run the journal holds."""

    framework_id: str
    executor_id: str
    info: ExecutorInfo | None
    container: ContainerEntry
    damaged: str | None = None
    token: str = ""
    """The secret its process registers with ("" in journals older than tokens)."""


@dataclass
class CheckpointState:
    """What a journal says, after replaying it."""

    boot_id: str = ""
    agent_id: str = ""
    port: int = 0
    frameworks: dict[str, FrameworkInfo] = field(default_factory=dict)
    shutting_down: set[str] = field(default_factory=set)
    """Frameworks being shut down: whatever is left of them is killed, nothing reported."""
    damaged_frameworks: dict[str, str] = field(default_factory=dict)
    tasks: dict[tuple[str, str], TaskEntry] = field(default_factory=dict)
    executors: dict[tuple[str, str], ExecutorEntry] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    """What went wrong reading the journal (each also logged)."""

    def empty(self) -> bool:
        return not (self.agent_id or self.frameworks or self.tasks or self.executors)

    def apply(self, kind: str, h: dict[str, Any], blob: Any) -> None:
        """Apply one record. Raises KeyError/TypeError/ValueError for one that does not fit."""
        if kind == "update":
            entry = self._task(h["f"], h["t"])
            entry.updates.append(blob)
            entry.latest = blob
            if blob.uuid:
                entry.saw(blob.uuid)
        elif kind == "ack":
            entry = self.tasks[(h["f"], h["t"])]
            if entry.updates and entry.updates[0].uuid == h["u"] and is_terminal(entry.updates.pop(0).state):
                del self.tasks[(h["f"], h["t"])]  # its end is reported: nothing left of it
        elif kind == "task_gone":
            self.tasks.pop((h["f"], h["t"]), None)
        elif kind == "pid":
            pid, start_time = int(h["pid"]), int(h["st"])
            if h["x"] == TASK:
                entry = self._task(h["f"], h["i"])
                if entry.container is None:
                    # Only after a damaged record: keep the process, to kill it.
                    entry.container = ContainerEntry("", "", pid, start_time)
                    entry.damaged = entry.damaged or "its task record is missing from the checkpoint"
                entry.container.pid, entry.container.start_time = pid, start_time
            else:
                ex = self.executors.get((h["f"], h["i"]))
                if ex is None:
                    ex = self.executors[(h["f"], h["i"])] = ExecutorEntry(
                        h["f"],
                        h["i"],
                        None,
                        ContainerEntry("", ""),
                        damaged="its executor record is missing from the checkpoint",
                    )
                ex.container.pid, ex.container.start_time = pid, start_time
        elif kind == "task":
            entry = self._task(h["f"], h["t"])
            entry.info = blob
            entry.executor_id = h.get("e", "")
            entry.launched = bool(h.get("l", False))
            if h.get("c"):
                entry.container = ContainerEntry(h["c"], h["s"], int(h.get("pid", 0)), int(h.get("st", 0)))
            for uuid in h.get("u", ()):
                entry.saw(uuid)
        elif kind == "launched":
            self.tasks[(h["f"], h["t"])].launched = True
        elif kind == "latest":
            entry = self._task(h["f"], h["t"])
            entry.latest = blob
            if blob.uuid:
                entry.saw(blob.uuid)
        elif kind == "executor":
            self.executors[(h["f"], h["e"])] = ExecutorEntry(
                h["f"],
                h["e"],
                blob,
                ContainerEntry(h["c"], h["s"], int(h.get("pid", 0)), int(h.get("st", 0))),
                token=str(h.get("tok", "")),
            )
        elif kind == "executor_gone":
            self.executors.pop((h["f"], h["e"]), None)
        elif kind == "framework":
            self.frameworks[h["f"]] = blob
        elif kind == "framework_gone":
            self.frameworks.pop(h["f"], None)
            self.shutting_down.discard(h["f"])
        elif kind == "shutdown":
            self.shutting_down.add(h["f"])
        elif kind == "agent":
            self.agent_id = str(h["a"])
        elif kind == "boot":
            self.boot_id, self.agent_id, self.port = str(h["b"]), str(h.get("a", "")), int(h.get("p", 0))
        else:
            raise ValueError(f"unknown record kind {kind!r}")

    def damage(self, kind: str, h: dict[str, Any], reason: str) -> str | None:
        """A record of ``kind`` about what ``h`` names had an unreadable payload: mark
        that entity damaged. Returns what was marked (for the log), or None."""
        fid = h.get("f")
        if not isinstance(fid, str):
            return None
        if kind in ("task", "update", "latest") and isinstance(h.get("t"), str):
            entry = self._task(fid, h["t"])
            entry.damaged = entry.damaged or reason
            if kind == "task" and h.get("c"):
                entry.executor_id = h.get("e", "")
                entry.container = ContainerEntry(h["c"], h["s"], int(h.get("pid", 0)), int(h.get("st", 0)))
            return f"task {h['t']!r} of framework {fid!r}"
        if kind == "executor" and isinstance(h.get("e"), str):
            self.executors[(fid, h["e"])] = ExecutorEntry(
                fid,
                h["e"],
                None,
                ContainerEntry(h["c"], h["s"], int(h.get("pid", 0)), int(h.get("st", 0))),
                damaged=reason,
            )
            return f"executor {h['e']!r} of framework {fid!r}"
        if kind == "framework":
            self.damaged_frameworks[fid] = reason
            return f"framework {fid!r}"
        return None

    def _task(self, fid: str, tid: str) -> TaskEntry:
        if not isinstance(fid, str) or not isinstance(tid, str):
            raise TypeError("framework and task ids must be strings")
        entry = self.tasks.get((fid, tid))
        if entry is None:
            entry = self.tasks[(fid, tid)] = TaskEntry(fid, tid)
        return entry

    def records(self) -> list[Record]:
        """Records that rebuild this state from nothing (what compaction writes)."""
        out: list[Record] = [("boot", {"b": self.boot_id, "a": self.agent_id, "p": self.port}, None)]
        for key in self.entities():
            out.extend(self.records_of(key))
        return out

    def entities(self) -> list[Entity]:
        """Every framework, executor and task held, as :func:`entity_of` names them."""
        out: list[Entity] = [("f", fid) for fid in self.frameworks]
        out += [("f", fid) for fid in self.shutting_down if fid not in self.frameworks]
        out += [("e", fid, eid) for fid, eid in self.executors]
        out += [("t", fid, tid) for fid, tid in self.tasks]
        return out

    def records_of(self, entity: Entity, *, uuids: bool = True) -> list[Record]:
        """The records that rebuild one framework, executor or task (none once it is gone);
        without the uuids of a task's updates unless ``uuids``."""
        if entity[0] == "f":
            fid = entity[1]
            out: list[Record] = []
            info = self.frameworks.get(fid)
            if info is not None:
                out.append(("framework", {"f": fid}, info))
            if fid in self.shutting_down:
                out.append(("shutdown", {"f": fid}, None))
            return out
        if entity[0] == "e":
            fid, eid = entity[1], entity[2]
            ex = self.executors.get((fid, eid))
            if ex is None or ex.info is None:
                return []  # gone, or damaged: recovery has dealt with it
            c = ex.container
            header = {
                "f": fid,
                "e": eid,
                "c": c.container_id,
                "s": c.sandbox,
                "pid": c.pid,
                "st": c.start_time,
            }
            if ex.token:
                header["tok"] = ex.token  # compaction keeps the token, or a restart would forget it
            return [("executor", header, ex.info)]
        fid, tid = entity[1], entity[2]
        t = self.tasks.get((fid, tid))
        if t is None or t.damaged:
            return []
        out = []
        if t.info is not None:
            out.append(("task", task_header(t, uuids=uuids), t.info))
        if t.latest is not None and not t.updates:
            out.append(("latest", {"f": fid, "t": tid}, t.latest))  # acknowledged already
        for status in t.updates:
            out.append(("update", {"f": fid, "t": tid}, status))
        return out


Record = tuple[str, dict[str, Any], Any]
"""A record to write: kind, header, Thrift struct (or None)."""
Entity = tuple[str, ...]
"""What records are about: ``("f", framework_id)``, ``("e", framework_id, executor_id)``
or ``("t", framework_id, task_id)``."""


def entity_of(kind: str, h: dict[str, Any]) -> Entity | None:
    """The framework, executor or task a record of ``kind`` changes (None: the agent's own)."""
    fid = h.get("f")
    if kind in ("boot", "agent") or not isinstance(fid, str):
        return None
    if kind in ("framework", "framework_gone", "shutdown"):
        return ("f", fid)
    if kind in ("executor", "executor_gone"):
        return ("e", fid, str(h.get("e")))
    if kind == "pid":
        return ("t" if h.get("x") == TASK else "e", fid, str(h.get("i")))
    return ("t", fid, str(h.get("t")))


def task_header(t: TaskEntry, *, uuids: bool = True) -> dict[str, Any]:
    """The header of a task's ``task`` record (without its uuids unless ``uuids``)."""
    h: dict[str, Any] = {"f": t.framework_id, "t": t.task_id, "e": t.executor_id, "l": t.launched}
    if uuids:
        order = list(t.seen_order)
        h["u"] = order if len(order) == len(t.seen) else sorted(t.seen.difference(order)) + order
    if t.container is not None:
        c = t.container
        h.update(c=c.container_id, s=c.sandbox, pid=c.pid, st=c.start_time)
    return h


def replay(records: list[DecodedRecord], path: str) -> tuple[CheckpointState, list[Problem]]:
    """The state ``records`` (read from the journal at ``path``) describe, and the problems
    met applying them (damaged records, records that do not fit); never raises."""
    state = CheckpointState()
    problems: list[Problem] = []
    for i, rec in enumerate(records):
        if rec.damaged is not None:
            what = state.damage(rec.kind, rec.header, rec.damaged)
            problems.append(
                (
                    f"{rec.damaged}: "
                    + (f"{what} is treated as lost" if what else "whatever it recorded is lost"),
                    True,
                )
            )
            continue
        try:
            state.apply(rec.kind, rec.header, rec.blob)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            problems.append(
                (
                    f"{path}: record {i} ({rec.kind}, offset {rec.offset}) does not fit what came "
                    f"before it ({type(exc).__name__}: {exc}): ignored",
                    True,
                )
            )
    return state, problems
