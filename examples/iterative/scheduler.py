"""The schedulers: one job of logistic regression, iterated, in either of two ways.

Both run ``iterations`` iterations over the same partitions; an iteration is one task
per partition, each answering the gradient over its partition, and the weights move by
their sum before the next iteration starts. They differ in where the data lives:

- :class:`CachedScheduler` (Spark's way, the paper's §6.4): tasks run on a long-lived
  executor per agent (:mod:`.executor`), which parses a partition once and keeps it in
  memory. Tasks go to the executor that holds their partition, by *delay scheduling*:
  an offer from another agent is passed up for up to ``delay`` seconds, then taken
  (that executor then loads the partition). When an executor is lost, what it held
  is forgotten and its partitions are loaded again elsewhere, from their source.
  With ``hold`` > 0 it keeps, unanswered, the offers that come while the last tasks
  of an iteration run, and launches the next iteration on them: in a busy shared
  cluster, the slots its finished tasks give back at the barrier would go to other
  frameworks' long tasks and come back late. It keeps no more slots than its own
  finished tasks gave back in that tail (what it had, not more), each for at most
  ``hold`` seconds.
- :class:`MapReduceScheduler` (Hadoop's way): every iteration is a fresh set of command
  tasks (:mod:`.task`), each reading and parsing its partition from disk again.

Gradients are summed in partition order, so both give the same weights, bit for bit.
Callbacks run on the driver thread; :attr:`IterativeScheduler.done` is set at the end
and :attr:`IterativeScheduler.result` says how it went.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass, field

import numpy as np

import mezzo
from mezzo import CommandInfo, ExecutorInfo, Filters, Offer, Resources, TaskInfo, TaskState, TaskStatus

from .data import Partition

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
"""Where ``examples`` is importable from (the tasks and executors get it as PYTHONPATH)."""
MAX_ATTEMPTS = 3
"""Tries of one partition's task in one iteration before the job fails."""
STEP = 1.0
"""The gradient step, over the number of points."""


@dataclass
class Result:
    ok: bool
    message: str
    weights: list[float] = field(default_factory=list)
    iteration_seconds: list[float] = field(default_factory=list)
    """Wall time of each iteration: the first from the scheduler's start (registering,
    starting executors), each later one from the previous one's end to its last gradient."""
    cached_answers: int = 0
    """Tasks answered from an executor's memory (:class:`CachedScheduler`)."""
    local_launches: int = 0
    remote_launches: int = 0
    reloads: int = 0
    """Partitions loaded again after the first iteration (their executor was lost, or
    delay scheduling moved them)."""
    held_launches: int = 0
    """Tasks started on offers kept through an iteration barrier (``hold``)."""


