"""Emulated agents (for the scale benchmarks) look like real agents to the real master:
they register, take tasks, report RUNNING and FINISHED after the task's duration,
and retry status updates until acknowledged."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import mezzo
import pytest
from mezzo import CommandInfo, Filters, Resources, TaskInfo
from mezzo.emulation import (
    EmulatedAgentPool,
    EmulatedFrameworkPool,
    EmulatedScheduler,
    emulated_task,
    normal_duration,
    run_probe,
    task_duration,
)
from mezzo.state_client import fetch_metrics

from .conftest import wait_for


class Spread(mezzo.Scheduler):
    """One task per agent, each 'sleeping' 0.2 s on the emulated agent."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.launched: set[str] = set()
        self.finished: set[str] = set()
        self.done = threading.Event()

    def resource_offers(self, driver, offers):
        for o in offers:
            if o.agent_id in self.launched:
                driver.decline_offer(o.offer_id, Filters(refuse_seconds=60))
                continue
            self.launched.add(o.agent_id)
            driver.launch_tasks(o.offer_id, [TaskInfo(
                task_id=f"on-{o.hostname}", agent_id=o.agent_id, resources=Resources(cpus=1, mem=64),
                command=CommandInfo(value="sleep 0.2"))], Filters(refuse_seconds=60))

    def status_update(self, driver, status):
        if status.state == mezzo.TaskState.TASK_FINISHED:
            self.finished.add(status.task_id)
            if len(self.finished) == self.n:
                self.done.set()


