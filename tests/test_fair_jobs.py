"""Many jobs at once with fair sharing and delay scheduling (examples/delay_scheduling/fair.py,
the paper's §6.1), and the §6.1 workloads (mix.py).

The scheduler's logic is driven by hand against a recording fake driver and a hand-set
clock; then it runs for real on two agents, and once as ``python -m
examples.delay_scheduling --mix facebook``.
"""

from __future__ import annotations

import collections
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import mezzo
from examples.delay_scheduling import (
    FACEBOOK_BINS,
    DelayPolicy,
    FairJob,
    FairJobsScheduler,
    JobSpec,
    Submission,
    facebook_mix,
    large_mix,
)
from examples.delay_scheduling.__main__ import agent_hostnames, main
from examples.delay_scheduling.mix import bin_counts
from mezzo import Filters, Offer, Resources, TaskState, TaskStatus

from . import test_delay_scheduling
from .conftest import wait_for

ROOT = Path(__file__).resolve().parents[1]
SLOT = Resources(cpus=1, mem=256)


class FakeDriver(test_delay_scheduling.FakeDriver):
    """The delay-scheduling tests' recording driver, plus the last launch's tasks."""

    @property
    def last(self) -> list[mezzo.TaskInfo]:
        return self.launched[-1][1]


Clock = test_delay_scheduling.Clock


_offers = iter(range(1_000_000))


def offer(host: str, slots: int = 1) -> Offer:
    return Offer(
        offer_id=f"o{next(_offers)}",
        framework_id="f",
        agent_id=f"id-{host}",
        hostname=host,
        resources=Resources(cpus=slots, mem=256 * slots),
    )


def ended(task: mezzo.TaskInfo, state: int = TaskState.TASK_FINISHED) -> TaskStatus:
    return TaskStatus(task_id=task.task_id, state=state, uuid="u-" + task.task_id)


def make(hosts=("a",), delay=0.0, **kwargs):
    clock = Clock()
    s = FairJobsScheduler("fw", list(hosts), DelayPolicy(delay), per_task=SLOT, clock=clock, **kwargs)
    driver = FakeDriver()
    s.registered(driver, "f", "m")
    return s, driver, clock


def jobs_of(tasks: list[mezzo.TaskInfo]) -> list[str]:
    return [t.labels["job"] for t in tasks]


# -- fair sharing -------------------------------------------------------------------


def test_a_new_small_job_gets_the_next_slots_ahead_of_a_big_running_job():
    s, driver, clock = make()
    big = s.submit(JobSpec("big", maps=20))
    s.resource_offers(driver, [offer("a", 4)])
    assert jobs_of(driver.last) == [big.job_id] * 4 and big.running == 4
    clock.now = 1.0
    small = s.submit(JobSpec("small", maps=2))
    s.resource_offers(driver, [offer("a", 4)])
    # The small job has none running: it takes a slot at a time until it has no more
    # maps, then the big job (4 running) takes the rest.
    assert jobs_of(driver.last) == [small.job_id] * 2 + [big.job_id] * 2
    assert (small.running, big.running, big.pending) == (2, 6, 14)


def test_equal_jobs_take_turns_slot_by_slot():
    s, driver, _ = make()
    one, two = s.submit(JobSpec("x", maps=5)), s.submit(JobSpec("x", maps=5))
    s.resource_offers(driver, [offer("a", 5)])
    # Ties on running tasks go to the job submitted first.
    assert jobs_of(driver.last) == [one.job_id, two.job_id] * 2 + [one.job_id]
    (launch,) = driver.launched
    assert launch[2] == Filters(refuse_seconds=0.5)  # one launch_tasks for the whole offer


