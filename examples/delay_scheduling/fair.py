"""Many MapReduce jobs at once: fair sharing between them, delay scheduling for their maps.

The paper's §6.1 "Facebook Hadoop mix" runs Hadoop's fair scheduler inside one
framework: jobs arrive while others run, and each free slot goes to the job that
has the fewest tasks running. :class:`FairJobsScheduler` does that on offers.

- :meth:`FairJobsScheduler.submit` adds a job (a :class:`JobSpec`: maps, optional
  reduces, mean task seconds). It is thread-safe and may be called before or after
  registration; the job's maps are pending at once.
- For each free slot of an offer (:func:`~.scheduler.slots_in`), the jobs with
  pending tasks are considered in the order (tasks running now, submission time);
  the first that takes a task on that host gets the slot. A pending *reduce* runs
  anywhere; a *map* is offered to :meth:`DelayPolicy.decide <.policy.DelayPolicy.decide>`
  one slot at a time, so a job without a local block passes the host up (its wait
  starts) until it has waited ``delay``, and the slot goes to the next job meanwhile.
- A job's reduces become pending only once every one of its maps has FINISHED.
- The tasks chosen on one offer go out in one ``launch_tasks``; an offer nobody
  wanted is declined with :func:`~.policy.refuse_seconds_for` the delay.
- A task that ends other than TASK_FINISHED runs again (``lost`` counts them).
- Offers are suppressed while no job has a pending task and revived when one has
  again; :meth:`~FairJobsScheduler.submit` always revives, which also clears the
  refuse filters (hosts passed up for the other jobs may hold the new job's blocks).

A task is a ``sleep`` (:func:`mezzo.emulation.emulated_task`) of Normal(mean,
``stddev`` x mean) seconds, at least 0.1, ``remote_factor`` times longer for a map
away from its block. Job ``n``'s block placement and durations come from a random
generator seeded with (``seed``, ``n``), so they do not depend on which thread
submitted when or on the order tasks launched in.

Threading: callbacks run on the driver thread; ``submit`` runs on any thread. One
lock guards the state. Driver methods are called after it is released, so no lock
of the driver's is ever taken inside ours; so is ``on_job_done``, which may itself
call ``submit`` (the "large" mix submits each job when the previous one finished).
"""

from __future__ import annotations

import heapq
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import mezzo
from mezzo import Filters, Resources, TaskState, TaskStatus
from mezzo.emulation import emulated_task

from .jobs import Job, random_placement
from .policy import DelayPolicy, refuse_seconds_for
from .scheduler import DEFAULT_TASK, slots_in

MAP, REDUCE = "map", "reduce"

MIN_TASK_SECONDS = 0.1
"""The shortest task drawn: a normal draw can be near zero or negative."""


@dataclass(frozen=True)
class JobSpec:
    """What a job is: ``maps`` map tasks and ``reduces`` reduce tasks (pending once
    every map has finished), with their mean durations in seconds. ``kind`` labels the
    job type in reports."""

    kind: str
    maps: int
    reduces: int = 0
    map_seconds: float = 2.0
    reduce_seconds: float = 2.0

    def __post_init__(self) -> None:
        if self.maps < 1:
            raise ValueError(f"a job needs at least one map, got {self.maps}")
        if self.reduces < 0:
            raise ValueError(f"reduces must be >= 0, got {self.reduces}")
        if self.map_seconds <= 0 or self.reduce_seconds <= 0:
            raise ValueError("task seconds must be > 0")


