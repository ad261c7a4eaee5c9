#!/usr/bin/env python3
"""The paper's macrobenchmark (§6.1): four frameworks sharing a cluster against each in a
static quarter of it (Figures 5-7, Tables 4 and 5).

Real daemons and real task processes on this machine: a master and ``--agents`` agents
of ``--agent-cpus`` cpus and ``--agent-mem`` MB (the paper's nodes: 4 cores, 15 GB).
The four workloads of §6.1.1, scaled (see :data:`SCALING`; ``--time-scale`` stretches
or shrinks every duration at once):

- *facebook*: the Facebook Hadoop mix, 100 jobs in Table 3's eight bins, submitted at
  fixed (seeded) times, run by the delay-scheduling framework with fair sharing between
  its jobs (``examples/delay_scheduling``, :class:`FairJobsScheduler`);
- *large*: the large Hadoop mix, ten large text-search jobs, each submitted when the
  previous one finished (the same framework);
- *spark*: five iterative jobs (``examples/iterative``: caching executors, delay
  scheduling for executor locality), each submitted a gap after the previous one ended;
- *torque*: eight gang-scheduled MPI jobs (``examples/mpi``, MPICH's ``mpiexec``, every
  rank a real MPI process that sleeps its share of the job), six small and two large,
  submitted at fixed times and run one at a time, first come first served, as a batch
  queue does.

Each run plays the same workload twice on fresh daemons: *shared*, the four frameworks
on one cluster under DRF; *static*, each framework alone on a cluster of a quarter of
the agents. Sampled every ``--sample`` seconds from the masters' state: each framework's
share of all the cpus (its tasks' cpus over the whole cluster's), and the cpus and
memory allocated to tasks and executors. A job's running time is its submission to its
last task's end (for MPI, queueing and gathering the gang included).

Usage::

    python bench/macrobenchmark.py                  # 3 runs of both scenarios (~35 min), writes docs
    python bench/macrobenchmark.py --quick --no-write   # toy size (the smoke test)
"""

from __future__ import annotations

import argparse
import getpass
import io
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import mezzo
import mezzo.log
from _cluster import machine
from _report import ROOT, pyplot, require_plotting, save_figure, write_section
from mezzo import FrameworkInfo, Resources
from mezzo.state_client import fetch_state
from mezzo.testing import LocalProcessCluster

sys.path.insert(0, str(ROOT))  # the example frameworks are not installed: import them from the repository
from examples.delay_scheduling import DelayPolicy, FairJobsScheduler, facebook_mix, large_mix
from examples.delay_scheduling.fair import FairJob
from examples.delay_scheduling.mix import FACEBOOK_BINS
from examples.iterative.data import Partition, make_partitions
from examples.iterative.scheduler import CachedScheduler
from examples.mpi import MpiScheduler

FRAMEWORKS = ("facebook", "large", "spark", "torque")
"""The four workloads, in the order of the paper's tables."""
TITLES = {
    "facebook": "Facebook Hadoop mix",
    "large": "Large Hadoop mix",
    "spark": "Spark (iterative)",
    "torque": "Torque / MPI",
}
PAPER_SPEEDUP = {"facebook": 1.14, "large": 2.10, "spark": 1.26, "torque": 0.96}
"""Table 4's speedups on Mesos (sum of job times, static over shared)."""
COLORS = {"facebook": "tab:blue", "large": "tab:orange", "spark": "tab:green", "torque": "tab:red"}

HADOOP_TASK = Resources(cpus=1, mem=1024)
SPARK_TASK = Resources(cpus=1, mem=512)
MPI_RANK = Resources(cpus=1, mem=1024)

