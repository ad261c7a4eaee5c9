"""The delay-scheduling example framework (examples/delay_scheduling, paper §6.3).

Most tests drive the pure decision logic with a hand-made job and clock: a local
launch resets the wait, a job passes offers up until it has waited ``delay``
seconds, then launches non-local. The scheduler is tested against a recording
fake driver, and once for real against a master with emulated agents.
"""

from __future__ import annotations

import random

import mezzo
import pytest
from mezzo import Filters, FrameworkFilters, Offer, Resources, TaskState, TaskStatus

from examples.delay_scheduling import (
    REFUSE_MAX,
    REFUSE_MIN,
    DelayPolicy,
    Job,
    JobStream,
    LocalityScheduler,
    TaskDurations,
    random_placement,
    refuse_seconds_for,
    slots_in,
)
from examples.delay_scheduling.scheduler import OUTSIDE_PARTITION_REFUSE

from .conftest import wait_for
from .test_emulation import agent_pool


def job_of(*replicas: tuple[str, ...], at: float = 0.0) -> Job:
    """A job whose map i reads block-i, stored on ``replicas[i]``."""
    return Job("j", [(f"block-{i}", hosts) for i, hosts in enumerate(replicas)], submitted_at=at)


# -- placement and the job's pending set ----------------------------------------


def test_random_placement_puts_each_block_on_distinct_hosts_reproducibly():
    hosts = [f"h{i}" for i in range(10)]
    one = random_placement(hosts, 50, 3, random.Random(7))
    assert one == random_placement(hosts, 50, 3, random.Random(7))
    assert all(len(set(r)) == 3 and set(r) <= set(hosts) for _, r in one)
    assert len({name for name, _ in one}) == 50
    with pytest.raises(ValueError):
        random_placement(["a", "b"], 1, 3, random.Random(0))


def test_taking_a_map_removes_it_from_every_replica_host():
    job = job_of(("a", "b"), ("b", "c"), ("c", "a"))
    assert [t.index for t in job.take_local("b", 5)] == [0, 1]
    assert not job.has_local("b")
    assert [t.index for t in job.take_local("a", 5)] == [2]  # map 0 went with "b"
    assert job.pending == 0 and not job.has_local("c")
    job.requeue(job.maps[1])
    assert job.has_local("b") and job.has_local("c") and job.pending == 1


def test_take_any_takes_the_oldest_pending_maps():
    job = job_of(("a",), ("b",), ("c",))
    job.take_local("b", 1)
    assert [t.index for t in job.take_any(5)] == [0, 2]


# -- the delay-scheduling decision ----------------------------------------------


def test_a_local_map_is_launched_at_once_and_resets_the_wait():
    job = job_of(("a",), ("b",))
    policy = DelayPolicy(delay=1.0)
    assert policy.decide(job, "x", 1, now=0.0).tasks == []
    assert job.waiting_since == 0.0
    decision = policy.decide(job, "b", 4, now=0.5)
    assert [t.index for t in decision.local] == [1] and decision.remote == []
    assert job.waiting_since is None and job.local_launches == 1


def test_no_local_map_waits_for_the_delay_then_launches_remote():
    job = job_of(("a",), ("a",), ("a",))
    policy = DelayPolicy(delay=1.0)
    assert policy.decide(job, "z", 1, now=10.0).tasks == []   # the wait starts here
    assert policy.decide(job, "z", 1, now=10.9).tasks == []   # not long enough
    decision = policy.decide(job, "z", 1, now=11.0)
    assert decision.local == [] and [t.index for t in decision.remote] == [0]
    # Still waited long enough: later offers are taken remote too, until a local launch.
    assert [t.index for t in policy.decide(job, "y", 1, now=11.1).remote] == [1]
    assert job.remote_launches == 2 and job.local_launches == 0
    assert policy.decide(job, "a", 1, now=11.2).local  # resets the wait
    assert job.waiting_since is None


def test_the_wait_counts_from_the_first_offer_passed_up_not_the_last_local_launch():
    job = job_of(("a",), ("b",))
    policy = DelayPolicy(delay=1.0)
    assert policy.decide(job, "a", 1, now=0.0).local
    # Ten seconds without offers (a full cluster) is no wait for locality.
    assert policy.decide(job, "z", 1, now=10.0).tasks == []
    assert policy.decide(job, "z", 1, now=11.0).remote


