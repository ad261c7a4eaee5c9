"""The MPI framework's scheduler: gather a gang, launch a rank per task, watch the job.

The job goes through three phases:

- *gathering*: offers are held (:class:`~.gang.Gang`) until the ranks all fit; a gang
  that gains no slot for ``hold_timeout`` gives back what it holds, suppresses its
  offers for a randomised, growing time, then revives them (all agents at once) and
  starts over;
- *running*: mpiexec started (:class:`~.launcher.MpiexecLauncher`), one task per rank
  launched with its proxy's command, offers suppressed;
- *done*: :attr:`MpiScheduler.outcome` says how it went, :attr:`MpiScheduler.done` is set.

A rank that ends other than ``TASK_FINISHED``, or mpiexec exiting with an error, fails
the job: the ranks still running are killed and mpiexec stopped. The job succeeds when
mpiexec exits 0 and every rank has finished.

Callbacks run on the driver thread; a watcher thread of the scheduler's own checks the
gang's hold timeout (no offer may come to notice it) and mpiexec's exit. Both take
:attr:`MpiScheduler.lock`.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

import mezzo
from mezzo import CommandInfo, Filters, Offer, Resources, TaskInfo, TaskState, TaskStatus

from .gang import BACKOFF_MAX, Gang
from .launcher import LaunchError, MpiexecLauncher

WATCH_INTERVAL = 0.2
"""Seconds between the watcher's looks at the gang and at mpiexec."""
FINISH_GRACE = 10.0
"""Seconds, after mpiexec exited 0, for the ranks' TASK_FINISHED to arrive."""
GATHERING, RUNNING, DONE = "gathering", "running", "done"


@dataclass
class JobOutcome:
    """How a job ended."""

    ok: bool
    message: str
    exit_status: int | None = None
    """mpiexec's (None: it did not run, or had not exited)."""
    ranks: dict[str, str] = field(default_factory=dict)
    """Each rank's task id -> its last state's name."""
    tries: int = 0
    """How many times the gang gave back what it held before it was complete."""
    gathered_in: float | None = None
    """Seconds from registering to holding every rank (None: never)."""


