"""A framework runs 100 command tasks across 3 real agents; all finish and leave their output."""

from __future__ import annotations

import threading
from pathlib import Path

import mezzo
from mezzo import CommandInfo, Filters, Resources, TaskInfo

from .conftest import wait_for


class Batch(mezzo.Scheduler):
    """Launches ``total`` small echo tasks as fast as offers allow."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.next = 0
        self.finished: dict[str, mezzo.TaskStatus] = {}
        self.failed: list[mezzo.TaskStatus] = []
        self.agent_of: dict[str, str] = {}
        self.lock = threading.Lock()
        self.done = threading.Event()

    def resource_offers(self, driver, offers):
        per_task = Resources(cpus=0.25, mem=32)
        for offer in offers:
            tasks = []
            left = offer.resources
            while self.next < self.total and per_task.fits_in(left):
                tid = f"t{self.next:03d}"
                self.next += 1
                left = left - per_task
                tasks.append(TaskInfo(task_id=tid, name=tid, agent_id=offer.agent_id, resources=per_task,
                                      command=CommandInfo(value=f"echo hello from {tid}; echo err-{tid} >&2")))
                self.agent_of[tid] = offer.agent_id
            if tasks:
                driver.launch_tasks([offer.offer_id], tasks, Filters(refuse_seconds=0))
            else:
                driver.decline_offer(offer.offer_id, Filters(refuse_seconds=60))

    def status_update(self, driver, status):
        if not mezzo.is_terminal(status.state):
            return
        with self.lock:
            if status.state == mezzo.TaskState.TASK_FINISHED:
                self.finished[status.task_id] = status
            else:
                self.failed.append(status)
            if len(self.finished) + len(self.failed) >= self.total:
                self.done.set()


def test_hundred_command_tasks_across_three_agents(make_cluster, drivers):
    cluster = make_cluster(3, master={"allocation_interval": 0.02}, agent_resources="cpus:2;mem:1024")
    sched = Batch(100)
    drivers(sched, "batch", cluster.master)
    assert sched.done.wait(90), f"only {len(sched.finished)} finished, failed={sched.failed[:3]}"
    assert not sched.failed, [(s.task_id, s.message) for s in sched.failed[:5]]
    assert len(sched.finished) == 100
    # The tasks were spread over all three agents.
    assert len(set(sched.agent_of.values())) == 3
    # Each task's stdout and stderr landed in its own sandbox on its agent.
    outputs = {}
    for path in Path(cluster.dir).glob("agent-*/**/stdout"):
        text = path.read_text()
        if text.startswith("hello from "):
            tid = text.split()[-1]
            outputs[tid] = path
            assert (path.parent / "stderr").read_text().strip() == f"err-{tid}"
    assert sorted(outputs) == sorted(sched.finished)
    # The master forgot them as running and counts them as completed.
    state = cluster.state()
    assert state["tasks"] == []
    wait_for(lambda: all(a["used"] == {} for a in cluster.state()["agents"]), 10, "resources freed")
