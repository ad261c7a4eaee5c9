"""The master: soft state, offers, launch validation, status forwarding (paper §3).

``Master`` is the handler of the ``Master`` service: each incoming call
``foo(a, b)`` on a connection arrives as ``master.foo(conn, a, b)``. Everything runs
on one event loop, so handlers mutate state without locks; they must stay cheap
and must never raise on what a peer sends (the rpc layer would log it, but a
half-applied handler leaves state inconsistent, so handlers validate first).

The master never trusts an id a peer claims: a connection is bound to the
framework or agent that registered on it (``conn.tag``), and calls naming another
framework's id are refused.

Usage::

    master = Master(config.master, plugins)
    await master.start()          # binds config.listen
    ...
    await master.stop()
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import math
import time
import uuid
from collections import deque
from typing import Any

import structlog

from .. import is_terminal, state_name
from ..builtin import AgentListFilter, MinFreeFilter
from ..config import MasterConfig
from ..plugins import Plugins
from ..resources import InvalidResources, Resources
from ..rpc import parse_address, serve
from ..services import AGENT, MASTER, SCHEDULER, TOOL
from ..wire.ttypes import (
    AgentInfo,
    ExecutorInfo,
    Filters,
    FrameworkFilters,
    FrameworkInfo,
    Offer,
    TaskInfo,
    TaskState,
    TaskStatus,
)
from . import launch as launch_rules
from .allocation import AllocationTimer, Cycle
from .offers import OfferBook
from .records import AgentRecord, FrameworkRecord, OfferRecord, TaskRecord
from .refusals import RefuseFilters
from .state_view import render_state

log = structlog.get_logger("mezzo.master", component="master")


class _FrameworkTag:
    __slots__ = ("framework_id",)

    def __init__(self, framework_id: str) -> None:
        self.framework_id = framework_id


class _AgentTag:
    __slots__ = ("agent_id",)

    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id


class Master:
    """The mezzo master. See the module docstring."""

    def __init__(self, config: MasterConfig, plugins: Plugins) -> None:
        self.config = config
        self.plugins = plugins
        self.hook = plugins.hook
        self.id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
        name = config.allocator.name
        self.allocator = plugins.registry.create(
            "allocator", name, config.allocator.selected_settings(),
            key=f"master.allocator.{name}", selected_by="master.allocator.name",
        )
        self.builtin_filters = [AgentListFilter({}, key="builtin"), MinFreeFilter({}, key="builtin")]
        self.offer_filters = [
            plugins.registry.create(
                "offer_filter", n, config.offer_filter_settings.get(n, {}),
                key=f"master.offer_filter.{n}", selected_by="master.offer_filters",
            )
            for n in config.offer_filters
        ]
        self.frameworks: dict[str, FrameworkRecord] = {}
        self.agents: dict[str, AgentRecord] = {}
        self.offer_book = OfferBook(self.id, config.offer_timeout)
        self.refusals = RefuseFilters()
        self.completed_tasks: deque[TaskRecord] = deque(maxlen=1000)
        self.last_cycle: dict[str, Any] = {}
        self._framework_ids = itertools.count(0)
        self._agent_ids = itertools.count(0)
        self._server: asyncio.base_events.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: AllocationTimer | None = None
        self._offer_timer: asyncio.TimerHandle | None = None
        self.address = config.listen
        self.started_at = time.time()

    # ----------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Bind ``config.listen`` (port 0 picks a free port; see ``.address``)."""
        self._loop = asyncio.get_running_loop()
        self._timer = AllocationTimer(self._loop, self.config.allocation_interval, self._allocate)
        host, port = parse_address(self.config.listen, 5050)
        self._server = await serve(host, port, MASTER, self, max_frame=self.config.max_frame_bytes)
        bound = self._server.sockets[0].getsockname()
        self.address = f"{bound[0]}:{bound[1]}"
        tune_gc()
        log.info("master started", address=self.address, master_id=self.id,
                 allocator=self.config.allocator.name)
        self.hook.mezzo_leader_elected(master=self.address)

    async def stop(self) -> None:
        """Stop serving and close every connection."""
        if self._timer is not None:
            self._timer.cancel()
        if self._offer_timer is not None:
            self._offer_timer.cancel()
        for record in [*self.frameworks.values(), *self.agents.values()]:
            for h in (getattr(record, "failover_handle", None), getattr(record, "removal_handle", None)):
                if h is not None:
                    h.cancel()
            if record.conn is not None:
                record.conn.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        log.info("master stopped", address=self.address)

    @property
    def now(self) -> float:
        return self._loop.time() if self._loop is not None else time.monotonic()

    def request_allocation(self) -> None:
        if self._timer is not None:
            self._timer.request()

    # ------------------------------------------------------------ frameworks

    def register_framework(self, conn: Any, framework: FrameworkInfo) -> None:
        scheduler = conn.remote(SCHEDULER)
        if not isinstance(framework, FrameworkInfo) or not isinstance(framework.name, str) or not framework.name.strip():
            scheduler.error("register_framework: FrameworkInfo.name is required")
            return
        if isinstance(conn.tag, _AgentTag):
            scheduler.error("register_framework: this connection belongs to an agent")
            return
        timeout = framework.failover_timeout
        if not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout < 0:
            scheduler.error(f"register_framework: failover_timeout {timeout!r} must be a finite number >= 0")
            return
        framework.role = framework.role or "*"
        fid = framework.framework_id
        existing = self.frameworks.get(fid) if fid else None
        if existing is not None:
            self._reattach_framework(existing, conn, framework)
            return
        # An unknown id comes from a scheduler that registered with an earlier master
        # (failover): keep its id so its tasks stay its own, and say "re-registered".
        recovered = bool(fid)
        if not recovered:
            fid = framework.framework_id = f"{self.id}-{next(self._framework_ids):04d}"
        record = FrameworkRecord(id=fid, info=framework, conn=conn)
        self.frameworks[fid] = record
        conn.tag = _FrameworkTag(fid)
        self.allocator.add_framework(fid, framework)
        log.info("framework registered", framework=fid, name=framework.name, role=framework.role,
                 recovered=recovered)
        self.hook.mezzo_framework_added(framework=framework)
        if recovered:
            scheduler.reregistered(fid, self.address)
        else:
            scheduler.registered(fid, self.address)
        self.request_allocation()

    def _reattach_framework(self, record: FrameworkRecord, conn: Any, info: FrameworkInfo) -> None:
        old = record.conn
        if old is not None and old is not conn:
            old.remote(SCHEDULER).error("framework failed over to another scheduler")
            old.tag = None
            old.close()
        if record.failover_handle is not None:
            record.failover_handle.cancel()
            record.failover_handle = None
        record.conn = conn
        record.info = info
        conn.tag = _FrameworkTag(record.id)
        if record.active:
            self.allocator.activate(record.id)
        log.info("framework re-registered", framework=record.id)
        conn.remote(SCHEDULER).reregistered(record.id, self.address)
        self.request_allocation()

    def _framework_of(self, conn: Any, framework_id: Any, call: str) -> FrameworkRecord | None:
        """The framework registered on ``conn``, if ``framework_id`` names it; else answer an error."""
        tag = conn.tag
        if not isinstance(tag, _FrameworkTag) or tag.framework_id != framework_id:
            record = None
        else:
            record = self.frameworks.get(framework_id)
        if record is None:
            log.warning("call from unregistered framework", call=call, framework=framework_id, peer=conn.peer)
            conn.remote(SCHEDULER).error(
                f"{call}: framework {framework_id!r} is not registered on this connection"
            )
        return record

    def unregister_framework(self, conn: Any, framework_id: str) -> None:
        record = self._framework_of(conn, framework_id, "unregister_framework")
        if record is not None:
            self._remove_framework(record, "unregistered by its scheduler")
            conn.tag = None

    def _remove_framework(self, record: FrameworkRecord, reason: str) -> None:
        fid = record.id
        self._rescind_offers(list(record.offers.values()), notify=False)
        for task in list(record.tasks.values()):
            agent = self.agents.get(task.agent_id)
            self._release_task(task, agent)
            task.state = TaskState.TASK_KILLED
            task.message = f"framework removed: {reason}"
            self.completed_tasks.append(task)
        for agent in self.agents.values():
            for key in [k for k in agent.executors if k[0] == fid]:
                self._release_executor(agent, key)
            if agent.conn is not None:
                agent.conn.remote(AGENT).shutdown_framework(fid)
        self.refusals.clear_framework(fid)
        if record.failover_handle is not None:
            record.failover_handle.cancel()
        del self.frameworks[fid]
        self.allocator.remove_framework(fid)
        log.info("framework removed", framework=fid, reason=reason)
        self.hook.mezzo_framework_removed(framework_id=fid, reason=reason)
        self.request_allocation()

    def set_needs_offers(self, conn: Any, framework_id: str, needs_offers: bool) -> None:
        record = self._framework_of(conn, framework_id, "set_needs_offers")
        if record is None:
            return
        if needs_offers:
            # Reviving clears refuse filters: the framework says it can use resources now.
            self.refusals.clear_framework(framework_id)
            if not record.active:
                record.active = True
                self.allocator.activate(framework_id)
            self.request_allocation()
        elif record.active:
            record.active = False
            self.allocator.deactivate(framework_id)
        log.info("framework needs offers", framework=framework_id, needs_offers=bool(needs_offers))

    def set_filters(self, conn: Any, framework_id: str, filters: FrameworkFilters) -> None:
        record = self._framework_of(conn, framework_id, "set_filters")
        if record is None:
            return
        agents = getattr(filters, "agents", None)
        if agents is not None and not all(isinstance(a, str) for a in agents):
            conn.remote(SCHEDULER).error("set_filters: agents must be a list of agent ids or hostnames")
            return
        try:
            min_free = Resources.of(filters.min_free) if getattr(filters, "min_free", None) is not None else None
        except InvalidResources as exc:
            conn.remote(SCHEDULER).error(f"set_filters: min_free: {exc}")
            return
        record.agent_whitelist = frozenset(agents) if agents is not None else None
        record.min_free = min_free if min_free else None
        log.info("framework filters set", framework=framework_id,
                 agents=sorted(record.agent_whitelist) if record.agent_whitelist is not None else None,
                 min_free=str(record.min_free) if record.min_free else None)
        self.request_allocation()

    def request_guaranteed_share(self, conn: Any, framework_id: str, request_id: int) -> None:
        record = self._framework_of(conn, framework_id, "request_guaranteed_share")
        if record is not None:
            conn.remote(SCHEDULER).guaranteed_share(request_id, self.allocator.guaranteed_share(framework_id))

    # ---------------------------------------------------------------- offers

    def _allocate(self) -> None:
        """One allocation cycle: expire, let the allocator offer, send the offers."""
        started = time.perf_counter()
        now = self.now
        self.refusals.expire(now)
        self._expire_offers(now)
        cycle = Cycle(self, now)
        self.allocator.allocate(cycle)
        sent = 0
        for fid, offers in cycle.made.items():
            record = self.frameworks[fid]
            wire = [self._offer_message(record, o) for o in offers]
            record.conn.remote(SCHEDULER).resource_offers(wire)
            sent += len(wire)
            self.hook.mezzo_offers_sent(framework_id=fid, offers=wire)
        self._arm_timers()
        elapsed = time.perf_counter() - started
        self.last_cycle = {
            "at": time.time(),
            "seconds": round(elapsed, 6),
            "offers": sent,
            "agents_refused_by_all": cycle.fully_refused_agents,
            "not_offered": cycle.reasons(),
        }
        if sent:
            log.debug("allocation cycle", offers=sent, seconds=round(elapsed, 4))

    def _offer_message(self, framework: FrameworkRecord, offer: OfferRecord) -> Offer:
        agent = self.agents[offer.agent_id]
        return Offer(
            offer_id=offer.id,
            framework_id=offer.framework_id,
            agent_id=agent.id,
            hostname=agent.info.hostname,
            resources=offer.resources,
            attributes=agent.info.attributes or {},
            executor_ids=[eid for (fid, eid) in agent.executors if fid == framework.id],
        )

    def _arm_timers(self) -> None:
        nxt = self.refusals.next_expiry()
        if nxt is not None and self._timer is not None:
            self._timer.request_at(nxt)
        expiry = self.offer_book.next_expiry()
        if expiry is not None and self._offer_timer is None and self._loop is not None:
            self._offer_timer = self._loop.call_at(expiry, self._offer_timeout_fired)

    def _offer_timeout_fired(self) -> None:
        self._offer_timer = None
        self._expire_offers(self.now)
        self._arm_timers()

    def _expire_offers(self, now: float) -> None:
        expired = self.offer_book.expired(now)
        if not expired:
            return
        for offer in expired:
            log.info("offer rescinded: timeout", framework=offer.framework_id, agent=offer.agent_id,
                     offer=offer.id, timeout=self.config.offer_timeout)
        # A framework that sat on an offer is treated as having declined it, so the
        # re-offer goes to someone else first (hoarding was a top Mesos complaint).
        self._rescind_offers(expired, notify=True, refuse_seconds=self.config.refuse_seconds)

    def _rescind_offers(self, offers: list[OfferRecord], *, notify: bool, refuse_seconds: float = 0.0) -> None:
        for offer in offers:
            framework = self.frameworks.get(offer.framework_id)
            agent = self.agents.get(offer.agent_id)
            self._return_offer(offer, framework, agent, offer.resources, refuse_seconds)
            if notify and framework is not None and framework.conn is not None:
                framework.conn.remote(SCHEDULER).offer_rescinded(offer.id)
        if offers:
            self.request_allocation()

    def _return_offer(self, offer: OfferRecord, framework: FrameworkRecord | None, agent: AgentRecord | None,
                      unused: Resources, refuse_seconds: float) -> None:
        """Take ``offer`` off the book, giving ``unused`` of it back to the agent's free pool."""
        self.offer_book.remove(offer, framework, agent)
        if framework is not None:
            self.allocator.recovered(offer.framework_id, unused)
        if agent is not None and unused:
            agent.free = agent.free + unused
            if framework is not None and refuse_seconds > 0:
                self.refusals.add(framework.id, agent.id, unused, self.now + refuse_seconds)

    def _refuse_seconds(self, filters: Filters | None) -> float:
        value = getattr(filters, "refuse_seconds", None)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 and not math.isnan(value):
            return float(value)
        return self.config.refuse_seconds

    def decline_offer(self, conn: Any, framework_id: str, offer_ids: list[str], filters: Filters) -> None:
        record = self._framework_of(conn, framework_id, "decline_offer")
        if record is None:
            return
        refuse = self._refuse_seconds(filters)
        for oid in offer_ids or ():
            offer = record.offers.get(oid)
            if offer is None:
                log.info("decline of unknown offer ignored", framework=framework_id, offer=oid)
                continue
            self._return_offer(offer, record, self.agents.get(offer.agent_id), offer.resources, refuse)
        self.request_allocation()

    # ---------------------------------------------------------------- launch

    def launch_tasks(self, conn: Any, framework_id: str, offer_ids: list[str], tasks: list[TaskInfo],
                     filters: Filters) -> None:
        record = self._framework_of(conn, framework_id, "launch_tasks")
        if record is None:
            return
        plan = launch_rules.check_launch(record, list(offer_ids or ()), list(tasks or ()),
                                         self.offer_book.offers, self.agents)
        scheduler = conn.remote(SCHEDULER)
        for status in plan.rejected:
            status.timestamp = time.time()
            log.info("task rejected", framework=framework_id, task=status.task_id,
                     state=state_name(status.state), reason=status.reason, message=status.message)
            self.hook.mezzo_task_status(framework_id=framework_id, status=status)
            scheduler.status_update(status)
        agent = plan.agent
        # The offers are consumed: what the accepted tasks use stays allocated to
        # the framework, the rest goes back with the framework's refuse filter.
        refuse = self._refuse_seconds(filters)
        unused = plan.offered - plan.used if agent is not None else None
        for offer in plan.offers:
            a = self.agents.get(offer.agent_id)
            self.offer_book.remove(offer, record, a)
            if agent is None:  # dropped launch: the whole offer comes back
                self._give_back(record, a, offer.resources, refuse)
        if agent is None:
            self.request_allocation()
            return
        if unused:
            self._give_back(record, agent, unused, refuse)
        for accepted in plan.accepted:
            self._start_task(record, agent, accepted)
        self.request_allocation()

    def _give_back(self, record: FrameworkRecord, agent: AgentRecord | None, resources: Resources,
                   refuse: float) -> None:
        self.allocator.recovered(record.id, resources)
        if agent is not None and resources:
            agent.free = agent.free + resources
            if refuse > 0:
                self.refusals.add(record.id, agent.id, resources, self.now + refuse)

    def _start_task(self, record: FrameworkRecord, agent: AgentRecord, accepted: launch_rules.Accepted) -> None:
        task = accepted.task
        task.resources = accepted.resources
        if task.executor is not None:
            task.executor.framework_id = record.id
            task.executor.resources = Resources.of(task.executor.resources)
            if accepted.executor_resources is not None:
                agent.executors[(record.id, task.executor.executor_id)] = task.executor
        tr = TaskRecord(framework_id=record.id, agent_id=agent.id, info=task, resources=accepted.resources)
        record.tasks[task.task_id] = tr
        agent.tasks[(record.id, task.task_id)] = tr
        log.info("launching task", framework=record.id, agent=agent.id, task=task.task_id,
                 resources=str(accepted.resources))
        agent.conn.remote(AGENT).run_task(record.info, task)

    # ----------------------------------------------------------------- tasks

    def kill_task(self, conn: Any, framework_id: str, task_id: str) -> None:
        record = self._framework_of(conn, framework_id, "kill_task")
        if record is None:
            return
        task = record.tasks.get(task_id)
        agent = self.agents.get(task.agent_id) if task is not None else None
        if task is None or agent is None:
            conn.remote(SCHEDULER).status_update(TaskStatus(
                task_id=task_id if isinstance(task_id, str) else "", state=TaskState.TASK_LOST,
                reason="task_unknown", message="kill_task: the master knows no such running task",
                source="master", framework_id=framework_id, timestamp=time.time(),
            ))
            return
        if agent.conn is None:
            log.info("kill deferred: agent disconnected", framework=framework_id, task=task_id, agent=agent.id)
            return
        log.info("killing task", framework=framework_id, task=task_id, agent=agent.id)
        agent.conn.remote(AGENT).kill_task(framework_id, task_id)

    def status_update(self, conn: Any, status: TaskStatus) -> None:
        agent = self._agent_of(conn, "status_update")
        if agent is None or not isinstance(status, TaskStatus):
            return
        fid = status.framework_id
        status.agent_id = agent.id
        record = self.frameworks.get(fid)
        task = agent.tasks.get((fid, status.task_id))
        if task is not None and isinstance(status.state, int):
            task.state = status.state
            task.message = status.message or ""
            task.reason = status.reason or ""
            task.updated_at = time.time()
            if is_terminal(status.state):
                self._release_task(task, agent)
                self.completed_tasks.append(task)
                self.request_allocation()
        self.hook.mezzo_task_status(framework_id=fid, status=status)
        if record is None:
            # Nobody will acknowledge for a framework that is gone: do it for it so the
            # agent's stream does not retry forever.
            if status.uuid:
                conn.remote(AGENT).status_update_acknowledged(fid, status.task_id, status.uuid)
            return
        if record.conn is not None:
            record.conn.remote(SCHEDULER).status_update(status)

    def acknowledge_status_update(self, conn: Any, framework_id: str, agent_id: str, task_id: str,
                                  uuid_: str) -> None:
        record = self._framework_of(conn, framework_id, "acknowledge_status_update")
        if record is None:
            return
        agent = self.agents.get(agent_id)
        if agent is not None and agent.conn is not None:
            agent.conn.remote(AGENT).status_update_acknowledged(framework_id, task_id, uuid_)

    def reconcile_tasks(self, conn: Any, framework_id: str, statuses: list[TaskStatus]) -> None:
        record = self._framework_of(conn, framework_id, "reconcile_tasks")
        if record is None:
            return
        scheduler = conn.remote(SCHEDULER)
        wanted = [s.task_id for s in statuses or () if s is not None] or list(record.tasks)
        for tid in wanted:
            task = record.tasks.get(tid)
            if task is None:
                done = next((t for t in reversed(self.completed_tasks)
                             if t.framework_id == framework_id and t.id == tid), None)
                if done is None:
                    scheduler.status_update(TaskStatus(
                        task_id=tid, state=TaskState.TASK_UNKNOWN, reason="reconciliation",
                        message="the master knows no such task", source="master",
                        framework_id=framework_id, timestamp=time.time()))
                    continue
                task = done
            scheduler.status_update(TaskStatus(
                task_id=tid, state=task.state, reason="reconciliation", message=task.message,
                source="master", agent_id=task.agent_id, executor_id=task.executor_id,
                framework_id=framework_id, timestamp=time.time()))

    def _release_task(self, task: TaskRecord, agent: AgentRecord | None) -> None:
        """Free a task's resources: it ended, or its framework or agent went away."""
        framework = self.frameworks.get(task.framework_id)
        if framework is not None:
            framework.tasks.pop(task.id, None)
            self.allocator.recovered(task.framework_id, task.resources)
        if agent is not None and agent.tasks.pop((task.framework_id, task.id), None) is not None:
            agent.free = agent.free + task.resources

    def _release_executor(self, agent: AgentRecord, key: tuple[str, str]) -> None:
        executor = agent.executors.pop(key, None)
        if executor is None:
            return
        resources = Resources.of(executor.resources)
        agent.free = agent.free + resources
        if key[0] in self.frameworks:
            self.allocator.recovered(key[0], resources)

    # --------------------------------------------------------------- messages

    def framework_to_executor(self, conn: Any, framework_id: str, agent_id: str, executor_id: str,
                              data: bytes) -> None:
        record = self._framework_of(conn, framework_id, "framework_to_executor")
        agent = self.agents.get(agent_id)
        if record is not None and agent is not None and agent.conn is not None:
            agent.conn.remote(AGENT).framework_to_executor(framework_id, executor_id, data or b"")

    def executor_to_framework(self, conn: Any, agent_id: str, framework_id: str, executor_id: str,
                              data: bytes) -> None:
        agent = self._agent_of(conn, "executor_to_framework")
        record = self.frameworks.get(framework_id)
        if agent is not None and record is not None and record.conn is not None:
            record.conn.remote(SCHEDULER).framework_message(agent.id, executor_id, data or b"")

    def executor_exited(self, conn: Any, agent_id: str, framework_id: str, executor_id: str,
                        exit_status: int, message: str) -> None:
        agent = self._agent_of(conn, "executor_exited")
        if agent is None:
            return
        self._release_executor(agent, (framework_id, executor_id))
        log.info("executor exited", agent=agent.id, framework=framework_id, executor=executor_id,
                 status=exit_status, message=message)
        record = self.frameworks.get(framework_id)
        if record is not None and record.conn is not None:
            record.conn.remote(SCHEDULER).executor_lost(agent.id, executor_id, exit_status or 0)
        self.request_allocation()

    # ----------------------------------------------------------------- agents

    def _agent_of(self, conn: Any, call: str) -> AgentRecord | None:
        tag = conn.tag
        agent = self.agents.get(tag.agent_id) if isinstance(tag, _AgentTag) else None
        if agent is None:
            log.warning("agent call from unregistered peer", call=call, peer=conn.peer)
        return agent

    def register_agent(self, conn: Any, agent: AgentInfo) -> None:
        total = self._check_agent(conn, agent, "register_agent")
        if total is None:
            return
        aid = f"{self.id}-S{next(self._agent_ids)}"
        agent.agent_id = aid
        self._add_agent(conn, agent, total)
        conn.remote(AGENT).registered(aid)

    def reregister_agent(self, conn: Any, agent: AgentInfo, tasks: list[TaskInfo], statuses: list[TaskStatus],
                         executors: list[ExecutorInfo]) -> None:
        total = self._check_agent(conn, agent, "reregister_agent")
        if total is None:
            return
        aid = agent.agent_id
        if not isinstance(aid, str) or not aid:
            conn.remote(AGENT).error("reregister_agent: agent_id is required")
            return
        record = self.agents.get(aid)
        if record is not None:
            if record.removal_handle is not None:
                record.removal_handle.cancel()
                record.removal_handle = None
            if record.conn is not None and record.conn is not conn:
                record.conn.tag = None
                record.conn.close()
            record.conn = conn
            record.connected = True
            record.info = agent
            conn.tag = _AgentTag(aid)
            log.info("agent re-registered", agent=aid, hostname=agent.hostname)
        else:
            # An agent this master has not seen (e.g. after a master restart): take its
            # word for what runs on it, so its tasks keep their resources.
            record = self._add_agent(conn, agent, total)
            latest = {(s.framework_id, s.task_id): s for s in statuses or () if s is not None}
            for ex in executors or ():
                if ex is not None and ex.framework_id in self.frameworks:
                    ex_res = _safe_resources(ex.resources)
                    record.executors[(ex.framework_id, ex.executor_id)] = ex
                    record.free = record.free - ex_res
                    self.allocator.allocated(ex.framework_id, ex_res)
            for t in tasks or ():
                if t is None or t.executor is None and t.command is None:
                    continue
                fid = t.executor.framework_id if t.executor is not None else ""
                st = next((s for (f, tid), s in latest.items() if tid == t.task_id), None)
                fid = fid or (st.framework_id if st is not None else "")
                framework = self.frameworks.get(fid)
                if framework is None or t.task_id in framework.tasks:
                    continue
                res = _safe_resources(t.resources)
                tr = TaskRecord(framework_id=fid, agent_id=aid, info=t, resources=res,
                                state=st.state if st is not None else TaskState.TASK_RUNNING)
                framework.tasks[t.task_id] = tr
                record.tasks[(fid, t.task_id)] = tr
                record.free = record.free - res
                self.allocator.allocated(fid, res)
        self.hook.mezzo_agent_added(agent=agent)
        conn.remote(AGENT).reregistered(aid)
        self.request_allocation()

    def _check_agent(self, conn: Any, agent: AgentInfo, call: str) -> Resources | None:
        remote = conn.remote(AGENT)
        if isinstance(conn.tag, _FrameworkTag):
            remote.error(f"{call}: this connection belongs to a framework")
            return None
        if not isinstance(agent, AgentInfo) or not isinstance(agent.hostname, str) or not agent.hostname:
            remote.error(f"{call}: AgentInfo.hostname is required")
            return None
        if not isinstance(agent.port, int) or not 0 < agent.port < 65536:
            remote.error(f"{call}: AgentInfo.port {agent.port!r} is not a valid port")
            return None
        try:
            total = Resources.of(agent.resources)
        except InvalidResources as exc:
            remote.error(f"{call}: resources: {exc}")
            return None
        if not total:
            remote.error(f"{call}: the agent offers no resources")
            return None
        agent.resources = total
        agent.attributes = {str(k): str(v) for k, v in (agent.attributes or {}).items()}
        return total

    def _add_agent(self, conn: Any, info: AgentInfo, total: Resources) -> AgentRecord:
        record = AgentRecord(id=info.agent_id, info=info, conn=conn, total=total, free=total)
        self.agents[record.id] = record
        conn.tag = _AgentTag(record.id)
        self.allocator.add_agent(record.id, total)
        log.info("agent registered", agent=record.id, hostname=info.hostname, resources=str(total))
        self.hook.mezzo_agent_added(agent=info)
        self.request_allocation()
        return record

    def _remove_agent(self, agent: AgentRecord, reason: str) -> None:
        self._rescind_offers(list(agent.offers.values()), notify=True)
        for task in list(agent.tasks.values()):
            self._release_task(task, agent)
            task.state = TaskState.TASK_LOST
            task.message = f"agent {agent.id} lost: {reason}"
            task.reason = "agent_removed"
            self.completed_tasks.append(task)
            record = self.frameworks.get(task.framework_id)
            status = TaskStatus(task_id=task.id, state=TaskState.TASK_LOST, reason="agent_removed",
                                message=task.message, source="master", agent_id=agent.id,
                                executor_id=task.executor_id, framework_id=task.framework_id,
                                timestamp=time.time())
            self.hook.mezzo_task_status(framework_id=task.framework_id, status=status)
            if record is not None and record.conn is not None:
                record.conn.remote(SCHEDULER).status_update(status)
        for key in list(agent.executors):
            self._release_executor(agent, key)
        self.refusals.clear_agent(agent.id)
        del self.agents[agent.id]
        self.allocator.remove_agent(agent.id, agent.total)
        for record in self.frameworks.values():
            if record.conn is not None:
                record.conn.remote(SCHEDULER).agent_lost(agent.id)
        log.warning("agent removed", agent=agent.id, reason=reason)
        self.hook.mezzo_agent_removed(agent_id=agent.id, reason=reason)

    # ------------------------------------------------------------ connections

    def connection_lost(self, conn: Any) -> None:
        tag = conn.tag
        if isinstance(tag, _FrameworkTag):
            record = self.frameworks.get(tag.framework_id)
            if record is not None and record.conn is conn:
                self._framework_disconnected(record)
        elif isinstance(tag, _AgentTag):
            agent = self.agents.get(tag.agent_id)
            if agent is not None and agent.conn is conn:
                self._agent_disconnected(agent)

    def _framework_disconnected(self, record: FrameworkRecord) -> None:
        record.conn = None
        self.allocator.deactivate(record.id)
        self._rescind_offers(list(record.offers.values()), notify=False)
        timeout = record.info.failover_timeout or 0.0
        log.info("framework disconnected", framework=record.id, failover_timeout=timeout)
        if timeout <= 0:
            self._remove_framework(record, "scheduler disconnected (failover_timeout 0)")
        elif self._loop is not None:
            record.failover_handle = self._loop.call_later(
                timeout, self._failover_expired, record.id)

    def _failover_expired(self, framework_id: str) -> None:
        record = self.frameworks.get(framework_id)
        if record is not None and record.conn is None:
            self._remove_framework(record, "scheduler did not fail over within failover_timeout")

    def _agent_disconnected(self, agent: AgentRecord) -> None:
        agent.conn = None
        agent.connected = False
        self._rescind_offers(list(agent.offers.values()), notify=True)
        timeout = self.config.agent_reregister_timeout
        log.warning("agent disconnected", agent=agent.id, reregister_timeout=timeout)
        if self._loop is not None:
            agent.removal_handle = self._loop.call_later(timeout, self._agent_timeout, agent.id)

    def _agent_timeout(self, agent_id: str) -> None:
        agent = self.agents.get(agent_id)
        if agent is not None and not agent.connected:
            self._remove_agent(agent, f"did not re-register within {self.config.agent_reregister_timeout:g} s")

    # ------------------------------------------------------------------ state

    def request_state(self, conn: Any, request_id: int) -> None:
        conn.remote(TOOL).state(request_id if isinstance(request_id, int) else 0, render_state(self))


def tune_gc() -> None:
    """Make garbage collection cheap for a master holding a large, long-lived heap.

    The master's state (thousands of agents, offers, refuse filters) is mostly
    acyclic and freed by reference counting; the cyclic collector only has to find
    the rare cycles (connections and their transports). With the default
    thresholds, full collections walk the whole heap every few allocation cycles
    and showed up as 1 s stalls at 10,000 agents (bench/allocation_cycle.py).
    Freezing what exists at start-up and collecting the young generation less often
    keeps cycles collectable while taking the stalls off the hot path.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


def _safe_resources(wire: Any) -> Resources:
    try:
        return Resources.of(wire)
    except InvalidResources:
        return Resources()