def test_zero_delay_launches_remote_on_the_first_offer():
    job = job_of(("a",), ("a",))
    decision = DelayPolicy(delay=0.0).decide(job, "z", 4, now=3.0)
    assert [t.index for t in decision.remote] == [0, 1]


def test_a_decision_never_exceeds_the_free_slots():
    job = job_of(*[("a",)] * 5)
    policy = DelayPolicy(delay=0.0)
    assert len(policy.decide(job, "a", 2, now=0.0).local) == 2
    assert policy.decide(job, "a", 0, now=0.0).tasks == []
    assert job.pending == 3


def test_refuse_seconds_follow_the_delay_within_bounds():
    assert refuse_seconds_for(0.0) == REFUSE_MIN
    assert refuse_seconds_for(0.75) == 0.75
    assert refuse_seconds_for(5.0) == REFUSE_MAX
    with pytest.raises(ValueError):
        DelayPolicy(-1)


def test_slots_and_durations():
    assert slots_in(Resources(cpus=4, mem=2048), Resources(cpus=1, mem=1024)) == 2
    assert slots_in(Resources(cpus=0.5, mem=2048), Resources(cpus=1, mem=1024)) == 0
    d = TaskDurations(2.0, 0.0, remote_factor=1.5, seed=1)
    assert d(True) == 2.0 and d(False) == 3.0


# -- the scheduler against a recording driver -----------------------------------


class FakeDriver:
    """Records the driver calls the scheduler makes."""

    def __init__(self) -> None:
        self.launched: list[tuple[str, list, Filters]] = []
        self.declined: list[tuple[str, Filters]] = []
        self.needs: list[bool] = []
        self.filters: list[FrameworkFilters] = []

    def launch_tasks(self, offer_id, tasks, filters=None):
        self.launched.append((offer_id, list(tasks), filters))

    def decline_offer(self, offer_id, filters=None):
        self.declined.append((offer_id, filters))

    def set_needs_offers(self, needs):
        self.needs.append(needs)

    def set_filters(self, filters):
        self.filters.append(filters)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FixedStream(JobStream):
    """Every job reads the same blocks: map i on ``replicas[i]``."""

    def __init__(self, *replicas: tuple[str, ...]) -> None:
        super().__init__("fw", ["unused"], maps=len(replicas))
        self.replicas_of = replicas
        self.count = 0

    def next_job(self, now: float) -> Job:
        self.count += 1
        job = job_of(*self.replicas_of, at=now)
        job.job_id = f"fw-job{self.count}"
        return job


def offer(host: str, cpus: float = 2, n: int = 0) -> Offer:
    return Offer(offer_id=f"o-{host}-{n}", framework_id="f", agent_id=f"id-{host}", hostname=host,
                 resources=Resources(cpus=cpus, mem=1024 * cpus))


def finished(task) -> TaskStatus:
    return TaskStatus(task_id=task.task_id, state=TaskState.TASK_FINISHED, uuid="u" + task.task_id)


def make_scheduler(*replicas, delay=1.0, jobs=None, partition=None):
    clock = Clock()
    s = LocalityScheduler(FixedStream(*replicas), DelayPolicy(delay), TaskDurations(2.0, 0.0, 2.0),
                          per_task=Resources(cpus=1, mem=1024), jobs=jobs, partition=partition, clock=clock)
    driver = FakeDriver()
    s.registered(driver, "f", "m")
    return s, driver, clock


