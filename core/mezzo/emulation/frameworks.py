"""Emulated frameworks: many real scheduler drivers in one process.

Each :class:`EmulatedScheduler` is an ordinary :class:`mezzo.Scheduler` behind an
ordinary :class:`mezzo.SchedulerDriver`; all of a process's drivers share the one
driver thread (:mod:`mezzo.driver.runtime`). The scheduler follows the paper's
§6.5 workload: on every offer it launches one task of ``per_task`` resources if
that fits and declines the offer otherwise (``tasks_per_offer`` and ``max_tasks``
change that for the throughput benchmark). A task's duration is drawn from
``duration()`` and carried in ``labels["duration"]``, which emulated agents
(:mod:`.agents`) read to "run" it on a timer; a real agent would run the
``sleep`` command it also carries.

:class:`ProbeFramework` is the paper's test framework: it registers, runs one
task, records when each step happened and leaves.

Usage::

    pool = EmulatedFrameworkPool("127.0.0.1:5050", count=200, per_task="cpus:1;mem:1024",
                                 duration=normal_duration(30, 10, seed=1))
    pool.start()
    ...
    print(pool.counts())
    pool.stop()
"""

from __future__ import annotations

import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from .. import is_terminal, state_name
from ..config import TlsConfig
from ..driver import Scheduler, SchedulerDriver
from ..resources import Resources
from ..wire.ttypes import CommandInfo, Filters, FrameworkInfo, Offer, TaskInfo, TaskState, TaskStatus

ENDED_WINDOW = 100_000
"""Ended tasks each emulated scheduler remembers to count duplicate terminal updates."""


def normal_duration(
    mean: float, stddev: float, *, seed: int | None = None, minimum: float = 0.1
) -> Callable[[], float]:
    """Task durations drawn from Normal(mean, stddev), never below ``minimum`` seconds."""
    rng = random.Random(seed)
    return lambda: max(minimum, rng.gauss(mean, stddev))


def emulated_task(task_id: str, agent_id: str, resources: Resources, seconds: float) -> TaskInfo:
    """A task that emulated agents "run" for ``seconds`` and real agents run as ``sleep``."""
    return TaskInfo(
        task_id=task_id,
        name=task_id,
        agent_id=agent_id,
        resources=resources,
        command=CommandInfo(value=f"sleep {seconds:.3f}", shell=True),
        labels={"duration": f"{seconds:.3f}"},
    )