class MpiScheduler(mezzo.Scheduler):
    """One MPI job of ``ranks`` ranks of ``per_rank`` each, running ``program`` (its
    argv, as mpiexec runs it on every rank); see the module docstring.

    ``localhost``: the address the agents reach this machine at (the proxies dial
    mpiexec there). ``launcher``: makes the job's :class:`MpiexecLauncher` (tests swap
    it); ``rng`` and ``clock``: the gang's."""

    def __init__(
        self,
        name: str,
        program: Sequence[str],
        ranks: int,
        per_rank: Resources,
        *,
        localhost: str,
        hold_timeout: float = 5.0,
        output: TextIO | None = None,
        launcher: Callable[..., MpiexecLauncher] = MpiexecLauncher,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.program = list(program)
        self.per_rank = per_rank
        self.localhost = localhost
        self.output = output
        self.gang = Gang(ranks, per_rank, hold_timeout, rng=rng or random.Random(), clock=clock)
        self._make_launcher = launcher
        self.launcher: MpiexecLauncher | None = None
        self.clock = clock
        self.lock = threading.Lock()
        self.phase = GATHERING
        self.rank_of: dict[str, int] = {}
        """Task id -> rank, once launched."""
        self.states: dict[str, str] = {}
        """Task id -> the name of its latest state."""
        self.most_slots = 0
        """The most ranks the offers held at once ever fit (what a gang that never
        completes got to)."""
        self.registered_at: float | None = None
        self.gathered_in: float | None = None
        self._finished_at: float | None = None
        self.backing_off_until: float | None = None
        """While set, the gang gave up and offers are suppressed until then (clock time)."""
        self.stopper: threading.Thread | None = None
        """Stops mpiexec after a failure, off the driver thread (it may take seconds)."""
        self.outcome: JobOutcome | None = None
        self.done = threading.Event()
        self._driver: mezzo.SchedulerDriver | None = None

    # -- registration ---------------------------------------------------------------

    def registered(self, driver, framework_id, master):
        with self.lock:
            if self._driver is None:
                self._driver = driver
                self.registered_at = self.clock()
                threading.Thread(target=self._watch, name="mpi-watch", daemon=True).start()

    # -- gathering --------------------------------------------------------------------

    def resource_offers(self, driver, offers: list[Offer]):
        with self.lock:
            if self.phase != GATHERING or self.backing_off_until is not None:
                # Running, done, or backing off (offers already on their way when we
                # suppressed): nothing to hold now.
                driver.decline_offer(offers, Filters(refuse_seconds=self.gang.hold_timeout))
                return
            unfit = [o for o in offers if not self.gang.hold(o)]
            if unfit:
                driver.decline_offer(unfit, Filters(refuse_seconds=self.gang.hold_timeout))
            self.most_slots = max(self.most_slots, self.gang.slots)
            if self.gang.complete:
                self._launch(driver)

    def offer_rescinded(self, driver, offer_id):
        with self.lock:
            self.gang.rescinded(offer_id)

    def disconnected(self, driver):
        # The offers held are void with the connection they came on: gather afresh.
        with self.lock:
            if self.phase == GATHERING:
                self.gang.give_back()

    def _launch(self, driver) -> None:
        placed, unused = self.gang.take()
        if unused:
            driver.decline_offer(unused, Filters(refuse_seconds=BACKOFF_MAX))
        if self.registered_at is not None:
            self.gathered_in = self.clock() - self.registered_at
        launcher = self._make_launcher(self.program, self.gang.ranks, self.localhost, output=self.output)
        try:
            commands = launcher.start()
        except LaunchError as exc:
            driver.decline_offer([o.offer_id for offers, _ in placed for o in offers])
            self._end(driver, False, f"cannot start the job: {exc}")
            return
        self.launcher = launcher
        rank = 0
        for offers, count in placed:
            tasks = []
            for _ in range(count):
                task_id = f"{self.name}-rank-{rank}"
                tasks.append(
                    TaskInfo(
                        task_id=task_id,
                        name=f"{self.name} rank {rank}",
                        agent_id=offers[0].agent_id,
                        resources=self.per_rank,
                        command=CommandInfo(value=commands[rank]),
                    )
                )
                self.rank_of[task_id] = rank
                self.states[task_id] = "TASK_STAGING"
                rank += 1
            driver.launch_tasks([o.offer_id for o in offers], tasks, Filters(refuse_seconds=BACKOFF_MAX))
        driver.set_needs_offers(False)  # nothing more to launch
        self.phase = RUNNING

    # -- running ---------------------------------------------------------------------

    def status_update(self, driver, status: TaskStatus):
        with self.lock:
            task_id = status.task_id
            if task_id not in self.rank_of:
                return
            state = mezzo.state_name(status.state)
            self.states[task_id] = state
            if mezzo.is_terminal(status.state) and status.state != TaskState.TASK_FINISHED:
                why = f": {status.message}" if status.message else ""
                self._end(driver, False, f"rank {self.rank_of[task_id]} ({task_id}) ended {state}{why}")

    def error(self, driver, message):
        with self.lock:
            self._end(driver, False, f"the master refused the framework: {message}")

    def _watch(self) -> None:
        """The gang's hold timeout and mpiexec's exit, as time passes."""
        while not self.done.wait(WATCH_INTERVAL):
            with self.lock:
                driver = self._driver
                if driver is None:
                    continue
                if self.phase == GATHERING and self.gang.expired():
                    held = self.gang.slots
                    ids, backoff = self.gang.give_up()
                    print(
                        f"{self.name}: held {held} of {self.gang.ranks} ranks, none more for {self.gang.hold_timeout:g} s; "
                        f"giving them back for {backoff:.1f} s (try {self.gang.tries})",
                        file=self.output,
                        flush=True,
                    )
                    # Away from every agent at once, and back to every agent at once: a
                    # refuse filter per offer would bring agents back at different times,
                    # and a gang could then never hold enough of them together.
                    driver.decline_offer(ids, Filters(refuse_seconds=backoff))
                    driver.set_needs_offers(False)
                    self.backing_off_until = self.clock() + backoff
                elif (
                    self.phase == GATHERING
                    and self.backing_off_until is not None
                    and self.clock() >= self.backing_off_until
                ):
                    self.backing_off_until = None
                    driver.set_needs_offers(True)  # revive: also clears our refuse filters
                elif self.phase == RUNNING and self.launcher is not None:
                    self._check_mpiexec(driver)

    def _check_mpiexec(self, driver) -> None:
        assert self.launcher is not None
        status = self.launcher.wait(0)
        if status is None:
            return
        if status != 0:
            self._end(driver, False, f"mpiexec exited with status {status}", status)
            return
        if all(state == "TASK_FINISHED" for state in self.states.values()):
            self._end(driver, True, f"{len(self.states)} ranks finished", 0)
            return
        if self._finished_at is None:
            self._finished_at = self.clock()
        elif self.clock() - self._finished_at > FINISH_GRACE:
            waiting = sorted(t for t, s in self.states.items() if s != "TASK_FINISHED")
            self._end(driver, False, f"mpiexec exited 0 but ranks {waiting} did not finish", 0)

    # -- the end ---------------------------------------------------------------------

    def _end(self, driver, ok: bool, message: str, exit_status: int | None = None) -> None:
        """Record the outcome (once); on failure kill the ranks still running and stop
        mpiexec. Called with the lock held."""
        if self.phase == DONE:
            return
        self.phase = DONE
        if not ok:
            for task_id, state in self.states.items():
                if not mezzo.is_terminal(TaskState[state]):
                    driver.kill_task(task_id)
        if self.launcher is not None and exit_status is None:
            # Off the driver thread: stopping may take seconds (SIGTERM, then SIGKILL).
            self.stopper = threading.Thread(target=self.launcher.stop, name="mpiexec-stop", daemon=True)
            self.stopper.start()
        self.outcome = JobOutcome(
            ok=ok,
            message=message,
            exit_status=exit_status,
            ranks=dict(self.states),
            tries=self.gang.tries,
            gathered_in=self.gathered_in,
        )
        self.done.set()