class IterativeScheduler(mezzo.Scheduler):
    """What both ways share: the iterations, the gradients, the weights, retries."""

    def __init__(
        self, partitions: list[Partition], iterations: int, per_task: Resources, *, task_seconds: float = 0.0
    ) -> None:
        self.partitions = partitions
        self.task_seconds = task_seconds
        """Each task takes at least this long (it waits out the rest after computing): a
        small data set then has the task length of a heavier model (the ALS jobs of the
        paper's §6.1), without the CPU this machine would need to compute one."""
        self.iterations = iterations
        self.per_task = per_task
        self.points = sum(p.rows for p in partitions)
        self.weights = np.zeros(partitions[0].dims)
        self.iteration = 0
        self.pending: dict[int, float] = {}
        """Partition -> when its task of this iteration became pending."""
        self.running: dict[str, int] = {}
        """Task id -> partition."""
        self.gradients: dict[int, np.ndarray] = {}
        self.attempts: dict[int, int] = {}
        self.started_at = 0.0
        self.result = Result(ok=False, message="not run")
        self.done = threading.Event()
        self.lock = threading.Lock()
        self._begin()

    def _begin(self) -> None:
        now = time.monotonic()
        self.pending = {p.index: now for p in self.partitions}
        self.gradients = {}
        self.attempts = {}
        self.started_at = now

    def task_spec(self, part: Partition) -> bytes:
        spec = {"partition": asdict(part), "weights": self.weights.tolist()}
        if self.task_seconds > 0:
            spec["work"] = self.task_seconds
        return json.dumps(spec).encode()

    def task_id(self, part: int) -> str:
        attempt = self.attempts.get(part, 0)
        return f"it{self.iteration}-p{part}-a{attempt}"

    def slots(self, offer: Offer, extra: Resources | None = None) -> int:
        left = Resources.of(offer.resources)
        if extra is not None:
            if not extra.fits_in(left):
                return 0
            left = left - extra
        count = 0
        while self.per_task.fits_in(left):
            left = left - self.per_task
            count += 1
        return count

    # -- answers ---------------------------------------------------------------------

    def status_update(self, driver, status: TaskStatus):
        with self.lock:
            part = self.running.get(status.task_id)
            if part is None or not mezzo.is_terminal(status.state):
                return
            del self.running[status.task_id]
            if status.state == TaskState.TASK_FINISHED:
                try:
                    answer = json.loads(status.data or b"")
                    self.gradients[part] = np.asarray(answer["gradient"], dtype=float)
                except (ValueError, KeyError, TypeError) as exc:
                    self._retry(driver, part, status.task_id, f"unreadable answer: {exc}")
                    return
                self.answered(status, part, answer)
                if len(self.gradients) == len(self.partitions):
                    self._next(driver)
            else:
                self._retry(
                    driver, part, status.task_id, f"{mezzo.state_name(status.state)}: {status.message}"
                )

    def answered(self, status: TaskStatus, part: int, answer: dict) -> None:
        """A partition's gradient came (subclasses count what they care about)."""

    def lost_partition(self, part: int, task_id: str) -> None:
        """A partition's task ``task_id`` failed (subclasses forget where it was)."""

    def _retry(self, driver, part: int, task_id: str, why: str) -> None:
        self.lost_partition(part, task_id)
        self.attempts[part] = self.attempts.get(part, 0) + 1
        if self.attempts[part] >= MAX_ATTEMPTS:
            self._finish(
                driver,
                False,
                f"partition {part} failed {MAX_ATTEMPTS} times in iteration {self.iteration}: {why}",
            )
            return
        self.pending[part] = time.monotonic()
        driver.set_needs_offers(True)

    def _next(self, driver) -> None:
        total = sum((self.gradients[p.index] for p in self.partitions), np.zeros_like(self.weights))
        self.weights = self.weights - STEP * total / self.points
        self.result.iteration_seconds.append(time.monotonic() - self.started_at)
        self.iteration += 1
        if self.iteration == self.iterations:
            self._finish(driver, True, f"{self.iterations} iterations")
            return
        self._begin()
        driver.set_needs_offers(True)

    def _finish(self, driver, ok: bool, message: str) -> None:
        if self.done.is_set():
            return
        self.result.ok, self.result.message = ok, message
        self.result.weights = self.weights.tolist()
        driver.set_needs_offers(False)
        self.done.set()

    def error(self, driver, message):
        with self.lock:
            self._finish(driver, False, f"the master refused the framework: {message}")

    def _env(self) -> dict[str, str]:
        return {"PYTHONPATH": REPO_ROOT, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


class MapReduceScheduler(IterativeScheduler):
    """Every iteration a fresh set of command tasks, each parsing its partition again."""

    def resource_offers(self, driver, offers: list[Offer]):
        with self.lock:
            for offer in offers:
                tasks = []
                for _ in range(self.slots(offer)):
                    if not self.pending or self.done.is_set():
                        break
                    part = min(self.pending)
                    del self.pending[part]
                    tasks.append(self._task(offer, part))
                if tasks:
                    driver.launch_tasks(offer, tasks, Filters(refuse_seconds=1))
                else:
                    driver.decline_offer(offer, Filters(refuse_seconds=1))
            if not self.pending:
                driver.set_needs_offers(False)

    def _task(self, offer: Offer, part: int) -> TaskInfo:
        task_id = self.task_id(part)
        self.running[task_id] = part
        spec = self.task_spec(self.partitions[part]).decode()
        return TaskInfo(
            task_id=task_id,
            agent_id=offer.agent_id,
            resources=self.per_task,
            command=CommandInfo(
                value=sys.executable,
                arguments=["-m", "examples.iterative.task", spec],
                shell=False,
                environment=self._env(),
            ),
        )


class CachedScheduler(IterativeScheduler):
    """Tasks on caching executors, placed by delay scheduling; see the module docstring."""

    EXECUTOR_ID = "iterative-cache"

    def __init__(
        self,
        partitions: list[Partition],
        iterations: int,
        per_task: Resources,
        *,
        executor_resources: Resources,
        delay: float = 1.0,
        task_seconds: float = 0.0,
        hold: float = 0.0,
    ) -> None:
        super().__init__(partitions, iterations, per_task, task_seconds=task_seconds)
        self.executor = ExecutorInfo(
            executor_id=self.EXECUTOR_ID,
            name="iterative cache",
            command=CommandInfo(
                value=f"{sys.executable} -m examples.iterative.executor", environment=self._env()
            ),
            resources=executor_resources,
        )
        self.delay = delay
        self.cached_on: dict[int, str] = {}
        """Partition -> the agent whose executor holds it (as far as we know)."""
        self.placed_on: dict[str, str] = {}
        """Task id -> agent."""
        self.hold = hold
        self.held: dict[str, tuple[Offer, float]] = {}
        """Offer id -> (the offer, when it came): kept for the next iteration."""
        self.given_back = 0
        """Tasks of this iteration that ended after its last one was launched: the
        slots it may keep for the next (see :meth:`_may_hold`)."""

    def resource_offers(self, driver, offers: list[Offer]):
        with self.lock:
            now = time.monotonic()
            self._expire_held(driver, now)
            for offer in offers:
                if not self.pending and self._may_hold():
                    self.held[offer.offer_id] = (offer, now)
                    continue
                chosen = self._choose(offer.agent_id, self._free_slots(offer), now)
                if chosen:
                    tasks = [self._task(offer, part) for part in chosen]
                    driver.launch_tasks(offer, tasks, Filters(refuse_seconds=0.2))
                else:
                    # Passed up (waiting for the partitions' own agents) or nothing left:
                    # a short filter, so that the offer comes back once the delay is over.
                    driver.decline_offer(offer, Filters(refuse_seconds=min(self.delay, 1.0) / 2))
            if not self.pending and not self._keeping():
                driver.set_needs_offers(False)

    def status_update(self, driver, status: TaskStatus):
        with self.lock:
            if not self.pending and status.task_id in self.running and mezzo.is_terminal(status.state):
                self.given_back += 1  # a slot of the tail freed (before the barrier may reset it)
        super().status_update(driver, status)
        with self.lock:
            self._expire_held(driver, time.monotonic())

    def offer_rescinded(self, driver, offer_id):
        with self.lock:
            self.held.pop(offer_id, None)

    def disconnected(self, driver):
        with self.lock:
            self.held.clear()  # void with the connection they came on

    def _free_slots(self, offer: Offer) -> int:
        running = self.EXECUTOR_ID in (offer.executor_ids or ())
        return self.slots(offer, None if running else Resources.of(self.executor.resources))

    def _keeping(self) -> bool:
        """Whether offers are wanted while nothing is pending: to be kept for the next
        iteration (one is to come, this one's tasks run) until it has all it needs."""
        if self.hold <= 0 or self.done.is_set() or not self.running:
            return False
        if self.iteration + 1 >= self.iterations:
            return False  # the last iteration: no next one to keep them for
        return self._kept() < len(self.partitions)

    def _may_hold(self) -> bool:
        """Whether an offer may be kept for the next iteration: :meth:`_keeping`, and
        fewer slots are kept than this iteration's finished tasks gave back since its
        last launch (what it had, not more)."""
        return self._keeping() and self._kept() < self.given_back

    def _kept(self) -> int:
        return sum(self._free_slots(offer) for offer, _ in self.held.values())

    def _expire_held(self, driver, now: float) -> None:
        for offer_id, (offer, since) in list(self.held.items()):
            if now - since >= self.hold:
                del self.held[offer_id]
                driver.decline_offer(offer, Filters(refuse_seconds=0.2))

    def _launch_held(self, driver) -> None:
        """Start the new iteration on the offers kept: each offer first takes the
        partitions its agent caches, then any left (they were kept to be used at once,
        so the locality delay does not apply); offers left unused are declined."""
        held = [offer for offer, _ in self.held.values()]
        self.held.clear()
        now = time.monotonic()
        chosen: dict[str, list[int]] = {}
        for offer in held:
            chosen[offer.offer_id] = self._choose(
                offer.agent_id, self._free_slots(offer), now, local_only=True
            )
        for offer in held:
            taken = chosen[offer.offer_id]
            slots = self._free_slots(offer) - len(taken)
            taken += self._choose(offer.agent_id, slots, now, anywhere=True)
            if taken:
                self.result.held_launches += len(taken)
                driver.launch_tasks(
                    offer, [self._task(offer, part) for part in taken], Filters(refuse_seconds=0.2)
                )
            else:
                driver.decline_offer(offer, Filters(refuse_seconds=0.2))

    def _next(self, driver) -> None:
        super()._next(driver)
        self.given_back = 0
        if self.held:
            if self.done.is_set():
                for offer, _ in self.held.values():
                    driver.decline_offer(offer)
                self.held.clear()
            else:
                self._launch_held(driver)

    def _choose(
        self, agent: str, slots: int, now: float, *, local_only: bool = False, anywhere: bool = False
    ) -> list[int]:
        """Up to ``slots`` pending partitions for ``agent``: those it holds first, then
        those held nowhere, then, once they have waited ``delay`` (at once if ``anywhere``),
        those held elsewhere. ``local_only`` takes the first kind alone."""
        if slots <= 0 or self.done.is_set():
            return []
        local = [p for p in self.pending if self.cached_on.get(p) == agent]
        homeless = [] if local_only else [p for p in self.pending if p not in self.cached_on]
        waited = [
            p
            for p, since in self.pending.items()
            if not local_only
            and p in self.cached_on
            and p not in local
            and (anywhere or now - since >= self.delay)
        ]
        chosen = (sorted(local) + sorted(homeless) + sorted(waited))[:slots]
        for part in chosen:
            if self.cached_on.get(part) == agent:
                self.result.local_launches += 1
            else:
                self.result.remote_launches += 1
            del self.pending[part]
        return chosen

    def _task(self, offer: Offer, part: int) -> TaskInfo:
        task_id = self.task_id(part)
        self.running[task_id] = part
        self.placed_on[task_id] = offer.agent_id  # popped when it answers or fails
        return TaskInfo(
            task_id=task_id,
            agent_id=offer.agent_id,
            resources=self.per_task,
            executor=self.executor,
            data=self.task_spec(self.partitions[part]),
        )

    def answered(self, status: TaskStatus, part: int, answer: dict) -> None:
        agent = self.placed_on.pop(status.task_id, None)
        if agent is not None:
            self.cached_on[part] = agent
        if answer.get("cached"):
            self.result.cached_answers += 1
        elif self.iteration > 0:
            self.result.reloads += 1  # loaded after the first iteration: its executor was lost

    def lost_partition(self, part: int, task_id: str) -> None:
        self.cached_on.pop(part, None)
        self.placed_on.pop(task_id, None)

    def executor_lost(self, driver, agent_id, executor_id, status):
        with self.lock:
            for part in [p for p, agent in self.cached_on.items() if agent == agent_id]:
                del self.cached_on[part]

    def agent_lost(self, driver, agent_id):
        self.executor_lost(driver, agent_id, self.EXECUTOR_ID, -1)