SCALING = (
    "Paper: 96 nodes of 4 cores and 15 GB, a quarter (24 nodes) per framework when partitioned, "
    "runs of 25-55 minutes. Here: {agents} agents of {cpus:g} cpus and {mem:g} MB, a quarter of "
    "{quarter} agent(s); durations about 5x shorter than the paper's{scaled}. "
    "*Facebook mix*: {fb_jobs} jobs in Table 3's eight bins (paper: 100), each bin's map and reduce "
    "counts cut to fit 8 slots ({bins} maps+reduces for bins 1-8), maps of {map_s} s, reduces of "
    "{reduce_s} s on average, exponential inter-arrivals of mean {fb_gap:g} s (paper: 14 s over 25 min); "
    "both Hadoop frameworks share their slots fairly between their jobs and wait up to {hadoop_delay:g} s "
    "for a node-local slot. "
    "*Large mix*: {large_jobs} text-search jobs of {large_maps} maps of {large_seconds:g} s, each "
    "submitted as the previous one ends (paper: ten jobs of 2,400 tasks, about twice as long in a "
    "partition as the other workloads; twice as many jobs here keep that ratio). *Spark*: {spark_jobs} "
    "logistic-regression jobs of {spark_iterations} iterations over {spark_partitions} partitions cached "
    "in executors of {spark_mem:g} MB, "
    "each task standing for {spark_task:g} s of work and waiting up to {spark_delay:g} s for the executor "
    "holding its partition (paper: five ALS jobs), {spark_gap:g} s apart "
    "(paper: 2 minutes); while an iteration's last tasks run, a job keeps the offers it gets "
    "(no more slots than its own finished tasks gave back, each for at most {spark_hold:g} s) to start the next one on them. "
    "*Torque*: {mpi_small} small and {mpi_large} large MPI jobs of {mpi_ranks} "
    "ranks of one cpu, {mpi_quarter:.0%} of a quarter's cpus (paper: 24 tasks, and Torque used 1/8 of the "
    "cluster, half its quarter, in §6.1.2), each rank sleeping {mpi_small_s:g} s or {mpi_large_s:g} s (paper: tachyon, "
    "261 s and 822 s in a partition), submitted {mpi_spacing:g} s apart, one running at a time; a gang "
    "gives back what it holds once it has gained no slot for {mpi_hold:g} s, and tries again later."
)


# -- the workloads --------------------------------------------------------------------


@dataclass
class JobRecord:
    """One job's life, in seconds from the scenario's start."""

    framework: str
    kind: str
    index: int
    """The job's place in its framework's submission order (the same in both scenarios)."""
    submitted: float
    finished: float | None = None
    ok: bool = True
    note: str = ""

    @property
    def seconds(self) -> float | None:
        return None if self.finished is None else self.finished - self.submitted