def test_ids_labels_and_counters():
    s, driver, _ = make()
    job = s.submit(JobSpec("selection (1)", maps=2, reduces=1, map_seconds=1.0))
    assert (job.job_id, job.kind, job.spec.maps, s.jobs_submitted) == ("fw-job1", "selection (1)", 2, 1)
    s.resource_offers(driver, [offer("a", 2)])
    tasks = driver.last
    assert [t.task_id for t in tasks] == ["fw-job1-m0-1", "fw-job1-m1-1"]
    assert all(t.labels["job"] == "fw-job1" and t.labels["phase"] == "map" for t in tasks)
    assert tasks[0].labels["locality"] == "node-local" and tasks[0].resources == SLOT
    assert (s.offers, s.local_launches, job.local_launches) == (1, 2, 2)
    assert s.submit(JobSpec("x", maps=1)).job_id == "fw-job2"
    with pytest.raises(ValueError):
        JobSpec("x", maps=0)
    with pytest.raises(ValueError):
        JobSpec("x", maps=1, reduces=-1)


# -- reduces, job ends, lost tasks ------------------------------------------------------


def test_reduces_run_only_after_every_map_finished():
    done: list[tuple[FairJob, bool]] = []
    s, driver, clock = make(on_job_done=lambda job: done.append((job, job in s.completed)))
    assert s.idle.is_set() and s.active == 0
    job = s.submit(JobSpec("aggregation", maps=2, reduces=2))
    assert not s.idle.is_set() and s.active == 1
    s.resource_offers(driver, [offer("a", 4)])
    maps = driver.last
    assert [t.labels["phase"] for t in maps] == ["map", "map"]
    clock.now = 2.0
    s.status_update(driver, ended(maps[0]))
    s.resource_offers(driver, [offer("a", 4)])
    assert len(driver.launched) == 1 and len(driver.declined) == 1  # one map still running: no reduce
    s.status_update(driver, ended(maps[1]))
    assert job.pending_reduces == 2
    s.resource_offers(driver, [offer("a", 4)])
    reduces = driver.last
    assert [t.task_id for t in reduces] == ["fw-job1-r0-1", "fw-job1-r1-1"]
    assert all(t.labels["phase"] == "reduce" and "locality" not in t.labels for t in reduces)
    clock.now = 5.0
    s.status_update(driver, ended(reduces[0]))
    assert not done and s.active == 1
    s.status_update(driver, ended(reduces[1]))
    assert done == [(job, True)] and s.completed == [job] and s.active == 0 and s.idle.is_set()
    assert (job.finished_at, job.seconds, job.running) == (5.0, 5.0, 0)


def test_a_lost_task_runs_again_and_duplicates_are_ignored():
    s, driver, _ = make()
    job = s.submit(JobSpec("x", maps=2, reduces=1))
    s.resource_offers(driver, [offer("a", 1)])
    (first,) = driver.last
    s.status_update(driver, ended(first, TaskState.TASK_LOST))
    s.status_update(driver, ended(first, TaskState.TASK_LOST))  # a duplicate
    s.status_update(driver, TaskStatus(task_id="nobody", state=TaskState.TASK_FAILED, uuid="x"))
    assert (s.lost, job.running, job.pending) == (1, 0, 2)
    s.resource_offers(driver, [offer("a", 2)])
    # The second attempt of map 0 (a requeued map goes to the back of the queue).
    assert [t.task_id for t in driver.last] == ["fw-job1-m1-1", "fw-job1-m0-2"]
    for task in driver.last:
        s.status_update(driver, ended(task))
    s.resource_offers(driver, [offer("a", 2)])
    (reduce,) = driver.last
    s.status_update(driver, ended(reduce, TaskState.TASK_FAILED))  # reduces are re-run too
    s.resource_offers(driver, [offer("a", 2)])
    assert [t.task_id for t in driver.last] == ["fw-job1-r0-2"]
    s.status_update(driver, ended(driver.last[0]))
    assert s.lost == 2 and s.completed == [job]


# -- suppress / revive ----------------------------------------------------------------


