"""The master's soft state: one record type per thing it knows about.

Everything here can be rebuilt from re-registering agents and schedulers (paper
§3.6), which is why none of it is persisted. Records are plain slotted objects
mutated only by :class:`mezzo.master.master.Master` on its event loop.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..resources import Resources, _merge
from ..wire.ttypes import AgentInfo, ExecutorInfo, FrameworkInfo, Range, TaskInfo, TaskState
from .forwarded_updates import ForwardedUpdates

PARTITION_AWARE = "PARTITION_AWARE"
"""The ``FrameworkInfo.capabilities`` name of a framework that asks for TASK_UNREACHABLE."""


def known_capabilities(names: object) -> list[str]:
    """Of a peer's ``FrameworkInfo.capabilities``, the ones the master acts on (a list
    of at most one name, so that checking it costs nothing however long the peer's was)."""
    if not isinstance(names, list):
        return []
    return [PARTITION_AWARE] if PARTITION_AWARE in names[:64] else []


MAX_UNREACHABLE_TASKS = 100_000
"""A framework's unreachable tasks the master remembers (the oldest beyond are forgotten:
reconciling them then answers as for an agent declared lost)."""


@dataclass(slots=True, eq=False)
class FrameworkRecord:
    id: str
    info: FrameworkInfo
    conn: Any
    """The scheduler driver's connection; None while disconnected."""
    active: bool = True
    """Wants offers (``set_needs_offers``)."""
    agent_whitelist: frozenset[str] | None = None
    """Persistent filter "only agents from list L" (ids or hostnames); None = any."""
    min_free: Resources | None = None
    """Persistent filter "only agents with at least R free"; None = no minimum."""
    offers: dict[str, OfferRecord] = field(default_factory=dict)
    tasks: TaskTable = field(default_factory=lambda: TaskTable())
    """Its tasks by id, with what they hold kept summed (:class:`TaskTable`)."""
    registered_at: float = field(default_factory=time.time)
    failover_handle: Any = None
    """Timer removing the framework if its scheduler does not come back."""
    failover_deadline: float | None = None
    """Unix time that timer fires (shown as the failover countdown), or None."""
    held_updates: dict[str, Any] = field(default_factory=dict)
    """Status updates that arrived while no scheduler was connected, delivered when
    one is (keyed by uuid, or by task for the master's own; a retry replaces itself)."""
    forwarded: ForwardedUpdates = field(default_factory=ForwardedUpdates)
    """Updates sent to the scheduler and not yet acknowledged (resends are not sent again)."""
    principal: str | None = None
    """Who registered it (the TLS certificate of its scheduler's connection); only that
    principal may re-register it or fail it over. None: registered without one, or
    known only from agents' reports after a master failover until its scheduler is back."""
    completed: deque[EndedTask] = field(default_factory=deque)
    """Its tasks that ended, oldest first (``master.max_completed_tasks_per_framework``)."""
    unreachable_tasks: dict[str, TaskRecord] = field(default_factory=dict)
    """Its tasks (partition-aware frameworks only) on agents declared lost for their
    silence, TASK_UNREACHABLE until the agent comes back (oldest first, bounded by
    :data:`MAX_UNREACHABLE_TASKS`)."""

    @property
    def partition_aware(self) -> bool:
        """Asked for TASK_UNREACHABLE rather than TASK_LOST (``PARTITION_AWARE``)."""
        return PARTITION_AWARE in (self.info.capabilities or ())

    @property
    def has_filters(self) -> bool:
        return self.agent_whitelist is not None or self.min_free is not None


