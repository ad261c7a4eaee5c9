"""DRF through the real master: the tech report's and the DRF paper's examples.

Each framework is greedy in the progressive-filling sense: on every offer it
launches one task if the task fits and returns the rest at once (refuse 0), so
the next task goes to whoever the allocator puts first. Offers it cannot use are
declined with a long filter. Tasks sleep, so allocations only grow. The run ends
when both frameworks have been offered something they could not use.
"""

from __future__ import annotations

import threading

import pytest

import mezzo
from mezzo import CommandInfo, Filters, Resources, TaskInfo

from .conftest import wait_for


class OneTaskPerOffer(mezzo.Scheduler):
    def __init__(self, name: str, cpus: float, mem_mb: float) -> None:
        self.name = name
        self.task = Resources(cpus=cpus, mem=mem_mb)
        self.launched = 0
        self.unfit = threading.Event()

    def resource_offers(self, driver, offers):
        for offer in offers:
            if self.task.fits_in(offer.resources):
                self.launched += 1
                tid = f"{self.name}-{self.launched}"
                driver.launch_tasks(offer.offer_id, [TaskInfo(
                    task_id=tid, agent_id=offer.agent_id, resources=self.task,
                    command=CommandInfo(value="sleep 120"))], Filters(refuse_seconds=0))
            else:
                self.unfit.set()
                driver.decline_offer(offer.offer_id, Filters(refuse_seconds=600))


def _run_pair(make_cluster, drivers, agent_resources, a, b, tables=None):
    cluster = make_cluster(1, master={"allocation_interval": 0.005}, agent_resources=agent_resources,
                           tables=tables or {})
    fa = OneTaskPerOffer(*a)
    fb = OneTaskPerOffer(*b)
    drivers(fa, a[0], cluster.master)
    drivers(fb, b[0], cluster.master)
    wait_for(lambda: fa.unfit.is_set() and fb.unfit.is_set(), 60, "both frameworks to fill up")
    state = cluster.state()
    running = {f["name"]: f["tasks"] for f in state["frameworks"]}
    return fa.launched, fb.launched, running, state


def test_tech_report_example(make_cluster, drivers):
    # 100 CPUs, 100 GB; F1 tasks <4 CPU, 1 GB>, F2 tasks <1 CPU, 8 GB> -> F1 20 tasks, F2 10.
    f1, f2, running, state = _run_pair(make_cluster, drivers, "cpus:100;mem:102400",
                                       ("F1", 4, 1024), ("F2", 1, 8192))
    assert (f1, f2) == (20, 10)
    assert running == {"F1": 20, "F2": 10}
    shares = {f["name"]: f["dominant_share"] for f in state["frameworks"]}
    assert shares["F1"] == pytest.approx(0.8) and shares["F2"] == pytest.approx(0.8)


def test_drf_paper_example(make_cluster, drivers):
    # 9 CPUs, 18 GB; A <1 CPU, 4 GB>, B <3 CPU, 1 GB> -> A 3 tasks, B 2.
    a, b, running, _ = _run_pair(make_cluster, drivers, "cpus:9;mem:18432", ("A", 1, 4096), ("B", 3, 1024))
    assert (a, b) == (3, 2)
    assert running == {"A": 3, "B": 2}


def test_weighted_drf(make_cluster, drivers):
    # The tech report's cluster with F2 weighted 2: both advance 0.04 of weighted share per
    # task, so they alternate until memory runs out: F1 12 tasks (48 CPU, 12 GB), F2 11 (88 GB).
    f1, f2, running, _ = _run_pair(
        make_cluster, drivers, "cpus:100;mem:102400", ("F1", 4, 1024), ("F2", 1, 8192),
        tables={"master.allocator.drf": {"frameworks": {"F2": 2.0}}},
    )
    assert (f1, f2) == (12, 11)
    assert running == {"F1": 12, "F2": 11}


def test_guaranteed_share_is_the_weighted_fair_share(make_cluster, drivers):
    from .conftest import Recorder

    cluster = make_cluster(1, agent_resources="cpus:9;mem:18432",
                           tables={"master.allocator.drf": {"frameworks": {"big": 2.0}}})
    big, small = Recorder(), Recorder()
    d_big = drivers(big, "big", cluster.master)
    d_small = drivers(small, "small", cluster.master)
    assert big.registered_event.wait(10) and small.registered_event.wait(10)
    g_big, g_small = d_big.guaranteed_share(), d_small.guaranteed_share()
    assert (g_big.get("cpus"), g_big.get("mem")) == (6, 12288)
    assert (g_small.get("cpus"), g_small.get("mem")) == (3, 6144)