def test_offers_are_suppressed_while_nothing_is_pending_and_revived_on_submit():
    s, driver, _ = make()
    assert driver.needs == [False]  # registered with no job
    job = s.submit(JobSpec("x", maps=1, reduces=1))
    s.submit(JobSpec("y", maps=1))
    # Submit always revives (clearing refuse filters), even when offers are wanted.
    assert driver.needs == [False, True, True]
    s.resource_offers(driver, [offer("a", 4)])
    assert driver.needs[-1] is False and len(driver.last) == 2
    s.status_update(driver, ended(driver.last[0], TaskState.TASK_KILLED))
    assert driver.needs[-1] is True  # the requeued map wants a slot
    s.resource_offers(driver, [offer("a", 1)])
    assert driver.needs[-1] is False
    s.status_update(driver, ended(driver.last[0]))
    assert job.pending_reduces == 1 and driver.needs[-1] is True  # the reduces want slots now
    n = len(driver.needs)
    s.resource_offers(driver, [offer("a", 1)])
    s.resource_offers(driver, [offer("a", 1)])  # arrived after the suppress: declined, suppress again
    assert driver.needs[n:] == [False, False] and len(driver.declined) == 1


def test_submit_before_registration_keeps_offers_wanted():
    s = FairJobsScheduler("fw", ["a"], DelayPolicy(0), per_task=SLOT)
    s.submit(JobSpec("x", maps=1))
    driver = FakeDriver()
    s.registered(driver, "f", "m")
    assert driver.needs == []  # a framework registers wanting offers
    s.resource_offers(driver, [offer("a")])
    assert len(driver.last) == 1


# -- delay scheduling per job ---------------------------------------------------------


def test_a_job_without_a_local_block_passes_the_host_to_the_next_job_until_its_delay():
    s, driver, clock = make(hosts=("a", "b"), delay=1.0, replicas=1, stddev=0.0, remote_factor=2.0)
    waiting = s.submit(JobSpec("one map", maps=1, map_seconds=1.0))
    home = waiting.maps[0].replicas[0]
    other = "b" if home == "a" else "a"
    local = s.submit(JobSpec("four maps", maps=4, map_seconds=1.0))
    assert local.has_local(other)  # this seed puts one of its blocks there
    s.resource_offers(driver, [offer(other)])
    # The first job (no tasks running) passes `other` up; its wait starts.
    (task,) = driver.last
    assert task.labels["job"] == local.job_id and task.labels["locality"] == "node-local"
    assert waiting.waiting_since == 0.0 and waiting.running == 0
    clock.now = 1.0
    s.resource_offers(driver, [offer(other)])
    # It has waited its delay: the host is good enough now, and it still comes first.
    (task,) = driver.last
    assert task.labels["job"] == waiting.job_id and task.labels["locality"] == "remote"
    assert task.labels["duration"] == "2.000"  # remote_factor
    assert (waiting.remote_launches, s.remote_launches, s.locality) == (1, 1, 0.5)


def test_a_job_passes_up_the_rest_of_an_offer_after_taking_its_local_block():
    s, driver, clock = make(hosts=("a", "b"), delay=5.0, replicas=1)
    job = s.submit(JobSpec("x", maps=8))
    on_a = sum("a" in m.replicas for m in job.maps)
    assert 0 < on_a < 8
    s.resource_offers(driver, [offer("a", 8)])
    # One slot at a time: it takes what is local, then passes the other slots up (its wait
    # starts), and the unused rest of the offer is refused briefly.
    assert len(driver.last) == on_a and all(t.labels["locality"] == "node-local" for t in driver.last)
    assert job.waiting_since == 0.0 and driver.launched[-1][2] == Filters(refuse_seconds=1.0)


# -- threads and callbacks --------------------------------------------------------------