class AgentRecord:
    """One agent: its resources, what runs on it and what is offered of it.

    ``free``, ``connected`` and ``drain`` are properties so that the master's index of
    *offerable* agents (connected, with something free, not draining) cannot go stale: every
    change of one updates ``offerable`` if the record belongs to one. An
    allocation cycle then walks only those agents instead of all of them, which
    at 50,000 agents was a fifth of the master's time (bench/fig10.py).
    """

    __slots__ = (
        "_connected",
        "_drain",
        "_free",
        "conn",
        "executors",
        "id",
        "info",
        "long_limit",
        "long_used",
        "min_offer",
        "offerable",
        "offers",
        "pending_kills",
        "principal",
        "registered_at",
        "removal_handle",
        "statistics",
        "tasks",
        "total",
        "unadopted_tasks",
        "was_unreachable",
    )

    def __init__(
        self,
        id: str,
        info: AgentInfo,
        conn: Any,
        total: Resources,
        free: Resources,
        connected: bool = True,
        offerable: dict[str, AgentRecord] | None = None,
        min_offer: Resources | None = None,
        long_limit: Resources | None = None,
    ) -> None:
        self.id = id
        self.info = info
        self.conn = conn
        """The agent's connection (possibly shared with other agents); None while disconnected."""
        self.total = total
        self.min_offer = min_offer
        """What must be free before the agent is offered (``master.min_offer`` capped by
        ``total``, see :func:`~mezzo.master.allocation.effective_min_offer`); None = any amount."""
        self.long_limit = long_limit
        """The most long tasks may hold here (``master.long_task_fraction`` of ``total``);
        None = no bound. See :mod:`~mezzo.master.long_tasks`."""
        self.long_used = Resources()
        """What the long tasks here hold."""
        self.offers: dict[str, OfferRecord] = {}
        self.tasks: dict[tuple[str, str], TaskRecord] = {}
        """Keyed by (framework id, task id)."""
        self.executors: dict[tuple[str, str], ExecutorInfo] = {}
        """Custom executors running here, keyed by (framework id, executor id)."""
        self.removal_handle: Any = None
        """Timer declaring the agent lost if it does not re-register in time."""
        self.statistics: list = []
        """The agent's latest container usage report (``container_statistics``)."""
        self.pending_kills: dict[tuple[str, str], Any] = {}
        """Kills asked for while the agent was disconnected: (framework id, task id) ->
        their :class:`~mezzo.wire.ttypes.KillPolicy` (None: the agent's default)."""
        self.unadopted_tasks: set[tuple[str, str]] = set()
        """(framework id, task id) of tasks it reported at re-registration that were not
        adopted (ended already, or did not fit and it was told to kill them): their end,
        from this agent, still goes to their framework. As many as its report named, at
        most; each is forgotten once its end is reported."""
        self.principal: str | None = None
        """Who registered it (its connection's TLS certificate); only that principal may
        re-register this agent id. None: registered without one."""
        self.was_unreachable = False
        """Re-registering after it was declared lost for its silence (the registry's
        ``UNREACHABLE``), until its report is adopted: the tasks of frameworks that were
        told TASK_LOST are killed rather than adopted."""
        self.registered_at = time.time()
        self.offerable = offerable
        """The master's index of offerable agents by id, or None (a record on its own)."""
        self._free = free
        self._connected = connected
        self._drain: Any = None
        self._reindex()

    @property
    def free(self) -> Resources:
        """Neither used by tasks and executors nor in an outstanding offer."""
        return self._free

    @free.setter
    def free(self, value: Resources) -> None:
        self._free = value
        self._reindex()

    @property
    def connected(self) -> bool:
        return self._connected

    @connected.setter
    def connected(self, value: bool) -> None:
        self._connected = value
        self._reindex()

    @property
    def drain(self) -> Any:
        """Its :class:`~.operator_actions.DrainInfo` while an operator drains it (never
        offered meanwhile), else None."""
        return self._drain

    @drain.setter
    def drain(self, value: Any) -> None:
        self._drain = value
        self._reindex()

    def _reindex(self) -> None:
        index = self.offerable
        if index is not None:
            if self._connected and self._free and self._drain is None:
                index[self.id] = self
            else:
                index.pop(self.id, None)

    @property
    def hostname(self) -> str:
        return self.info.hostname

    def __repr__(self) -> str:
        return f"AgentRecord({self.id!r}, {self.info.hostname!r}, free={self._free}, connected={self._connected})"


