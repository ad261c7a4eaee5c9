"""The queue's scheduler: offers in, tasks out, status updates back into the job table.

The paper's Torque port in the small (§5.2): while no job waits the queue suppresses
offers (and declines any in flight), so it holds nothing; a submission revives them.
Each offer is filled with as many waiting jobs as fit, oldest first (backfilling past a
job too big for it); the rest of the offer is refused for :data:`REST_REFUSE_SECONDS`,
which lapse as soon as a task's end frees more on that agent.

Each job's task runs the job's command as the user who submitted it
(``CommandInfo.user``: the master checks it against ``run_tasks``), with
``MEZZO_JOB_ID``, ``MEZZO_JOB_SUBMISSION`` and, in an array, ``MEZZO_ARRAY_INDEX`` set.

After every (re)registration the tasks the journal says run are reconciled: the master
answers each with its state, and those it never got (dropped with a master that failed)
or lost with their agent come back as ends, requeued or retried like any other.
Answers of ``TASK_UNKNOWN`` (an agent not re-registered yet) are asked again every
:data:`RECONCILE_AGAIN_SECONDS` until they settle.

Callbacks run on the driver thread, the API's calls on the daemon's loop: both hold
:attr:`QueueFramework.lock` while they touch the table or the journal.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import Any

import structlog

import mezzo
from mezzo import CommandInfo, Filters, Resources, TaskInfo, TaskState, TaskStatus

from .jobs import Job, JobState, JobTable, Submission
from .journal import Journal, JournalError

log = structlog.get_logger("mezzo.queue", component="queue")

REST_REFUSE_SECONDS = 1.0
"""How long the unused rest of an offer is refused while jobs still wait (it lapses as
soon as more is free on the agent)."""
IDLE_REFUSE_SECONDS = 60.0
"""How long an offer is refused while no job waits (offers are suppressed too)."""
RECONCILE_AGAIN_SECONDS = 30.0
"""How often tasks the master did not know are asked about again."""
RECONCILE_ALL_SECONDS = 300.0
"""How often every running task is asked about (a reconciliation the master dropped, or
an end the queue missed, is settled within this)."""
REMOVED = re.compile(r"framework \S+ was (torn down|removed)\b")
"""The master's error to a framework it removed: torn down by an operator while connected,
or named again after its removal (its failover timeout passed): mezzo.master.service."""
TASK_UNKNOWN = "task_unknown"
"""The reason of the master's TASK_LOST for a task it does not know (a kill of one)."""