def test_on_job_done_may_submit_the_next_job_without_idle_flickering():
    seen_idle: list[bool] = []

    def next_job(job: FairJob) -> None:
        if s.jobs_submitted < 2:
            s.submit(JobSpec("next", maps=1))
        seen_idle.append(s.idle.is_set())

    s, driver, _ = make(on_job_done=next_job)
    s.submit(JobSpec("first", maps=1))
    for _ in range(2):
        s.resource_offers(driver, [offer("a")])
        s.status_update(driver, ended(driver.last[0]))
    assert [j.job_id for j in s.completed] == ["fw-job1", "fw-job2"]
    assert seen_idle == [False, False] and s.idle.is_set()


def test_submit_is_thread_safe():
    s, driver, _ = make()
    threads = [
        threading.Thread(target=lambda: [s.submit(JobSpec("x", maps=2)) for _ in range(25)]) for _ in range(4)
    ]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        s.resource_offers(driver, [offer("a", 3)])
    s.resource_offers(driver, [offer("a", 400)])
    ids = [t.task_id for _, tasks, _ in driver.launched for t in tasks]
    assert s.jobs_submitted == 100 and s.active == 100 and len(ids) == len(set(ids)) == 200
    assert {i.split("-m")[0] for i in ids} == {f"fw-job{n}" for n in range(1, 101)}


def test_durations_are_normal_around_the_mean_and_the_same_for_a_seed():
    def durations(seed: int) -> list[str]:
        s, driver, _ = make(seed=seed, stddev=0.1)
        s.submit(JobSpec("x", maps=50, map_seconds=2.0))
        s.resource_offers(driver, [offer("a", 50)])
        return [t.labels["duration"] for t in driver.last]

    one = durations(1)
    assert one == durations(1) and one != durations(2)
    seconds = [float(d) for d in one]
    assert 1.9 < sum(seconds) / 50 < 2.1 and min(seconds) > 1.4 and max(seconds) < 2.6


# -- the workloads ----------------------------------------------------------------------


def test_facebook_mix_is_the_papers_job_counts_in_a_seeded_order():
    mix = facebook_mix()
    assert len(mix) == 100 and all(isinstance(m, Submission) for m in mix)
    counts = collections.Counter(m.spec.kind for m in mix)
    assert [counts[spec.kind] for spec, _ in FACEBOOK_BINS] == [38, 18, 14, 12, 6, 6, 4, 2]
    assert [(s.maps, s.reduces) for s, _ in FACEBOOK_BINS] == [
        (1, 0),
        (2, 0),
        (4, 1),
        (6, 0),
        (10, 2),
        (16, 0),
        (24, 0),
        (32, 4),
    ]
    at = [m.at for m in mix]
    assert at[0] == 0.0 and at == sorted(at) and 2.0 < at[-1] / 99 < 4.5  # mean inter-arrival about 3 s
    assert facebook_mix(seed=0) == mix and facebook_mix(seed=1) != mix
    assert [m.spec.kind for m in mix] != [
        spec.kind for spec, n in FACEBOOK_BINS for _ in range(n)
    ]  # shuffled
    join = next(m.spec for m in mix if m.spec.kind == "join (8)")
    assert (join.map_seconds, join.reduce_seconds) == (3.5, 5.0)


def test_facebook_mix_scales_job_counts_and_times():
    for jobs in [8, 20, 50, 137]:
        counts = bin_counts(jobs)
        assert sum(counts) == jobs and min(counts) >= 1 and counts[0] == max(counts)
        assert len(facebook_mix(jobs=jobs)) == jobs
    assert bin_counts(8) == [1] * 8 and bin_counts(50) == [19, 9, 7, 6, 3, 3, 2, 1]
    assert sum(bin_counts(3)) == 3 and bin_counts(0) == [0] * 8
    fast, slow = facebook_mix(jobs=30, time_scale=0.1, seed=4), facebook_mix(jobs=30, seed=4)
    assert [f.spec.kind for f in fast] == [s.spec.kind for s in slow]
    assert all(f.at == pytest.approx(s.at * 0.1) for f, s in zip(fast, slow, strict=True))
    assert all(
        f.spec.map_seconds == pytest.approx(s.spec.map_seconds * 0.1) for f, s in zip(fast, slow, strict=True)
    )