class EmulatedScheduler(Scheduler):
    """One task of ``per_task`` on every offer it fits in (paper §6.5); see the module docstring.

    The counters are written on the driver thread and read from others; each is a
    plain int, so a reader sees a recent value without locking.
    """

    def __init__(
        self,
        name: str,
        per_task: Resources,
        duration: Callable[[], float],
        *,
        tasks_per_offer: int = 1,
        max_tasks: int | None = None,
        refuse_seconds: float | None = None,
    ) -> None:
        if tasks_per_offer < 0 or (tasks_per_offer == 0 and not per_task):
            # 0 fills the offer: with tasks of no resources that would never end.
            raise ValueError(
                f"tasks_per_offer must be >= 0, and 0 needs tasks with resources; "
                f"got {tasks_per_offer} tasks of {per_task or 'nothing'}"
            )
        self.name = name
        self.per_task = per_task
        self.duration = duration
        self.tasks_per_offer = tasks_per_offer
        """At most this many tasks on one offer; 0 fills the offer."""
        self.max_tasks = max_tasks
        """Launch no more than this many tasks in all (None: no limit)."""
        self.filters = None if refuse_seconds is None else Filters(refuse_seconds=refuse_seconds)
        """Sent with launches and declines: how long the rest of an offer is refused
        to this framework (None: the master's ``refuse_seconds``)."""
        self.launched = 0
        self.running = 0
        self.finished = 0
        self.failed = 0
        self.offers = 0
        self.declined = 0
        self.duplicates = 0
        """Terminal updates for tasks that had ended already (must stay 0)."""
        self.duplicate_examples: list[tuple[str, str, str]] = []
        self._ids = 0
        self._live: set[str] = set()
        self._ended: OrderedDict[str, str] = OrderedDict()
        """Ended task ids, newest last, bounded by ENDED_WINDOW (a load test may run for hours)."""
        self._suppressed = False
        self.first_offer_at: float | None = None
        """``time.time()`` of the first offers (the throughput benchmark's clock)."""
        self.registrations = 0
        """``registered`` callbacks: new framework ids (1, unless the master forgot us)."""
        self.reregistrations = 0
        """``reregistered`` callbacks: reconnections that kept the id (master failovers)."""
        self.registered_at: float | None = None
        """``time.time()`` of the latest (re-)registration; None while disconnected."""
        self.offered_at: float | None = None
        """``time.time()`` of the first offers since the latest (re-)registration."""

    def registered(self, driver: SchedulerDriver, framework_id: str, master: str) -> None:
        self.registrations += 1
        self.registered_at, self.offered_at = time.time(), None

    def reregistered(self, driver: SchedulerDriver, framework_id: str, master: str) -> None:
        self.reregistrations += 1
        self.registered_at, self.offered_at = time.time(), None

    def disconnected(self, driver: SchedulerDriver) -> None:
        self.registered_at = None

    def resource_offers(self, driver: SchedulerDriver, offers: list[Offer]) -> None:
        if self.first_offer_at is None:
            self.first_offer_at = time.time()
        if self.offered_at is None:
            self.offered_at = time.time()
        per_task = self.per_task
        for offer in offers:
            self.offers += 1
            tasks: list[TaskInfo] = []
            left = offer.resources
            while per_task.fits_in(left) and (self.tasks_per_offer == 0 or len(tasks) < self.tasks_per_offer):
                if self.max_tasks is not None and self.launched + len(tasks) >= self.max_tasks:
                    break
                self._ids += 1
                tasks.append(
                    emulated_task(f"{self.name}-{self._ids}", offer.agent_id, per_task, self.duration())
                )
                left = left - per_task
            if not tasks:
                self.declined += 1
                driver.decline_offer(offer.offer_id, self.filters)
            else:
                driver.launch_tasks(offer.offer_id, tasks, self.filters)
                self.launched += len(tasks)
        if self.max_tasks is not None and self.launched >= self.max_tasks and not self._suppressed:
            self._suppressed = True
            driver.set_needs_offers(False)  # all launched: stop the master offering

    def status_update(self, driver: SchedulerDriver, status: TaskStatus) -> None:
        state = status.state
        if state == TaskState.TASK_RUNNING:
            if status.task_id not in self._live:
                self._live.add(status.task_id)
                self.running += 1
        elif is_terminal(state):
            if status.task_id in self._ended:
                self.duplicates += 1
                if len(self.duplicate_examples) < 5:
                    self.duplicate_examples.append((status.task_id, self._ended[status.task_id], status.uuid))
                return
            self._ended[status.task_id] = status.uuid
            if len(self._ended) > ENDED_WINDOW:
                self._ended.popitem(last=False)
            if status.task_id in self._live:
                self._live.discard(status.task_id)
                self.running -= 1
            if state == TaskState.TASK_FINISHED:
                self.finished += 1
            else:
                self.failed += 1

    def error(self, driver: SchedulerDriver, message: str) -> None:
        self.failed += 1