@pytest.mark.parametrize("per_connection", [1, 10])
def test_emulated_agents_register_and_run_tasks(make_cluster, drivers, per_connection):
    cluster = make_cluster(0, master={"allocation_interval": 0.01})
    n = 50
    pool = EmulatedAgentPool(cluster.master, n, "cpus:2;mem:1024", agents_per_connection=per_connection)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(pool.start(), loop).result(30)
        asyncio.run_coroutine_threadsafe(pool.wait_registered(30), loop).result(35)
        state = cluster.state()
        assert len(state["agents"]) == n
        assert {a["hostname"] for a in state["agents"]} == {f"emulated-{i}" for i in range(n)}
        sched = Spread(n)
        drivers(sched, "spread", cluster.master)
        assert sched.done.wait(30), f"{len(sched.finished)} of {n} finished"
        wait_for(lambda: all(not a.unacked for a in pool.agents), 10, "every update to be acknowledged")
        state = cluster.state()
        assert state["tasks"] == []
        # Each task ran on the agent it was launched on, whichever connection carried it.
        done = {t["id"]: t["agent_id"] for t in state["completed_tasks"]}
        by_host = {a["hostname"]: a["id"] for a in state["agents"]}
        assert all(done[f"on-{host}"] == aid for host, aid in by_host.items())
    finally:
        asyncio.run_coroutine_threadsafe(pool.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


# -- emulated frameworks, the probe, the metrics, the processes -----------------------


AGENTS = 20
AGENT_RESOURCES = "cpus:2;mem:1024"
TASK = "cpus:1;mem:64"
SLOTS = 2 * AGENTS  # tasks of cpus:1 on agents of cpus:2


@contextmanager
def agent_pool(master: str, n: int, resources: str, per_connection: int = 5):
    """An EmulatedAgentPool on its own event-loop thread, registered; stopped on exit."""
    pool = EmulatedAgentPool(master, n, resources, agents_per_connection=per_connection)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def on_loop(fn):
        async def call():
            return fn()
        return asyncio.run_coroutine_threadsafe(call(), loop).result(5)

    pool.on_loop = on_loop  # read the pool's counters consistently, on its own thread
    try:
        asyncio.run_coroutine_threadsafe(pool.start(), loop).result(10)
        asyncio.run_coroutine_threadsafe(pool.wait_registered(10), loop).result(15)
        yield pool
    finally:
        asyncio.run_coroutine_threadsafe(pool.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


def snapshot(pool) -> tuple[int, int]:
    """(pool.running, tasks actually held by its agents), read on the pool's loop."""
    return pool.on_loop(lambda: (pool.running, sum(len(a.tasks) for a in pool.agents)))


@contextmanager
def framework_pool(master: str, count: int, duration, prefix: str):
    frameworks = EmulatedFrameworkPool(master, count, TASK, duration, name_prefix=prefix)
    frameworks.start()
    stopped = False
    try:
        wait_for(lambda: frameworks.registered_count() == count, 10, f"{count} frameworks to register")

        def stop():
            nonlocal stopped
            if not stopped:
                stopped = True
                frameworks.stop()

        frameworks.stop_now = stop
        yield frameworks
    finally:
        if not stopped:
            frameworks.stop()


def test_normal_duration_is_seeded_bounded_and_has_the_mean():
    draw = normal_duration(30.0, 10.0, seed=7)
    xs = [draw() for _ in range(20_000)]
    assert abs(statistics.fmean(xs) - 30.0) < 0.5
    assert abs(statistics.pstdev(xs) - 10.0) < 0.5
    again = normal_duration(30.0, 10.0, seed=7)
    assert [again() for _ in range(100)] == xs[:100]
    # Mostly below the minimum before clamping: every draw is clamped, none lower.
    low = normal_duration(0.0, 1.0, seed=3, minimum=0.25)
    ys = [low() for _ in range(5_000)]
    assert min(ys) == 0.25
    assert sum(y == 0.25 for y in ys) > 2_000
    assert max(ys) > 1.0
    # The default minimum is 0.1 s.
    assert min(normal_duration(-5.0, 0.1, seed=1)() for _ in range(100)) == 0.1


def test_emulated_task_carries_its_duration_for_emulated_and_real_agents():
    task = emulated_task("t-1", "agent-9", mezzo.Resources.parse(TASK), 1.25)
    assert task.agent_id == "agent-9" and task.task_id == "t-1"
    assert task_duration(task) == 1.25
    assert task.command.value == "sleep 1.250"
    task.labels = {}
    assert task_duration(task) == 1.25  # from the sleep command


def test_emulated_frameworks_keep_emulated_agents_busy(make_cluster):
    cluster = make_cluster(0, master={"allocation_interval": 0.01, "refuse_seconds": 0.2})
    with agent_pool(cluster.master, AGENTS, AGENT_RESOURCES) as pool, \
            framework_pool(cluster.master, 5, normal_duration(0.3, 0.05, seed=1), "load") as frameworks:
        busiest = 0
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            running, held = snapshot(pool)
            assert running == held, "pool.running drifted from the tasks its agents hold"
            assert 0 <= running <= SLOTS, f"{running} tasks on {SLOTS} slots"
            busiest = max(busiest, running)
            assert frameworks.counts()["running"] <= SLOTS
            time.sleep(0.02)
        counts = frameworks.counts()
        assert busiest > AGENTS // 2, f"at most {busiest} tasks ran at once"
        assert counts["failed"] == 0, counts
        # 2.5 s of 0.3 s tasks: well over one round of the slots.
        assert counts["finished"] > SLOTS, counts
        assert counts["launched"] >= counts["finished"]
        assert all(s.finished > 0 for s in frameworks.schedulers), "a framework starved"
        # Quiet: no more offers, so every launched task ends and both sides agree.
        for d in frameworks.drivers:
            d.set_needs_offers(False)
        wait_for(lambda: snapshot(pool) == (0, 0) and frameworks.counts()["running"] == 0, 5,
                 "the cluster to drain")
        time.sleep(0.2)  # no launch may still be on its way
        counts = frameworks.counts()
        assert snapshot(pool) == (0, 0)
        assert counts["finished"] == counts["launched"] and counts["failed"] == 0, counts
        wait_for(lambda: all(not a.unacked for a in pool.agents), 5, "every update to be acknowledged")
        assert fetch_metrics(cluster.master)["tasks_running"] == 0


def test_long_tasks_fill_every_slot_and_both_sides_agree(make_cluster):
    """With tasks longer than the test, the cluster settles with every slot taken:
    the agents' ``running``, the frameworks' ``running`` and the master agree."""
    n = 10
    cluster = make_cluster(0, master={"allocation_interval": 0.01, "refuse_seconds": 0.2})
    with agent_pool(cluster.master, n, AGENT_RESOURCES) as pool, \
            framework_pool(cluster.master, 5, normal_duration(600, 1, seed=2), "long") as frameworks:
        wait_for(lambda: snapshot(pool) == (2 * n, 2 * n), 10, "every slot to fill")
        wait_for(lambda: frameworks.counts()["running"] == 2 * n, 5, "the frameworks to see them run")
        time.sleep(0.3)  # nothing more may launch: the cluster is full
        counts = frameworks.counts()
        assert snapshot(pool) == (2 * n, 2 * n)
        assert counts["launched"] == counts["running"] == 2 * n, counts
        assert counts["finished"] == counts["failed"] == 0, counts
        metrics = fetch_metrics(cluster.master)
        assert metrics["tasks_running"] == 2 * n and metrics["agents"] == n and metrics["frameworks"] == 5
        # Frameworks leaving kill their tasks: the agents' count goes back to zero.
        frameworks.stop_now()
        wait_for(lambda: snapshot(pool) == (0, 0), 5, "the killed tasks to leave the agents")
        wait_for(lambda: fetch_metrics(cluster.master)["tasks_running"] == 0, 5, "the master to drop them")


def test_probe_on_a_loaded_cluster_records_its_steps_in_order(make_cluster):
    cluster = make_cluster(0, master={"allocation_interval": 0.01, "refuse_seconds": 0.2})
    with agent_pool(cluster.master, AGENTS, AGENT_RESOURCES) as pool, \
            framework_pool(cluster.master, 5, normal_duration(0.3, 0.05, seed=4), "busy") as frameworks:
        wait_for(lambda: frameworks.counts()["finished"] > AGENTS, 5, "the load to get going")
        seconds = 0.5
        probe = run_probe(cluster.master, TASK, seconds, timeout=10, name="probe")
        assert probe.outcome == "TASK_FINISHED", probe.outcome
        t = probe.times
        assert set(t) == {"started", "registered", "offered", "running", "finished"}
        assert t["started"] <= t["registered"] <= t["offered"] <= t["running"] <= t["finished"]
        assert t["finished"] - t["offered"] >= seconds
        assert frameworks.counts()["failed"] == 0
        assert snapshot(pool)[0] > 0  # the load was still there
    state = cluster.state()
    probe_tasks = [x for x in state["completed_tasks"] if x["id"] == "probe-task"]
    assert len(probe_tasks) == 1


# -- python -m mezzo.emulation ---------------------------------------------------------


class JsonLines:
    """A subprocess printing JSON lines, read on a thread so reads can time out."""

    def __init__(self, args: list[str], log_path) -> None:
        self.log = open(log_path, "wb")  # noqa: SIM115  (closed by close())
        self.proc = subprocess.Popen([sys.executable, "-m", "mezzo.emulation", *args],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     start_new_session=True)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def next(self, timeout: float) -> dict:
        line = self.lines.get(timeout=timeout)
        assert line is not None, f"exited with {self.proc.wait()} before printing a line"
        return json.loads(line)

    def until(self, predicate, timeout: float, what: str) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            row = self.next(max(0.01, deadline - time.monotonic()))
            if predicate(row):
                return row
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; last line {row}")

    def terminate(self, timeout: float) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()


def test_emulation_processes_report_json_lines_and_stop_on_sigterm(make_cluster, tmp_path):
    cluster = make_cluster(0, master={"allocation_interval": 0.01, "refuse_seconds": 0.2})
    common = ["--master", cluster.master, "--report-every", "0.2", "--register-timeout", "10"]
    agents = JsonLines(["agents", *common, "--count", "12", "--per-connection", "5",
                        "--resources", AGENT_RESOURCES], tmp_path / "agents.log")
    frameworks = None
    try:
        first = agents.next(15)
        assert first["registered"] == 12 and first["seconds"] >= 0 and "t" in first
        assert len(cluster.state()["agents"]) == 12
        frameworks = JsonLines(["frameworks", *common, "--count", "3", "--task", TASK,
                                "--duration", "0.3", "--stddev", "0.05", "--seed", "1"],
                               tmp_path / "frameworks.log")
        assert frameworks.next(15)["registered"] == 3
        busy = frameworks.until(lambda r: r["running"] > 0 and r["finished"] > 0, 8, "frameworks running tasks")
        assert busy["registered"] == 3 and busy["failed"] == 0
        assert set(busy) >= {"offers", "launched", "running", "finished", "failed", "declined"}
        row = agents.until(lambda r: r.get("running", 0) > 0, 5, "agents running tasks")
        assert row["registered"] == 12 and row["running"] <= 24 and row["updates_sent"] > 0
        started = time.monotonic()
        assert frameworks.terminate(5) == 0, (tmp_path / "frameworks.log").read_text()
        assert agents.terminate(5) == 0, (tmp_path / "agents.log").read_text()
        assert time.monotonic() - started < 6
        # Gone from the master too: the frameworks unregistered, the agents disconnected.
        wait_for(lambda: fetch_metrics(cluster.master)["frameworks"] == 0, 5, "the frameworks to leave")
        wait_for(lambda: not any(a["connected"] for a in cluster.state()["agents"]), 5,
                 "the agents to disconnect")
    finally:
        agents.close()
        if frameworks is not None:
            frameworks.close()


def test_v1_emulated_frameworks_run_tasks_and_a_v1_probe_finishes(make_cluster, tmp_path):
    # The same workload through the Mesos v1 façade (mezzo.emulation.v1_frameworks):
    # every launch, update and acknowledgement a separate HTTP request, none refused.
    from mezzo.emulation.v1_frameworks import run_v1_probe

    cluster = make_cluster(0, master={"allocation_interval": 0.01, "refuse_seconds": 0.2})
    common = ["--master", cluster.master, "--report-every", "0.2", "--register-timeout", "10"]
    agents = JsonLines(["agents", *common, "--count", "12", "--per-connection", "5",
                        "--resources", AGENT_RESOURCES], tmp_path / "agents.log")
    frameworks = None
    try:
        assert agents.next(15)["registered"] == 12
        frameworks = JsonLines(["frameworks", *common, "--api", "v1", "--count", "3", "--task", TASK,
                                "--duration", "0.3", "--stddev", "0.05", "--seed", "1"],
                               tmp_path / "frameworks.log")
        assert frameworks.next(15)["registered"] == 3
        busy = frameworks.until(lambda r: r["finished"] > 24, 10, "v1 frameworks finishing tasks")
        assert busy["registrations"] == 3 and busy["failed"] == 0 and busy["duplicates"] == 0
        assert busy["call_errors"] == 0 and busy["launched"] >= busy["finished"]
        names = sorted(f["name"] for f in cluster.state()["frameworks"])
        assert names == ["emulated-0", "emulated-1", "emulated-2"]  # the master knows them as any other
        probe = asyncio.run(run_v1_probe(cluster.master, TASK, 0.5, timeout=10, name="v1probe"))
        assert probe.outcome == "TASK_FINISHED", probe.outcome
        t = probe.times
        assert t["started"] <= t["registered"] <= t["offered"] <= t["running"] <= t["finished"]
        assert frameworks.terminate(5) == 0, (tmp_path / "frameworks.log").read_text()
    finally:
        agents.close()
        if frameworks is not None:
            frameworks.close()


# -- EmulatedScheduler: tasks_per_offer and max_tasks ----------------------------------


class FakeDriver:
    """Records what a scheduler asks of its driver."""

    def __init__(self) -> None:
        self.launches: list[tuple[str, list]] = []
        self.declines: list[str] = []
        self.needs_offers: list[bool] = []

    def launch_tasks(self, offer_id, tasks, filters=None):
        self.launches.append((offer_id, list(tasks) if isinstance(tasks, list) else [tasks]))

    def decline_offer(self, offer_id, filters=None):
        self.declines.append(offer_id)

    def set_needs_offers(self, needs):
        self.needs_offers.append(needs)


def fake_offer(i: int, resources: str) -> mezzo.Offer:
    return mezzo.Offer(offer_id=f"offer-{i}", framework_id="f", agent_id=f"agent-{i}", hostname=f"h{i}",
                       resources=Resources.parse(resources), attributes={}, executor_ids=[])


def scheduler(task: str = "cpus:1;mem:64", **kw) -> EmulatedScheduler:
    return EmulatedScheduler("s", Resources.parse(task), lambda: 600.0, **kw)


@pytest.mark.parametrize("per_offer,expected", [(1, 1), (2, 2), (3, 3), (0, 4), (10, 4)])
def test_tasks_per_offer_bounds_the_tasks_on_one_offer(per_offer, expected):
    s, d = scheduler(tasks_per_offer=per_offer), FakeDriver()
    s.resource_offers(d, [fake_offer(1, "cpus:4;mem:4096")])
    assert len(d.launches) == 1 and d.declines == []
    offer_id, tasks = d.launches[0]
    assert offer_id == "offer-1" and len(tasks) == expected
    assert {t.agent_id for t in tasks} == {"agent-1"}
    assert len({t.task_id for t in tasks}) == expected
    total = Resources()
    for t in tasks:
        total = total + t.resources
    assert total.fits_in(Resources.parse("cpus:4;mem:4096"))
    assert s.launched == expected and s.offers == 1 and s.declined == 0
    assert d.needs_offers == []


def test_filling_an_offer_is_bounded_by_every_resource():
    s, d = scheduler("cpus:1;mem:1000", tasks_per_offer=0), FakeDriver()
    s.resource_offers(d, [fake_offer(1, "cpus:8;mem:2500"), fake_offer(2, "cpus:0.5;mem:9000")])
    assert [(o, len(ts)) for o, ts in d.launches] == [("offer-1", 2)]  # mem runs out first
    assert d.declines == ["offer-2"]  # not even one task fits
    assert s.launched == 2 and s.declined == 1 and s.offers == 2


def test_max_tasks_launches_exactly_that_many_then_suppresses_offers_once():
    s, d = scheduler(tasks_per_offer=0, max_tasks=6), FakeDriver()
    s.resource_offers(d, [fake_offer(1, "cpus:4;mem:4096"), fake_offer(2, "cpus:4;mem:4096"),
                          fake_offer(3, "cpus:4;mem:4096")])
    assert [(o, len(ts)) for o, ts in d.launches] == [("offer-1", 4), ("offer-2", 2)]
    assert d.declines == ["offer-3"]
    assert s.launched == 6 and d.needs_offers == [False]
    # Offers already on their way are declined; suppression is not asked again.
    s.resource_offers(d, [fake_offer(4, "cpus:4;mem:4096")])
    assert d.declines == ["offer-3", "offer-4"] and s.launched == 6
    assert d.needs_offers == [False]
    assert len({t.task_id for _, ts in d.launches for t in ts}) == 6


def test_max_tasks_with_one_task_per_offer():
    s, d = scheduler(max_tasks=3), FakeDriver()
    for i in range(1, 6):
        s.resource_offers(d, [fake_offer(i, "cpus:4;mem:4096")])
        assert d.needs_offers == ([] if i < 3 else [False])
    assert [len(ts) for _, ts in d.launches] == [1, 1, 1]
    assert d.declines == ["offer-4", "offer-5"]
    assert s.launched == 3


def test_max_tasks_zero_launches_nothing():
    s, d = scheduler(max_tasks=0), FakeDriver()
    s.resource_offers(d, [fake_offer(1, "cpus:4;mem:4096")])
    assert d.launches == [] and d.declines == ["offer-1"] and d.needs_offers == [False]


def test_filling_offers_with_tasks_of_no_resources_is_refused():
    """``tasks_per_offer=0`` with an empty ``per_task`` would fill every offer forever
    (each task takes nothing from it): the scheduler must refuse that up front."""
    with pytest.raises(ValueError):
        EmulatedScheduler("s", Resources.parse("cpus:0"), lambda: 1.0, tasks_per_offer=0)
    with pytest.raises(ValueError):
        EmulatedScheduler("s", Resources.parse("cpus:1"), lambda: 1.0, tasks_per_offer=-1)


def test_the_pool_passes_tasks_per_offer_and_max_tasks_on():
    pool = EmulatedFrameworkPool("127.0.0.1:1", 2, TASK, lambda: 1.0, tasks_per_offer=0, max_tasks=7)
    assert [(s.tasks_per_offer, s.max_tasks) for s in pool.schedulers] == [(0, 7), (0, 7)]


def test_tasks_per_offer_zero_fills_a_real_agent_from_one_offer(make_cluster, drivers):
    cluster = make_cluster(0, master={"allocation_interval": 0.01, "refuse_seconds": 0.2})
    with agent_pool(cluster.master, 1, "cpus:4;mem:4096") as pool:
        s = EmulatedScheduler("fill", Resources.parse("cpus:1;mem:1024"), normal_duration(600, 1, seed=5),
                              tasks_per_offer=0)
        drivers(s, "fill", cluster.master)
        wait_for(lambda: snapshot(pool) == (4, 4), 10, "the agent to run 4 tasks")
        wait_for(lambda: s.running == 4, 5, "the framework to see them run")
        time.sleep(0.3)  # a full agent is offered no more
        assert (s.launched, s.offers, s.declined, s.failed) == (4, 1, 0, 0)
        metrics = fetch_metrics(cluster.master)
        assert metrics["tasks_running"] == 4
        [agent] = cluster.state()["agents"]
        assert agent["tasks"] == 4 and agent["free"] == {}, agent


@pytest.mark.parametrize("per_offer,max_tasks", [(1, 3), (0, 6)])
def test_max_tasks_stops_launching_and_stops_the_offers(make_cluster, drivers, per_offer, max_tasks):
    cluster = make_cluster(0, master={"allocation_interval": 0.01, "refuse_seconds": 0.1})
    with agent_pool(cluster.master, 2, "cpus:4;mem:4096") as pool:
        s = EmulatedScheduler("capped", Resources.parse("cpus:1;mem:64"), normal_duration(600, 1, seed=6),
                              tasks_per_offer=per_offer, max_tasks=max_tasks)
        drivers(s, "capped", cluster.master)
        wait_for(lambda: s.launched >= max_tasks, 10, f"{max_tasks} launches")
        wait_for(lambda: [f["active"] for f in cluster.state()["frameworks"]] == [False], 5,
                 "the master to see the framework suppress offers")
        wait_for(lambda: snapshot(pool) == (max_tasks, max_tasks), 5, "the agents to run them")
        time.sleep(0.1)  # offers already on their way arrive
        offers = s.offers
        # Free resources are left and refusals last 0.1 s: without the suppression
        # the master would offer them about ten times a second.
        time.sleep(1.0)
        assert s.offers == offers, "offers kept coming after max_tasks"
        assert s.launched == max_tasks and s.failed == 0
        assert snapshot(pool) == (max_tasks, max_tasks)
        metrics = fetch_metrics(cluster.master)
        assert metrics["tasks_running"] == max_tasks and metrics["offers_outstanding"] == 0
