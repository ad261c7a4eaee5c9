"""The framework: a mezzo scheduler running a stream of map-only jobs with delay scheduling.

:class:`LocalityScheduler` runs one job at a time, back to back (``jobs`` of them,
or until stopped). On each offer it asks :class:`~.policy.DelayPolicy` which maps
to launch on that host, launches them as one-slot tasks, or declines the offer
with a short refuse filter (:func:`~.policy.refuse_seconds_for`). When a job has
launched every map it suppresses offers (``set_needs_offers(False)``); when the
next job starts it revives them, which also clears its refuse filters: hosts
passed up for the last job may hold the next one's blocks.

A map "reads" its block: its duration comes from ``durations(local)``, so that a
non-local map can be made slower (it would read over the network). Tasks are
``sleep N`` commands that carry ``labels["duration"]``: a real agent runs the
sleep, an emulated agent (:mod:`mezzo.emulation`) a timer of that length.

With ``partition`` (a set of hostnames) the framework only ever uses those hosts:
it installs them as its persistent agent filter (``set_filters``) and declines any
other host for good. That is static partitioning, the paper's baseline.

Threading: every callback runs on the driver thread, one at a time, so the state
needs no lock. Other threads may read the counters and ``completed`` (plain ints
and a list that is only appended to); ``all_done`` is set after the last job.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence

import mezzo
from mezzo import Filters, FrameworkFilters, Resources, TaskState, TaskStatus
from mezzo.emulation import emulated_task

from .jobs import Job, MapTask, random_placement
from .policy import DelayPolicy, refuse_seconds_for

DEFAULT_TASK = Resources(cpus=1, mem=128)
"""What one map takes unless told otherwise: one slot."""

OUTSIDE_PARTITION_REFUSE = 3600.0
"""Refusal for a host outside a static partition: it will never be wanted."""


class JobStream:
    """Job ``n`` reads ``maps`` blocks placed uniformly at random (``replicas`` distinct
    hosts each) over ``hosts``: the whole cluster, as a shared HDFS would spread a file.
    Deterministic for a given ``seed``."""

    def __init__(self, name: str, hosts: Sequence[str], maps: int, replicas: int = 3, seed: int = 0) -> None:
        if maps < 1:
            raise ValueError(f"a job needs at least one map, got {maps}")
        self.name = name
        self.hosts = list(hosts)
        self.maps = maps
        self.replicas = replicas
        self._rng = random.Random(seed)
        self._count = 0

    def next_job(self, now: float) -> Job:
        self._count += 1
        job_id = f"{self.name}-job{self._count}"
        return Job(job_id, random_placement(self.hosts, self.maps, self.replicas, self._rng, job_id), now)


class TaskDurations:
    """Map durations: Normal(``mean``, ``stddev``) seconds, at least ``minimum``,
    times ``remote_factor`` for a map launched away from its block."""

    def __init__(self, mean: float, stddev: float, remote_factor: float = 1.0, *,
                 minimum: float = 0.1, seed: int | None = None) -> None:
        self.mean, self.stddev, self.remote_factor, self.minimum = mean, stddev, remote_factor, minimum
        self._rng = random.Random(seed)

    def __call__(self, local: bool) -> float:
        seconds = max(self.minimum, self._rng.gauss(self.mean, self.stddev))
        return seconds if local else seconds * self.remote_factor


def slots_in(offered: Resources, per_task: Resources) -> int:
    """How many tasks of ``per_task`` fit in ``offered``."""
    n, left = 0, offered
    while per_task.fits_in(left):
        n, left = n + 1, left - per_task
    return n


class LocalityScheduler(mezzo.Scheduler):
    """Runs ``stream``'s jobs one after the other with delay scheduling; see the module docstring.

    ``jobs``: how many to run (None: until the driver stops). ``refuse_seconds``:
    sent with declines and launches (None: :func:`refuse_seconds_for` the delay).
    ``clock``: seconds, monotonic (tests pass their own).
    """

    def __init__(self, stream: JobStream, policy: DelayPolicy, durations: Callable[[bool], float], *,
                 per_task: Resources = DEFAULT_TASK, jobs: int | None = None,
                 refuse_seconds: float | None = None, partition: Collection[str] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream
        self.policy = policy
        self.durations = durations
        self.per_task = per_task
        self.jobs = jobs
        self.refuse = Filters(refuse_seconds=refuse_seconds if refuse_seconds is not None
                              else refuse_seconds_for(policy.delay))
        self.partition = frozenset(partition) if partition is not None else None
        self.clock = clock
        self.job: Job | None = None
        """The job running now (None before registration and after the last one)."""
        self.completed: list[Job] = []
        self.all_done = threading.Event()
        self.offers = 0
        self.declined = 0
        self.local_launches = 0
        self.remote_launches = 0
        self.lost = 0
        self.launched_on: Counter[str] = Counter()
        """Maps launched per hostname."""
        self._tasks: dict[str, tuple[Job, MapTask]] = {}
        self._attempts = 0
        self._wants_offers = True

    # -- registration ---------------------------------------------------------

    def registered(self, driver: mezzo.SchedulerDriver, framework_id: str, master: str) -> None:
        if self.partition is not None:
            # The master then never offers other hosts; the check in resource_offers
            # only covers offers already on their way before this arrives.
            driver.set_filters(FrameworkFilters(agents=sorted(self.partition)))
        if self.job is None and not self.completed:
            self._start_next_job(driver)

    # -- offers -------------------------------------------------------------------

    def resource_offers(self, driver: mezzo.SchedulerDriver, offers: list[mezzo.Offer]) -> None:
        now = self.clock()
        for offer in offers:
            self.offers += 1
            if self.partition is not None and offer.hostname not in self.partition:
                self._decline(driver, offer, Filters(refuse_seconds=OUTSIDE_PARTITION_REFUSE))
                continue
            job = self.job
            decision = self.policy.decide(job, offer.hostname, slots_in(offer.resources, self.per_task), now) \
                if job is not None else None
            if decision is None or not decision.tasks:
                self._decline(driver, offer, self.refuse)
                continue
            tasks = [self._task(job, m, offer.agent_id, local=True) for m in decision.local]
            tasks += [self._task(job, m, offer.agent_id, local=False) for m in decision.remote]
            self.local_launches += len(decision.local)
            self.remote_launches += len(decision.remote)
            self.launched_on[offer.hostname] += len(tasks)
            # The rest of the offer gets the same short refusal as a decline: this job
            # had nothing more it wanted to run on that host right now.
            driver.launch_tasks(offer.offer_id, tasks, self.refuse)
        if self.job is not None and not self.job.pending:
            self._want_offers(driver, False)  # every map launched: nothing to offer us until the next job

    def _decline(self, driver: mezzo.SchedulerDriver, offer: mezzo.Offer, filters: Filters) -> None:
        self.declined += 1
        driver.decline_offer(offer.offer_id, filters)

    def _task(self, job: Job, task: MapTask, agent_id: str, *, local: bool) -> mezzo.TaskInfo:
        self._attempts += 1
        task_id = f"{job.job_id}-map{task.index}-{self._attempts}"
        info = emulated_task(task_id, agent_id, self.per_task, self.durations(local))
        info.labels.update({"block": task.block, "locality": "node-local" if local else "remote"})
        self._tasks[task_id] = (job, task)
        return info

    # -- task ends ------------------------------------------------------------

    def status_update(self, driver: mezzo.SchedulerDriver, status: TaskStatus) -> None:
        if not mezzo.is_terminal(status.state):
            return
        entry = self._tasks.pop(status.task_id, None)
        if entry is None:
            return  # a duplicate, or a task of a job we no longer track
        job, task = entry
        if status.state == TaskState.TASK_FINISHED:
            job.finished += 1
            if job.done and job is self.job:
                self._finish_job(driver, job)
            return
        # Lost, failed or killed: the map runs again, as a pending map like any other.
        self.lost += 1
        job.requeue(task)
        if job is self.job:
            self._want_offers(driver, True)

    def _finish_job(self, driver: mezzo.SchedulerDriver, job: Job) -> None:
        job.finished_at = self.clock()
        self.completed.append(job)
        self.job = None
        if self.jobs is not None and len(self.completed) >= self.jobs:
            self._want_offers(driver, False)
            self.all_done.set()
            return
        self._start_next_job(driver)

    def _start_next_job(self, driver: mezzo.SchedulerDriver) -> None:
        self.job = self.stream.next_job(self.clock())
        # Reviving also clears our refuse filters: hosts passed up for the previous
        # job may well hold this one's blocks.
        self._want_offers(driver, True, force=True)

    def _want_offers(self, driver: mezzo.SchedulerDriver, wanted: bool, *, force: bool = False) -> None:
        """Suppress or revive offers, sending only changes (``force``: revive anyway,
        to clear the refuse filters)."""
        if wanted != self._wants_offers or force:
            self._wants_offers = wanted
            driver.set_needs_offers(wanted)

    def error(self, driver: mezzo.SchedulerDriver, message: str) -> None:
        self.all_done.set()  # the driver aborts: nothing more will happen

    # -- reading --------------------------------------------------------------

    @property
    def locality(self) -> float:
        """Share of all launches so far that were node-local (1.0 before any)."""
        launched = self.local_launches + self.remote_launches
        return self.local_launches / launched if launched else 1.0