class FairJob(Job):
    """One submitted job: the maps of a :class:`~.jobs.Job` (pending set, block index,
    ``waiting_since`` and locality counters, all used by :class:`DelayPolicy`) plus its
    reduces and how many of its tasks run now.

    ``pending`` stays the number of pending *maps*, as DelayPolicy expects;
    ``pending_reduces`` and ``has_pending`` cover the reduces. ``finished`` counts
    finished maps, ``reduces_finished`` finished reduces; ``done`` needs both.
    ``local_launches``/``remote_launches`` count map launches only (a reduce has no
    locality). ``map_seconds``/``reduce_seconds`` are each task's drawn duration
    (before ``remote_factor``).
    """

    def __init__(
        self,
        job_id: str,
        spec: JobSpec,
        placement: Iterable[tuple[str, tuple[str, ...]]],
        submitted_at: float,
        *,
        order: int,
        map_seconds: Sequence[float],
        reduce_seconds: Sequence[float],
    ) -> None:
        super().__init__(job_id, placement, submitted_at)
        self.spec = spec
        self.kind = spec.kind
        self.order = order
        """Submission number: breaks ties between jobs submitted at the same clock reading."""
        self.running = 0
        self.reduces_finished = 0
        self.map_seconds = list(map_seconds)
        self.reduce_seconds = list(reduce_seconds)
        self._pending_reduces: dict[int, None] = {}  # an ordered set: the oldest first
        self._attempts = {MAP: [0] * spec.maps, REDUCE: [0] * spec.reduces}

    @property
    def pending_reduces(self) -> int:
        return len(self._pending_reduces)

    @property
    def has_pending(self) -> bool:
        """True when a map or a reduce waits for a slot."""
        return bool(self.pending or self._pending_reduces)

    @property
    def done(self) -> bool:
        return self.finished >= len(self.maps) and self.reduces_finished >= self.spec.reduces

    def take_reduce(self) -> int:
        """The oldest pending reduce's index, removed from the pending set."""
        index = next(iter(self._pending_reduces))
        del self._pending_reduces[index]
        return index

    def next_attempt(self, phase: str, index: int) -> int:
        """1 for a task's first launch, 2 for its second, ..."""
        self._attempts[phase][index] += 1
        return self._attempts[phase][index]

    def task_finished(self, phase: str) -> None:
        """Count a finished task; the last map to finish makes every reduce pending."""
        if phase == REDUCE:
            self.reduces_finished += 1
            return
        self.finished += 1
        if self.finished == len(self.maps):
            self._pending_reduces = dict.fromkeys(range(self.spec.reduces))

    def task_lost(self, phase: str, index: int) -> None:
        """Make a task that did not finish pending again."""
        if phase == REDUCE:
            self._pending_reduces[index] = None
        else:
            self.requeue(self.maps[index])


