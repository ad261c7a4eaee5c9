"""Long and short tasks (paper §4.4) end to end: a real master and agent, real
``sleep`` tasks, a real scheduler driver.

The master bounds long tasks to half of each agent and gives short tasks 1.5 s. On
its first offer the framework launches a long service, a second long task that no
longer fits in the room, a quick short task and a short task that runs too long.
The in-process unit tests are in tests/unit/test_long_tasks.py.
"""

from __future__ import annotations

import threading
import time

import mezzo
from mezzo import CommandInfo, Resources, TaskInfo

from .conftest import wait_for


class OneShot(mezzo.Scheduler):
    """Launches ``tasks(offer)`` on the first offer, declines the rest; records updates."""

    def __init__(self, tasks) -> None:
        self.tasks = tasks
        self.lock = threading.Lock()
        self.room = "unset"
        self.updates: dict[str, list[mezzo.TaskStatus]] = {}

    def resource_offers(self, driver, offers):
        for offer in offers:
            if self.room == "unset":
                self.room = offer.long_task_room
                driver.launch_tasks(offer.offer_id, self.tasks(offer))
            else:
                driver.decline_offer(offer.offer_id, mezzo.Filters(refuse_seconds=60))

    def status_update(self, driver, status):
        with self.lock:
            self.updates.setdefault(status.task_id, []).append(status)

    def last(self, task_id: str) -> tuple[str, str, str] | None:
        with self.lock:
            s = self.updates.get(task_id, [None])[-1]
        return None if s is None else (mezzo.state_name(s.state), s.reason, s.message)


def test_long_tasks_stay_within_the_room_and_short_ones_past_the_maximum_are_revoked(make_cluster, drivers):
    cluster = make_cluster(1, agent_resources="cpus:4;mem:1024", master={
        "allocation_interval": 0.02, "long_task_fraction": 0.5, "short_task_max": 1.5,
        "revocation_grace_period": 0.5,
    })

    def tasks(offer):
        def make(tid, cpus, command, long=False):
            return TaskInfo(task_id=tid, agent_id=offer.agent_id, resources=Resources(cpus=cpus, mem=64),
                            command=CommandInfo(value=command), long=long)
        return [make("service", 2, "sleep 600", long=True),
                make("too-long", 1, "sleep 600", long=True),   # 2 cpus of room are used up
                make("quick", 0.5, "sleep 0.1"),
                make("overstays", 1, "sleep 600")]

    framework = OneShot(tasks)
    drivers(framework, "long-and-short", cluster.master)
    wait_for(lambda: framework.last("overstays") is not None and framework.last("overstays")[0] == "TASK_KILLED",
             20, '"overstays" to be revoked')
    assert (framework.room.get("cpus"), framework.room.get("mem")) == (2, 512)  # half the agent
    assert framework.last("too-long")[:2] == ("TASK_ERROR", "insufficient_long_task_room")
    assert framework.last("quick")[0] == "TASK_FINISHED"
    _, reason, message = framework.last("overstays")
    assert reason == "revoked" and "master.short_task_max (1.5 s)" in message, message
    time.sleep(1.0)  # the long service outlives the maximum untouched
    assert framework.last("service")[0] == "TASK_RUNNING"
    tasks_now = {t["id"]: t["state"] for t in cluster.state()["tasks"]}
    assert tasks_now == {"service": "TASK_RUNNING"}
