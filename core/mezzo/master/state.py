"""The cluster state of one leadership term: records, offers, refusals, and the
accounting that keeps them and the allocator in step.

What the master knows is soft state (paper §3.6): agents, frameworks, their tasks
and executors, outstanding offers, refuse filters. :class:`ClusterState` holds it
and keeps one invariant through every change:

    **every resource of every agent is in exactly one place**: the agent's free
    pool, an outstanding offer, a task, or an executor; and the allocator has been
    told (``allocated`` / ``recovered``) of every move into or out of a framework's
    hands.

The primitives below (:meth:`free_up`, :meth:`return_offer`, :meth:`release_task`,
:meth:`release_executor`, ...) are the only code that moves resources; the
lifecycles of frameworks (:mod:`.framework_lifecycle`), agents
(:mod:`.agent_lifecycle`) and tasks (:mod:`.task_lifecycle`) and the allocation
cycle (:mod:`.allocation`) are built from them.

The state owns no event loop and no connection: time and timers come from a
:class:`~.ports.Clock`, messages go out through an :class:`~.ports.Outbox`
(see :mod:`.ports`). Everything runs on one thread, so nothing here locks.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from .. import state_name
from ..resources import Resources
from ..wire.ttypes import ExecutorInfo, Filters, TaskState, TaskStatus
from . import long_tasks
from .events import EventStream
from .offers import OfferBook
from .records import (
    MAX_UNREACHABLE_TASKS,
    AgentRecord,
    EndedFramework,
    FrameworkRecord,
    OfferRecord,
    StatusEntry,
    TaskRecord,
)
from .refusals import RefuseFilters

if TYPE_CHECKING:
    from ..config import MasterConfig
    from ..hookspecs import OfferFilter
    from ..plugin_guard import PluginGuard
    from ..plugins import Observers
    from .guarded_allocator import GuardedAllocator
    from .ports import Clock, Outbox
    from .registry import MemoryRegistry, ZkRegistry

log = structlog.get_logger("mezzo.master", component="master")

COMPLETED_TASKS_KEPT = 1000
"""Ended tasks the state remembers (newest last), for reconciliation and ``mezzo state``."""

AGENT_ITEMS = 2
"""What an agent weighs in :meth:`ClusterState.rendering_items`, a task weighing one:
rendering an agent cost 18-30 us (``/state``, ``/state-summary``), a task 5-17 us
(``/state``, ``/frameworks``), on a 2-core VM."""

REMEMBER_REMOVED_FRAMEWORKS = 10_000
"""How many removed framework ids the state remembers, to refuse their return."""


class TaskWatcher(Protocol):
    """Something that follows tasks as they start and end (revocation, the
    short-task limit). Called synchronously from inside state changes: cheap, and
    must not change the state itself."""

    def task_started(self, task: TaskRecord) -> None: ...

    def task_ended(self, task: TaskRecord, agent: AgentRecord | None) -> None: ...

    def launched(self, framework_id: str) -> None: ...


class ClusterState:
    """Everything one leadership term of the master knows. See the module docstring."""

    def __init__(
        self,
        *,
        master_id: str,
        config: MasterConfig,
        allocator: GuardedAllocator,
        offer_filters: list[OfferFilter],
        builtin_filters: list[OfferFilter],
        registry: MemoryRegistry | ZkRegistry,
        observe: Observers,
        guard: PluginGuard,
        clock: Clock,
        outbox: Outbox,
        min_offer: Resources | None = None,
        id_key: bytes | None = None,
        events: EventStream | None = None,
    ) -> None:
        self.id = master_id
        """This term's master id: the prefix of every id it hands out."""
        self._id_key = id_key if id_key is not None else master_id.encode()
        """Secret that makes the ids this term hands out unguessable (see :meth:`_tag`);
        the master passes random bytes, tests may leave it out for repeatable ids."""
        self.config = config
        self.allocator = allocator
        self.offer_filters = offer_filters
        """Configured offer filter components, in ``master.offer_filters`` order."""
        self.builtin_filters = builtin_filters
        """The paper's two framework filters (``set_filters``), applied first."""
        self.registry = registry
        self.observe = observe
        self.events = events if events is not None else EventStream()
        """The operator event stream (:mod:`.events`): publishing costs nothing unsubscribed."""
        self.guard = guard
        self.clock = clock
        self.outbox = outbox
        self.min_offer = min_offer
        """``master.min_offer`` (None = off); each agent holds it capped by its total."""
        self.now: Callable[[], float] = clock.now

        self.frameworks: dict[str, FrameworkRecord] = {}
        self.agents: dict[str, AgentRecord] = {}
        self.offerable: dict[str, AgentRecord] = {}
        """Agents connected and with something free, kept by the records themselves."""
        self.offer_book = OfferBook(master_id, config.offer_timeout)
        self.refusals = RefuseFilters()
        self.completed_tasks: deque[TaskRecord] = deque(maxlen=COMPLETED_TASKS_KEPT)
        self.completed_per_framework = config.max_completed_tasks_per_framework
        """Ended tasks each framework's history keeps (:attr:`FrameworkRecord.completed`)."""
        self.completed_frameworks: deque[EndedFramework] = deque(maxlen=config.max_completed_frameworks)
        """Frameworks removed in this term, newest last, with their histories."""
        self.removed_frameworks: OrderedDict[str, str] = OrderedDict()
        """Ids of frameworks removed in this term, with why (bounded)."""
        self.declared_unreachable: OrderedDict[str, None] = OrderedDict()
        """Agents this master declared unreachable (bounded): for them it knows which
        tasks were told TASK_UNREACHABLE and which TASK_LOST."""
        self.unreachable_on: dict[str, set[tuple[str, str]]] = {}
        """(framework id, task id) of the unreachable tasks (:meth:`task_unreachable`) by
        the agent they were on, so that an agent coming back settles its own in time
        proportional to them (:meth:`AgentLifecycle._adopted`)."""
        self.orphans: dict[str, list[tuple[AgentRecord, TaskRecord | tuple[str, str]]]] = {}
        """Tasks and executor keys agents reported for frameworks not known yet, by
        framework id, so that a framework coming back need not scan every agent."""
        self.executor_hosts: dict[str, set[str]] = {}
        """Ids of the agents running executors of each framework (kept by
        :meth:`add_executor` and :meth:`release_executor`; may name an agent that has
        gone since), so that removing a framework tells only the agents that hold
        something of it rather than every agent: 200 frameworks leaving a cluster of
        20,000 agents were 4,000,000 messages and 11 s of the loop."""
        self.watchers: list[TaskWatcher] = []
        self.request_allocation: Callable[..., None] = _no_allocation
        """``request_allocation(prompt=False)``: ask for an allocation cycle soon
        (wired by the master to its :class:`~.allocation_timer.AllocationTimer`);
        ``prompt`` for resources a task's end freed and for a framework that just
        registered."""
        self._framework_ids = itertools.count(0)
        self._agent_ids = itertools.count(0)

    # -- ids -------------------------------------------------------------------

    def new_framework_id(self) -> str:
        """A framework id no one can guess before it is handed out: a framework that
        registers *with* an id this master does not know is taken for one of an earlier
        master's, so a sequence alone let anyone take the next id before its framework
        registered (the probe's squatting)."""
        while True:
            n = next(self._framework_ids)
            fid = f"{self.id}-{n:04d}-{self._tag(f'F{n}')}"
            if fid not in self.frameworks:
                return fid

    def new_agent_id(self) -> str:
        """An agent id, unguessable for the same reason as :meth:`new_framework_id`."""
        while True:
            n = next(self._agent_ids)
            aid = f"{self.id}-S{n}-{self._tag(f'S{n}')}"
            if aid not in self.agents:
                return aid

    def _tag(self, what: str) -> str:
        """48 bits of HMAC-SHA256 of ``what`` under this term's key: readable ids keep
        their sequence number, and the tag makes the next one unguessable."""
        return hmac.new(self._id_key, what.encode(), hashlib.sha256).hexdigest()[:12]

    # -- moving resources --------------------------------------------------------

    def free_up(self, agent: AgentRecord, resources: Resources) -> None:
        """Put ``resources`` back in the agent's free pool; refusals that no longer
        cover the pool lapse (the invariant of :mod:`.refusals`)."""
        if resources:
            agent.free = agent.free + resources
            self.refusals.free_grew(agent.id, agent.free)

    def give_back(
        self,
        framework: FrameworkRecord | None,
        agent: AgentRecord | None,
        resources: Resources,
        refuse_seconds: float,
    ) -> None:
        """``resources`` leave ``framework``'s hands for ``agent``'s free pool, refused
        to the framework for ``refuse_seconds`` (declined, or unused of an offer)."""
        if framework is not None:
            self.allocator.recovered(framework.id, resources)
        if agent is not None and resources:
            self.free_up(agent, resources)
            if framework is not None and refuse_seconds > 0:
                self.refusals.add(framework.id, agent.id, resources, self.now() + refuse_seconds, agent.free)

    def return_offer(self, offer: OfferRecord, refuse_seconds: float = 0.0) -> None:
        """Take ``offer`` off the book and give all of it back (see :meth:`give_back`)."""
        framework = self.frameworks.get(offer.framework_id)
        agent = self.agents.get(offer.agent_id)
        self.offer_book.remove(offer, framework, agent)
        self.give_back(framework, agent, offer.resources, refuse_seconds)

    def rescind_offers(self, offers: list[OfferRecord], *, notify: bool, refuse_seconds: float = 0.0) -> None:
        """Withdraw ``offers``; their frameworks hear ``offer_rescinded`` if ``notify``."""
        for offer in offers:
            self.return_offer(offer, refuse_seconds)
            framework = self.frameworks.get(offer.framework_id)
            if notify and framework is not None and framework.conn is not None:
                self.outbox.scheduler(framework.conn).offer_rescinded(offer.id)
        if offers:
            self.request_allocation()

    def expire_offers(self, now: float) -> None:
        """Rescind the offers older than ``master.offer_timeout``."""
        expired = self.offer_book.expired(now)
        if not expired:
            return
        for offer in expired:
            log.info(
                "offer rescinded: timeout",
                framework=offer.framework_id,
                agent=offer.agent_id,
                offer=offer.id,
                timeout=self.config.offer_timeout,
            )
        # A framework that sat on an offer is treated as having declined it, so the
        # re-offer goes to someone else first (hoarding was a top Mesos complaint).
        self.rescind_offers(expired, notify=True, refuse_seconds=self.config.refuse_seconds)

    def refuse_seconds(self, filters: Filters | None) -> float:
        """How long a decline or an unused remainder is refused: the framework's
        ``Filters.refuse_seconds`` when it is a number >= 0, else ``master.refuse_seconds``."""
        value = getattr(filters, "refuse_seconds", None)
        if (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and value >= 0
            and not math.isnan(value)
        ):
            return float(value)
        return self.config.refuse_seconds

    def add_task(self, agent: AgentRecord, task: TaskRecord) -> None:
        """Record ``task`` as running on ``agent``, whose pool it was taken from already
        (from an offer, or from what the agent reported). Its framework's side is
        the caller's: the framework may not be known yet (see :attr:`orphans`)."""
        agent.tasks[(task.framework_id, task.id)] = task
        long_tasks.task_started(agent, task)
        for watcher in self.watchers:
            watcher.task_started(task)

    def release_task(self, task: TaskRecord, agent: AgentRecord | None) -> None:
        """Free a task's resources: it ended, or its framework or agent went away."""
        framework = self.frameworks.get(task.framework_id)
        if framework is not None:
            framework.tasks.pop(task.id, None)
            self.allocator.recovered(task.framework_id, task.resources)
        if agent is not None and agent.tasks.pop((task.framework_id, task.id), None) is not None:
            long_tasks.task_released(agent, task)
            self.free_up(agent, task.resources)

    def end_task(
        self, task: TaskRecord, agent: AgentRecord | None, state: int, reason: str, message: str
    ) -> None:
        """The master ends ``task`` itself (its agent or framework went away): release
        it and remember how it ended."""
        self.release_task(task, agent)
        task.state, task.reason, task.message = state, reason, message
        task.updated_at = time.time()
        task.moved_to(state, task.updated_at, reason, message, "master")
        self.events.task_updated(task, self.frameworks.get(task.framework_id))
        self.task_ended(task)

    def task_unreachable(
        self, task: TaskRecord, agent: AgentRecord, framework: FrameworkRecord, message: str
    ) -> None:
        """``agent`` was declared lost for its silence and ``framework`` is partition-aware:
        ``task`` is released (its resources leave with the agent) but kept as
        TASK_UNREACHABLE, reason ``agent_unreachable``, until the agent comes back."""
        self.release_task(task, agent)
        task.info.data = None  # never sent again: the agent has it, or it is lost
        task.state, task.reason, task.message = TaskState.TASK_UNREACHABLE, "agent_unreachable", message
        task.updated_at = time.time()
        task.moved_to(task.state, task.updated_at, task.reason, message, "master")
        self.events.task_updated(task, framework)
        framework.unreachable_tasks[task.id] = task
        self.unreachable_on.setdefault(agent.id, set()).add((framework.id, task.id))
        while len(framework.unreachable_tasks) > MAX_UNREACHABLE_TASKS:
            oldest = framework.unreachable_tasks.pop(next(iter(framework.unreachable_tasks)))
            self.forget_unreachable(oldest)

    def forget_unreachable(self, task: TaskRecord) -> None:
        """``task`` is no longer unreachable (back, ended, or forgotten): out of the index."""
        keys = self.unreachable_on.get(task.agent_id)
        if keys is not None:
            keys.discard((task.framework_id, task.id))
            if not keys:
                del self.unreachable_on[task.agent_id]

    def task_ended(self, task: TaskRecord, *, history: bool = True) -> None:
        """``task`` ended: remembered for reconciliation (:attr:`completed_tasks`) and,
        with ``history``, in its framework's history. What it was launched with is let
        go: its data (up to ``max_task_data_bytes``) is never needed again once it was
        sent to its agent."""
        task.info.data = None
        task.held = None
        log.info(
            "task ended",
            framework=task.framework_id,
            task=task.id,
            agent=task.agent_id,
            state=state_name(task.state),
            reason=task.reason or None,
            exit_code=task.exit_code,
            seconds=ran_for(task.statuses),
            message=(task.message or "")[:200] or None,
        )
        self.completed_tasks.append(task)
        framework = self.frameworks.get(task.framework_id)
        if history and framework is not None and self.completed_per_framework > 0:
            framework.completed.append(task.ended(framework.info.role))
            if len(framework.completed) > self.completed_per_framework:
                framework.completed.popleft()

    def framework_ended(self, record: FrameworkRecord, reason: str) -> None:
        """``record`` was removed: its history joins :attr:`completed_frameworks`."""
        if self.completed_frameworks.maxlen:
            self.completed_frameworks.append(
                EndedFramework(
                    record.id,
                    record.info,
                    record.principal,
                    record.registered_at,
                    time.time(),
                    reason,
                    record.completed,
                )
            )

    def add_executor(self, agent: AgentRecord, key: tuple[str, str], executor: ExecutorInfo) -> None:
        """``executor`` (of framework ``key[0]``) runs on ``agent`` from now on; the
        caller accounts for its resources."""
        agent.executors[key] = executor
        self.executor_hosts.setdefault(key[0], set()).add(agent.id)

    def release_executor(self, agent: AgentRecord, key: tuple[str, str]) -> None:
        """An executor is gone: what it held goes back to the agent's pool."""
        executor = agent.executors.pop(key, None)
        if executor is None:
            return
        hosts = self.executor_hosts.get(key[0])
        if hosts is not None and not any(k[0] == key[0] for k in agent.executors):
            hosts.discard(agent.id)
            if not hosts:
                del self.executor_hosts[key[0]]
        resources = Resources.of(executor.resources)
        self.free_up(agent, resources)
        if key[0] in self.frameworks:
            self.allocator.recovered(key[0], resources)

    # -- telling frameworks ------------------------------------------------------

    def tell_status(self, framework: FrameworkRecord, status: TaskStatus) -> None:
        """Send ``status`` to the framework's scheduler, or hold it until one connects."""
        if framework.conn is not None:
            self.outbox.scheduler(framework.conn).status_update(status)
            if status.uuid:
                limit = 2 * len(framework.tasks)
                framework.forwarded.note(status.uuid, framework.conn, self.clock.now(), limit)
        else:
            framework.held_updates[status.uuid or f"master:{status.task_id}"] = status

    def tell_agent_lost(self, agent_id: str) -> None:
        """Every connected framework hears that ``agent_id`` is gone."""
        for framework in self.frameworks.values():
            if framework.conn is not None:
                self.outbox.scheduler(framework.conn).agent_lost(agent_id)

    def master_status(self, task: TaskRecord, state: int, reason: str, message: str) -> TaskStatus:
        """A status update the master itself sends about ``task``."""
        return TaskStatus(
            task_id=task.id,
            state=state,
            reason=reason,
            message=message,
            source="master",
            agent_id=task.agent_id,
            executor_id=task.executor_id,
            framework_id=task.framework_id,
            timestamp=time.time(),
        )

    def forget_framework(self, framework_id: str, reason: str) -> None:
        """Remember that ``framework_id`` was removed, so it cannot come back (bounded)."""
        self.removed_frameworks[framework_id] = reason
        if len(self.removed_frameworks) > REMEMBER_REMOVED_FRAMEWORKS:
            self.removed_frameworks.popitem(last=False)

    # -- the term's end ----------------------------------------------------------------

    def links(self) -> Iterator[Any]:
        """The links of every connected framework and agent (each once)."""
        seen: set[int] = set()
        links = [f.conn for f in self.frameworks.values()] + [a.conn for a in self.agents.values()]
        for link in links:
            if link is not None and id(link) not in seen:
                seen.add(id(link))
                yield link

    def cancel_timers(self) -> None:
        """Cancel the timers the records hold (failover and re-registration deadlines)."""
        for framework in self.frameworks.values():
            if framework.failover_handle is not None:
                framework.failover_handle.cancel()
                framework.failover_handle = None
        for agent in self.agents.values():
            if agent.removal_handle is not None:
                agent.removal_handle.cancel()
                agent.removal_handle = None

    # -- counts (metrics) ------------------------------------------------------------

    def rendering_items(self, limit: int, *, ended: bool = True) -> int:
        """What rendering this state as a document costs, in items: an agent counts
        :data:`AGENT_ITEMS`, a framework, task or offer one; with ``ended``, removed
        frameworks and every ended task too. Counting stops once past ``limit`` (the
        count returned is then only known to exceed it): O(min(frameworks, limit)),
        so a large cluster costs nothing to find large."""
        count = AGENT_ITEMS * len(self.agents) + len(self.frameworks)
        if ended:
            count += len(self.completed_frameworks)
        # Each framework was counted above: the loop runs at most ``limit`` times.
        for framework in self.frameworks.values():
            if count > limit:
                return count
            count += len(framework.tasks) + len(framework.offers) + len(framework.unreachable_tasks)
            if ended:
                count += len(framework.completed)
        if ended:
            for gone in self.completed_frameworks:
                if count > limit:
                    return count
                count += len(gone.completed)
        return count

    def tasks_running(self) -> int:
        return sum(len(f.tasks) for f in self.frameworks.values())

    def frameworks_connected(self) -> int:
        return sum(1 for f in self.frameworks.values() if f.conn is not None)


def _no_allocation(*, prompt: bool = False) -> None:
    return None


def ran_for(statuses: list[StatusEntry]) -> float | None:
    """Seconds from a task's first TASK_RUNNING to its last status (None if it never ran)."""
    started = next((s[1] for s in statuses if s[0] == TaskState.TASK_RUNNING), None)
    return round(statuses[-1][1] - started, 3) if started is not None else None
