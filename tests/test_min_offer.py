"""Minimum offer size (``master.min_offer``, paper §4.6) against a real master: "a
framework with large tasks is not starved by a stream of small ones".

Two emulated agents of 4 cpus. Framework "small" fills them with 1-cpu tasks and
then keeps replacing them, ending one task per agent at a time: it ends the oldest
task on an agent when it has just launched a replacement there, or when nothing was
offered to it on that agent for ``RELEASE`` seconds (its tasks are short, they end
anyway). Framework "big" wants 4-cpu tasks, and DRF puts it first in line (it holds
nothing).

- Without a minimum, every cpu that frees up is offered at once: to "big", which
  cannot use one cpu and declines, then to "small", which takes it. An agent is never
  4 cpus free, so "big" launches nothing while "small" launches dozens. This does
  not depend on timing: for an agent to be all free, "small" would have to get no
  offer of it for ``3 × RELEASE`` seconds while it has a free cpu.
- With ``min_offer = "cpus:4"``, a freed cpu is not offered; the agent waits until its
  tasks have ended and then is offered whole, to "big" first.

The pure logic (the capped minimum, the cycle's skip) is in tests/unit/test_min_offer_unit.py.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque

import mezzo
from mezzo import CommandInfo, Filters, Resources, TaskInfo

from .conftest import wait_for
from .test_emulation import agent_pool

AGENTS = 2
AGENT_RESOURCES = "cpus:4;mem:1024"
SMALL = Resources(cpus=1, mem=256)   # four fill an agent exactly: nothing left over to offer
BIG = Resources(cpus=4, mem=1024)    # a whole agent
RELEASE = 0.75
"""Seconds "small" waits for an offer of an agent before ending another of its tasks there."""
WINDOW = 3.0
"""Seconds "big" is watched without a minimum: shorter than 3 × RELEASE + the time an
agent takes to fill would let nothing through even if every offer were late."""


class Small(mezzo.Scheduler):
    """Keeps agents full of 1-cpu tasks and, once ``churn`` is set, ends them one at a
    time per agent (see the module docstring)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.launched = 0
        self.running: dict[str, deque[str]] = defaultdict(deque)  # agent -> task ids, oldest first
        self.last_end: dict[str, float] = defaultdict(float)
        self.churn = threading.Event()
        self.stopping = threading.Event()
        self.driver = None
        self._ids = 0
        self._thread = threading.Thread(target=self._release_loop, daemon=True)

    def registered(self, driver, framework_id, master):
        self.driver = driver
        self._thread.start()

    def resource_offers(self, driver, offers):
        for offer in offers:
            res = Resources.of(offer.resources)
            n = int(min(res.get("cpus") // SMALL.get("cpus"), res.get("mem") // SMALL.get("mem")))
            if n == 0:
                driver.decline_offer(offer.offer_id, Filters(refuse_seconds=0.1))
                continue
            tasks = []
            with self.lock:
                for _ in range(n):
                    self._ids += 1
                    tid = f"small-{self._ids}"
                    tasks.append(TaskInfo(task_id=tid, agent_id=offer.agent_id, resources=SMALL,
                                          command=CommandInfo(value="sleep 600")))
                    self.running[offer.agent_id].append(tid)
                self.launched += n
            driver.launch_tasks(offer.offer_id, tasks)
            if self.churn.is_set():
                self._end_one(offer.agent_id)

    def _end_one(self, agent_id: str) -> None:
        with self.lock:
            queue = self.running[agent_id]
            if not queue:
                return
            tid = queue.popleft()
            self.last_end[agent_id] = time.monotonic()
        self.driver.kill_task(tid)

    def _release_loop(self) -> None:
        while not self.stopping.wait(0.05):
            if not self.churn.is_set():
                continue
            now = time.monotonic()
            with self.lock:
                due = [a for a, q in self.running.items() if q and now - self.last_end[a] >= RELEASE]
            for agent_id in due:
                self._end_one(agent_id)


class Big(mezzo.Scheduler):
    """Launches a 4-cpu task (half a second long) on every offer that holds one."""

    def __init__(self) -> None:
        self.launched = 0
        self.offers = 0
        self.declined = 0
        self.registered_event = threading.Event()
        self._ids = 0

    def registered(self, driver, framework_id, master):
        self.registered_event.set()

    def resource_offers(self, driver, offers):
        for offer in offers:
            self.offers += 1
            if not BIG.fits_in(Resources.of(offer.resources)):
                # Not for us for the next hour, unless more becomes free there.
                self.declined += 1
                driver.decline_offer(offer.offer_id, Filters(refuse_seconds=3600))
                continue
            self._ids += 1
            self.launched += 1
            driver.launch_tasks(offer.offer_id, [TaskInfo(
                task_id=f"big-{self._ids}", agent_id=offer.agent_id, resources=BIG,
                command=CommandInfo(value="sleep 0.5"))])


def start_contention(cluster, drivers) -> tuple[Small, Big]:
    """"small" fills the agents, then "big" registers, then "small" starts churning."""
    small = Small()
    drivers(small, "small", cluster.master)
    wait_for(lambda: small.launched == 4 * AGENTS, 10, '"small" to fill the agents')
    big = Big()
    drivers(big, "big", cluster.master)
    assert big.registered_event.wait(10), '"big" did not register'
    small.churn.set()
    return small, big


def test_without_a_minimum_small_tasks_starve_a_framework_with_large_ones(make_cluster, drivers):
    cluster = make_cluster(0, master={"allocation_interval": 0.02})
    with agent_pool(cluster.master, AGENTS, AGENT_RESOURCES):
        small, big = start_contention(cluster, drivers)
        try:
            before = small.launched
            time.sleep(WINDOW)
            during = small.launched - before
            assert big.launched == 0, f'"big" launched {big.launched} tasks; "small" {during}'
            assert during >= 24, f'"small" launched only {during} tasks in {WINDOW:g} s'
            assert big.offers > 0, '"big" was never offered the freed cpus'
            assert cluster.state()["last_allocation"]["agents_below_min_offer"] == 0
        finally:
            small.stopping.set()


def test_with_a_minimum_the_framework_with_large_tasks_gets_whole_agents(make_cluster, drivers):
    cluster = make_cluster(0, master={"allocation_interval": 0.02, "min_offer": "cpus:4"})
    with agent_pool(cluster.master, AGENTS, AGENT_RESOURCES):
        small, big = start_contention(cluster, drivers)
        try:
            held_back = []

            def big_launched() -> bool:
                state = cluster.state()
                held_back.append(state["last_allocation"].get("agents_below_min_offer", 0))
                return big.launched >= 1

            wait_for(big_launched, 10, '"big" to launch a task', interval=0.1)
            state = cluster.state()
            assert state["master"]["min_offer"] == {"cpus": 4.0}
            # While freed cpus waited for the rest of their agent, mezzo state said so.
            assert max(held_back) >= 1, held_back
            # "big" was offered only whole agents: it never had to decline.
            assert big.declined == 0
        finally:
            small.stopping.set()
