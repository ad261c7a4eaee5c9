"""What a queued job is, and the queue's bookkeeping: pure logic, no I/O.

A *submission* (one ``mezzo submit``) is one job, or with ``--array 1-N`` N jobs that
share its number: ``42`` alone, or ``42_1`` ... ``42_N`` (Slurm's spelling). Each job
runs as one task at a time; a task that fails is retried up to ``retries`` times (a
new task, ``attempts`` counting them), one the cluster dropped or revoked before it
could finish is requeued without counting.

States: ``QUEUED`` (waiting for an offer), ``RUNNING`` (a task launched, from staging
to its end), and the ends: ``FINISHED`` (exit 0), ``FAILED`` (out of retries, or a
task the master refused), ``CANCELLED``.

:class:`JobTable` is the queue: FIFO with backfill (a job that does not fit an offer
lets later, smaller ones use it), every operation O(1) per job touched, and bounds on
what users can make it hold (:class:`Limits`).
"""

from __future__ import annotations

import enum
import itertools
import re
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any


class JobState(enum.StrEnum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def ended(self) -> bool:
        return self in (JobState.FINISHED, JobState.FAILED, JobState.CANCELLED)


class SubmissionError(ValueError):
    """A submission the queue refuses: ``field`` names what was wrong."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class QueueFull(SubmissionError):
    """The queue holds as many waiting jobs as it may: not the submission's fault."""


@dataclass(frozen=True)
class Limits:
    """What one user request may make the queue hold (peers are untrusted)."""

    max_waiting: int = 100_000
    """Jobs queued or running at once, all users together."""
    max_waiting_per_user: int = 50_000
    """Jobs queued or running at once of one user: one user cannot fill the queue."""
    max_array: int = 100_000
    """Jobs in one submission."""
    max_command_bytes: int = 64 * 1024
    """Length of a command (UTF-8)."""
    max_submission_bytes: int = 16 << 20
    """Jobs times command length in one submission: each job of an array holds its own
    command (``{index}`` filled in)."""
    max_amount: float = 1e9
    """The most cpus or mem a job may ask (as much as an agent may have)."""
    max_retries: int = 100
    max_ended: int = 10_000
    """Ended jobs remembered for listings (oldest forgotten first)."""
    scan_per_offer: int = 1_000
    """Queued jobs looked at for one offer: a head too big for every offer must not make
    each offer cost the whole queue."""


@dataclass
class Submission:
    """One ``mezzo submit``, as the API receives it (already type-checked)."""

    command: str
    cpus: float = 1.0
    mem: float = 128.0
    array: tuple[int, int] | None = None
    """First and last index, inclusive."""
    retries: int = 0
    name: str = ""


@dataclass
class Job:
    id: str
    submission: int
    index: int | None
    command: str
    """The command as run: ``{index}`` already filled in."""
    cpus: float
    mem: float
    user: str
    name: str
    retries: int
    submitted: float
    state: JobState = JobState.QUEUED
    attempts: int = 0
    """Tasks launched for it that counted (a dropped or revoked one does not)."""
    launches: int = 0
    """Tasks launched for it in all: the next task's id is made from it."""
    task_id: str | None = None
    agent_id: str | None = None
    hostname: str | None = None
    started: float | None = None
    ended: float | None = None
    exit_code: int | None = None
    last: str = ""
    """How its last task ended (or what the master says of it), for listings."""
    cancelling: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "submission": self.submission,
            "index": self.index,
            "command": self.command,
            "cpus": self.cpus,
            "mem": self.mem,
            "user": self.user,
            "name": self.name,
            "retries": self.retries,
            "submitted": self.submitted,
            "state": self.state.value,
            "attempts": self.attempts,
            "launches": self.launches,
            "task_id": self.task_id,
            "agent_id": self.agent_id,
            "hostname": self.hostname,
            "started": self.started,
            "ended": self.ended,
            "exit_code": self.exit_code,
            "last": self.last,
            "cancelling": self.cancelling,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Job:
        return cls(**{**d, "state": JobState(d["state"])})


_ARRAY = re.compile(r"\s*(\d{1,9})\s*-\s*(\d{1,9})\s*|\s*(\d{1,9})\s*")


def parse_array(text: str, field: str = "array", limit: int = Limits.max_array) -> tuple[int, int]:
    """``"1-1000"`` (or ``"7"``, one index) as ``(first, last)``; raises
    :class:`SubmissionError` naming ``field`` when it is not that, or too long."""
    m = _ARRAY.fullmatch(text)
    if m is None:
        raise SubmissionError(field, f"expected FIRST-LAST (such as 1-100), got {text!r}")
    first, last = (int(m[1]), int(m[2])) if m[1] is not None else (int(m[3]), int(m[3]))
    if last < first:
        raise SubmissionError(field, f"{text!r} ends before it starts")
    if last - first + 1 > limit:
        raise SubmissionError(field, f"{last - first + 1} jobs in one submission; at most {limit}")
    return first, last


def _milli(amount: float) -> int:
    return round(amount * 1000)


def never_fits(job: Job | Submission, largest: dict[str, float] | None) -> str | None:
    """Why no agent of the cluster could hold ``job`` (``largest``: the most cpus and mem
    an active agent has, from the master's ``/overview``), or None when one could or the
    cluster is not known."""
    if not largest:
        return None
    for name, wanted in (("cpus", job.cpus), ("mem", job.mem)):
        have = largest.get(name)
        if have is not None and _milli(wanted) > _milli(have):
            sizes = ", ".join(f"{largest[k]:g} {k}" for k in ("cpus", "mem") if k in largest)
            return f"no agent has {wanted:g} {name} (the largest has {sizes}); it waits until one joins"
    return None


# How each end of a task counts (by TaskState name): "done", "retry" (an attempt used,
# retried while attempts remain), "requeue" (not the job's fault: again, uncounted),
# "fail" (retrying cannot help: the master refused the task).
_TASK_ENDS = {
    "TASK_FINISHED": "done",
    "TASK_FAILED": "retry",
    "TASK_LOST": "retry",
    "TASK_GONE": "retry",
    "TASK_KILLED": "retry",
    "TASK_DROPPED": "requeue",
    "TASK_ERROR": "fail",
}
REQUEUE_REASONS = frozenset({"revoked", "agent_overcommitted", "agent_drained", "master_disconnected"})
"""Task end reasons that are the cluster's doing, not the job's: requeued uncounted."""


class WaitingJobs:
    """The queued jobs, by submission, oldest submission first and each one's jobs in order.

    All jobs of one submission ask the same cpus and mem, so an offer is filled by looking
    at submissions, not jobs: how many of a submission fit is one division, and a
    100,000-job array too big for every agent costs an offer one comparison, never a walk
    over its jobs (nor keeps the jobs behind it from being seen). Submissions are kept in
    order of their numbers, which is the order they arrive in; every operation is O(1)
    but one: a job requeued into a submission that had no job waiting any more puts the
    submissions back in order, O(submissions waiting)."""

    def __init__(self) -> None:
        self._by_submission: dict[int, OrderedDict[str, Job]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __contains__(self, job_id: str) -> bool:
        return any(job_id in jobs for jobs in self._by_submission.values())

    def __iter__(self) -> Iterator[str]:
        """The ids, in the order offers take them."""
        for jobs in self._by_submission.values():
            yield from jobs

    def add(self, job: Job, *, front: bool = False) -> None:
        jobs = self._by_submission.get(job.submission)
        if jobs is None:
            newest = next(reversed(self._by_submission), None)
            jobs = self._by_submission[job.submission] = OrderedDict()
            if newest is not None and job.submission < newest:
                self._by_submission = dict(sorted(self._by_submission.items()))
        if job.id not in jobs:
            self._count += 1
        jobs[job.id] = job
        if front:
            jobs.move_to_end(job.id, last=False)

    def remove(self, job: Job) -> bool:
        """Take ``job`` out; False if it was not waiting."""
        jobs = self._by_submission.get(job.submission)
        if jobs is None or jobs.pop(job.id, None) is None:
            return False
        self._count -= 1
        if not jobs:
            del self._by_submission[job.submission]
        return True

    def submissions(self) -> Iterator[OrderedDict[str, Job]]:
        """Each submission's waiting jobs, oldest submission first."""
        yield from self._by_submission.values()


class JobTable:
    """Every job the queue knows: waiting ones in FIFO order, running ones by task id,
    and the last :attr:`Limits.max_ended` ended ones. Not thread-safe (the daemon
    holds a lock around it)."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self.jobs: dict[str, Job] = {}
        self.queued = WaitingJobs()
        self.waiting_by_user: Counter[str] = Counter()
        """Jobs queued or running, by user."""
        self.running: dict[str, Job] = {}
        """By task id."""
        self._ended: deque[str] = deque()
        self.next_submission = 1

    # -- what users ask ------------------------------------------------------------

    @property
    def waiting(self) -> int:
        """Jobs queued or running."""
        return len(self.queued) + len(self.running)

    def submit(self, sub: Submission, user: str, now: float | None = None) -> list[Job]:
        """Add ``sub``'s jobs at the end of the queue; raises :class:`SubmissionError`
        (nothing added) when a field is out of bounds or the queue is full."""
        limits = self.limits
        if not sub.command.strip():
            raise SubmissionError("command", "empty")
        if len(sub.command.encode()) > limits.max_command_bytes:
            raise SubmissionError("command", f"longer than {limits.max_command_bytes} bytes")
        for name, amount in (("cpus", sub.cpus), ("mem", sub.mem)):
            if not 0 <= amount <= limits.max_amount:
                raise SubmissionError(name, f"{amount:g} is not between 0 and {limits.max_amount:g}")
        if not 0 <= sub.retries <= limits.max_retries:
            raise SubmissionError("retries", f"{sub.retries} is not between 0 and {limits.max_retries}")
        first, last = sub.array if sub.array is not None else (0, 0)
        count = last - first + 1
        if count < 1 or count > limits.max_array:
            raise SubmissionError("array", f"{count} jobs in one submission; at most {limits.max_array}")
        if count * len(sub.command.encode()) > limits.max_submission_bytes:
            raise SubmissionError(
                "array",
                f"{count} jobs of a {len(sub.command.encode())}-byte command: more than {limits.max_submission_bytes} bytes",
            )
        if self.waiting_by_user[user] + count > limits.max_waiting_per_user:
            raise QueueFull(
                "array" if count > 1 else "command",
                f"{user} has {self.waiting_by_user[user]} jobs waiting; at most {limits.max_waiting_per_user} a user",
            )
        if self.waiting + count > limits.max_waiting:
            raise QueueFull(
                "array" if count > 1 else "command",
                f"the queue is full: {self.waiting} jobs waiting, at most {limits.max_waiting}",
            )
        number = self.next_submission
        self.next_submission += 1
        now = time.time() if now is None else now
        added = []
        for index in range(first, last + 1) if sub.array is not None else (None,):
            job = Job(
                id=str(number) if index is None else f"{number}_{index}",
                submission=number,
                index=index,
                command=sub.command if index is None else sub.command.replace("{index}", str(index)),
                cpus=sub.cpus,
                mem=sub.mem,
                user=user,
                name=sub.name,
                retries=sub.retries,
                submitted=now,
            )
            self._add(job)
            added.append(job)
        return added

    def withdraw(self, jobs: list[Job]) -> None:
        """Take back the jobs of a submission just made (its journal write failed)."""
        for job in jobs:
            self.jobs.pop(job.id, None)
            self.queued.remove(job)
            self.waiting_by_user[job.user] -= 1
        if jobs and jobs[0].submission == self.next_submission - 1:
            self.next_submission -= 1

    def select(self, job_ids: Iterable[str]) -> Iterator[Job]:
        """The jobs named: an id (``42_7``) or a submission (``42``: all its jobs). One
        pass over the table however many submissions are named."""
        numbers = set()
        named = {}
        for job_id in job_ids:
            job = self.jobs.get(job_id)
            if job is not None:
                named[job.id] = job
            elif job_id.isdigit():
                numbers.add(int(job_id))
        if numbers:
            named.update(
                (j.id, j) for j in self.jobs.values() if j.submission in numbers and j.index is not None
            )
        yield from named.values()  # each job once, however often it was named

    def cancel(self, job: Job, now: float | None = None) -> str | None:
        """Cancel ``job``: a queued one ends now (None); a running one is marked and the
        id of its task returned, to be killed (it ends when the kill is reported)."""
        if job.state is JobState.QUEUED:
            self.queued.remove(job)
            self._end(job, JobState.CANCELLED, now, "cancelled before it ran")
            return None
        if job.state is JobState.RUNNING and not job.cancelling:
            job.cancelling = True
            return job.task_id
        return None  # ended, or its kill asked for already

    def cancelling(self) -> list[Job]:
        """Running jobs cancelled whose tasks have not ended yet (their kills are asked
        again after a re-registration: a kill may have been lost with the master)."""
        return [job for job in self.running.values() if job.cancelling]

    def requeue_running(self, now: float | None = None) -> list[Job]:
        """Every running job back in the queue (uncounted), a cancelled one ended: what the
        master's removal of the queue's framework did to their tasks (it killed them)."""
        jobs = list(self.running.values())
        self.running.clear()
        for job in jobs:
            if job.cancelling:
                self._end(job, JobState.CANCELLED, now, "cancelled; its task was killed with the framework")
            else:
                self._requeue(job)
        return jobs

    # -- what the cluster offers and reports ----------------------------------------

    def fitting(self, cpus: float, mem: float) -> list[Job]:
        """Queued jobs, oldest submission first, that fit together in ``cpus`` and ``mem``
        (looking at :attr:`Limits.scan_per_offer` submissions at most: a job too big for
        the offer lets later, smaller ones use it, as Slurm's backfill does within its
        window). They stay queued until :meth:`launched`."""
        free_cpus, free_mem = _milli(cpus), _milli(mem)
        chosen: list[Job] = []
        for scanned, jobs in enumerate(self.queued.submissions()):
            if scanned >= self.limits.scan_per_offer or free_cpus <= 0:
                break
            first = next(iter(jobs.values()))
            need_cpus, need_mem = _milli(first.cpus), _milli(first.mem)
            fit = min(
                len(jobs),
                free_cpus // need_cpus if need_cpus else len(jobs),
                free_mem // need_mem if need_mem else len(jobs),
            )
            if fit <= 0:
                continue
            for job in itertools.islice(jobs.values(), fit):
                chosen.append(job)
            free_cpus -= fit * need_cpus
            free_mem -= fit * need_mem
        return chosen

    def task_id_for(self, job: Job) -> str:
        """The id of ``job``'s next task: unique within the framework for ever."""
        return f"job-{job.id}.{job.launches + 1}"

    def launched(
        self, job: Job, task_id: str, agent_id: str, hostname: str, now: float | None = None
    ) -> None:
        self.queued.remove(job)
        job.state = JobState.RUNNING
        job.launches += 1
        job.task_id = task_id
        job.agent_id = agent_id
        job.hostname = hostname
        job.started = time.time() if now is None else now
        job.exit_code = None
        self.running[task_id] = job

    def not_launched(self, jobs: list[Job]) -> None:
        """Undo :meth:`launched` for ``jobs`` (their launch could not be recorded): queued
        again, at the front, as they were."""
        for job in reversed(jobs):
            self.running.pop(job.task_id or "", None)
            job.launches -= 1
            self._requeue(job, front=True)

    def task_ended(
        self,
        task_id: str,
        state: str,
        *,
        reason: str = "",
        message: str = "",
        exit_code: int | None = None,
        now: float | None = None,
    ) -> Job | None:
        """A task of the queue ended in ``state`` (a TaskState name): its job finishes,
        fails, is requeued or is retried (see the module docstring). Returns the job,
        None for a task not running here (a duplicate or stale update)."""
        job = self.running.pop(task_id, None)
        if job is None:
            return None
        job.exit_code = exit_code
        job.last = f"{state}: {message}" if message else state
        outcome = _TASK_ENDS.get(state, "retry")
        if reason in REQUEUE_REASONS and outcome != "done":
            outcome = "requeue"
        if job.cancelling:
            self._end(job, JobState.CANCELLED, now, job.last)
        elif outcome == "done":
            job.attempts += 1
            self._end(job, JobState.FINISHED, now, job.last)
        elif outcome == "requeue":
            self._requeue(job)
        elif outcome == "retry" and job.attempts < job.retries:
            job.attempts += 1
            self._requeue(job)
        else:
            job.attempts += 1
            self._end(job, JobState.FAILED, now, job.last)
        return job

    # -- the journal's side ----------------------------------------------------------

    def restore(self, job: Job) -> None:
        """Put back a job read from the journal, as it was."""
        earlier = self.jobs.pop(job.id, None)
        if earlier is not None:
            if not earlier.state.ended:
                self.waiting_by_user[earlier.user] -= 1
            self.queued.remove(earlier)
            if earlier.task_id is not None and self.running.get(earlier.task_id) is earlier:
                del self.running[earlier.task_id]
        self._add(job)
        self.next_submission = max(self.next_submission, job.submission + 1)

    def all_jobs(self) -> Iterator[Job]:
        return iter(self.jobs.values())

    # -- inside ------------------------------------------------------------------------

    def _add(self, job: Job) -> None:
        self.jobs[job.id] = job
        if not job.state.ended:
            self.waiting_by_user[job.user] += 1
        if job.state is JobState.QUEUED:
            self.queued.add(job)
        elif job.state is JobState.RUNNING and job.task_id is not None:
            self.running[job.task_id] = job
        else:
            self._remember_ended(job)

    def _requeue(self, job: Job, *, front: bool = False) -> None:
        job.state = JobState.QUEUED
        job.task_id = None
        self.queued.add(job, front=front)

    def _end(self, job: Job, state: JobState, now: float | None, last: str) -> None:
        self.waiting_by_user[job.user] -= 1
        job.state = state
        job.ended = time.time() if now is None else now
        job.last = last
        job.cancelling = False
        self._remember_ended(job)

    def _remember_ended(self, job: Job) -> None:
        self._ended.append(job.id)
        while len(self._ended) > self.limits.max_ended:
            old = self._ended.popleft()
            stale = self.jobs.get(old)
            if stale is not None and stale.state.ended:
                del self.jobs[old]
