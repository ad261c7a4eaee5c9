"""A framework that launches a fixed number of short tasks and writes down everything it
is told: the client side of a Jepsen-style history, for :mod:`mezzo.testing.checker`.

    workload = HistoryWorkload("w1", tasks=500, marks=Path("/tmp/run/marks"))
    driver = mezzo.SchedulerDriver(workload, workload.framework_info(), sim.master)
    driver.start()
    workload.wait(timeout=300)           # every task has a terminal update
    workload.history                     # [Event(time, task, kind, state, reason, agent)]

Each task is a real process: ``sh -c 'echo ... >> MARKS/<task id>; sleep D'``. The
line it appends (its pid, the time, its sandbox, which names its agent's work
directory) is the *reality* the checker
holds the history against: a task id with two lines ran twice. Tasks are launched
once each and never relaunched: a task reported lost stays lost, so that every task
id has one launch and must have exactly one terminal update.

While tasks are unfinished it asks the master about them now and then (explicit
reconciliation, every :attr:`reconcile_every` seconds), as a careful framework does
after a failover or a partition: an update that was lost for good is answered then.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import mezzo
from mezzo import CommandInfo, Filters, FrameworkInfo, Resources, TaskInfo, TaskStatus

TASK = Resources(cpus=0.25, mem=32)


@dataclass(frozen=True)
class Event:
    time: float
    """``time.time()`` when it was seen (comparable with the tasks' own marks)."""
    task: str
    kind: str
    """``launch`` or ``update``."""
    state: str = ""
    reason: str = ""
    agent: str = ""


class HistoryWorkload(mezzo.Scheduler):
    """``tasks`` tasks of ``duration`` seconds (± half), at most ``parallel`` at once;
    ``partition_aware`` asks for TASK_UNREACHABLE rather than TASK_LOST."""

    def __init__(
        self,
        name: str,
        tasks: int,
        marks: Path,
        *,
        duration: float = 0.5,
        parallel: int = 16,
        seed: int = 0,
        reconcile_every: float = 3.0,
        partition_aware: bool = False,
    ) -> None:
        self.name = name
        self.partition_aware = partition_aware
        self.total = tasks
        self.marks = marks
        self.marks.mkdir(parents=True, exist_ok=True)
        self.parallel = parallel
        self.reconcile_every = reconcile_every
        rng = random.Random(f"{name}/{seed}")
        self.durations = [round(duration * rng.uniform(0.5, 1.5), 2) for _ in range(tasks)]
        self.lock = threading.Lock()
        self.history: list[Event] = []
        self.launched: dict[str, str] = {}
        """Task id -> agent id, for every task launched."""
        self.ended: dict[str, str] = {}
        """Task id -> its first terminal state."""
        self.done = threading.Event()
        self._next = 0
        self._last_reconcile = time.monotonic()

    def framework_info(self) -> FrameworkInfo:
        # Kept through a master failover or a lost scheduler link for a minute.
        capabilities = ["PARTITION_AWARE"] if self.partition_aware else []
        return FrameworkInfo(name=self.name, failover_timeout=60.0, capabilities=capabilities)

    def task_id(self, n: int) -> str:
        return f"{self.name}-{n:05d}"

    # -- callbacks ---------------------------------------------------------------------

    def resource_offers(self, driver, offers):
        with self.lock:
            for offer in offers:
                room = Resources.of(offer.resources)
                tasks: list[TaskInfo] = []
                while (
                    self._next < self.total
                    and len(self.launched) - len(self.ended) + len(tasks) < self.parallel
                    and TASK.fits_in(room)
                ):
                    tasks.append(self._task(offer.agent_id, self._next))
                    room = room - TASK
                    self._next += 1
                if tasks:
                    now = time.time()
                    for t in tasks:
                        self.launched[t.task_id] = offer.agent_id
                        self.history.append(Event(now, t.task_id, "launch", agent=offer.agent_id))
                    driver.launch_tasks(offer.offer_id, tasks, Filters(refuse_seconds=0))
                else:
                    driver.decline_offer(offer.offer_id, Filters(refuse_seconds=0.5))
            if self._next >= self.total:
                driver.set_needs_offers(False)
            self._maybe_reconcile(driver)

    def status_update(self, driver, status: TaskStatus):
        with self.lock:
            state = mezzo.state_name(status.state)
            self.history.append(
                Event(
                    time.time(), status.task_id, "update", state, status.reason or "", status.agent_id or ""
                )
            )
            if mezzo.is_terminal(status.state) and status.task_id in self.launched:
                self.ended.setdefault(status.task_id, state)
                if len(self.ended) == self.total:
                    self.done.set()
            self._maybe_reconcile(driver)

    def _maybe_reconcile(self, driver) -> None:
        now = time.monotonic()
        if now - self._last_reconcile < self.reconcile_every:
            return
        self._last_reconcile = now
        open_tasks = [
            TaskStatus(task_id=t, agent_id=a, state=mezzo.TaskState.TASK_STAGING)
            for t, a in self.launched.items()
            if t not in self.ended
        ]
        if open_tasks:
            driver.reconcile_tasks(open_tasks)

    def poke(self, driver) -> None:
        """Reconcile now if due (call it from a timer: callbacks stop when nothing happens)."""
        with self.lock:
            self._maybe_reconcile(driver)

    # -- tasks ---------------------------------------------------------------------------

    def _task(self, agent_id: str, n: int) -> TaskInfo:
        task_id = self.task_id(n)
        mark = self.marks / task_id
        return TaskInfo(
            task_id=task_id,
            agent_id=agent_id,
            resources=TASK,
            command=CommandInfo(
                value=f'echo "$$ $(date +%s.%N) $MEZZO_SANDBOX" >> {mark}; exec sleep {self.durations[n]}'
            ),
        )

    def wait(self, timeout: float, driver=None) -> bool:
        """Until every task has ended (True) or ``timeout`` (False); reconciles meanwhile."""
        deadline = time.monotonic() + timeout
        while not self.done.wait(0.5):
            if driver is not None:
                self.poke(driver)
            if time.monotonic() > deadline:
                return False
        return True