def test_scheduler_launches_local_declines_then_goes_remote_after_the_delay():
    s, driver, clock = make_scheduler(("a",), ("b",))
    s.resource_offers(driver, [offer("a"), offer("x")])
    (oid, tasks, filters), = driver.launched
    assert oid == "o-a-0" and [t.labels["block"] for t in tasks] == ["block-0"]
    assert tasks[0].labels["locality"] == "node-local" and tasks[0].labels["duration"] == "2.000"
    assert filters.refuse_seconds == 1.0
    assert driver.declined == [("o-x-0", Filters(refuse_seconds=1.0))]
    clock.now = 1.0
    s.resource_offers(driver, [offer("x", n=1)])
    remote = driver.launched[-1][1]
    assert [t.labels["block"] for t in remote] == ["block-1"] and remote[0].labels["locality"] == "remote"
    assert remote[0].labels["duration"] == "4.000"  # remote maps take remote_factor longer
    assert (s.local_launches, s.remote_launches, s.locality) == (1, 1, 0.5)
    assert driver.needs[-1] is False  # every map launched: offers suppressed


def test_scheduler_runs_jobs_back_to_back_and_revives_for_each():
    s, driver, clock = make_scheduler(("a",), jobs=2)
    assert driver.needs == [True]
    for n in range(2):
        s.resource_offers(driver, [offer("a", n=n)])
        clock.now += 3
        s.status_update(driver, finished(driver.launched[-1][1][0]))
    assert [j.job_id for j in s.completed] == ["fw-job1", "fw-job2"]
    assert [j.seconds for j in s.completed] == [3.0, 3.0]
    assert driver.needs == [True, False, True, False]
    assert s.all_done.is_set() and s.job is None


def test_a_lost_map_is_pending_again():
    s, driver, _ = make_scheduler(("a",), ("a",))
    s.resource_offers(driver, [offer("a")])
    task = driver.launched[0][1][0]
    s.status_update(driver, TaskStatus(task_id=task.task_id, state=TaskState.TASK_LOST, uuid="x"))
    assert s.lost == 1 and s.job.pending == 1 and driver.needs[-1] is True
    s.resource_offers(driver, [offer("a", n=1)])
    assert driver.launched[-1][1][0].labels["block"] == task.labels["block"]


def test_static_partition_installs_the_agent_filter_and_refuses_other_hosts():
    s, driver, _ = make_scheduler(("a",), ("z",), delay=0.0, partition={"a", "b"})
    assert driver.filters == [FrameworkFilters(agents=["a", "b"])]
    s.resource_offers(driver, [offer("z"), offer("b")])
    assert driver.declined == [("o-z-0", Filters(refuse_seconds=OUTSIDE_PARTITION_REFUSE))]
    assert [t.agent_id for t in driver.launched[0][1]] == ["id-b", "id-b"]


# -- for real: a master and emulated agents --------------------------------------


def test_frameworks_reach_high_locality_on_a_real_master(make_cluster):
    """Two frameworks on six emulated agents of 2 slots, blocks with 2 replicas each: with a
    1 s delay nearly every map runs where its block is; a statically partitioned framework
    only ever runs on its partition."""
    cluster = make_cluster(0)
    with agent_pool(cluster.master, 6, "cpus:2;mem:2048", per_connection=3):
        hosts = [f"emulated-{i}" for i in range(6)]
        shared = [LocalityScheduler(JobStream(f"fw{i}", hosts, maps=12, replicas=2, seed=i), DelayPolicy(1.0),
                                    TaskDurations(0.3, 0.05, 2.0, seed=i), per_task=Resources(cpus=1, mem=512),
                                    jobs=2) for i in range(2)]
        static = LocalityScheduler(JobStream("st", hosts, maps=12, replicas=2, seed=9), DelayPolicy(0.0),
                                   TaskDurations(0.3, 0.05, 2.0), per_task=Resources(cpus=1, mem=512), jobs=1,
                                   partition=hosts[:2])
        drivers = [mezzo.SchedulerDriver(s, mezzo.FrameworkInfo(name=f"fw{i}"), cluster.master)
                   for i, s in enumerate([*shared, static])]
        for d in drivers:
            d.start()
        try:
            wait_for(lambda: all(s.all_done.is_set() for s in [*shared, static]), 60, "every job to finish")
        finally:
            for d in drivers:
                d.stop()
            for d in drivers:
                d.join()
    for s in shared:
        assert [len(j.maps) for j in s.completed] == [12, 12] and s.lost == 0
        assert s.locality >= 0.75, (s.local_launches, s.remote_launches)
    assert set(static.launched_on) <= set(hosts[:2]) and sum(static.launched_on.values()) == 12