@dataclass(slots=True, eq=False)
class TaskRecord:
    framework_id: str
    agent_id: str
    info: TaskInfo
    resources: Resources
    """What the task holds on its agent (its own resources, not its executor's)."""
    state: int = TaskState.TASK_STAGING
    message: str = ""
    reason: str = ""
    updated_at: float = field(default_factory=time.time)
    kill_requested: bool = False
    """Its framework asked to kill it: revocation leaves it alone."""
    launched_at: float = field(default_factory=time.time)
    """When this master launched it, or learned of it from a re-registering agent
    (the work revoking it would waste, as far as this master knows)."""
    held: Any = None
    """Its :class:`~mezzo.hookspecs.HeldTask` for revocation policies, made the first
    time it is offered to one and kept (what it says never changes)."""
    statuses: list[StatusEntry] = field(default_factory=list)
    """Each state it was in, since when (Unix time), and the reason, message and source
    (``executor``, ``agent``, ``master``) of the update that put it there; oldest first,
    at most :data:`STATUSES_KEPT` (the first and the latest ones always)."""
    exit_code: int | None = None
    """Its command's exit status, once an update reported one."""

    def __post_init__(self) -> None:
        if not self.statuses:
            self.statuses.append((self.state, self.launched_at, "", "", "master"))

    def moved_to(
        self, state: int, when: float, reason: str = "", message: str = "", source: str = ""
    ) -> None:
        """Record that the task is in ``state`` from ``when`` on, and why (a repeat of
        its current state is not a new status)."""
        if self.statuses[-1][0] != state:
            if len(self.statuses) >= STATUSES_KEPT:
                del self.statuses[1]  # the first (when it was launched) stays
            self.statuses.append(
                (state, when, reason[:REASON_MAX], message[:STATUS_MESSAGE_MAX], source[:REASON_MAX])
            )

    def ended(self, role: str) -> EndedTask:
        """What the framework's history keeps of it once it ended (of its ``role``)."""
        return EndedTask(
            self.info.task_id,
            self.info.name or "",
            self.framework_id,
            self.agent_id,
            self.executor_id,
            self.state,
            self.reason,
            self.message[:ENDED_MESSAGE_MAX],
            self.resources,
            list(self.statuses),
            self.info.labels or {},  # never changed once launched: shared, not copied
            role,
            self.updated_at,
            self.exit_code,
        )

    @property
    def id(self) -> str:
        return self.info.task_id

    @property
    def name(self) -> str:
        return self.info.name or ""

    @property
    def labels(self) -> dict[str, str]:
        return self.info.labels or {}

    @property
    def executor_id(self) -> str:
        return self.info.executor.executor_id if self.info.executor is not None else ""


ENDED_MESSAGE_MAX = 1024
"""Characters of an ended task's last message its history keeps: a peer's message
may be megabytes, and the history holds a thousand tasks per framework."""

StatusEntry = tuple[int, float, str, str, str]
"""One state a task was in: ``(state, since, reason, message, source)``."""
STATUS_MESSAGE_MAX = 200
"""Characters of each status's message a task's record keeps."""
REASON_MAX = 100
"""Characters of a status's reason (and source) kept: they are names (``reason_command_
executor_failed``, ``agent_drained``), but a peer may send anything."""
STATUSES_KEPT = 16
"""States a task's record remembers (a task that goes back and forth between two
states keeps its first and its latest ones)."""


@dataclass(slots=True, eq=False)
class EndedTask:
    """A task that ended, as its framework's history keeps it (``master.
    max_completed_tasks_per_framework`` of them): what operators ask about a task
    that is gone, without its TaskInfo (its command, its data)."""

    id: str
    name: str
    framework_id: str
    agent_id: str
    executor_id: str
    state: int
    reason: str
    message: str
    resources: Resources
    statuses: list[StatusEntry]
    labels: dict[str, str]
    role: str
    updated_at: float
    exit_code: int | None = None


@dataclass(slots=True, eq=False)
class EndedFramework:
    """A framework that was removed, as the master's history keeps it (``master.
    max_completed_frameworks`` of them), with its ended tasks."""

    id: str
    info: FrameworkInfo
    principal: str | None
    registered_at: float
    unregistered_at: float
    reason: str
    completed: Any
    """Its :class:`EndedTask` s, oldest first (a bounded deque)."""


