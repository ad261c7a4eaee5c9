"""Delay scheduling (Zaharia et al., EuroSys 2010), as a pure decision.

Offered free slots on a host, a job:

1. launches pending maps whose block is on that host (node-local), and its wait
   resets;
2. otherwise, if it has been passing up offers for at least ``delay`` seconds
   since its last local launch, launches any pending maps there (non-local); it
   keeps doing so on later offers until a local launch resets the wait;
3. otherwise passes the offer up, and its wait starts if it was not running.

The wait is counted from the first offer passed up, not from the last local
launch: a job that got no offers at all for a while (the cluster was full) has
not *waited for locality*, it has waited for slots, and should still hold out for
a local one. This is the time-based form of the paper's "skip count".

With ``delay = 0`` every offer is taken: step 3 never happens.

How long to refuse a passed-up host (:func:`refuse_seconds_for`) is the other
half of the design; see its docstring.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .jobs import Job, MapTask

REFUSE_MIN = 0.5
"""Shortest refusal sent with a decline (seconds). Under DRF the declined host goes,
one allocation cycle (``master.allocation_interval``, 0.1 s) at a time, to the next
framework in line; a refusal that lapses sooner hands it straight back to the same
(lowest-share) framework, which declines again: ping-pong, while frameworks that do
have its data are never offered it. Half a second lets about five others see it.
(On the busy cluster of ``bench/fig8.py`` a refusal mostly lapses early anyway, when a task
ends on the host; there 0 cost nearly 3x the offers rather than locality.)"""

REFUSE_MAX = 1.0
"""Longest refusal (seconds). A host that every framework passed up stays idle until
one refusal lapses; a longer refusal wastes its slots longer. (A refusal also lapses
as soon as more is free on the host, e.g. when a task ends there, so busy hosts come
back sooner anyway.)"""


def refuse_seconds_for(delay: float) -> float:
    """The ``refuse_seconds`` to send with declines for a job ``delay``.

    ``delay`` clamped to [REFUSE_MIN, REFUSE_MAX]: no longer than the delay where
    possible, so that hosts passed up at the start of a wait are offered again by the
    time the job would take them non-locally (no revive needed); never so short
    that it ping-pongs, nor so long that hosts nobody wants sit idle.
    """
    return min(max(delay, REFUSE_MIN), REFUSE_MAX)


@dataclass
class Decision:
    """What to launch on one offer: ``local`` and ``remote`` maps (one of them empty);
    both empty means pass the offer up."""

    local: list[MapTask] = field(default_factory=list)
    remote: list[MapTask] = field(default_factory=list)

    @property
    def tasks(self) -> list[MapTask]:
        return self.local + self.remote


class DelayPolicy:
    """Decides, per offer, what a job launches; see the module docstring.

    ``delay`` is in seconds (>= 0). :meth:`decide` takes the maps it returns off the
    job's pending set and updates the job's wait and locality counters.
    """

    def __init__(self, delay: float) -> None:
        if delay < 0:
            raise ValueError(f"delay must be >= 0 seconds, got {delay}")
        self.delay = delay

    def may_launch_remote(self, job: Job, now: float) -> bool:
        """True once the job has waited ``delay`` seconds for a local slot."""
        return job.waiting_since is not None and now - job.waiting_since >= self.delay

    def decide(self, job: Job, host: str, slots: int, now: float) -> Decision:
        """The maps ``job`` launches in ``slots`` free slots on ``host`` at time ``now``."""
        if slots <= 0 or not job.pending:
            return Decision()
        local = job.take_local(host, slots)
        if local:
            job.waiting_since = None  # a local launch: the wait starts over
            job.local_launches += len(local)
            return Decision(local=local)
        if job.waiting_since is None:
            job.waiting_since = now  # the first offer passed up: the wait begins
        if not self.may_launch_remote(job, now):
            return Decision()
        remote = job.take_any(slots)
        job.remote_launches += len(remote)
        return Decision(remote=remote)
