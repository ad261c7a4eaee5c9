"""Revocation (paper §3.3) end to end: a real master and real agents running real
``sleep`` tasks, frameworks on real scheduler drivers.

The cluster: 2 agents of 4 cpus and 4096 MB. drf guarantees by role: "mpi" 0.5 (4 cpus,
4096 MB), "batch" 0.25, "late" 0.25. "mpi" runs 4 tasks of 1 cpu and 1024 MB: exactly
its guarantee. "batch" is greedy: 1-cpu tasks on whatever is left, so it holds 4 cpus,
twice its guarantee. Then "late" arrives wanting 2 cpus, and the cluster is full.

- With ``revocation_delay`` set, "late" is starved after it; the fair-share policy
  takes batch's two newest tasks (2 cpus meet late's guarantee), they end TASK_KILLED
  with reason ``revoked``, and what they free goes to "late" (held for it). "mpi",
  at its guarantee, loses nothing, and nothing more is revoked afterwards.
- Without it (the default), "late" launches nothing and nobody loses a task.
- Under strict-priority, which would hand freed cpus straight back to a greedy
  higher-priority framework, the hold still gets them to the starved one.

The decision logic on its own (offers first, one round per launch, checks on what a
policy returns) is in tests/unit/test_revocation_monitor.py.
"""

from __future__ import annotations

import threading
import time

import mezzo
from mezzo import CommandInfo, Filters, Resources, TaskInfo, TaskState

from .conftest import wait_for

AGENTS = 2
AGENT_RESOURCES = "cpus:4;mem:4096"
GUARANTEES = {"roles": {"mpi": 0.5, "batch": 0.25, "late": 0.25}}
REVOCATION = {"allocation_interval": 0.02, "revocation_delay": 0.5, "revocation_grace_period": 1.0}


class Filler(mezzo.Scheduler):
    """Launches ``sleep 600`` tasks of ``per_task`` on every offer they fit in, at most
    ``limit`` running at once (None: no limit), declining the rest briefly. Records
    every status update."""

    def __init__(self, name: str, per_task: Resources, limit: int | None = None) -> None:
        self.name = name
        self.per_task = per_task
        self.limit = limit
        self.lock = threading.Lock()
        self.framework_id = ""
        self.launched: list[str] = []
        self.running: set[str] = set()
        self.ended: dict[str, mezzo.TaskStatus] = {}
        self.statuses: list[mezzo.TaskStatus] = []

    def registered(self, driver, framework_id, master):
        self.framework_id = framework_id

    def resource_offers(self, driver, offers):
        for offer in offers:
            left = Resources.of(offer.resources)
            tasks = []
            with self.lock:
                live = len(self.launched) - len(self.ended)
                while self.per_task.fits_in(left) and (self.limit is None or live + len(tasks) < self.limit):
                    tid = f"{self.name}-{len(self.launched) + len(tasks) + 1}"
                    tasks.append(TaskInfo(task_id=tid, agent_id=offer.agent_id, resources=self.per_task,
                                          command=CommandInfo(value="sleep 600")))
                    left = left - self.per_task
                self.launched.extend(t.task_id for t in tasks)
            if tasks:
                driver.launch_tasks(offer.offer_id, tasks, Filters(refuse_seconds=0.2))
            else:
                driver.decline_offer(offer.offer_id, Filters(refuse_seconds=0.2))

    def status_update(self, driver, status):
        with self.lock:
            self.statuses.append(status)
            if status.state == TaskState.TASK_RUNNING:
                self.running.add(status.task_id)
            elif mezzo.is_terminal(status.state):
                self.running.discard(status.task_id)
                self.ended[status.task_id] = status

    def count_running(self) -> int:
        with self.lock:
            return len(self.running)

    def updates_of(self, task_id: str) -> list[tuple[str, str, str]]:
        with self.lock:
            return [(mezzo.state_name(s.state), s.reason, s.message) for s in self.statuses if s.task_id == task_id]


def fill_then_arrive(cluster, drivers) -> tuple[Filler, Filler, Filler]:
    """"mpi" takes its 4 tasks, "batch" fills the rest, then "late" registers."""
    mpi = Filler("mpi", Resources(cpus=1, mem=1024), limit=4)
    drivers(mpi, "mpi", cluster.master, role="mpi")
    wait_for(lambda: mpi.count_running() == 4, 15, '"mpi" to run its 4 tasks')
    batch = Filler("batch", Resources(cpus=1, mem=256))
    drivers(batch, "batch", cluster.master, role="batch")
    wait_for(lambda: batch.count_running() == 4, 15, '"batch" to fill the other 4 cpus')
    late = Filler("late", Resources(cpus=1, mem=256), limit=2)
    drivers(late, "late", cluster.master, role="late")
    return mpi, batch, late


