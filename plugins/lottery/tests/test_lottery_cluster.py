"""lottery through a real master and agents: two frameworks of weights 1 and 3 that
always want more compete for the slots of a full cluster of short tasks, and win
them about 1:3.

Each agent has room for exactly one task, so each offer is one task slot. Both
frameworks register before any agent exists, so every slot is drawn by the
lottery from the start. The subprocesses load installed entry points only: this
needs ``pip install -e plugins/lottery``.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter

import pytest

import mezzo
from mezzo import CommandInfo, Filters, Resources, TaskInfo
from mezzo.testing import LocalProcessCluster, wait_for

SLOTS = 160
"""Task launches counted. The weight-3 framework's count is ~Binomial(160, 0.75):
mean 120, sd 5.5, so the bounds asserted below are more than 5 sd away."""

TASK = Resources(cpus=1, mem=32)


class Tally:
    """Task slots won per framework, up to SLOTS in all."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.won: Counter[str] = Counter()
        self.full = threading.Event()

    def take(self, name: str) -> bool:
        with self.lock:
            if self.full.is_set():
                return False
            self.won[name] += 1
            if sum(self.won.values()) == SLOTS:
                self.full.set()
            return True


class Greedy(mezzo.Scheduler):
    """Launches one short task on every offer until the tally is full."""

    def __init__(self, name: str, tally: Tally) -> None:
        self.name, self.tally = name, tally
        self.registered_event = threading.Event()
        self.launched = 0
        self.ended = 0
        self.failed: list = []

    def registered(self, driver, framework_id, master):
        self.registered_event.set()

    def resource_offers(self, driver, offers):
        for offer in offers:
            if not TASK.fits_in(offer.resources) or not self.tally.take(self.name):
                driver.decline_offer(offer.offer_id, Filters(refuse_seconds=60))
                continue
            self.launched += 1
            task = TaskInfo(
                task_id=f"{self.name}-{self.launched}",
                agent_id=offer.agent_id,
                resources=TASK,
                command=CommandInfo(value="true"),
            )
            driver.launch_tasks(offer.offer_id, [task], Filters(refuse_seconds=0))

    def status_update(self, driver, status):
        if mezzo.is_terminal(status.state):
            self.ended += 1
            if mezzo.state_name(status.state) != "TASK_FINISHED":
                self.failed.append(status)


@pytest.mark.slow
def test_weights_one_and_three_share_slots_about_one_to_three(tmp_path):
    cluster = LocalProcessCluster(
        4,
        directory=str(tmp_path / "cluster"),
        agent_resources="cpus:1;mem:32",
        master={"allocation_interval": 0.01},
        tables={
            "master.allocator": {"name": "lottery"},
            "master.allocator.lottery": {"weights": {"roles": {"heavy": 3}}},
        },
    )
    tally = Tally()
    light, heavy = Greedy("light", tally), Greedy("heavy", tally)
    drivers = []
    try:
        cluster.start_master()
        for sched, role in ((light, "light"), (heavy, "heavy")):
            d = mezzo.SchedulerDriver(sched, mezzo.FrameworkInfo(name=sched.name, role=role), cluster.master)
            d.start()
            drivers.append(d)
        for sched in (light, heavy):
            assert sched.registered_event.wait(10), f"{sched.name} did not register"
        for i in range(1, 5):
            cluster.start_agent(i)
        state = cluster.wait_for_agents(4)
        assert state["master"]["allocator"] == "lottery"
        assert tally.full.wait(30), f"only {dict(tally.won)} slots in 30 s"
        # The slots were real: every task launched ran and finished.
        wait_for(
            lambda: light.ended == light.launched and heavy.ended == heavy.launched,
            10,
            "the launched tasks to end",
        )
        assert not light.failed and not heavy.failed, (light.failed + heavy.failed)[:3]
    finally:
        for d in drivers:
            with contextlib.suppress(Exception):  # a driver that already stopped
                d.stop()
        cluster.stop()
    won = tally.won
    share = won["heavy"] / SLOTS
    assert won["heavy"] > won["light"] > 0, won
    assert 0.55 <= share <= 0.93, f"weight-3 framework won {share:.0%} of the slots: {dict(won)}"