class FairJobsScheduler(mezzo.Scheduler):
    """Runs every submitted job at once, sharing slots fairly; see the module docstring.

    ``hosts``: where block replicas are placed (``min(replicas, len(hosts))`` distinct
    hosts per block). ``on_job_done(job)``: called on the driver thread once a job has
    finished and been appended to ``completed``. ``clock``: seconds, monotonic.

    Readable from any thread: ``completed`` (append-only, in completion order),
    ``jobs_submitted``, ``active``, ``idle`` (set while no job is active; also set if
    the driver aborts, with the message in ``failed``), and the counters ``offers``,
    ``declined``, ``lost`` (tasks re-run), ``local_launches``/``remote_launches`` (maps).
    """

    def __init__(
        self,
        name: str,
        hosts: Sequence[str],
        policy: DelayPolicy,
        *,
        per_task: Resources = DEFAULT_TASK,
        replicas: int = 3,
        stddev: float = 0.1,
        remote_factor: float = 1.0,
        seed: int = 0,
        on_job_done: Callable[[FairJob], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not hosts:
            raise ValueError("blocks need at least one host")
        if replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {replicas}")
        self.name = name
        self.hosts = list(hosts)
        self.policy = policy
        self.per_task = per_task
        self.replicas = min(replicas, len(self.hosts))
        self.stddev = stddev
        self.remote_factor = remote_factor
        self.seed = seed
        self.on_job_done = on_job_done
        self.clock = clock
        self.refuse = Filters(refuse_seconds=refuse_seconds_for(policy.delay))
        self.completed: list[FairJob] = []
        self.jobs_submitted = 0
        self.idle = threading.Event()
        self.idle.set()
        self.failed: str | None = None
        self.offers = 0
        self.declined = 0
        self.lost = 0
        self.local_launches = 0
        self.remote_launches = 0
        self._lock = threading.Lock()
        self._active: dict[str, FairJob] = {}
        self._pending: dict[str, FairJob] = {}
        """The active jobs with a task waiting for a slot."""
        self._tasks: dict[str, tuple[FairJob, str, int]] = {}
        """Running task id -> (job, phase, index)."""
        self._driver: mezzo.SchedulerDriver | None = None
        self._wants_offers = True  # a framework registers wanting offers

    # -- jobs -------------------------------------------------------------------

    def submit(self, spec: JobSpec) -> FairJob:
        """Add a job; its maps are pending at once. Thread-safe."""
        with self._lock:
            self.jobs_submitted += 1
            job = self._new_job(self.jobs_submitted, spec)
            self._active[job.job_id] = job
            self._pending[job.job_id] = job
            self.idle.clear()
            change = self._offers_change(revive=True)
            driver = self._driver
        self._send(driver, change)
        return job

    def _new_job(self, n: int, spec: JobSpec) -> FairJob:
        job_id = f"{self.name}-job{n}"
        # Seeded per job (a str seed hashes deterministically), so that job n is the
        # same whatever else ran before it.
        rng = random.Random(f"{self.seed}:{n}")
        placement = random_placement(self.hosts, spec.maps, self.replicas, rng, job_id)
        return FairJob(
            job_id,
            spec,
            placement,
            self.clock(),
            order=n,
            map_seconds=[self._draw(rng, spec.map_seconds) for _ in range(spec.maps)],
            reduce_seconds=[self._draw(rng, spec.reduce_seconds) for _ in range(spec.reduces)],
        )

    def _draw(self, rng: random.Random, mean: float) -> float:
        return max(MIN_TASK_SECONDS, rng.gauss(mean, self.stddev * mean))

    @property
    def active(self) -> int:
        """Jobs submitted and not finished."""
        return len(self._active)

    @property
    def locality(self) -> float:
        """Share of map launches so far that were node-local (1.0 before any)."""
        launched = self.local_launches + self.remote_launches
        return self.local_launches / launched if launched else 1.0

    # -- registration -----------------------------------------------------------

    def registered(self, driver: mezzo.SchedulerDriver, framework_id: str, master: str) -> None:
        with self._lock:
            self._driver = driver
            change = self._offers_change()  # suppress if nothing was submitted yet
        self._send(driver, change)

    def reregistered(self, driver: mezzo.SchedulerDriver, framework_id: str, master: str) -> None:
        with self._lock:
            self._driver = driver  # the driver re-sends our last needs-offers itself

    def error(self, driver: mezzo.SchedulerDriver, message: str) -> None:
        self.failed = message
        self.idle.set()  # the driver aborts: nothing will finish now; don't keep waiters waiting

    # -- offers ---------------------------------------------------------------------

    def resource_offers(self, driver: mezzo.SchedulerDriver, offers: list[mezzo.Offer]) -> None:
        now = self.clock()
        launches: list[tuple[str, list[mezzo.TaskInfo]]] = []
        declines: list[str] = []
        with self._lock:
            # Offers prove the master thinks we want them. A revive from submit() on
            # another thread is queued to the driver thread and can land after a
            # suppress decided later; without this the suppress would not be re-sent.
            self._wants_offers = True
            for offer in offers:
                self.offers += 1
                tasks = self._fill(offer, now)
                if tasks:
                    launches.append((offer.offer_id, tasks))
                else:
                    self.declined += 1
                    declines.append(offer.offer_id)
            change = self._offers_change()
        # The rest of a used offer gets the same short refusal as a decline: every job
        # passed it up (or it is smaller than a slot).
        for offer_id, tasks in launches:
            driver.launch_tasks(offer_id, tasks, self.refuse)
        for offer_id in declines:
            driver.decline_offer(offer_id, self.refuse)
        self._send(driver, change)

    def _fill(self, offer: mezzo.Offer, now: float) -> list[mezzo.TaskInfo]:
        """The tasks to launch on ``offer``, one slot at a time in fair order (lock held).

        A heap keyed (running, submitted_at, order): the job at its top asks for the
        slot, and goes back in with its new running count if it took it. A job that
        passes the host up does not go back: for the same host and the same ``now``,
        DelayPolicy would pass it up again (it has no local block there, and its wait,
        started now at the latest, is not ``delay`` old unless the delay is 0, when it
        takes any slot). So each job asks at most once more than it takes:
        O((jobs + tasks taken) x log jobs) per offer.
        """
        slots = slots_in(offer.resources, self.per_task)
        if not slots or not self._pending:
            return []
        heap = [(job.running, job.submitted_at, job.order, job) for job in self._pending.values()]
        heapq.heapify(heap)
        tasks: list[mezzo.TaskInfo] = []
        while heap and len(tasks) < slots:
            job = heapq.heappop(heap)[3]
            task = self._take(job, offer, now)
            if task is None:
                continue
            tasks.append(task)
            if job.has_pending:
                heapq.heappush(heap, (job.running, job.submitted_at, job.order, job))
            else:
                del self._pending[job.job_id]
        return tasks

    def _take(self, job: FairJob, offer: mezzo.Offer, now: float) -> mezzo.TaskInfo | None:
        """One task of ``job`` on ``offer``'s host, or None if the job passes it up (lock held)."""
        labels: dict[str, str] = {}
        if job.pending_reduces:
            # Reduces read every map's output: any host will do. (A job never has
            # pending maps and pending reduces at once.)
            phase, index = REDUCE, job.take_reduce()
            seconds = job.reduce_seconds[index]
        else:
            # One slot at a time: a job that takes a local map here and is asked again
            # for the next slot starts its wait now, having passed that slot up.
            decision = self.policy.decide(job, offer.hostname, 1, now)
            if not decision.tasks:
                return None
            local = bool(decision.local)
            (map_task,) = decision.tasks
            phase, index = MAP, map_task.index
            seconds = job.map_seconds[index] * (1.0 if local else self.remote_factor)
            # decide() has counted the launch on the job; these are the framework's totals.
            if local:
                self.local_launches += 1
            else:
                self.remote_launches += 1
            labels = {"block": map_task.block, "locality": "node-local" if local else "remote"}
        task_id = f"{job.job_id}-{phase[0]}{index}-{job.next_attempt(phase, index)}"
        info = emulated_task(task_id, offer.agent_id, self.per_task, seconds)
        info.labels.update({"job": job.job_id, "phase": phase, **labels})
        self._tasks[task_id] = (job, phase, index)
        job.running += 1
        return info

    # -- task ends --------------------------------------------------------------------

    def status_update(self, driver: mezzo.SchedulerDriver, status: TaskStatus) -> None:
        if not mezzo.is_terminal(status.state):
            return
        done: FairJob | None = None
        with self._lock:
            entry = self._tasks.pop(status.task_id, None)
            if entry is None:
                return  # a duplicate, or not ours
            job, phase, index = entry
            job.running -= 1
            if status.state == TaskState.TASK_FINISHED:
                job.task_finished(phase)  # the last map makes the reduces pending
                if job.done:
                    done = self._retire(job)
            else:
                self.lost += 1  # lost, failed, killed...: the task runs again
                job.task_lost(phase, index)
            if job.has_pending:
                self._pending[job.job_id] = job
            change = self._offers_change()
        self._send(driver, change)
        if done is not None:
            self._announce(done)

    def _retire(self, job: FairJob) -> FairJob:
        job.finished_at = self.clock()
        del self._active[job.job_id]
        self.completed.append(job)
        return job

    def _announce(self, job: FairJob) -> None:
        """Call ``on_job_done`` (without the lock: it may submit), then set ``idle`` if no
        job is active: after the callback, so that a job it submits leaves ``idle`` clear
        rather than set for an instant."""
        try:
            if self.on_job_done is not None:
                self.on_job_done(job)
        finally:
            with self._lock:
                if not self._active:
                    self.idle.set()

    # -- suppress / revive -----------------------------------------------------------

    def _offers_change(self, *, revive: bool = False) -> bool | None:
        """The needs-offers value to send now, or None (lock held): offers are wanted
        while a task is pending; only changes are sent, except that ``revive`` sends a
        revive even when offers are wanted already, to clear the refuse filters."""
        wanted = bool(self._pending)
        if wanted == self._wants_offers and not (revive and wanted):
            return None
        self._wants_offers = wanted
        return wanted

    @staticmethod
    def _send(driver: mezzo.SchedulerDriver | None, change: bool | None) -> None:
        if driver is not None and change is not None:
            driver.set_needs_offers(change)