def test_a_starved_framework_gets_the_newest_tasks_of_the_one_above_its_guarantee(make_cluster, drivers):
    cluster = make_cluster(AGENTS, agent_resources=AGENT_RESOURCES, master=REVOCATION,
                           tables={"master.allocator.drf": {"guarantees": GUARANTEES}})
    mpi, batch, late = fill_then_arrive(cluster, drivers)
    wait_for(lambda: late.count_running() == 2, 20, '"late" to run its 2 tasks after revocation')
    # Two drivers, two threads: batch may read its TASK_KILLED after late read its
    # TASK_RUNNING, although the master sent it first.
    wait_for(lambda: len(batch.ended) >= 2, 10, '"batch" to hear of its 2 revoked tasks')

    # batch's two newest tasks were revoked, with the reason on both kill updates.
    revoked = sorted(batch.ended)
    assert revoked == ["batch-3", "batch-4"], batch.ended
    for tid in revoked:
        updates = batch.updates_of(tid)
        killing = [u for u in updates if u[0] == "TASK_KILLING"]
        assert killing and killing[0][1] == "revoked", updates
        state, reason, message = updates[-1]
        assert (state, reason) == ("TASK_KILLED", "revoked"), updates
        assert message.startswith(f"revoked: framework {batch.framework_id} above its guarantee"), message
        assert f"revoked for framework {late.framework_id}" in message, message

    # mpi, exactly at its guarantee, lost nothing; and no second round follows.
    time.sleep(1.5)
    assert mpi.ended == {} and mpi.count_running() == 4
    assert sorted(batch.ended) == revoked and batch.count_running() == 2
    state = cluster.state()
    revocation = state["revocation"]
    assert revocation["tasks_revoked"] == 2 and revocation["revoking"] == [] and revocation["starved"] == []
    assert {r["for_framework_id"] for r in revocation["recent"]} == {late.framework_id}
    assert state["master"]["revocation_delay"] == 0.5
    completed = {t["id"]: t["reason"] for t in state["completed_tasks"]}
    assert completed == {"batch-3": "revoked", "batch-4": "revoked"}


def test_without_revocation_the_late_framework_waits_and_nobody_loses_a_task(make_cluster, drivers):
    cluster = make_cluster(AGENTS, agent_resources=AGENT_RESOURCES, master={"allocation_interval": 0.02},
                           tables={"master.allocator.drf": {"guarantees": GUARANTEES}})
    mpi, batch, late = fill_then_arrive(cluster, drivers)
    time.sleep(2.0)  # four times the delay the other test revokes after
    assert late.launched == [] and mpi.ended == {} and batch.ended == {}
    state = cluster.state()
    assert state["revocation"] is None and state["master"]["revocation_delay"] == 0.0


def test_freed_resources_are_held_for_the_starved_framework_under_strict_priority(make_cluster, drivers):
    # "batch" at level 10 would be offered every freed cpu first, forever; "late" (level 0)
    # has a guarantee. Without the hold, revocation would kill batch's tasks only to hand
    # the cpus back to batch.
    cluster = make_cluster(1, agent_resources=AGENT_RESOURCES, master=REVOCATION, tables={
        "master.allocator": {"name": "strict-priority"},
        "master.allocator.strict-priority": {"roles": {"batch": 10, "late": 0},
                                             "guarantees": {"roles": {"batch": 0.5, "late": 0.5}}},
    })
    batch = Filler("batch", Resources(cpus=1, mem=256))
    drivers(batch, "batch", cluster.master, role="batch")
    wait_for(lambda: batch.count_running() == 4, 15, '"batch" to fill the agent')
    late = Filler("late", Resources(cpus=1, mem=256), limit=2)
    drivers(late, "late", cluster.master, role="late")
    wait_for(lambda: late.count_running() == 2, 20, '"late" to get the revoked cpus')
    assert sorted(batch.ended) == ["batch-3", "batch-4"]
    assert {s.reason for s in batch.ended.values()} == {"revoked"}
