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

import threading
import time
from collections.abc import Callable
from typing import Any

import structlog

import mezzo
from mezzo import CommandInfo, Filters, Resources, TaskInfo, TaskState, TaskStatus

from .jobs import Job, JobTable, Submission
from .journal import Journal

log = structlog.get_logger("mezzo.queue", component="queue")

REST_REFUSE_SECONDS = 1.0
"""How long the unused rest of an offer is refused while jobs still wait (it lapses as
soon as more is free on the agent)."""
IDLE_REFUSE_SECONDS = 60.0
"""How long an offer is refused while no job waits (offers are suppressed too)."""
RECONCILE_AGAIN_SECONDS = 30.0


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
        self.largest_agent: dict[str, float] | None = None
        """The most cpus and mem an active agent has (the master's ``/overview``; None:
        not known), to tell a user whose job no agent could ever hold."""
        self.on_refused: Callable[[], None] | None = None
        """Called (on the driver thread) when the master refuses the queue for good."""

    # -- the API's side (any thread) ---------------------------------------------------

    def submit(self, submission: Submission, user: str) -> list[Job]:
        """Queue ``submission``'s jobs for ``user`` (on disk before this returns)."""
        with self.lock:
            jobs = self.table.submit(submission, user)
            self.journal.jobs_changed(jobs, sync=True)
            self._want_offers()
        log.info("submitted", jobs=len(jobs), first=jobs[0].id, user=user, command=submission.command[:200])
        return jobs

    def cancel(self, jobs: list[Job]) -> None:
        """Cancel ``jobs``: queued ones end now, running ones once their kill is reported."""
        kills = []
        with self.lock:
            changed = []
            for job in jobs:
                task_id = self.table.cancel(job)
                if task_id is not None:
                    kills.append(task_id)
                changed.append(job)
            self.journal.jobs_changed(changed, sync=True)
            self._want_offers()
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
            again = self.master is not None and self._unknown
            due = time.monotonic() - self._reconciled_at >= RECONCILE_AGAIN_SECONDS
            if again and due:
                self._reconcile(list(self._unknown))

    # -- the driver's callbacks ----------------------------------------------------------

    def registered(self, driver, framework_id, master) -> None:
        self._connected(framework_id, master, "registered")

    def reregistered(self, driver, framework_id, master) -> None:
        self._connected(framework_id, master, "re-registered")

    def disconnected(self, driver) -> None:
        self.master = None
        self.lost_since = time.time()
        log.warning("lost the master; jobs stay queued until it is back")

    def error(self, driver, message) -> None:
        self.master = None
        self.lost_since = time.time()
        log.error("the master refused the queue", message=message)
        if self.on_refused is not None:
            self.on_refused()

    def resource_offers(self, driver, offers) -> None:
        for offer in offers:
            free = Resources.of(offer.resources)
            with self.lock:
                jobs = self.table.fitting(free.get("cpus"), free.get("mem"))
                tasks = [self._task_of(job, offer) for job in jobs]
                if tasks:
                    self.journal.jobs_changed(jobs, sync=True)
                waiting = bool(self.table.queued)
            refuse = REST_REFUSE_SECONDS if waiting else IDLE_REFUSE_SECONDS
            if tasks:
                driver.launch_tasks([offer.offer_id], tasks, Filters(refuse_seconds=refuse))
            else:
                driver.decline_offer(offer.offer_id, Filters(refuse_seconds=refuse))
        with self.lock:
            self._want_offers()

    def status_update(self, driver, status: TaskStatus) -> None:
        state = mezzo.state_name(status.state)
        with self.lock:
            if status.state == TaskState.TASK_UNKNOWN:
                self._unknown.add(status.task_id)
                job = self.table.running.get(status.task_id)
                if job is not None:
                    job.last = f"{state}: {status.message}" if status.message else state
                return
            self._unknown.discard(status.task_id)
            if not mezzo.is_terminal(status.state):
                return
            job = self.table.task_ended(
                status.task_id,
                state,
                reason=status.reason or "",
                message=status.message or "",
                exit_code=status.exit_code,
            )
            if job is None:
                return
            self.journal.jobs_changed([job])
            self._want_offers()
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
            self._want_offers()
            self._reconcile(list(self.table.running))
        log.info(f"queue {how}", master=master, framework=framework_id)

    def _reconcile(self, task_ids: list[str]) -> None:
        """(Lock held.) Ask the master for the state of these tasks of ours."""
        self._reconciled_at = time.monotonic()
        statuses = []
        for task_id in task_ids:
            job = self.table.running.get(task_id)
            if job is not None:
                statuses.append(
                    TaskStatus(task_id=task_id, agent_id=job.agent_id or "", state=TaskState.TASK_RUNNING)
                )
        if statuses and self.driver is not None:
            self.driver.reconcile_tasks(statuses)

    def _want_offers(self) -> None:
        """(Lock held.) Revive offers when jobs wait, suppress them when none does."""
        wanted = bool(self.table.queued)
        if wanted != self._offers_wanted and self.driver is not None:
            self._offers_wanted = wanted
            self.driver.set_needs_offers(wanted)

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
