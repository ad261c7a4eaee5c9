"""The MPI example framework (examples/mpi, the paper's §5 port): gang scheduling.

The gang's rules run on hand-made offers and a hand-turned clock; the scheduler runs
once against a recording driver and a stand-in mpiexec; and the framework runs for
real, ``python -m examples.mpi``, against a cluster of real agents with MPICH's own
``mpiexec`` and a real MPI program (``examples/mpi/pi.c``, compiled with ``mpicc``):
a job across two agents, a rank that dies, and two jobs that could deadlock.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from examples.mpi import Gang, JobOutcome, LaunchError, MpiScheduler, ranks_in
from examples.mpi.gang import BACKOFF_MAX
from mezzo import Filters, Offer, Resources, TaskState, TaskStatus

PI_SOURCE = Path(__file__).resolve().parent.parent / "examples" / "mpi" / "pi.c"
PER_RANK = Resources(cpus=1, mem=64)


def offer(oid: str, agent: str = "a1", cpus: float = 2, mem: float = 1024) -> Offer:
    return Offer(
        offer_id=oid,
        framework_id="fw",
        agent_id=agent,
        hostname=agent,
        resources=Resources(cpus=cpus, mem=mem),
    )


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# -- the gang ------------------------------------------------------------------------------


def test_ranks_in_counts_whole_ranks():
    assert ranks_in(Resources(cpus=2.5, mem=1024), PER_RANK) == 2
    assert ranks_in(Resources(cpus=4, mem=100), PER_RANK) == 1  # memory for one
    assert ranks_in(Resources(cpus=0.5, mem=1024), PER_RANK) == 0


def test_a_gang_holds_offers_until_every_rank_fits_and_places_rank_0_first():
    clock = Clock()
    gang = Gang(3, PER_RANK, hold_timeout=5, clock=clock)
    assert not gang.hold(offer("tiny", cpus=0.5))  # no rank fits: the caller declines it
    assert gang.hold(offer("o1", "a1", cpus=2))
    assert gang.slots == 2 and not gang.complete
    assert gang.hold(offer("o2", "a2", cpus=4))
    assert gang.complete
    placed, unused = gang.take()
    assert [([o.offer_id for o in offers], n) for offers, n in placed] == [(["o1"], 2), (["o2"], 1)]
    assert unused == [] and gang.held == {} and gang.since is None


def test_offers_of_one_agent_are_pooled_a_rank_taking_cpus_from_one_and_memory_from_another():
    gang = Gang(2, PER_RANK, hold_timeout=5, clock=Clock())
    assert gang.hold(offer("big", "a1", cpus=1, mem=4096))  # a rank, and memory to spare
    assert gang.hold(offer("cpu", "a1", cpus=1, mem=32))  # alone it fits none; with "big", one more
    assert not gang.hold(offer("mem", "a1", cpus=0, mem=4096))  # no cpu to go with it: declined
    assert not gang.hold(offer("elsewhere", "a2", cpus=1, mem=32))  # nothing of a2's to pool with
    assert gang.complete
    placed, unused = gang.take()
    assert [([o.offer_id for o in offers], n) for offers, n in placed] == [(["big", "cpu"], 2)]
    assert unused == []


def test_offers_not_needed_are_given_back():
    gang = Gang(1, PER_RANK, hold_timeout=5, clock=Clock())
    gang.hold(offer("o1", "a1"))
    gang.hold(offer("o2", "a2"))
    placed, unused = gang.take()
    assert [[o.offer_id for o in offers] for offers, _ in placed] == [["o1"]] and unused == ["o2"]


def test_a_gang_that_waits_too_long_gives_up_with_a_growing_random_backoff():
    clock = Clock()
    gang = Gang(4, PER_RANK, hold_timeout=2, rng=random.Random(3), clock=clock)
    assert not gang.expired()  # nothing held: nothing to give up
    gang.hold(offer("o1"))
    clock.now += 1.9
    assert not gang.expired()
    clock.now += 0.1
    assert gang.expired()
    ids, first = gang.give_up()
    assert ids == ["o1"] and gang.held == {} and not gang.expired()
    assert 2 <= first < 4  # [1, 2) x the hold timeout
    gang.hold(offer("o2"))
    clock.now += 2
    _, second = gang.give_up()
    assert 4 <= second < 8  # doubled on the second try
    for _ in range(10):
        gang.hold(offer("o3"))
        _, backoff = gang.give_up()
    assert backoff == BACKOFF_MAX


def test_a_gang_still_growing_keeps_what_it_holds_and_gives_up_once_it_stops():
    clock = Clock()
    gang = Gang(4, PER_RANK, hold_timeout=2, clock=clock)
    gang.hold(offer("o1", cpus=1))
    clock.now += 1.5
    gang.hold(offer("o2", cpus=1))  # a slot more: the clock starts again
    clock.now += 1.5
    gang.hold(offer("o3", cpus=1))
    clock.now += 1.9
    assert not gang.expired() and gang.slots == 3  # 4.9 s since o1, 1.9 since the last slot
    gang.rescinded("o3")
    gang.hold(offer("o3b", cpus=1))  # what was rescinded, offered again: no new high
    clock.now += 0.1
    assert gang.expired()


def test_rescinded_offers_leave_the_gang_and_its_clock_restarts():
    clock = Clock()
    gang = Gang(3, PER_RANK, hold_timeout=2, clock=clock)
    gang.hold(offer("o1"))
    clock.now += 1.5
    gang.rescinded("o1")
    assert gang.slots == 0 and gang.since is None
    gang.hold(offer("o2"))
    clock.now += 1.5
    assert not gang.expired()  # 1.5 s since o2, not 3 since o1


@pytest.mark.parametrize("ranks, per_rank", [(0, PER_RANK), (2, Resources())])
def test_a_gang_needs_ranks_and_resources(ranks, per_rank):
    with pytest.raises(ValueError):
        Gang(ranks, per_rank, hold_timeout=1)


# -- the scheduler, against a recording driver ---------------------------------------------


class RecordingDriver:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __getattr__(self, name):
        return lambda *args: self.calls.append((name, *args))

    def named(self, name: str) -> list[tuple]:
        return [c[1:] for c in self.calls if c[0] == name]


class StandInLauncher:
    """What MpiScheduler needs of MpiexecLauncher, without mpiexec."""

    made: list[StandInLauncher] = []

    def __init__(self, program, ranks, localhost, output=None, fail: bool = False) -> None:
        self.program, self.ranks, self.localhost = program, ranks, localhost
        self.status: int | None = None
        self.stopped = False
        self.fail = fail
        StandInLauncher.made.append(self)

    def start(self, timeout: float = 10.0) -> list[str]:
        if self.fail:
            raise LaunchError("mpiexec exited with status 1 before launching: no such program")
        return [f"proxy --id {i}" for i in range(self.ranks)]

    def wait(self, timeout=None):
        return self.status

    def stop(self, grace: float = 3.0) -> None:
        self.stopped = True
        self.status = -15


def scheduler(ranks: int = 3, **kw) -> MpiScheduler:
    StandInLauncher.made.clear()
    return MpiScheduler(
        "job", ["./pi"], ranks, PER_RANK, localhost="10.0.0.1", launcher=StandInLauncher, **kw
    )


def status(task_id: str, state: int, message: str = "") -> TaskStatus:
    return TaskStatus(task_id=task_id, state=state, message=message)


def test_the_scheduler_launches_a_rank_per_task_with_its_proxy_once_the_gang_is_complete():
    s, driver = scheduler(), RecordingDriver()
    s.resource_offers(driver, [offer("o1", "a1", cpus=2)])
    assert driver.named("launch_tasks") == [] and s.phase == "gathering"
    s.resource_offers(driver, [offer("o2", "a2", cpus=2), offer("tiny", "a3", cpus=0.2)])
    (launcher,) = StandInLauncher.made
    assert (launcher.program, launcher.ranks, launcher.localhost) == (["./pi"], 3, "10.0.0.1")
    launches = driver.named("launch_tasks")
    assert [(oid, [t.task_id for t in tasks]) for oid, tasks, _ in launches] == [
        (["o1"], ["job-rank-0", "job-rank-1"]),
        (["o2"], ["job-rank-2"]),
    ]
    assert [t.command.value for _, tasks, _ in launches for t in tasks] == [
        f"proxy --id {i}" for i in range(3)
    ]
    assert all(Resources.of(t.resources) == PER_RANK for _, tasks, _ in launches for t in tasks)
    assert driver.named("decline_offer")[0][0][0].offer_id == "tiny"  # no rank fits in it
    assert driver.named("set_needs_offers") == [(False,)]
    assert s.phase == "running"
    # Offers after the launch are declined for long.
    s.resource_offers(driver, [offer("late")])
    assert driver.named("decline_offer")[-1][1] == Filters(refuse_seconds=5)  # the hold timeout


def test_a_failed_rank_fails_the_job_kills_the_others_and_stops_mpiexec():
    s, driver = scheduler(), RecordingDriver()
    s.resource_offers(driver, [offer("o1", cpus=4)])
    for i in range(3):
        s.status_update(driver, status(f"job-rank-{i}", TaskState.TASK_RUNNING))
    s.status_update(driver, status("job-rank-0", TaskState.TASK_FINISHED))
    s.status_update(driver, status("job-rank-1", TaskState.TASK_FAILED, "command killed by signal SIGKILL"))
    assert s.done.is_set()
    outcome = s.outcome
    assert isinstance(outcome, JobOutcome) and not outcome.ok
    assert outcome.message == "rank 1 (job-rank-1) ended TASK_FAILED: command killed by signal SIGKILL"
    assert driver.named("kill_task") == [("job-rank-2",)]  # not the finished one, nor the failed
    assert StandInLauncher.made[0].stopped


def test_the_job_succeeds_when_mpiexec_exits_0_and_every_rank_finished():
    s, driver = scheduler(ranks=2), RecordingDriver()
    s._driver = driver
    s.resource_offers(driver, [offer("o1", cpus=2)])
    launcher = StandInLauncher.made[0]
    for i in range(2):
        s.status_update(driver, status(f"job-rank-{i}", TaskState.TASK_FINISHED))
    launcher.status = 0
    with s.lock:
        s._check_mpiexec(driver)
    assert s.outcome is not None and s.outcome.ok and s.outcome.exit_status == 0
    assert s.outcome.ranks == {"job-rank-0": "TASK_FINISHED", "job-rank-1": "TASK_FINISHED"}


def test_mpiexec_that_cannot_start_fails_the_job_and_gives_the_offers_back():
    s, driver = scheduler(ranks=1), RecordingDriver()
    s._make_launcher = lambda *a, **k: StandInLauncher(*a, fail=True, **k)
    s.resource_offers(driver, [offer("o1")])
    assert s.outcome is not None and not s.outcome.ok
    assert s.outcome.message.startswith("cannot start the job: mpiexec exited with status 1")
    assert driver.named("decline_offer") == [(["o1"],)]
    assert driver.named("launch_tasks") == []


def test_the_watcher_gives_back_a_gang_that_waited_too_long():
    clock = Clock()
    s, driver = scheduler(ranks=4, hold_timeout=1, clock=clock, rng=random.Random(1)), RecordingDriver()
    s.registered(driver, "fw", "master")
    s.resource_offers(driver, [offer("o1", cpus=2)])
    clock.now += 1.0
    deadline = time.monotonic() + 5
    while not driver.named("decline_offer") and time.monotonic() < deadline:
        time.sleep(0.05)
    ((ids, filters),) = driver.named("decline_offer")
    assert ids == ["o1"] and 1 <= filters.refuse_seconds < 2
    assert s.gang.tries == 1 and s.phase == "gathering"
    # Away from every agent at once: offers suppressed, and those still coming declined.
    assert driver.named("set_needs_offers") == [(False,)]
    s.resource_offers(driver, [offer("o2", cpus=2)])
    assert s.gang.held == {} and driver.named("decline_offer")[-1][0][0].offer_id == "o2"
    # Back to every agent at once when the backoff is over.
    clock.now += filters.refuse_seconds
    deadline = time.monotonic() + 5
    while len(driver.named("set_needs_offers")) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    s.done.set()  # stops the watcher
    assert driver.named("set_needs_offers") == [(False,), (True,)]
    assert s.backing_off_until is None


# -- for real: MPICH, agents, the framework's command line ----------------------------------

needs_mpich = pytest.mark.skipif(
    shutil.which("mpiexec") is None or shutil.which("mpicc") is None,
    reason="MPICH (mpiexec, mpicc) is installed by make setup (apt-get install mpich libmpich-dev)",
)


@pytest.fixture(scope="module")
def pi_program(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("mpi") / "pi"
    subprocess.run(["mpicc", "-O2", "-o", str(out), str(PI_SOURCE)], check=True, timeout=120)
    return str(out)


def run_job(
    master: str, ranks: int, *program: str, hold_timeout: float = 5, name: str = "mpi", timeout: float = 60
):
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "examples.mpi",
            "--master",
            master,
            "--ranks",
            str(ranks),
            "--mem",
            "64",
            "--hold-timeout",
            str(hold_timeout),
            "--name",
            name,
            "--timeout",
            str(timeout),
            "--",
            *program,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def no_mpi_processes_left(program: str) -> bool:
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return not any(program in line or "hydra_pmi_proxy" in line for line in out.splitlines())


@needs_mpich
def test_an_mpi_job_runs_its_ranks_across_agents(make_cluster, pi_program):
    cluster = make_cluster(2, agent_resources="cpus:2;mem:1024", master={"allocation_interval": 0.05})
    job = run_job(cluster.master, 4, pi_program, "2000000")
    out, err = job.communicate(timeout=90)
    assert job.returncode == 0, (out, err)
    assert "pi = 3.14159265" in out and "(2000000 terms, 4 ranks)" in out, out
    assert sorted(line.split(":")[0] for line in out.splitlines() if line.startswith("rank ")) == [
        f"rank {i} of 4" for i in range(4)
    ]
    assert "mpi: succeeded" in err and "4 ranks finished" in err, err
    done = {t["id"]: t for t in cluster.state()["completed_tasks"]}
    assert {done[f"mpi-rank-{i}"]["state"] for i in range(4)} == {"TASK_FINISHED"}
    assert len({done[f"mpi-rank-{i}"]["agent_id"] for i in range(4)}) == 2  # two ranks on each agent


@needs_mpich
def test_a_rank_that_dies_fails_the_job_and_the_other_ranks_are_killed(make_cluster, pi_program):
    cluster = make_cluster(2, agent_resources="cpus:2;mem:1024", master={"allocation_interval": 0.05})
    job = run_job(cluster.master, 4, pi_program, "--die", "2", "--sleep", "0.5")
    out, err = job.communicate(timeout=90)
    assert job.returncode == 1, (out, err)
    # The job fails on the first failure it hears of: rank 2's own end (its proxy
    # SIGKILLed), another's whose proxy lost its peer, or, on a loaded machine where the
    # status updates come later, mpiexec exiting on its dead proxy.
    assert "mpi: failed" in err, err
    assert "ended TASK_FAILED" in err or "mpiexec exited with status" in err, err
    assert "rank 2: dying as asked" in out + err
    ended = {t["id"]: t["state"] for t in cluster.state()["completed_tasks"]}
    # Each rank's task ended: failed (its proxy died) or killed (by the framework, which
    # may have heard of mpiexec's exit first).
    assert all(ended.get(f"mpi-rank-{i}") in ("TASK_FAILED", "TASK_KILLED") for i in range(4)), ended
    deadline = time.monotonic() + 10
    while not no_mpi_processes_left(pi_program) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert no_mpi_processes_left(pi_program), "a rank, a proxy or mpiexec outlived the job"


@needs_mpich
def test_two_jobs_that_each_need_most_of_the_cluster_both_finish(make_cluster, pi_program):
    # 4 slots; each job needs 3. A task of another framework holds 2 of them for the first
    # seconds, so neither job can complete: each holds what it can, gives it back after
    # its hold timeout and stays away a random while. Once the slots are free, the one
    # back first takes 3, then the other gets its turn.
    cluster = make_cluster(2, agent_resources="cpus:2;mem:1024", master={"allocation_interval": 0.05})
    blocker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mezzo",
            "run",
            "--master",
            cluster.master,
            "--cpus",
            "2",
            "--mem",
            "64",
            "--",
            "sleep",
            "3",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 20
    while not any(t["state"] == "TASK_RUNNING" for t in cluster.state()["tasks"]):
        assert time.monotonic() < deadline, "the blocking task did not start"
        time.sleep(0.05)
    jobs = [
        run_job(cluster.master, 3, pi_program, "--sleep", "1", hold_timeout=1, name=n) for n in ("one", "two")
    ]
    results: dict[int, tuple[str, str]] = {}

    def wait(i: int) -> None:
        results[i] = jobs[i].communicate(timeout=120)

    threads = [threading.Thread(target=wait, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, job in enumerate(jobs):
        assert job.returncode == 0, results.get(i)
    assert blocker.wait(30) == 0, blocker.stderr.read() if blocker.stderr else ""
    assert any("giving them back" in out for out, _ in results.values()), results  # they did contend
    states = {t["id"]: t["state"] for t in cluster.state()["completed_tasks"]}
    for name in ("one", "two"):
        assert [states[f"{name}-rank-{i}"] for i in range(3)] == ["TASK_FINISHED"] * 3, states
