"""Jobs, map tasks and where their input blocks live.

A *job* is a list of map tasks; each map reads one input *block*, and each block
has replicas on a few hosts (three distinct ones, as HDFS places them). Nothing
here talks to mezzo: this is the bookkeeping a locality-aware scheduler needs,
kept pure so that it can be tested without a cluster.

    placement = random_placement(hosts, blocks=100, replicas=3, rng=random.Random(1))
    job = Job("job-1", placement, submitted_at=time.monotonic())
    job.take_local("host-7", 2)   # up to 2 pending maps whose block is on host-7
    job.take_any(1)               # the oldest pending map, wherever its block is
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class MapTask:
    """One map: ``index`` within its job, the ``block`` it reads, the hosts holding it."""

    index: int
    block: str
    replicas: tuple[str, ...]


def random_placement(hosts: Sequence[str], blocks: int, replicas: int, rng: random.Random,
                     prefix: str = "block") -> list[tuple[str, tuple[str, ...]]]:
    """``blocks`` blocks, each on ``replicas`` distinct hosts drawn uniformly from ``hosts``.

    Returns ``[(block name, replica hostnames), ...]``. Raises :class:`ValueError`
    when there are fewer hosts than replicas (replicas must be on distinct hosts).
    """
    if replicas < 1 or replicas > len(hosts):
        raise ValueError(f"{replicas} replicas need as many distinct hosts; got {len(hosts)} hosts")
    return [(f"{prefix}-{i}", tuple(rng.sample(list(hosts), replicas))) for i in range(blocks)]


class Job:
    """The pending maps of one job, indexed by host, plus its counters.

    Taking a map (:meth:`take_local`, :meth:`take_any`) removes it from every
    host's index at once, so each map is launched once; :meth:`requeue` puts a
    map back (its task was lost). All methods are O(maps taken x replicas).
    """

    def __init__(self, job_id: str, placement: Iterable[tuple[str, tuple[str, ...]]],
                 submitted_at: float) -> None:
        self.job_id = job_id
        self.submitted_at = submitted_at
        self.finished_at: float | None = None
        self.maps = [MapTask(i, block, tuple(hosts)) for i, (block, hosts) in enumerate(placement)]
        # Both are insertion-ordered dicts used as ordered sets: the oldest map goes first.
        self._pending: dict[int, MapTask] = {}
        self._on_host: dict[str, dict[int, None]] = {}
        for task in self.maps:
            self.requeue(task)
        self.local_launches = 0
        self.remote_launches = 0
        self.finished = 0
        self.waiting_since: float | None = None
        """When the job first passed up an offer since its last local launch (None: not
        waiting). Owned by :class:`~.policy.DelayPolicy`."""

    # -- pending maps ---------------------------------------------------------

    @property
    def pending(self) -> int:
        return len(self._pending)

    def has_local(self, host: str) -> bool:
        """True when a pending map's block has a replica on ``host``."""
        return bool(self._on_host.get(host))

    def take_local(self, host: str, limit: int) -> list[MapTask]:
        """Up to ``limit`` pending maps whose block is on ``host`` (oldest first), removed."""
        on_host = self._on_host.get(host)
        if not on_host or limit <= 0:
            return []
        taken = [self._pending[i] for i in list(on_host)[:limit]]
        for task in taken:
            self._remove(task)
        return taken

    def take_any(self, limit: int) -> list[MapTask]:
        """Up to ``limit`` pending maps (oldest first), wherever their blocks are; removed."""
        taken = list(self._pending.values())[:max(0, limit)]
        for task in taken:
            self._remove(task)
        return taken

    def requeue(self, task: MapTask) -> None:
        """Make ``task`` pending again (a no-op if it is)."""
        if task.index in self._pending:
            return
        self._pending[task.index] = task
        for host in task.replicas:
            self._on_host.setdefault(host, {})[task.index] = None

    def _remove(self, task: MapTask) -> None:
        del self._pending[task.index]
        for host in task.replicas:
            on_host = self._on_host[host]
            del on_host[task.index]
            if not on_host:
                del self._on_host[host]

    # -- progress ---------------------------------------------------------------

    @property
    def done(self) -> bool:
        return self.finished >= len(self.maps)

    @property
    def locality(self) -> float:
        """Share of this job's launches that were node-local (1.0 before any launch)."""
        launched = self.local_launches + self.remote_launches
        return self.local_launches / launched if launched else 1.0

    @property
    def seconds(self) -> float | None:
        """Submission to the last map's end, once done."""
        return None if self.finished_at is None else self.finished_at - self.submitted_at