class Workload:
    """One framework's jobs, played against ``master`` on a thread of its own from
    :meth:`start`; :attr:`records` fill in as jobs end, :attr:`done` is set after the
    last. ``t0`` (``time.monotonic()``) is the scenario's start."""

    name = ""

    def __init__(self, master: str, hosts: list[str], args: argparse.Namespace, t0: float) -> None:
        self.master, self.hosts, self.args, self.t0 = master, hosts, args, t0
        self.records: list[JobRecord] = []
        self.done = threading.Event()
        self.error: str | None = None
        self.stopping = threading.Event()
        self._thread = threading.Thread(target=self._main, name=f"workload-{self.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self._thread.join(60)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def _main(self) -> None:
        try:
            self.play()
        except Exception as exc:  # noqa: BLE001 - reported with the results, the others go on
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.done.set()

    def play(self) -> None:
        raise NotImplementedError

    def sleep_until(self, at: float) -> bool:
        """Wait until ``at`` seconds into the scenario; False if stopped meanwhile."""
        return not self.stopping.wait(max(0.0, at - self.now()))


class HadoopWorkload(Workload):
    """A :class:`FairJobsScheduler` fed by :meth:`jobs`: (submission time or None for
    "when the previous job ended", spec) pairs."""

    def jobs(self) -> list:
        raise NotImplementedError

    def play(self) -> None:
        plan = self.jobs()
        ended = threading.Semaphore(0)
        scheduler = FairJobsScheduler(
            self.name,
            self.hosts,
            DelayPolicy(self.args.delay),
            per_task=HADOOP_TASK,
            seed=self.args.seed,
            on_job_done=lambda job: ended.release(),
        )
        submitted: list[tuple[FairJob, float]] = []
        driver = mezzo.SchedulerDriver(scheduler, FrameworkInfo(name=self.name), self.master)
        driver.start()
        try:
            for at, spec in plan:
                if at is not None and not self.sleep_until(at):
                    return
                if at is None and submitted and not self._wait(ended, scheduler):
                    return
                submitted.append((scheduler.submit(spec), self.now()))
            while len(scheduler.completed) < len(plan):
                if not self._wait(ended, scheduler):
                    return
        finally:
            driver.stop()
            driver.join()
            for i, (job, at) in enumerate(submitted):
                finished = None if job.finished_at is None else at + (job.finished_at - job.submitted_at)
                self.records.append(JobRecord(self.name, job.kind, i, at, finished, ok=finished is not None))

    def _wait(self, ended: threading.Semaphore, scheduler: FairJobsScheduler) -> bool:
        """Until a job ends (True), or the workload is stopped (False); raises when the
        driver aborted (no job will end then)."""
        while not ended.acquire(timeout=0.5):
            if scheduler.failed is not None:
                raise RuntimeError(f"the {self.name} framework's driver aborted: {scheduler.failed}")
            if self.stopping.is_set():
                return False
        return True


class FacebookWorkload(HadoopWorkload):
    name = "facebook"

    def jobs(self) -> list:
        mix = facebook_mix(
            jobs=self.args.fb_jobs,
            mean_interarrival=self.args.fb_gap,
            time_scale=self.args.time_scale,
            seed=self.args.seed,
        )
        return [(s.at, s.spec) for s in mix]


class LargeWorkload(HadoopWorkload):
    name = "large"

    def jobs(self) -> list:
        specs = large_mix(
            jobs=self.args.large_jobs,
            maps=self.args.large_maps,
            map_seconds=self.args.large_seconds * self.args.time_scale,
        )
        return [(0.0 if i == 0 else None, spec) for i, spec in enumerate(specs)]


class SparkWorkload(Workload):
    """Iterative jobs one after the other, each a framework of its own named ``spark``
    (as each Spark job is), ``--spark-gap`` seconds apart."""

    name = "spark"

    def __init__(self, *a, partitions: list[Partition], **kw) -> None:
        super().__init__(*a, **kw)
        self.partitions = partitions

    def play(self) -> None:
        args = self.args
        for i in range(args.spark_jobs):
            if i and not self.sleep_until(self.now() + args.spark_gap * args.time_scale):
                return
            record = JobRecord(self.name, "logistic regression", i, self.now())
            self.records.append(record)
            scheduler = CachedScheduler(
                self.partitions,
                args.spark_iterations,
                SPARK_TASK,
                executor_resources=Resources(mem=args.spark_executor_mem),
                delay=args.spark_delay * args.time_scale,
                task_seconds=args.spark_task * args.time_scale,
                hold=args.spark_hold * args.time_scale,
            )
            driver = mezzo.SchedulerDriver(scheduler, FrameworkInfo(name=self.name), self.master)
            driver.start()
            try:
                while not scheduler.done.wait(0.5):
                    if self.stopping.is_set():
                        return
                record.finished = self.now()  # the last answer came: teardown is not the job's
            finally:
                driver.stop()
                driver.join()
            record.ok, record.note = scheduler.result.ok, scheduler.result.message
            if not record.ok:
                raise RuntimeError(f"spark job {i + 1}: {record.note}")


class TorqueWorkload(Workload):
    """MPI jobs submitted at fixed times into a first-come-first-served queue: each runs
    (gathers its gang, then runs mpiexec) once the one before it has ended."""

    name = "torque"

    def __init__(self, *a, program: str, **kw) -> None:
        super().__init__(*a, **kw)
        self.program = program

    def plan(self) -> list[tuple[float, str, float]]:
        """(submission time, kind, seconds each rank sleeps), in submission order."""
        args = self.args
        jobs = args.mpi_small + args.mpi_large
        # The large jobs second to last, fifth to last, ... (then any place still small).
        kinds = ["small"] * jobs
        places = [i for i in range(jobs - 2, -1, -3)] + [i for i in range(jobs - 1, -1, -1)]
        for i in list(dict.fromkeys(places))[: args.mpi_large]:
            kinds[i] = "large"
        seconds = {"small": args.mpi_small_s, "large": args.mpi_large_s}
        return [
            (i * args.mpi_spacing * args.time_scale, kind, seconds[kind] * args.time_scale)
            for i, kind in enumerate(kinds)
        ]

    def play(self) -> None:
        for i, (at, kind, sleep) in enumerate(self.plan()):
            if not self.sleep_until(at):
                return
            record = JobRecord(self.name, f"{kind} MPI", i, at)
            self.records.append(record)
            scheduler = MpiScheduler(
                f"torque-{i + 1}",
                [self.program, "--sleep", f"{sleep:g}", "100000"],
                self.args.mpi_ranks,
                MPI_RANK,
                localhost="127.0.0.1",
                hold_timeout=self.args.mpi_hold * self.args.time_scale,
                output=io.StringIO(),
            )
            info = FrameworkInfo(name=self.name, user=getpass.getuser())
            driver = mezzo.SchedulerDriver(scheduler, info, self.master)
            driver.start()
            try:
                while not scheduler.done.wait(0.5):
                    if self.stopping.is_set():
                        return
                record.finished = self.now()  # mpiexec and the ranks are done: teardown is not the job's
            finally:
                driver.stop()
                driver.join()
                if scheduler.stopper is not None:
                    scheduler.stopper.join()
            outcome = scheduler.outcome
            record.ok = outcome is not None and outcome.ok
            gathered = outcome.gathered_in if outcome is not None else None
            record.note = (
                f"gathered in {gathered:.1f} s"
                if gathered is not None
                else (outcome.message if outcome else "")
            )
            if not record.ok:
                raise RuntimeError(f"MPI job {i + 1}: {outcome.message if outcome else 'no outcome'}")


# -- sampling ---------------------------------------------------------------------------


@dataclass
class Sample:
    t: float
    cpus: dict[str, float]
    """Framework name -> cpus its tasks hold."""
    used_cpus: float
    used_mem: float
    """Held by tasks and executors, all clusters together."""


class Sampler:
    """Reads every master's state every ``interval`` seconds on a thread of its own."""

    def __init__(self, masters: list[str], interval: float, t0: float) -> None:
        self.masters, self.interval, self.t0 = masters, interval, t0
        self.samples: list[Sample] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.monotonic() - self.t0
            cpus: dict[str, float] = defaultdict(float)
            used_cpus = used_mem = 0.0
            try:
                for master in self.masters:
                    state = fetch_state(master, timeout=10)
                    for f in state["frameworks"]:
                        cpus[f["name"]] += f["used"].get("cpus", 0.0)
                    for a in state["agents"]:
                        used_cpus += a["used"].get("cpus", 0.0)
                        used_mem += a["used"].get("mem", 0.0)
            except Exception:  # noqa: BLE001 - a missed sample, counted
                self.failures += 1
            else:
                self.samples.append(Sample(t, dict(cpus), used_cpus, used_mem))
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - self.t0 - t)))