class QueueFramework(mezzo.Scheduler):
    """See the module docstring. :attr:`driver` is set by the daemon before it starts."""

    def __init__(self, table: JobTable, journal: Journal) -> None:
        self.table = table
        self.journal = journal
        self.lock = threading.Lock()
        self.driver: Any = None
        self.master: str | None = None
        """The master registered with; None while not registered."""
        self.lost_since: float | None = time.time()
        """When the queue was last registered (None: it is now); its start before the first."""
        self._offers_wanted: bool | None = None
        self._unknown: set[str] = set()
        """Task ids the master last answered TASK_UNKNOWN for."""
        self._reconciled_at = 0.0
        self._reconciled_all_at = 0.0
        self.largest_agent: dict[str, float] | None = None
        """The most cpus and mem an active agent has (the master's ``/overview``; None:
        not known), to tell a user whose job no agent could ever hold."""
        self.on_refused: Callable[[bool], None] | None = None
        """Called (on the driver thread) when the master refuses the queue: True when it
        removed the queue's framework (register anew), False for good."""

    # -- the API's side (any thread) ---------------------------------------------------

    def submit(self, submission: Submission, user: str) -> list[Job]:
        """Queue ``submission``'s jobs for ``user`` (on disk before this returns)."""
        with self.lock:
            jobs = self.table.submit(submission, user)
            try:
                self.journal.jobs_changed(jobs, sync=True)
            except JournalError:
                self.table.withdraw(jobs)  # not on disk: not queued (the user hears so)
                raise
            self._revive()
        log.info("submitted", jobs=len(jobs), first=jobs[0].id, user=user, command=submission.command[:200])
        return jobs

    def cancel(self, jobs: list[Job]) -> None:
        """Cancel ``jobs``: queued ones end now, running ones once their kill is reported."""
        kills = []
        with self.lock:
            changed = []
            for job in jobs:
                was = (job.state, job.cancelling)
                task_id = self.table.cancel(job)
                if task_id is not None:
                    kills.append(task_id)
                if (job.state, job.cancelling) != was:
                    changed.append(job)
            self.journal.jobs_changed(changed, sync=True)
        for task_id in kills:
            self.driver.kill_task(task_id)

    def status(self) -> dict[str, Any]:
        """The queue's own state, for listings: registration and counts."""
        return {
            "framework_id": self.journal.framework_id,
            "master": self.master,
            "registered": self.master is not None,
            "lost_since": self.lost_since,
            "queued": len(self.table.queued),
            "running": len(self.table.running),
        }

    def tick(self) -> None:
        """Periodic work (the daemon calls it every few seconds): ask again about tasks
        the master did not know, compact the journal."""
        with self.lock:
            self.journal.maybe_compact(self.table)
            self._unknown &= self.table.running.keys()
            if self.master is None:
                return
            now = time.monotonic()
            if now - self._reconciled_all_at >= RECONCILE_ALL_SECONDS:
                self._reconcile(list(self.table.running))
            elif self._unknown and now - self._reconciled_at >= RECONCILE_AGAIN_SECONDS:
                self._reconcile(list(self._unknown))

    # -- the driver's callbacks ----------------------------------------------------------

    def registered(self, driver, framework_id, master) -> None:
        self._connected(framework_id, master, "registered")

    def reregistered(self, driver, framework_id, master) -> None:
        self._connected(framework_id, master, "re-registered")

    def disconnected(self, driver) -> None:
        with self.lock:
            self.master = None
            self.lost_since = time.time()
        log.warning("lost the master; jobs stay queued until it is back")

    def error(self, driver, message) -> None:
        removed = REMOVED.match(message) is not None
        with self.lock:
            self.master = None
            self.lost_since = time.time()
            if removed:
                self.forget_framework()
        log.error("the master refused the queue", message=message)
        if self.on_refused is not None:
            self.on_refused(removed)

    def forget_framework(self) -> None:
        """(Lock held.) The master removed the queue's framework, killing its tasks: their
        jobs are queued again (a cancelled one ends) and the next registration is a new
        framework's."""
        jobs = self.table.requeue_running()
        self.journal.jobs_changed(jobs, sync=True)
        self.journal.framework_registered("")
        self._unknown.clear()
        self._offers_wanted = None

    def resource_offers(self, driver, offers) -> None:
        waiting = True
        for offer in offers:
            free = Resources.of(offer.resources)
            with self.lock:
                jobs = self.table.fitting(free.get("cpus"), free.get("mem"))
                tasks = [self._task_of(job, offer) for job in jobs]
                if tasks:
                    try:
                        self.journal.jobs_changed(jobs, sync=True)
                    except JournalError:
                        # Not launched unless on disk (a restart would run them again).
                        log.exception("cannot record launches; the jobs wait", jobs=len(jobs))
                        self.table.not_launched(jobs)
                        tasks = []
                waiting = bool(self.table.queued)
            refuse = REST_REFUSE_SECONDS if waiting else IDLE_REFUSE_SECONDS
            if tasks:
                driver.launch_tasks([offer.offer_id], tasks, Filters(refuse_seconds=refuse))
            else:
                driver.decline_offer(offer.offer_id, Filters(refuse_seconds=refuse))
        if not waiting:
            with self.lock:
                self._suppress()

    def status_update(self, driver, status: TaskStatus) -> None:
        state = mezzo.state_name(status.state)
        kill_again = False
        with self.lock:
            running = self.table.running.get(status.task_id)
            unknown_kill = running is not None and running.cancelling and status.reason == TASK_UNKNOWN
            if status.state == TaskState.TASK_UNKNOWN or unknown_kill:
                # The master does not know the task (yet: an agent not back after a failover).
                # Not its end: asked again until the master knows; a cancel's kill with it.
                self._unknown.add(status.task_id)
                if running is not None:
                    running.last = f"{state}: {status.message}" if status.message else state
                return
            self._unknown.discard(status.task_id)
            if not mezzo.is_terminal(status.state):
                kill_again = running is not None and running.cancelling and status.reason == "reconciliation"
                job = None
            else:
                job = self.table.task_ended(
                    status.task_id,
                    state,
                    reason=status.reason or "",
                    message=status.message or "",
                    exit_code=status.exit_code,
                )
                if job is not None:
                    self.journal.jobs_changed([job], sync=True)
                    if job.state is JobState.QUEUED:
                        self._revive()
        if kill_again:  # a cancelled job's task the master has just found again
            driver.kill_task(status.task_id)
        if job is None:
            return
        self._log_end(job, status)

    def _log_end(self, job: Job, status: TaskStatus) -> None:
        if job.state.ended:
            log.info("job ended", job=job.id, task=status.task_id, state=job.state.value, last=job.last)
        else:
            log.info("job requeued", job=job.id, task=status.task_id, attempts=job.attempts, last=job.last)

    # -- inside --------------------------------------------------------------------------

    def _connected(self, framework_id: str, master: str, how: str) -> None:
        with self.lock:
            self.journal.framework_registered(framework_id)
            self.master = master
            self.lost_since = None
            self._offers_wanted = None  # a master that failed over knows nothing of it
            self._revive()
            self._reconcile(list(self.table.running))
            # A kill may have been lost with the master (or the queue's last run): again.
            kills = [job.task_id for job in self.table.cancelling() if job.task_id is not None]
        for task_id in kills:
            self.driver.kill_task(task_id)
        log.info(f"queue {how}", master=master, framework=framework_id)

    def _reconcile(self, task_ids: list[str]) -> None:
        """(Lock held.) Ask the master for the state of these tasks of ours."""
        self._reconciled_at = time.monotonic()
        if len(task_ids) == len(self.table.running):
            self._reconciled_all_at = self._reconciled_at
        statuses = []
        for task_id in task_ids:
            job = self.table.running.get(task_id)
            if job is not None:
                statuses.append(
                    TaskStatus(task_id=task_id, agent_id=job.agent_id or "", state=TaskState.TASK_RUNNING)
                )
        if statuses and self.driver is not None:
            self.driver.reconcile_tasks(statuses)

    def _revive(self) -> None:
        """(Lock held.) Ask for offers again if they were suppressed and a job waits."""
        if self.table.queued and self._offers_wanted is not True and self.driver is not None:
            self._offers_wanted = True
            self.driver.set_needs_offers(True)

    def _suppress(self) -> None:
        """(Lock held.) Stop offers while no job waits. Only ever called when an offer came
        and nothing wanted it, so a user submitting and cancelling in a loop costs the
        master at most one suppress per allocation cycle, never a call per request (the
        master disconnects a framework past its call rate)."""
        if not self.table.queued and self._offers_wanted is not False and self.driver is not None:
            self._offers_wanted = False
            self.driver.set_needs_offers(False)

    def _task_of(self, job: Job, offer: Any) -> TaskInfo:
        """(Lock held.) ``job``'s next task on ``offer``, recorded as launched."""
        task_id = self.table.task_id_for(job)
        self.table.launched(job, task_id, offer.agent_id, offer.hostname)
        environment = {"MEZZO_JOB_ID": job.id, "MEZZO_JOB_SUBMISSION": str(job.submission)}
        if job.index is not None:
            environment["MEZZO_ARRAY_INDEX"] = str(job.index)
        return TaskInfo(
            task_id=task_id,
            name=f"job {job.id}" + (f" ({job.name})" if job.name else ""),
            agent_id=offer.agent_id,
            resources=Resources(cpus=job.cpus, mem=job.mem),
            command=CommandInfo(value=job.command, user=job.user, environment=environment),
        )
