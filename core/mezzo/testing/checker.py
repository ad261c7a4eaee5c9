"""Checks a faulty run's histories against what really happened (Jepsen's checker).

    problems = check(workloads, master_state, task_processes)
    assert not problems, "\\n".join(problems)

What must hold once the faults are healed and every task has ended:

1. **One outcome per task.** Every task launched has a terminal update; all its
   terminal updates name the same state; at most one of them is the task's own end
   (the others may only be answers to reconciliation, reason ``reconciliation``,
   which a framework asking again may get any number of times); nothing but terminal
   updates comes after its own end (a task reported lost never runs again; a
   reconciliation answer may run ahead of updates still on their way, as in Mesos).
   TASK_UNREACHABLE, not terminal, goes only to partition-aware frameworks.
2. **Nothing runs twice.** A task launched once started at most once (its marks file,
   written by the task itself, has at most one line); one reported TASK_FINISHED did
   start.
3. **The master agrees with reality.** The master holds no task of these frameworks as
   active, and no agent holds any (its ``tasks`` count is 0).
4. **No agent keeps a task the master forgot.** No process of these frameworks' tasks
   still runs on any host (``task_processes``, found by :func:`task_processes`).

Each problem is one line naming the task (or agent, or pid) and what was seen.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from .workload import HistoryWorkload

TERMINAL = {
    "TASK_FINISHED",
    "TASK_FAILED",
    "TASK_KILLED",
    "TASK_ERROR",
    "TASK_DROPPED",
    "TASK_LOST",
    "TASK_GONE",
}


def check(
    workloads: Iterable[HistoryWorkload],
    master_state: Mapping,
    task_processes: Mapping[int, str],
    *,
    limit: int = 50,
) -> list[str]:
    """The problems found (empty: the run is correct); at most ``limit`` of them, then
    a line saying how many more."""
    problems: list[str] = []
    framework_names = set()
    for w in workloads:
        framework_names.add(w.name)
        problems += _outcomes(w)
        problems += _late_updates(w)
        problems += _starts(w)
    problems += _master_view(master_state, framework_names)
    problems += [
        f"pid {pid}: task {task} still runs after every task ended"
        for pid, task in sorted(task_processes.items())
        if _prefix(task) in framework_names
    ]
    if len(problems) > limit:
        problems = problems[:limit] + [f"... and {len(problems) - limit} more"]
    return problems


def _prefix(task_id: str) -> str:
    return task_id.rpartition("-")[0]


def _outcomes(w: HistoryWorkload) -> list[str]:
    problems = []
    terminal: dict[str, list[tuple[str, str]]] = {}
    for e in w.history:
        if e.kind == "update" and e.state in TERMINAL:
            terminal.setdefault(e.task, []).append((e.state, e.reason))
    if not w.partition_aware:
        problems += [
            f"{e.task}: TASK_UNREACHABLE to a framework that is not partition-aware"
            for e in w.history
            if e.kind == "update" and e.state == "TASK_UNREACHABLE"
        ]
    for task in w.launched:
        ends = terminal.get(task, [])
        if not ends:
            problems.append(f"{task}: no terminal update")
            continue
        states = {s for s, _ in ends}
        if len(states) > 1:
            problems.append(f"{task}: contradictory terminal updates {ends}")
        own = [s for s, reason in ends if reason != "reconciliation"]
        if len(own) > 1:
            problems.append(
                f"{task}: {len(own)} terminal updates that are not reconciliation answers: {ends}"
            )
    unknown = set(terminal) - set(w.launched)
    problems += [f"{task}: updates for a task never launched" for task in sorted(unknown)]
    return problems


def _late_updates(w: HistoryWorkload) -> list[str]:
    """Non-terminal updates after a task's own end (its first terminal update that is
    not a reconciliation answer): a task reported ended never runs again. Only its own
    end counts: a reconciliation answer gives the latest state the master knows, which
    may be ahead of updates still on their way from the agent (as in Mesos)."""
    found = []
    ended: set[str] = set()
    for e in w.history:
        if e.kind != "update":
            continue
        if e.task in ended and e.state not in TERMINAL:
            found.append(f"{e.task}: {e.state} ({e.reason or 'no reason'}) after its end")
        elif e.state in TERMINAL and e.reason != "reconciliation":
            ended.add(e.task)
    return found


def _starts(w: HistoryWorkload) -> list[str]:
    problems = []
    for task, end in ((t, w.ended.get(t)) for t in w.launched):
        mark = w.marks / task
        try:
            lines = [line for line in mark.read_text().splitlines() if line.strip()]
        except FileNotFoundError:
            lines = []
        if len(lines) > 1:
            problems.append(f"{task}: launched once, started {len(lines)} times: {lines}")
        if end == "TASK_FINISHED" and not lines:
            problems.append(f"{task}: reported TASK_FINISHED but never started")
    return problems


def _master_view(state: Mapping, frameworks: set[str]) -> list[str]:
    problems = []
    ours = {f["id"] for f in state.get("frameworks", []) if f.get("name") in frameworks}
    for t in state.get("tasks", []):
        if t.get("framework_id") in ours:
            problems.append(f"{t.get('id')}: still {t.get('state')} in the master after every task ended")
    for a in state.get("agents", []):
        if a.get("tasks"):
            problems.append(
                f"agent {a.get('hostname')} ({a.get('id')}): holds {a['tasks']} task(s) in the master"
            )
    return problems


def task_processes(pids: Iterable[int]) -> dict[int, str]:
    """Of ``pids``, the processes of mezzo tasks: pid -> their ``MEZZO_TASK_ID``."""
    found = {}
    for pid in pids:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in environ:
            if item.startswith(b"MEZZO_TASK_ID="):
                found[pid] = item.split(b"=", 1)[1].decode(errors="replace")
    return found


def all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]