# -- one scenario -------------------------------------------------------------------------


@dataclass
class Scenario:
    name: str
    seconds: float
    records: list[JobRecord]
    samples: list[Sample]
    errors: dict[str, str] = field(default_factory=dict)


def start_clusters(count: int, agents: int, tmp: Path, args: argparse.Namespace) -> list[LocalProcessCluster]:
    resources = f"cpus:{args.agent_cpus:g};mem:{args.agent_mem:g};disk:10000"
    clusters = []
    try:
        for i in range(count):
            cluster = LocalProcessCluster(
                agents,
                directory=str(tmp / f"cluster-{i + 1}"),
                agent_resources=resources,
                master={"allocation_interval": 0.05},
                start_timeout=60,
            )
            clusters.append(cluster)
            cluster.start()
        for cluster in clusters:
            cluster.wait_for_agents(agents)
    except BaseException:
        for cluster in clusters:
            cluster.stop()
        raise
    return clusters


def run_scenario(
    name: str, tmp: Path, partitions: list[Partition], program: str, args: argparse.Namespace
) -> Scenario:
    """Play the four workloads, ``shared`` on one cluster or ``static`` on four."""
    quarters = 1 if name == "shared" else 4
    clusters = start_clusters(quarters, args.agents // quarters, tmp / name, args)
    try:
        masters = [c.master for c in clusters]
        hosts = [sorted(a["hostname"] for a in c.state()["agents"]) for c in clusters]
        t0 = time.monotonic()
        made: list[Workload] = []
        for i, kind in enumerate(FRAMEWORKS):
            where = i if quarters == 4 else 0
            common = (masters[where], hosts[where], args, t0)
            if kind == "facebook":
                made.append(FacebookWorkload(*common))
            elif kind == "large":
                made.append(LargeWorkload(*common))
            elif kind == "spark":
                made.append(SparkWorkload(*common, partitions=partitions))
            else:
                made.append(TorqueWorkload(*common, program=program))
        sampler = Sampler(masters, args.sample, t0)
        sampler.start()
        for w in made:
            w.start()
        deadline = t0 + args.timeout
        try:
            for w in made:
                if not w.done.wait(max(0.0, deadline - time.monotonic())):
                    raise TimeoutError(
                        f"{name}: the {w.name} workload did not finish within {args.timeout:g} s "
                        f"({sum(r.finished is not None for r in w.records)} jobs done)"
                    )
            seconds = time.monotonic() - t0
        finally:
            for w in made:
                w.stop()
            sampler.stop()
    finally:
        for c in clusters:
            c.stop()
    errors = {w.name: w.error for w in made if w.error}
    records = [r for w in made for r in w.records]
    print(
        f"  {name}: {seconds:.0f} s, "
        + ", ".join(
            f"{w.name} {len(w.records)} jobs in {sum(r.seconds or 0 for r in w.records):.0f} s" for w in made
        )
        + (f"; errors: {errors}" if errors else "")
        + (f"; {sampler.failures} samples missed" if sampler.failures else ""),
        flush=True,
    )
    return Scenario(name, seconds, records, sampler.samples, errors)


# -- reading the results ------------------------------------------------------------------


def sums(s: Scenario) -> dict[str, float]:
    """Table 4's column: per framework, the sum of its jobs' running times."""
    out: dict[str, float] = defaultdict(float)
    for r in s.records:
        out[r.framework] += r.seconds or 0.0
    return dict(out)


def per_kind(shared: Scenario, static: Scenario) -> dict[tuple[str, str], tuple[float, float, float]]:
    """Table 5's rows: (framework, kind) -> (mean static s, mean shared s, mean of the
    per-job speedups static/shared), jobs matched by their place in submission order."""
    by_index = {(r.framework, r.index): r for r in shared.records}
    grouped: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for r in static.records:
        other = by_index.get((r.framework, r.index))
        if other is None or r.seconds is None or other.seconds is None:
            continue
        grouped[(r.framework, r.kind)].append((r.seconds, other.seconds))
    return {
        key: (
            statistics.fmean(a for a, _ in pairs),
            statistics.fmean(b for _, b in pairs),
            statistics.fmean(a / b for a, b in pairs if b > 0),
        )
        for key, pairs in grouped.items()
    }


def utilisation(s: Scenario, until: float, capacity_cpus: float, capacity_mem: float) -> tuple[float, float]:
    """Mean share of all cpus and of all memory allocated, over the samples before ``until``."""
    window = [x for x in s.samples if x.t <= until] or s.samples
    return (
        statistics.fmean(x.used_cpus for x in window) / capacity_cpus,
        statistics.fmean(x.used_mem for x in window) / capacity_mem,
    )


@dataclass
class RunResult:
    run: int
    shared: Scenario
    static: Scenario

    def speedups(self) -> dict[str, float]:
        a, b = sums(self.static), sums(self.shared)
        return {f: a.get(f, 0.0) / b[f] for f in FRAMEWORKS if b.get(f)}


def one_run(
    run: int, tmp: Path, partitions: list[Partition], program: str, args: argparse.Namespace
) -> RunResult:
    order = ("shared", "static") if run % 2 else ("static", "shared")
    print(f"run {run}:", flush=True)
    got = {name: run_scenario(name, tmp / f"run-{run}", partitions, program, args) for name in order}
    result = RunResult(run, got["shared"], got["static"])
    print(
        f"  speedups (static / shared, sum of job times): {json.dumps(rounded(result.speedups()))}",
        flush=True,
    )
    return result


def spread(values) -> str:
    """``"2.5-3.5"``: the smallest and largest of some seconds."""
    values = list(values)
    return f"{min(values):g}-{max(values):g}"


def rounded(d: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 2) for k, v in d.items()}


