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
import socket
import time
import uuid
from collections import OrderedDict, deque
from typing import Any

import structlog

from ..builtin import AgentListFilter, MinFreeFilter
from ..config import MasterConfig, parse_min_offer
from ..errors import MezzoError
from ..heap import tune_gc
from ..plugins import Plugins, check_settings_tables
from ..resources import Resources
from ..rpc import TRAFFIC, parse_address, serve
from ..services import MASTER, SCHEDULER, TOOL
from ..wire.ttypes import Filters, Offer
from ..zk import LeaderDetector, LeaderElection, parse_zk_url
from .agent_calls import AgentCalls
from .allocation import AllocationTimer, Cycle
from .framework_calls import FrameworkCalls
from .health import AgentHealth
from .leadership import LeaderGate
from .long_tasks import ShortTaskLimit, offer_room
from .offers import OfferBook
from .records import AgentRecord, AgentTag, FrameworkRecord, FrameworkTag, OfferRecord, TaskRecord
from .recovery import Recovery
from .refusals import RefuseFilters
from .registry import MemoryRegistry, ZkRegistry
from .revocation_monitor import RevocationMonitor
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
        check_settings_tables(plugins, "allocator", config.allocator.settings, "master.allocator")
        check_settings_tables(plugins, "offer_filter", config.offer_filter_settings, "master.offer_filter")
        check_settings_tables(plugins, "revocation_policy", config.revocation_policy.settings,
                              "master.revocation_policy")
        self.revocation_policy = plugins.registry.create(
            "revocation_policy", config.revocation_policy.name, config.revocation_policy.selected_settings(),
            key=f"master.revocation_policy.{config.revocation_policy.name}",
            selected_by="master.revocation_policy.name",
        )
        """The selected revocation policy (paper §3.3), asked by :attr:`revocation`."""
        self.zk_url = parse_zk_url(config.zk, "master.zk") if config.zk else None
        self.min_offer = parse_min_offer(config.min_offer)
        """``master.min_offer`` (None = off); each agent holds it capped by its total."""
        self.leading = False
        """True while this master leads: from start() for a lone master, while elected with zk."""
        self.leader_address = ""
        """The leading master's address as far as we know ("" while unknown)."""
        self.registry: MemoryRegistry | ZkRegistry = MemoryRegistry()
        self.gate = LeaderGate(self)
        self.cycles = 0
        self.cycle_seconds = 0.0
        self.offers_made = 0
        self.terms = 0
        """How many times this process became the leader."""
        self._server: asyncio.base_events.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: AllocationTimer | None = None
        self._offer_timer: asyncio.TimerHandle | None = None
        self._health: AgentHealth | None = None
        self._election: LeaderElection | None = None
        self._detector: LeaderDetector | None = None
        self.address = config.listen
        self.started_at = time.time()
        self.snapshots = StateSnapshots(lambda: render_state(self), use_fork=config.render_state_in_child)
        self._fresh_state()

    def _fresh_state(self) -> None:
        """Forget everything: a new leadership term rebuilds it from re-registrations.

        The allocator and offer filters are made anew too, since they keep their own
        view of frameworks and agents. A new master id keeps the ids of agents,
        frameworks and offers made in this term apart from those of earlier terms.
        """
        config, plugins = self.config, self.plugins
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
        self.offerable: dict[str, AgentRecord] = {}
        """Agents connected and with something free, kept by the records themselves."""
        self.offer_book = OfferBook(self.id, config.offer_timeout)
        self.refusals = RefuseFilters()
        self.completed_tasks: deque[TaskRecord] = deque(maxlen=1000)
        self.removed_frameworks: OrderedDict[str, str] = OrderedDict()
        """Ids of frameworks removed by this master, with why (bounded)."""
        self.last_cycle: dict[str, Any] = {}
        self.recovery = Recovery()
        """Agents awaited after a failover; offers are held while it lasts."""
        self.agent_conns: set[Any] = set()
        """Connections carrying agents, for the health check."""
        self.orphans: dict[str, list[tuple[AgentRecord, Any]]] = {}
        """Tasks and executor keys agents reported for frameworks not known yet, by
        framework id, so that a framework coming back need not scan every agent."""
        self._framework_ids = itertools.count(0)
        self._agent_ids = itertools.count(0)
        self.revocation: RevocationMonitor | None = None
        """Watches for starved frameworks while leading, if ``revocation_delay`` > 0."""
        self.short_tasks: ShortTaskLimit | None = None
        """Revokes short tasks past ``short_task_max`` while leading, if it is > 0."""

    # ----------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Bind ``config.listen`` (port 0 picks a free port; see ``.address``), then lead
        (a lone master) or contend for leadership through ``config.zk``.

        Raises :class:`~mezzo.errors.MezzoError` naming ``master.zk`` when ZooKeeper
        cannot be reached.
        """
        self._loop = loop = asyncio.get_running_loop()
        self._timer = AllocationTimer(loop, self.config.allocation_interval, self._allocate)
        host, port = parse_address(self.config.listen, 5050)
        handler = self.gate if self.zk_url is not None else self
        self._server = await serve(host, port, MASTER, handler, max_frame=self.config.max_frame_bytes)
        bound = self._server.sockets[0].getsockname()
        self.address = f"{bound[0]}:{bound[1]}"
        if bound[0] in ("0.0.0.0", "::", ""):
            # What others must dial, published in ZooKeeper and sent to schedulers.
            self.address = f"{socket.getfqdn()}:{bound[1]}"
        tune_gc()
        log.info("master started", address=self.address, allocator=self.config.allocator.name,
                 zk=str(self.zk_url) if self.zk_url else None)
        if self.zk_url is None:
            self._become_leader()
            return
        try:
            await loop.run_in_executor(None, self._contend)
        except TimeoutError as exc:
            await self.stop()
            raise MezzoError(f"master.zk: {exc}") from None

    def _contend(self) -> None:
        """Join the election (blocking, off the loop): standby until elected."""
        url, loop = self.zk_url, self._loop
        # Unreachable at start-up for a whole session timeout: give up and say so.
        connect_timeout = max(self.config.zk_session_timeout, 1.0)
        self._detector = LeaderDetector(url, on_change=lambda leader: loop.call_soon_threadsafe(
            self._leader_is, leader or ""), session_timeout=self.config.zk_session_timeout)
        self._detector.start(connect_timeout)
        self._election = LeaderElection(url, self.address, on_elected=self._elected,
                                        on_demoted=self._demoted,
                                        session_timeout=self.config.zk_session_timeout)
        self.registry = ZkRegistry(self._election.client, url.path, loop.call_soon_threadsafe)
        self._election.start(connect_timeout)

    def _elected(self) -> None:
        # kazoo's thread: read the admitted agents before taking over, so the loop
        # never blocks on ZooKeeper.
        admitted = self.registry.load()
        self._loop.call_soon_threadsafe(self._become_leader, admitted)

    def _demoted(self, reason: str) -> None:
        self._loop.call_soon_threadsafe(self._step_down, reason)

    def _leader_is(self, address: str) -> None:
        """What ZooKeeper says leads now (from the detector's own session)."""
        if self.leading:
            return  # our own election speaks for us; we step down through it
        self.leader_address = address
        if address == self.address:
            self.gate.hold()  # elected, taking over: keep the calls that arrive meanwhile
        else:
            self.gate.close()

    def _become_leader(self, admitted: set[str] | None = None) -> None:
        if self.leading:
            return
        # The state is fresh: from __init__, or from _step_down, and the gate kept
        # everyone out in between.
        self.terms += 1
        self.leading = True
        self.leader_address = self.address
        self.gate.open()
        self._health = AgentHealth(self, self._loop)
        if self.config.revocation_delay > 0:
            self.revocation = RevocationMonitor(self, self.revocation_policy, delay=self.config.revocation_delay,
                                                grace=self.config.revocation_grace_period)
            self.revocation.start(self._loop)
        if self.config.short_task_max > 0:
            self.short_tasks = ShortTaskLimit(self, self.config.short_task_max, self.config.revocation_grace_period)
            self.short_tasks.start(self._loop)
        self.recovery.begin(self, admitted or set())
        log.info("leading", address=self.address, master_id=self.id,
                 awaiting_agents=len(self.recovery.awaiting))
        self.observe.mezzo_leader_elected(master=self.address)

    def _step_down(self, reason: str) -> None:
        """Stop acting as leader at once: refuse calls, drop every framework and agent."""
        if not self.leading:
            return
        self.leading = False
        self.gate.close()
        if self.leader_address == self.address:
            self.leader_address = ""
        self._cancel_timers()
        for record in [*self.frameworks.values(), *self.agents.values()]:
            conn = record.conn
            if conn is not None:
                conn.tag = None  # nothing of this term's state is to be updated any more
                conn.close()
        self._fresh_state()
        log.warning("stepped down: no longer the leader", address=self.address, reason=reason)

    def _cancel_timers(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._offer_timer is not None:
            self._offer_timer.cancel()
            self._offer_timer = None
        if self._health is not None:
            self._health.stop()
            self._health = None
        if self.revocation is not None:
            self.revocation.stop()
        if self.short_tasks is not None:
            self.short_tasks.stop()
        self.recovery.cancel()
        for record in [*self.frameworks.values(), *self.agents.values()]:
            for h in (getattr(record, "failover_handle", None), getattr(record, "removal_handle", None)):
                if h is not None:
                    h.cancel()

    async def stop(self) -> None:
        """Stop serving and close every connection (a leader steps down first)."""
        if self._election is not None:
            await self._loop.run_in_executor(None, self._election.stop)
            self._election = None
        if self._detector is not None:
            await self._loop.run_in_executor(None, self._detector.stop)
            self._detector = None
        self._cancel_timers()
        self.snapshots.close()
        for record in [*self.frameworks.values(), *self.agents.values()]:
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

    def request_allocation(self, *, prompt: bool = False) -> None:
        """Ask for an allocation cycle; ``prompt`` for resources a task's end freed
        (see :class:`~mezzo.master.allocation.AllocationTimer`)."""
        if self._timer is not None:
            self._timer.request(prompt=prompt)

    # ---------------------------------------------------------------- offers

    def _allocate(self) -> None:
        """One allocation cycle: expire, let the allocator offer, send the offers."""
        if not self.leading or self.recovery.holding:
            return  # offers resume when recovery ends (it requests a cycle)
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
            "agents_below_min_offer": cycle.agents_below_min_offer,
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
            # Tested here, not in offer_room: this runs for every offer of every cycle.
            long_task_room=None if agent.long_limit is None else offer_room(agent, offer.resources),
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
            self.agent_conns.discard(conn)
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
        """Counters for monitoring and the benchmarks; O(frameworks + agent connections),
        never O(agents).

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
            "leading": self.leading,
            "recovering": self.recovery.holding,
            "agents": len(self.agents),
            "agents_connected": sum(len(c.tag.agent_ids) for c in self.agent_conns if isinstance(c.tag, AgentTag)),
            "frameworks": len(self.frameworks),
            "frameworks_connected": sum(1 for f in self.frameworks.values() if f.conn is not None),
            "tasks_running": sum(len(f.tasks) for f in self.frameworks.values()),
            "tasks_revoked": (self.revocation.tasks_revoked if self.revocation is not None else 0)
            + (self.short_tasks.tasks_revoked if self.short_tasks is not None else 0),
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
