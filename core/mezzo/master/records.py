"""The master's soft state: one record type per thing it knows about.

Everything here can be rebuilt from re-registering agents and schedulers (paper
§3.6), which is why none of it is persisted. Records are plain slotted objects
mutated only by :class:`mezzo.master.master.Master` on its event loop.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..resources import Resources
from ..wire.ttypes import AgentInfo, ExecutorInfo, FrameworkInfo, TaskInfo, TaskState


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
    tasks: dict[str, TaskRecord] = field(default_factory=dict)
    registered_at: float = field(default_factory=time.time)
    failover_handle: Any = None
    """Timer removing the framework if its scheduler does not come back."""
    held_updates: dict[str, Any] = field(default_factory=dict)
    """Status updates that arrived while no scheduler was connected, delivered when
    one is (keyed by uuid, or by task for the master's own; a retry replaces itself)."""

    @property
    def has_filters(self) -> bool:
        return self.agent_whitelist is not None or self.min_free is not None


class AgentRecord:
    """One agent: its resources, what runs on it and what is offered of it.

    ``free`` and ``connected`` are properties so that the master's index of
    *offerable* agents (connected, with something free) cannot go stale: every
    change of either updates ``offerable`` if the record belongs to one. An
    allocation cycle then walks only those agents instead of all of them, which
    at 50,000 agents was a fifth of the master's time (bench/fig10.py).
    """

    __slots__ = (
        "_connected",
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
        "registered_at",
        "removal_handle",
        "statistics",
        "tasks",
        "total",
    )

    def __init__(self, id: str, info: AgentInfo, conn: Any, total: Resources, free: Resources,
                 connected: bool = True, offerable: dict[str, AgentRecord] | None = None,
                 min_offer: Resources | None = None, long_limit: Resources | None = None) -> None:
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
        self.pending_kills: set[tuple[str, str]] = set()
        """(framework id, task id) of kills asked for while the agent was disconnected."""
        self.registered_at = time.time()
        self.offerable = offerable
        """The master's index of offerable agents by id, or None (a record on its own)."""
        self._free = free
        self._connected = connected
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

    def _reindex(self) -> None:
        index = self.offerable
        if index is not None:
            if self._connected and self._free:
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

    @property
    def id(self) -> str:
        return self.info.task_id

    @property
    def executor_id(self) -> str:
        return self.info.executor.executor_id if self.info.executor is not None else ""


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