def test_large_mix():
    assert large_mix() == [JobSpec("text search (large)", maps=60, reduces=0, map_seconds=4.0)] * 10
    assert [s.maps for s in large_mix(jobs=2, maps=5, map_seconds=1.0)] == [5, 5]


def test_help_stays_clean(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    out = capsys.readouterr()
    assert exit_.value.code == 0 and "--mix {facebook,large}" in out.out and out.err == ""


# -- for real -------------------------------------------------------------------------


class Timed(FairJobsScheduler):
    """Records when each status update arrived (driver thread)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.updates: list[tuple[float, str, int]] = []

    def status_update(self, driver, status):
        self.updates.append((time.monotonic(), status.task_id, status.state))
        super().status_update(driver, status)


def test_jobs_with_reduces_complete_on_real_agents(make_cluster, drivers):
    cluster = make_cluster(2, master={"allocation_interval": 0.02})
    hosts = agent_hostnames(cluster.master)
    assert hosts == ["agent-1", "agent-2"]
    s = Timed("fair", hosts, DelayPolicy(0.5), per_task=Resources(cpus=1, mem=64), seed=3)
    specs = [
        JobSpec("a", maps=6, reduces=2, map_seconds=0.3, reduce_seconds=0.2),
        JobSpec("b", maps=2, map_seconds=0.2),
        JobSpec("c", maps=8, reduces=1, map_seconds=0.3, reduce_seconds=0.2),
        JobSpec("d", maps=1, reduces=1, map_seconds=0.2, reduce_seconds=0.2),
    ]

    def submit_all() -> None:
        for spec in specs:
            s.submit(spec)
            time.sleep(0.2)

    drivers(s, "fair", cluster.master)
    submitter = threading.Thread(target=submit_all)
    submitter.start()
    submitter.join()
    wait_for(lambda: len(s.completed) == len(specs) and s.idle.is_set(), 30, "every job to finish")
    assert s.lost == 0 and sorted(j.kind for j in s.completed) == ["a", "b", "c", "d"]
    first_update: dict[str, float] = {}
    finished_at: dict[str, float] = {}
    for at, task_id, state in s.updates:
        first_update.setdefault(task_id, at)
        if state == TaskState.TASK_FINISHED:
            finished_at[task_id] = at
    assert set(finished_at) == set(first_update)  # every task ran to the end
    for job in s.completed:
        maps = [t for t in finished_at if t.startswith(f"{job.job_id}-m")]
        reduces = [t for t in finished_at if t.startswith(f"{job.job_id}-r")]
        assert (len(maps), len(reduces)) == (job.spec.maps, job.spec.reduces)
        last_map = max(finished_at[t] for t in maps)
        assert all(first_update[t] > last_map for t in reduces), job.job_id
        assert job.seconds is not None and job.seconds > 0
    assert s.local_launches == 17  # two hosts, two replicas: every block is on both


def test_the_facebook_mix_runs_from_the_command_line(make_cluster):
    cluster = make_cluster(2, master={"allocation_interval": 0.02})
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "examples.delay_scheduling",
            "--master",
            cluster.master,
            "--mix",
            "facebook",
            "--mix-jobs",
            "8",
            "--time-scale",
            "0.1",
            "--mem",
            "64",
            "--delay",
            "0.5",
            "--timeout",
            "40",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, (r.stdout, r.stderr)
    lines = [line for line in r.stdout.splitlines() if line.startswith("delay-scheduling-job")]
    assert len(lines) == 8, r.stdout
    assert {line.split(": ")[1].split(",")[0] for line in lines} == {spec.kind for spec, _ in FACEBOOK_BINS}
    assert "8 of 8 jobs finished" in r.stdout