class TaskTable(dict):
    """A framework's tasks by task id: a dict that keeps what its tasks hold summed.

    Revocation (:func:`~mezzo.master.revocation_monitor.holding`) needs every
    framework's holdings about once a second; summing them task by task cost
    O(tasks) per check, 0.1 s and more at 50,000 agents (bench/revocation_check.py).
    Every way of adding or removing a task (``t[k] = v``, ``del``, ``pop``,
    ``popitem``, ``setdefault``, ``update``, ``clear``) updates the sums in O(the
    task's resources), so :meth:`held` costs O(resource names + distinct port ranges).
    A task's ``resources``, ``agent_id`` and executor must not change while it is here.
    """

    __slots__ = ("_executors", "_milli", "_ranges")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self._milli: dict[str, int] = {}
        """Sum of the tasks' scalars, in thousandths (no zero entries)."""
        self._ranges: dict[tuple[str, int, int], int] = {}
        """(name, begin, end) of every range a task holds, with how many tasks hold it."""
        self._executors: dict[tuple[str, str], int] = {}
        """(agent id, executor id) of the executors the tasks run in, with how many tasks."""
        self.update(*args, **kwargs)

    # -- the sums ---------------------------------------------------------------

    def held(self) -> Resources:
        """What the tasks hold together (their own resources, not their executors'):
        equal to summing ``task.resources`` over the tasks."""
        milli = dict(self._milli)
        if not self._ranges:
            return Resources._raw(milli, {})
        pairs: dict[str, list[tuple[int, int]]] = {}
        for name, b, e in self._ranges:
            pairs.setdefault(name, []).append((b, e))
        return Resources._raw(
            milli, {name: [Range(b, e) for b, e in _merge(ps)] for name, ps in pairs.items()}
        )

    def executors(self) -> Any:
        """The distinct (agent id, executor id) the tasks run in (a view)."""
        return self._executors.keys()

    def _take(self, task: TaskRecord) -> None:
        res = task.resources
        milli = self._milli
        for name, m in res.scalars.items():
            milli[name] = milli.get(name, 0) + m
        if res.ranges:
            ranges = self._ranges
            for name, rs in res.ranges.items():
                for r in rs:
                    key = (name, r.begin, r.end)
                    ranges[key] = ranges.get(key, 0) + 1
        eid = task.executor_id
        if eid:
            executor = (task.agent_id, eid)
            self._executors[executor] = self._executors.get(executor, 0) + 1

    def _drop(self, task: TaskRecord) -> None:
        res = task.resources
        milli = self._milli
        for name, m in res.scalars.items():
            left = milli.get(name, 0) - m
            if left > 0:
                milli[name] = left
            else:
                milli.pop(name, None)
        if res.ranges:
            _uncount(self._ranges, [(name, r.begin, r.end) for name, rs in res.ranges.items() for r in rs])
        eid = task.executor_id
        if eid:
            _uncount(self._executors, [(task.agent_id, eid)])

    # -- the dict, with the sums kept ----------------------------------------------

    def __setitem__(self, key: str, task: TaskRecord) -> None:
        old = dict.get(self, key)
        if old is not None:
            self._drop(old)
        dict.__setitem__(self, key, task)
        self._take(task)

    def __delitem__(self, key: str) -> None:
        self._drop(dict.pop(self, key))

    _MISSING = object()

    def pop(self, key: str, default: Any = _MISSING) -> Any:
        if key in self:
            task = dict.pop(self, key)
            self._drop(task)
            return task
        if default is TaskTable._MISSING:
            raise KeyError(key)
        return default

    def popitem(self) -> tuple[str, TaskRecord]:
        key, task = dict.popitem(self)
        self._drop(task)
        return key, task

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return dict.__getitem__(self, key)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, task in dict(*args, **kwargs).items():
            self[key] = task

    def __ior__(self, other: Any) -> TaskTable:  # type: ignore[misc]  # dict's | makes a dict; |= must keep the sums
        self.update(other)
        return self

    def clear(self) -> None:
        dict.clear(self)
        self._milli.clear()
        self._ranges.clear()
        self._executors.clear()

    def copy(self) -> TaskTable:
        return TaskTable(self)

    def __reduce__(self) -> Any:
        return (TaskTable, (dict(self),))


def _uncount(counts: dict, keys: list) -> None:
    for key in keys:
        n = counts.get(key, 0) - 1
        if n > 0:
            counts[key] = n
        else:
            counts.pop(key, None)


@dataclass(slots=True, eq=False)
class OfferRecord:
    id: str
    framework_id: str
    agent_id: str
    resources: Resources
    expires_at: float
    """Loop time after which the offer is rescinded (inf = never)."""
    created_at: float = field(default_factory=time.time)


class FrameworkTag:
    """Marks a connection as a scheduler's: ``conn.tag`` after ``register_framework``."""

    __slots__ = ("framework_id",)

    def __init__(self, framework_id: str) -> None:
        self.framework_id = framework_id


class AgentTag:
    """Marks a connection as carrying agents: ``conn.tag`` after ``register_agent``.

    A real agent has a connection of its own; a process hosting many agents (the
    emulated agents of the scale benchmarks, an agent gateway) may register them
    all on one connection, since a process may hold only so many sockets. Calls
    from such a connection name their agent, and the master accepts them only for
    agents registered on that same connection.
    """

    __slots__ = ("agent_ids",)

    def __init__(self, agent_id: str) -> None:
        self.agent_ids = {agent_id}
