"""The master: soft state, offers, launch validation, status forwarding (paper §3).

``Master`` is the handler of the ``Master`` service: each incoming call
``foo(a, b)`` on a connection arrives as ``master.foo(conn, a, b)``. Everything runs
on one event loop, so handlers mutate state without locks; they must stay cheap
and must never raise on what a peer sends (the rpc layer would log it, but a
half-applied handler leaves state inconsistent, so handlers validate first).

The master never trusts an id a peer claims: a connection is bound to the
framework or agent that registered on it (``conn.tag``), and calls naming another
framework's id are refused.

The calls are grouped by what they are about: :mod:`.framework_calls`,
:mod:`.agent_calls` and :mod:`.task_calls` hold them as mixins of ``Master``; this
module holds the state, the life cycle and the allocation cycle with its offers.

Usage::

    master = Master(config.master, plugins)
    await master.start()          # binds config.listen
    ...
    await master.stop()
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import resource
import time
import uuid
from collections import OrderedDict, deque
from typing import Any

import structlog

from ..builtin import AgentListFilter, MinFreeFilter
from ..config import MasterConfig
from ..heap import tune_gc
from ..plugins import Plugins, check_settings_tables
from ..resources import Resources
from ..rpc import TRAFFIC, parse_address, serve
from ..services import MASTER, SCHEDULER, TOOL
from ..wire.ttypes import Filters, Offer
from .agent_calls import AgentCalls
from .allocation import AllocationTimer, Cycle
from .framework_calls import FrameworkCalls
from .offers import OfferBook
from .records import AgentRecord, AgentTag, FrameworkRecord, FrameworkTag, OfferRecord, TaskRecord
from .refusals import RefuseFilters
from .state_snapshot import StateSnapshots
from .state_view import render_state
from .task_calls import TaskCalls

log = structlog.get_logger("mezzo.master", component="master")


class Master(FrameworkCalls, AgentCalls, TaskCalls):
    """The mezzo master. See the module docstring."""

    def __init__(self, config: MasterConfig, plugins: Plugins) -> None:
        self.config = config
        self.plugins = plugins
        self.observe = plugins.observe
        self.id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
        check_settings_tables(plugins, "allocator", config.allocator.settings, "master.allocator")
        check_settings_tables(plugins, "offer_filter", config.offer_filter_settings, "master.offer_filter")
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
        self.offerable: dict[str, AgentRecord] = {}
        """Agents connected and with something free, kept by the records themselves."""
        self.offer_book = OfferBook(self.id, config.offer_timeout)
        self.refusals = RefuseFilters()
        self.completed_tasks: deque[TaskRecord] = deque(maxlen=1000)
        self.removed_frameworks: OrderedDict[str, str] = OrderedDict()
        """Ids of frameworks removed by this master, with why (bounded)."""
        self.last_cycle: dict[str, Any] = {}
        self.cycles = 0
        self.cycle_seconds = 0.0
        self.offers_made = 0
        self._framework_ids = itertools.count(0)
        self._agent_ids = itertools.count(0)
        self._server: asyncio.base_events.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: AllocationTimer | None = None
        self._offer_timer: asyncio.TimerHandle | None = None
        self.address = config.listen
        self.started_at = time.time()
        self.snapshots = StateSnapshots(lambda: render_state(self), use_fork=config.render_state_in_child)

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
        self.observe.mezzo_leader_elected(master=self.address)

    async def stop(self) -> None:
        """Stop serving and close every connection."""
        if self._timer is not None:
            self._timer.cancel()
        if self._offer_timer is not None:
            self._offer_timer.cancel()
        self.snapshots.close()
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
            self.observe.mezzo_offers_sent(framework_id=fid, offers=wire)
        self._arm_timers()
        elapsed = time.perf_counter() - started
        self.cycles += 1
        self.cycle_seconds += elapsed
        self.offers_made += sent
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
            self._free_up(agent, unused)
            if framework is not None and refuse_seconds > 0:
                self.refusals.add(framework.id, agent.id, unused, self.now + refuse_seconds, agent.free)

    def _free_up(self, agent: AgentRecord, resources: Resources) -> None:
        """Put ``resources`` back in the agent's free pool; refusals that no longer
        cover the pool lapse (the invariant of :mod:`.refusals`)."""
        if resources:
            agent.free = agent.free + resources
            self.refusals.free_grew(agent.id, agent.free)

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

    # ------------------------------------------------------------ connections

    def connection_lost(self, conn: Any) -> None:
        tag = conn.tag
        if isinstance(tag, FrameworkTag):
            record = self.frameworks.get(tag.framework_id)
            if record is not None and record.conn is conn:
                self._framework_disconnected(record)
        elif isinstance(tag, AgentTag):
            for agent_id in list(tag.agent_ids):
                agent = self.agents.get(agent_id)
                if agent is not None and agent.conn is conn:
                    self._agent_disconnected(agent)

    # ------------------------------------------------------------------ state

    def request_state(self, conn: Any, request_id: int) -> None:
        # Rendered in a forked child, so that polling never stalls offers and
        # updates (see state_snapshot.py).
        rid = request_id if isinstance(request_id, int) else 0
        self.snapshots.request(lambda text: conn.remote(TOOL).state(rid, text))

    def request_metrics(self, conn: Any, request_id: int) -> None:
        conn.remote(TOOL).metrics(request_id if isinstance(request_id, int) else 0, json.dumps(self.metrics()))

    def metrics(self) -> dict[str, Any]:
        """Counters for monitoring and the benchmarks; O(frameworks), never O(agents).

        Message counts are this process's (``mezzo.rpc.TRAFFIC``), which for a
        master process is the master's.
        """
        return {
            "uptime_seconds": round(time.time() - self.started_at, 3),
            "messages_received": TRAFFIC.received,
            "messages_sent": TRAFFIC.sent,
            "allocation_cycles": self.cycles,
            "allocation_seconds": round(self.cycle_seconds, 6),
            "offers_made": self.offers_made,
            "offers_outstanding": len(self.offer_book),
            "agents": len(self.agents),
            "frameworks": len(self.frameworks),
            "tasks_running": sum(len(f.tasks) for f in self.frameworks.values()),
            "state_snapshots": self.snapshots.forks,
            "cpu_seconds": round(time.process_time(), 3),
            "rss_bytes": _rss_bytes(),
        }


def _rss_bytes() -> int:
    """This process's resident memory now (Linux), else its peak."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
