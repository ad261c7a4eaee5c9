"""strict-priority through the real master: the low level starves while the high
level wants resources, and gets them once the high level stops wanting them.

The high framework keeps a queue of short tasks; whenever one ends, the freed
resources must go back to it, never to the low framework (which DRF would favour,
shown by the same scenario under ``drf``).
"""

from __future__ import annotations

import threading
import time

import mezzo
from mezzo import CommandInfo, Filters, Resources, TaskInfo

from .conftest import wait_for


class Queue(mezzo.Scheduler):
    """Runs ``total`` tasks of 1 cpu sleeping ``seconds``; suppresses offers once all are placed."""

    def __init__(self, name: str, total: int, seconds: float) -> None:
        self.name, self.total, self.seconds = name, total, seconds
        self.launched = 0
        self.finished = 0
        self.first_launch_at: float | None = None
        self.satisfied_at: float | None = None
        self.done = threading.Event()
        self.lock = threading.Lock()

    def resource_offers(self, driver, offers):
        task = Resources(cpus=1, mem=16)
        for offer in offers:
            left, tasks = offer.resources, []
            while self.launched < self.total and task.fits_in(left):
                self.launched += 1
                left = left - task
                tasks.append(TaskInfo(task_id=f"{self.name}-{self.launched}", agent_id=offer.agent_id,
                                      resources=task, command=CommandInfo(value=f"sleep {self.seconds}")))
            if tasks:
                if self.first_launch_at is None:
                    self.first_launch_at = time.monotonic()
                driver.launch_tasks(offer.offer_id, tasks, Filters(refuse_seconds=0))
                if self.launched == self.total:
                    # Everything is placed: this framework wants no more resources.
                    self.satisfied_at = time.monotonic()
                    driver.set_needs_offers(False)
            else:
                driver.decline_offer(offer.offer_id, Filters(refuse_seconds=0.05))

    def status_update(self, driver, status):
        if mezzo.is_terminal(status.state):
            with self.lock:
                self.finished += 1
                if self.finished == self.total:
                    self.done.set()


def _scenario(make_cluster, drivers, allocator_tables):
    cluster = make_cluster(1, master={"allocation_interval": 0.01}, agent_resources="cpus:2;mem:256",
                           tables=allocator_tables)
    high = Queue("high", total=12, seconds=0.2)
    drivers(high, "high", cluster.master, role="prod")
    wait_for(lambda: high.launched >= 2, 10, "the high framework to start")
    low = Queue("low", total=2, seconds=0.1)
    drivers(low, "low", cluster.master, role="batch")
    assert high.done.wait(60)
    assert low.done.wait(30)
    return high, low


def test_low_level_starves_while_high_level_wants_offers(make_cluster, drivers):
    high, low = _scenario(make_cluster, drivers, {
        "master.allocator": {"name": "strict-priority"},
        "master.allocator.strict-priority": {"roles": {"prod": 10, "batch": 0}},
    })
    # The low level launched nothing while the high level still wanted resources ...
    assert low.first_launch_at is not None and low.first_launch_at >= high.satisfied_at
    # ... and it did get the cluster afterwards.
    assert low.finished == 2


def test_same_scenario_under_drf_shares_the_cluster(make_cluster, drivers):
    high, low = _scenario(make_cluster, drivers, {})
    assert low.first_launch_at < high.satisfied_at