# -- preparing --------------------------------------------------------------------------


def compile_program(tmp: Path) -> str:
    """``examples/mpi/pi.c`` compiled with ``mpicc``: the ranks' program (``--sleep S``)."""
    if shutil.which("mpicc") is None or shutil.which("mpiexec") is None:
        raise SystemExit(
            "mpicc/mpiexec not found: install MPICH (make setup does: apt-get install mpich libmpich-dev)"
        )
    out = tmp / "pi"
    subprocess.run(
        ["mpicc", "-O2", "-o", str(out), str(ROOT / "examples" / "mpi" / "pi.c")], check=True, timeout=120
    )
    return str(out)


def spark_partitions(tmp: Path, args: argparse.Namespace) -> list[Partition]:
    """The Spark jobs' data set (small: its tasks stand for more work than it holds)."""
    return make_partitions(tmp / "spark-data", args.spark_partitions, args.spark_rows, 10, seed=1)


# -- the report --------------------------------------------------------------------------


def report(results: list[RunResult], args: argparse.Namespace, argv: list[str]) -> list[str]:
    capacity_cpus = args.agents * args.agent_cpus
    capacity_mem = args.agents * args.agent_mem
    n = len(results)

    def median(values) -> float:
        return statistics.median(list(values))

    table4 = []
    verdicts = []
    for f in FRAMEWORKS:
        static = median(sums(r.static).get(f, 0.0) for r in results)
        shared = median(sums(r.shared).get(f, 0.0) for r in results)
        speedups = [r.speedups().get(f, 0.0) for r in results]
        speedup = median(speedups)
        table4.append(
            f"| {TITLES[f]} | {static:.0f} | {shared:.0f} | {speedup:.2f}x ({', '.join(f'{s:.2f}' for s in speedups)}) "
            f"| {PAPER_SPEEDUP[f]:.2f}x |"
        )
        if f != "torque":
            verdicts.append((f, speedup))
    kinds: dict[tuple[str, str], list[tuple[float, float, float]]] = defaultdict(list)
    for r in results:
        for key, row in per_kind(r.shared, r.static).items():
            kinds[key].append(row)
    table5 = [
        f"| {TITLES[f]} | {kind} | {median(x[0] for x in rows):.1f} | {median(x[1] for x in rows):.1f} "
        f"| {median(x[2] for x in rows):.2f}x |"
        for (f, kind), rows in sorted(
            kinds.items(), key=lambda kv: (FRAMEWORKS.index(kv[0][0]), kind_order(kv[0][1]))
        )
    ]
    utils = []
    for r in results:
        until = min(r.shared.seconds, r.static.seconds)
        utils.append(
            (
                utilisation(r.shared, until, capacity_cpus, capacity_mem),
                utilisation(r.static, until, capacity_cpus, capacity_mem),
            )
        )
    cpu_shared = median(u[0][0] for u in utils)
    cpu_static = median(u[1][0] for u in utils)
    mem_shared = median(u[0][1] for u in utils)
    mem_static = median(u[1][1] for u in utils)
    makespan_shared = median(r.shared.seconds for r in results)
    makespan_static = median(r.static.seconds for r in results)
    failures = sum(not rec.ok for r in results for s in (r.shared, r.static) for rec in s.records)
    errors = [
        f"{s.name} run {r.run}: {e}" for r in results for s in (r.shared, r.static) for e in s.errors.values()
    ]
    scaling = SCALING.format(
        agents=args.agents,
        cpus=args.agent_cpus,
        mem=args.agent_mem,
        quarter=args.agents // 4,
        scaled="" if args.time_scale == 1 else f", then x{args.time_scale:g} (--time-scale)",
        fb_jobs=args.fb_jobs,
        bins=", ".join(f"{b.maps}+{b.reduces}" if b.reduces else f"{b.maps}" for b, _ in FACEBOOK_BINS),
        map_s=spread(b.map_seconds * args.time_scale for b, _ in FACEBOOK_BINS),
        reduce_s=spread(b.reduce_seconds * args.time_scale for b, _ in FACEBOOK_BINS if b.reduces),
        fb_gap=args.fb_gap * args.time_scale,
        hadoop_delay=args.delay,
        large_jobs=args.large_jobs,
        large_maps=args.large_maps,
        large_seconds=args.large_seconds * args.time_scale,
        spark_jobs=args.spark_jobs,
        spark_iterations=args.spark_iterations,
        spark_partitions=args.spark_partitions,
        spark_task=args.spark_task * args.time_scale,
        spark_gap=args.spark_gap * args.time_scale,
        spark_delay=args.spark_delay * args.time_scale,
        spark_mem=args.spark_executor_mem,
        spark_hold=args.spark_hold * args.time_scale,
        mpi_small=args.mpi_small,
        mpi_large=args.mpi_large,
        mpi_ranks=args.mpi_ranks,
        mpi_quarter=args.mpi_ranks / ((args.agents // 4) * args.agent_cpus),
        mpi_small_s=args.mpi_small_s * args.time_scale,
        mpi_large_s=args.mpi_large_s * args.time_scale,
        mpi_spacing=args.mpi_spacing * args.time_scale,
        mpi_hold=args.mpi_hold * args.time_scale,
    )
    fine_ok = all(s >= 1.0 for _, s in verdicts)
    lines = [
        f"Machine: {machine()}. Command: `{' '.join(['python', 'bench/macrobenchmark.py', *argv])}`. "
        f"{n} run(s), each playing the workloads shared (one cluster, DRF) and static (four clusters of a quarter "
        f"each), in alternating order. {scaling}",
        "",
        "**Table 4** (sum of the jobs' running times per framework, medians of the runs; speedup = static / "
        "shared, each run's in parentheses):",
        "",
        "| framework | static (s) | shared (s) | speedup | paper |",
        "|---|---|---|---|---|",
        *table4,
        "",
        "**Table 5** (per job type: mean running time, and the mean of the jobs' speedups; medians of the runs):",
        "",
        "| framework | job type | static (s) | shared (s) | speedup |",
        "|---|---|---|---|---|",
        *table5,
        "",
        f"**Utilisation** (allocated to tasks and executors, mean over the time both scenarios ran, medians): "
        f"cpus {cpu_shared:.0%} shared vs {cpu_static:.0%} static, memory {mem_shared:.0%} vs {mem_static:.0%} "
        f"(paper, measured use: +10 % cpu, +17 % memory). Whole workload done in {makespan_shared:.0f} s shared, "
        f"{makespan_static:.0f} s static.",
        "",
        f"- {'met' if cpu_shared > cpu_static else '**missed**'}: utilisation higher when shared",
        f"- {'met' if fine_ok else '**missed**'}: every fine-grained framework at least as fast as in its "
        f"partition ({', '.join(f'{f} {s:.2f}x' for f, s in verdicts)})",
        f"- jobs failed: {failures}" + (f"; errors: {errors}" if errors else ""),
    ]
    if not args.quick and not args.no_write and plot(results[-1], capacity_cpus, capacity_mem):
        lines += [
            "",
            f"Figures of run {results[-1].run}: ![Figure 5](macro-fig5.png) ![Figure 6](macro-fig6.png) "
            "![Figure 7](macro-fig7.png)",
        ]
    return lines


def kind_order(kind: str) -> tuple[int, str]:
    """Table 3's bins in their order ("selection (1)" before "text search (2)"), then by name."""
    found = re.search(r"\((\d+)\)", kind)
    return (int(found.group(1)) if found else 0, kind)


def plot(r: RunResult, capacity_cpus: float, capacity_mem: float) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    docs = ROOT / "docs"

    def share(s: Scenario, f: str) -> tuple[list[float], list[float]]:
        return [x.t for x in s.samples], [x.cpus.get(f, 0.0) / capacity_cpus for x in s.samples]

    fig, axes = plt.subplots(2, 2, figsize=(10, 6), dpi=110)
    for ax, f in zip(axes.flat, FRAMEWORKS, strict=True):
        t, y = share(r.static, f)
        ax.fill_between(t, y, step="post", color="lightgray", label="static partitioning")
        t, y = share(r.shared, f)
        ax.step(t, y, where="post", color=COLORS[f], label="shared (mezzo, DRF)")
        ax.set_title(TITLES[f])
        ax.set_ylim(0, 1)
        ax.set_xlabel("time (s)")
        ax.set_ylabel("share of cpus")
        ax.legend(fontsize="small")
    fig.suptitle("Each framework's share of the cluster, shared vs static (paper Fig. 5)")
    save_figure(fig, docs / "macro-fig5.png")

    fig, ax = plt.subplots(figsize=(8, 3.8), dpi=110)
    t = [x.t for x in r.shared.samples]
    ys = [[x.cpus.get(f, 0.0) / capacity_cpus for x in r.shared.samples] for f in FRAMEWORKS]
    ax.stackplot(
        t, ys, labels=[TITLES[f] for f in FRAMEWORKS], colors=[COLORS[f] for f in FRAMEWORKS], step="post"
    )
    ax.set_ylim(0, 1)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("share of cpus")
    ax.set_title("Framework shares on the shared cluster (paper Fig. 6)")
    ax.legend(loc="upper right", fontsize="small")
    save_figure(fig, docs / "macro-fig6.png")

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.6), dpi=110)
    for s, color in ((r.shared, "tab:blue"), (r.static, "tab:gray")):
        t = [x.t for x in s.samples]
        a1.plot(t, [100 * x.used_cpus / capacity_cpus for x in s.samples], color=color, label=s.name)
        a2.plot(t, [100 * x.used_mem / capacity_mem for x in s.samples], color=color, label=s.name)
    for ax, what in ((a1, "cpus"), (a2, "memory")):
        ax.set_xlabel("time (s)")
        ax.set_ylabel(f"{what} allocated (%)")
        ax.set_ylim(0, 100)
        ax.legend()
    fig.suptitle("Allocation over time, shared vs static (paper Fig. 7)")
    save_figure(fig, docs / "macro-fig7.png")
    return True