class EmulatedFrameworkPool:
    """``count`` :class:`EmulatedScheduler` frameworks, each with its own driver,
    all in this process."""

    def __init__(
        self,
        master: str,
        count: int,
        per_task: str | Resources = "cpus:1;mem:1024",
        duration: Callable[[], float] | None = None,
        *,
        name_prefix: str = "emulated",
        role: str = "*",
        tasks_per_offer: int = 1,
        max_tasks: int | None = None,
        refuse_seconds: float | None = None,
    ) -> None:
        per = per_task if isinstance(per_task, Resources) else Resources.parse(per_task)
        duration = duration or normal_duration(30.0, 10.0)
        self.schedulers = [
            EmulatedScheduler(
                f"{name_prefix}-{i}",
                per,
                duration,
                tasks_per_offer=tasks_per_offer,
                max_tasks=max_tasks,
                refuse_seconds=refuse_seconds,
            )
            for i in range(count)
        ]
        self.drivers = [
            SchedulerDriver(s, FrameworkInfo(name=s.name, role=role), master) for s in self.schedulers
        ]

    def start(self) -> None:
        for driver in self.drivers:
            driver.start()

    def registered_count(self) -> int:
        return sum(1 for d in self.drivers if d.connected)

    def counts(self) -> dict[str, int]:
        """Totals over every framework: offers, launched, running, finished, failed, declined."""
        out = {
            "offers": 0,
            "launched": 0,
            "running": 0,
            "finished": 0,
            "failed": 0,
            "declined": 0,
            "duplicates": 0,
            "registrations": 0,
            "reregistrations": 0,
        }
        for s in self.schedulers:
            out["offers"] += s.offers
            out["launched"] += s.launched
            out["running"] += s.running
            out["finished"] += s.finished
            out["failed"] += s.failed
            out["declined"] += s.declined
            out["duplicates"] += s.duplicates
            out["registrations"] += s.registrations
            out["reregistrations"] += s.reregistrations
        return out

    def all_registered_at(self) -> float | None:
        """When the last of these frameworks (re-)registered, if all are registered now
        (``time.time()``); after a master failover, when the last one re-registered."""
        times = [s.registered_at for s in self.schedulers]
        return None if not times or None in times else max(times)  # type: ignore[type-var]

    def offered_since_registered_at(self) -> float | None:
        """The earliest first offer any framework got since its latest (re-)registration:
        after a failover, once all re-registered, when the new leader's offers began."""
        times = [s.offered_at for s in self.schedulers if s.offered_at is not None]
        return min(times) if times else None

    def first_offer_at(self) -> float | None:
        """When the first of these frameworks got its first offers (``time.time()``)."""
        times = [s.first_offer_at for s in self.schedulers if s.first_offer_at is not None]
        return min(times) if times else None

    def stop(self) -> None:
        for driver in self.drivers:
            driver.stop()
        for driver in self.drivers:
            driver.join()


class ProbeFramework(Scheduler):
    """The paper's test framework: register, run one task of ``seconds``, leave.

    ``times`` maps each step to ``time.monotonic()``: ``started`` (driver started),
    ``registered``, ``offered`` (first offer the task fits in), ``running`` and
    ``finished``. ``done`` is set once the task ends (``outcome`` names how).
    """

    def __init__(self, per_task: Resources, seconds: float, name: str = "probe") -> None:
        self.per_task = per_task
        self.seconds = seconds
        self.name = name
        self.times: dict[str, float] = {}
        self.outcome = ""
        self.done = threading.Event()
        self._launched = False

    def registered(self, driver: SchedulerDriver, framework_id: str, master: str) -> None:
        self.times["registered"] = time.monotonic()

    def resource_offers(self, driver: SchedulerDriver, offers: list[Offer]) -> None:
        for offer in offers:
            if self._launched or not self.per_task.fits_in(offer.resources):
                driver.decline_offer(offer.offer_id)
                continue
            self._launched = True
            self.times["offered"] = time.monotonic()
            driver.launch_tasks(
                offer.offer_id,
                emulated_task(f"{self.name}-task", offer.agent_id, self.per_task, self.seconds),
            )
            # One task is all it wants: stop the master from offering more.
            driver.set_needs_offers(False)

    def status_update(self, driver: SchedulerDriver, status: TaskStatus) -> None:
        if status.state == TaskState.TASK_RUNNING:
            self.times.setdefault("running", time.monotonic())
        elif is_terminal(status.state):
            self.times["finished"] = time.monotonic()
            self.outcome = state_name(status.state)
            self.done.set()

    def error(self, driver: SchedulerDriver, message: str) -> None:
        self.outcome = f"error: {message}"
        self.done.set()


def run_probe(
    master: str,
    per_task: str | Resources = "cpus:1;mem:1024",
    seconds: float = 10.0,
    *,
    timeout: float = 120.0,
    name: str = "probe",
    tls: TlsConfig | None = None,
) -> ProbeFramework:
    """Run one :class:`ProbeFramework` to the end and return it (``times``, ``outcome``);
    ``tls`` as for :class:`~mezzo.driver.scheduler.SchedulerDriver`.

    Raises :class:`TimeoutError` when its task has not ended within ``timeout``.
    """
    per = per_task if isinstance(per_task, Resources) else Resources.parse(per_task)
    probe = ProbeFramework(per, seconds, name)
    driver = SchedulerDriver(probe, FrameworkInfo(name=name), master, tls=tls)
    probe.times["started"] = time.monotonic()
    driver.start()
    try:
        if not probe.done.wait(timeout):
            raise TimeoutError(
                f"probe task did not end within {timeout} s (steps so far: {sorted(probe.times)})"
            )
    finally:
        driver.stop()
        driver.join()
    return probe