# -- main ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a toy size, one run (the smoke test)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--agents", type=int, default=8, help="a multiple of 4 (default 8)")
    p.add_argument("--agent-cpus", type=float, default=4.0)
    p.add_argument("--agent-mem", type=float, default=15360.0)
    p.add_argument(
        "--time-scale",
        type=float,
        default=0.6,
        help="multiplies every duration given below but --delay (default 0.6)",
    )
    p.add_argument("--fb-jobs", type=int, default=100)
    p.add_argument("--fb-gap", type=float, default=3.0, help="mean seconds between Facebook jobs (default 3)")
    p.add_argument("--large-jobs", type=int, default=20)
    p.add_argument("--large-maps", type=int, default=60)
    p.add_argument("--large-seconds", type=float, default=4.0)
    p.add_argument("--spark-jobs", type=int, default=5)
    p.add_argument("--spark-iterations", type=int, default=10)
    p.add_argument("--spark-partitions", type=int, default=16)
    p.add_argument("--spark-rows", type=int, default=20_000)
    p.add_argument("--spark-task", type=float, default=2.0, help="seconds each Spark task stands for")
    p.add_argument("--spark-gap", type=float, default=24.0)
    p.add_argument(
        "--spark-delay",
        type=float,
        default=0.5,
        help="seconds a Spark task waits for the executor caching its partition (default 0.5)",
    )
    p.add_argument(
        "--spark-hold",
        type=float,
        default=4.0,
        help="seconds a Spark job keeps an offer for its next iteration (default 4; 0 = never)",
    )
    p.add_argument(
        "--spark-executor-mem",
        type=float,
        default=1024.0,
        help="MB each Spark executor holds for its cache (default 1024; DRF counts it in Spark's share)",
    )
    p.add_argument("--mpi-small", type=int, default=6)
    p.add_argument("--mpi-large", type=int, default=2)
    p.add_argument(
        "--mpi-ranks",
        type=int,
        default=4,
        help="ranks of one cpu per MPI job (default 4: half a quarter, as the paper's jobs used)",
    )
    p.add_argument("--mpi-small-s", type=float, default=15.0)
    p.add_argument("--mpi-large-s", type=float, default=45.0)
    p.add_argument(
        "--mpi-hold",
        type=float,
        default=10.0,
        help="seconds an MPI gang may gain no slot before it gives back what it holds",
    )
    p.add_argument("--mpi-spacing", type=float, default=30.0, help="seconds between MPI submissions")
    p.add_argument(
        "--delay",
        type=float,
        default=0.5,
        help="seconds a Hadoop job waits for a node-local slot (default 0.5, not scaled)",
    )
    p.add_argument("--sample", type=float, default=1.0, help="seconds between samples of the masters' state")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--timeout", type=float, default=1200.0, help="give up on a scenario after this many seconds"
    )
    p.add_argument("--json", default=None, help="also write every job and sample here")
    p.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = p.parse_args(argv)
    require_plotting(p, not (args.no_write or args.quick))
    if args.quick:
        args.runs, args.agents, args.time_scale = 1, 4, 0.05
        args.fb_jobs, args.large_jobs, args.large_maps = 8, 2, 8
        args.spark_jobs, args.spark_iterations, args.spark_partitions, args.spark_rows = 2, 2, 4, 500
        args.spark_executor_mem, args.mpi_small, args.mpi_large, args.mpi_ranks = 1024.0, 1, 1, 4
        args.mpi_spacing, args.sample, args.timeout = 5.0, 0.5, 100.0
    if args.agents % 4 or args.agents < 4:
        p.error(f"--agents: a multiple of 4 (a quarter each when static), not {args.agents}")
    if args.mpi_ranks > (args.agents // 4) * args.agent_cpus:
        p.error(
            f"--mpi-ranks: {args.mpi_ranks} ranks do not fit a quarter's {(args.agents // 4) * args.agent_cpus:g} cpus"
        )
    if not 0 < args.mpi_hold * args.time_scale < 30:
        p.error("--mpi-hold: times --time-scale, between 0 and the master's offer_timeout of 30 s")
    if args.runs < 1 or args.time_scale <= 0:
        p.error("--runs must be at least 1 and --time-scale above 0")
    mezzo.log.configure("warning")
    results = []
    with tempfile.TemporaryDirectory(prefix="macro-") as name:
        tmp = Path(name)
        program = compile_program(tmp)
        partitions = spark_partitions(tmp, args)
        for run in range(1, args.runs + 1):
            results.append(one_run(run, tmp, partitions, program, args))
    lines = report(results, args, argv)
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in results], default=str))
    if not args.no_write:
        write_section(
            "## §6.1 macrobenchmark: four frameworks shared vs static quarters (bench/macrobenchmark.py)",
            lines,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
