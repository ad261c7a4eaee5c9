"""The master process: binds its port, leads (alone or through ZooKeeper), wires each term.

This is the composition root of the master (paper §3). What the master *knows* is
the cluster state of the current leadership term (:mod:`.state`); what it *does*
with calls is the service (:mod:`.service`) and the lifecycles behind it. This
module owns what outlives a term: the listening socket, the election, the
registry of admitted agents, the plugins, the state snapshots, the counters. Each
time it becomes the leader it builds a fresh :class:`~.term.Term` (:meth:`Master.new_term`),
and when it steps down it closes that term and drops every connection.

Usage::

    master = Master(config.master, plugins)
    await master.start()          # binds config.listen, then leads or contends
    ...
    await master.stop()

Without sockets (tests, benchmarks)::

    master = Master(config, plugins, clock=ManualClock())
    master.lead()
    master.service.register_framework(conn, FrameworkInfo(name="f"))
    master.term.allocation.run()
"""

from __future__ import annotations

import asyncio
import os
import resource
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from ..acls import View
from ..builtin import AgentListFilter, MinFreeFilter
from ..config import MasterConfig, TlsConfig, parse_min_offer
from ..errors import ConfigError, MezzoError
from ..heap import GC_PAUSES, tune_gc
from ..http.link import http_handoff
from ..http.master_api import master_app
from ..http.scheduler_api import SCHEDULER_API
from ..http.server import HttpServer
from ..plugin_guard import PluginGuard
from ..plugins import Plugins, check_settings_tables
from ..rpc import TRAFFIC, ConnectionLimiter, Listener, parse_address, serve, server_tls
from ..rpc.address import WILDCARDS, dialable_address, join_address
from ..rpc.codec import Utf8Text
from ..rpc.listener import listen_error
from ..services import MASTER
from ..zk import LeaderDetector, LeaderElection, parse_zk_url
from ..zk.client import UnprotectedPath
from . import mesos_view
from .agent_lifecycle import AgentLifecycle
from .allocation import Allocation, CycleTotals
from .call_rates import CallRates
from .events import EventStream
from .file_requests import FileRequests
from .framework_lifecycle import FrameworkLifecycle
from .guarded_allocator import GuardedAllocator
from .health import AgentHealth, FrameworkHealth
from .leadership import LeaderGate
from .long_tasks import ShortTaskLimit
from .loop_watch import LoopWatch
from .operator_actions import OperatorActions
from .ports import Clock, ConnectionOutbox, LoopClock, Outbox
from .recovery import Recovery
from .registry import MemoryRegistry, ZkRegistry
from .revocation_monitor import RevocationMonitor
from .service import MasterService
from .state import ClusterState
from .state_snapshot import StateSnapshots
from .state_view import render_state
from .task_lifecycle import TaskLifecycle
from .term import Term

log = structlog.get_logger("mezzo.master", component="master")

DOCUMENT_RENDERERS = 64
"""Kinds of HTTP document (document, viewer, parameters) with a renderer kept at once."""
DOCUMENTS_RENDERING_MAX = 4
"""Different HTTP documents rendered at once (each a forked child); more wait their turn
at the client (503)."""


class Master:
    """The mezzo master. See the module docstring."""

    def __init__(
        self,
        config: MasterConfig,
        plugins: Plugins,
        *,
        clock: Clock | None = None,
        outbox: Outbox | None = None,
        tls: TlsConfig | None = None,
    ) -> None:
        self.config = config
        self.tls = tls if tls is not None and tls.enabled else None
        """``[tls]`` when on: the master listens with TLS, every peer shows a certificate
        (unless ``tls.peer_certificates`` is "optional")."""
        self._server_tls = (
            server_tls(self.tls) if self.tls is not None else None
        )  # ConfigError now, not at start
        if config.advertise:
            try:
                dialable_address(config.advertise, 5050)  # ConfigError now, not at start
            except ValueError as exc:
                raise ConfigError("master.advertise", str(exc)) from None
        self.plugins = plugins
        self.clock: Clock = clock if clock is not None else LoopClock()
        self.outbox: Outbox = outbox if outbox is not None else ConnectionOutbox()
        self.guard: PluginGuard = plugins.guard
        """The one boundary of every call into a component (:mod:`mezzo.plugin_guard`)."""
        check_settings_tables(plugins, "allocator", config.allocator.settings, "master.allocator")
        check_settings_tables(plugins, "offer_filter", config.offer_filter_settings, "master.offer_filter")
        check_settings_tables(
            plugins, "revocation_policy", config.revocation_policy.settings, "master.revocation_policy"
        )
        self.revocation_policy = plugins.registry.create(
            "revocation_policy",
            config.revocation_policy.name,
            config.revocation_policy.selected_settings(),
            key=f"master.revocation_policy.{config.revocation_policy.name}",
            selected_by="master.revocation_policy.name",
        )
        """The selected revocation policy (paper §3.3), asked by each term's revocation monitor."""
        self.zk_url = parse_zk_url(config.zk, "master.zk") if config.zk else None
        self.min_offer = parse_min_offer(config.min_offer)
        """``master.min_offer`` (None = off); each agent holds it capped by its total."""
        self.leader_address = ""
        """The leading master's address as far as we know ("" while unknown)."""
        self.registry: MemoryRegistry | ZkRegistry = MemoryRegistry()
        self.gate = LeaderGate(lambda: self.leader_address)
        self.totals = CycleTotals()
        """Allocation cycles over every term."""
        self.terms = 0
        """How many times this process became the leader."""
        self.address = config.listen
        self.started_at = time.time()
        self.snapshots = StateSnapshots(
            lambda: render_state(self),
            use_fork=config.render_state_in_child,
            saturated=lambda: self.loop_watch.saturated(),
            inline=self._small_state,
        )
        self.acls = config.acls.for_tls(self.tls is not None)
        """Who may do what (``[master.acls]``): with TLS on and no ``permissive``, deny by default."""
        self._view_snapshots: dict[View, StateSnapshots] = {}
        """Snapshots of the part of the state some viewers see (:meth:`mezzo.acls.Acls.view_of`),
        one per distinct view: as many as the ACLs can make, never more than their rules."""
        self._server: Listener | None = None
        self._http: HttpServer | None = None
        """The HTTP API sharing the port (``[master.http]``)."""
        self._documents: dict[tuple, StateSnapshots] = {}
        """Renderers of the HTTP API's documents by (document, view, parameters)."""
        self.events = EventStream()
        """Subscribers to the operator event stream (:mod:`.events`), across terms: a
        term's state publishes to it while it leads."""
        self._election: LeaderElection | None = None
        self._detector: LeaderDetector | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.loop_watch = LoopWatch(
            self.clock,
            history=max(120.0, 4 * config.agent_ping_timeout, 1.5 * config.framework_idle_timeout),
        )
        """The master's own stalls (:mod:`.loop_watch`), which health checks, call
        rates and connection timeouts never charge to agents and frameworks."""
        self.connection_limiter = ConnectionLimiter(
            config.connections, max_frame=config.max_frame_bytes, logger=log, stalls=self.loop_watch
        )
        """Bounds on the peers of the master's port (``[master.connections]``, :mod:`mezzo.rpc.limits`)."""
        self.file_requests = FileRequests(timeout=config.http.file_timeout)
        """The ``/files/*`` proxy's requests to agents in flight (:mod:`.file_requests`)."""
        self.term = self.new_term()
        self.gate.serve(self.term.service)

    # -- the current term ------------------------------------------------------------

    @property
    def state(self) -> ClusterState:
        """The current term's cluster state."""
        return self.term.state

    @property
    def service(self) -> MasterService:
        """The current term's RPC handler (the gate routes connections to it)."""
        return self.term.service

    @property
    def leading(self) -> bool:
        """True while this master leads: from start() for a lone master, while elected with zk."""
        return self.term.leading

    @property
    def id(self) -> str:
        """The current term's master id."""
        return self.term.state.id

    def new_term(self) -> Term:
        """A fresh term: new master id, new allocator and offer filters (they keep their
        own view of frameworks and agents), empty state, everything wired to it."""
        config, plugins = self.config, self.plugins
        master_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
        name = config.allocator.name
        allocator = plugins.registry.create(
            "allocator",
            name,
            config.allocator.selected_settings(),
            key=f"master.allocator.{name}",
            selected_by="master.allocator.name",
        )
        offer_filters = [
            plugins.registry.create(
                "offer_filter",
                n,
                config.offer_filter_settings.get(n, {}),
                key=f"master.offer_filter.{n}",
                selected_by="master.offer_filters",
            )
            for n in config.offer_filters
        ]
        state = ClusterState(
            master_id=master_id,
            id_key=uuid.uuid4().hex.encode(),  # uuid4: random, and replayable where tests patch it
            config=config,
            allocator=GuardedAllocator(allocator, self.guard),
            offer_filters=offer_filters,
            builtin_filters=[AgentListFilter({}, key="builtin"), MinFreeFilter({}, key="builtin")],
            registry=self.registry,
            observe=plugins.observe,
            guard=self.guard,
            clock=self.clock,
            outbox=self.outbox,
            min_offer=self.min_offer,
            events=self.events,
        )
        recovery = Recovery(state)
        frameworks = FrameworkLifecycle(state)
        agents = AgentLifecycle(state, frameworks, recovery)
        tasks = TaskLifecycle(state, recovery, self.acls)
        allocation = Allocation(state, recovery, interval=config.allocation_interval, totals=self.totals)
        state.request_allocation = allocation.request
        service = MasterService(
            state,
            frameworks,
            agents,
            tasks,
            address=lambda: self.address,
            render_state=self.snapshots.request_encoded,
            render_view=self._request_view,
            acls=self.acls,
            metrics=self.metrics,
            saturated=self.loop_watch.saturated,
            file_requests=self.file_requests,
            call_rates=CallRates(
                self.clock,
                rate=config.framework_call_rate,
                burst=config.framework_call_burst,
                watch=self.loop_watch,
            ),
        )
        health = AgentHealth(
            service,
            self.clock,
            self.loop_watch,
            interval=config.agent_ping_interval,
            timeout=config.agent_ping_timeout,
        )
        term = Term(
            state=state,
            frameworks=frameworks,
            agents=agents,
            tasks=tasks,
            recovery=recovery,
            allocation=allocation,
            service=service,
            health=health,
            operator=OperatorActions(state, self.acls),
            framework_health=FrameworkHealth(
                service,
                self.clock,
                self.loop_watch,
                interval=config.framework_ping_interval,
                timeout=config.framework_idle_timeout,
            ),
        )
        if config.revocation_delay > 0:
            term.revocation = RevocationMonitor(
                state,
                recovery,
                self.revocation_policy,
                delay=config.revocation_delay,
                grace=config.revocation_grace_period,
            )
            state.watchers.append(term.revocation)
        if config.short_task_max > 0:
            term.short_tasks = ShortTaskLimit(state, config.short_task_max, config.revocation_grace_period)
            state.watchers.append(term.short_tasks)
        return term

    # -- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        """Bind ``config.listen`` (port 0 picks a free port; see ``.address``), then lead
        (a lone master) or contend for leadership through ``config.zk``.

        Raises :class:`~mezzo.errors.MezzoError` naming ``master.zk`` when ZooKeeper
        cannot be reached.
        """
        self._loop = loop = asyncio.get_running_loop()
        host, port = parse_address(self.config.listen, 5050)
        handoff = None
        if self.config.http.enabled:
            app = master_app(self)
            self._http = HttpServer(app)
            await self._http.start()
            # v1 scheduler calls of the common shape skip aiohttp (.http.call_lane).
            lane = app[SCHEDULER_API].lane_call
            handoff = http_handoff(self._http.handler, self.connection_limiter, lane)
        try:
            self._server = await serve(
                host,
                port,
                MASTER,
                self.gate,
                max_frame=self.config.max_frame_bytes,
                limiter=self.connection_limiter,
                tls=self._server_tls,
                handoff=handoff,
            )
        except OSError as exc:
            if self._http is not None:
                await self._http.stop()
            raise listen_error("master.listen", host, port, exc) from None
        bound = self._server.sockets[0].getsockname()
        # What others must dial, published in ZooKeeper and sent to schedulers.
        if self.config.advertise:
            self.address = dialable_address(self.config.advertise, bound[1])
        elif bound[0] in WILDCARDS:
            self.address = join_address(socket.getfqdn(), bound[1])
        else:
            self.address = join_address(bound[0], bound[1])
        tune_gc()
        log.info(
            "master started",
            address=self.address,
            allocator=self.config.allocator.name,
            zk=str(self.zk_url) if self.zk_url else None,
            tls=self.tls is not None,
            event_loop=type(loop).__module__.partition(".")[0],  # "uvloop" or "asyncio"
            acls="rules" if self.acls.configured else ("allow all" if self.acls.permissive else "deny all"),
        )
        if not self.acls.configured and not self.acls.permissive:
            why = (
                "TLS is on and [master.acls] has no rules"
                if self.tls is not None
                else "master.acls.permissive is false and [master.acls] has no rules"
            )
            log.warning(
                f"{why}: every framework, agent and viewer will be refused (the default is deny); "
                "see docs/security.md"
            )
        if self.zk_url is None:
            self.lead()  # no await since binding: no call can have arrived before this
            return
        try:
            await loop.run_in_executor(None, self._contend)
        except (TimeoutError, UnprotectedPath) as exc:
            await self.stop()
            raise MezzoError(f"master.zk: {exc}") from None

    def _contend(self) -> None:
        """Join the election (blocking, off the loop): standby until elected."""
        url, loop = self.zk_url, self._loop
        assert url is not None and loop is not None
        # Unreachable at start-up for a whole session timeout: give up and say so.
        connect_timeout = max(self.config.zk_session_timeout, 1.0)

        def on_change(leader: str | None) -> None:  # kazoo's thread
            loop.call_soon_threadsafe(self.leader_is, leader or "")

        self._detector = LeaderDetector(
            url, on_change=on_change, session_timeout=self.config.zk_session_timeout
        )
        self._detector.start(connect_timeout)
        self._election = LeaderElection(
            url,
            self.address,
            on_elected=self._elected,
            on_demoted=self._demoted,
            session_timeout=self.config.zk_session_timeout,
            master_id=lambda: self.id,
        )
        self.registry = ZkRegistry(self._election.client, url.path, loop.call_soon_threadsafe)
        self._election.start(connect_timeout)

    def _elected(self) -> None:
        # kazoo's thread: read the admitted agents before taking over, so the loop
        # never blocks on ZooKeeper.
        assert self._loop is not None and isinstance(self.registry, ZkRegistry)
        admitted = set(self.registry.load())
        self._loop.call_soon_threadsafe(self.lead, admitted)

    def _demoted(self, reason: str) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self.step_down, reason)

    def leader_is(self, address: str) -> None:
        """ZooKeeper says ``address`` leads now (from the detector's own session)."""
        if self.leading:
            return  # our own election speaks for us; we step down through it
        self.leader_address = address
        if address == self.address:
            self.gate.hold()  # elected, taking over: keep the calls that arrive meanwhile
        else:
            self.gate.close()

    def lead(self, admitted: set[str] | None = None) -> None:
        """Become the leader: the current (fresh) term starts, awaiting the ``admitted``
        agents (the registry's list) before it offers anything. No-op while leading."""
        if self.leading:
            return
        # The term is fresh: from __init__ or from step_down, and the gate kept
        # everyone out in between.
        term = self.term
        if term.closed:
            term = self.term = self.new_term()
        if self.registry is not term.state.registry:
            term.state.registry = self.registry  # elected through ZooKeeper after the term was made
        self.terms += 1
        self.leader_address = self.address
        self.loop_watch.start()
        term.begin(admitted or set())
        self.gate.serve(term.service)
        self.gate.open()
        log.info(
            "leading", address=self.address, master_id=self.id, awaiting_agents=len(term.recovery.awaiting)
        )
        self.plugins.observe.mezzo_leader_elected(master=self.address)

    def step_down(self, reason: str) -> None:
        """Stop acting as leader at once: refuse calls, drop every framework and agent."""
        if not self.leading:
            return
        self.gate.close()
        if self.leader_address == self.address:
            self.leader_address = ""
        old = self.term
        old.close()
        self.events.end_all("this master stopped leading: subscribe at the leader (GET /redirect)")
        for link in old.state.links():
            link.tag = None  # nothing of this term's state is to be updated any more
            link.close()
        self.term = self.new_term()
        self.gate.serve(self.term.service)
        log.warning("stepped down: no longer the leader", address=self.address, reason=reason)

    async def stop(self) -> None:
        """Stop serving and close every connection (a leader steps down first)."""
        loop = asyncio.get_running_loop()
        if self._election is not None:
            await loop.run_in_executor(None, self._election.stop)
            self._election = None
        if self._detector is not None:
            await loop.run_in_executor(None, self._detector.stop)
            self._detector = None
        self.events.end_all("the master is stopping")
        if self._http is not None:
            # First, while the state can still answer the requests in flight (briefly:
            # see HttpServer.stop); the links themselves close with the port below.
            await self._http.stop()
            self._http = None
        self.term.close()
        self.loop_watch.stop()
        self.snapshots.close()
        for snapshots in [*self._view_snapshots.values(), *self._documents.values()]:
            snapshots.close()
        for link in self.term.state.links():
            link.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        log.info("master stopped", address=self.address)

    def _small_state(self, *, ended: bool = True) -> bool:
        """Whether the state is small enough to render on the loop (``master.render_inline_max_items``)."""
        limit = self.config.render_inline_max_items
        return limit > 0 and self.term.state.rendering_items(limit, ended=ended) <= limit

    def _request_view(self, view: View, reply: Callable[[Utf8Text], None]) -> None:
        """Answer ``reply`` with the part of the state ``view`` shows, rendered like the
        whole of it (a forked child per distinct view, shared by its waiters)."""
        snapshots = self._view_snapshots.get(view)
        if snapshots is None:
            snapshots = self._view_snapshots[view] = StateSnapshots(
                lambda: render_state(self, view),
                use_fork=self.config.render_state_in_child,
                saturated=lambda: self.loop_watch.saturated(),
                inline=self._small_state,
            )
        snapshots.request_encoded(reply)

    def request_document(
        self,
        document: str,
        view: View,
        params: tuple[tuple[str, Any], ...],
        reply: Callable[[Utf8Text], None],
    ) -> bool:
        """Answer ``reply`` with one of the HTTP API's Mesos-shaped documents
        (:func:`.mesos_view.render`) as ``view`` shows it, rendered in a forked child
        shared by the waiters of the same document, view and parameters. At most
        :data:`DOCUMENT_RENDERERS` kinds are kept; idle ones make room for new ones.

        False, and nothing done, when :data:`DOCUMENTS_RENDERING_MAX` other documents
        are being rendered: a client asking for many different ones (``/tasks`` with a
        new ``task_id`` each time) cannot make the master fork without end."""
        key = (document, view, params)
        snapshots = self._documents.get(key)
        if snapshots is None or not snapshots.busy:
            rendering = sum(1 for s in self._documents.values() if s.busy)
            if rendering >= DOCUMENTS_RENDERING_MAX:
                return False
        self._documents.pop(key, None)
        if snapshots is None:
            if len(self._documents) >= DOCUMENT_RENDERERS:
                for old, idle in list(self._documents.items()):
                    if not idle.busy:
                        # No child and nothing waiting: dropped as it is (not closed, which
                        # would stop an answer still being handed out a waiter per turn).
                        del self._documents[old]
                        if len(self._documents) < DOCUMENT_RENDERERS:
                            break
            # /overview shows no ended framework's tasks: they do not make it dear.
            ended = document != "overview"
            snapshots = StateSnapshots(
                lambda: mesos_view.render(document, self, view, params),
                use_fork=self.config.render_state_in_child,
                saturated=lambda: self.loop_watch.saturated(),
                reuse_slow=True,
                inline=lambda: self._small_state(ended=ended),
            )
        self._documents[key] = snapshots  # most recently asked last
        snapshots.request_encoded(reply)
        return True

    def teardown(self, principal: str | None, peer: str, framework_id: str) -> tuple[str, str]:
        """An operator's teardown from the HTTP API (``POST /teardown``), as ``mezzo
        teardown`` does it: see :meth:`~.service.MasterService.teardown`. Leader only."""
        return self.term.service.teardown(principal, peer, framework_id)

    def documents_changed(self) -> None:
        """An operator changed the state: the HTTP documents kept for reuse are dropped,
        so the next request shows the change (:meth:`.state_snapshot.StateSnapshots.forget`)."""
        for snapshots in self._documents.values():
            snapshots.forget()

    def event_counts(self) -> dict[str, Any]:
        """What an event subscriber is told first: how much there is (``/state`` has it all)."""
        state = self.term.state
        return {
            "master_id": state.id,
            "agents": len(state.agents),
            "frameworks": len(state.frameworks),
            "tasks": state.tasks_running(),
        }

    @property
    def operator(self) -> OperatorActions:
        """The term's drain, reactivate and kill (:mod:`.operator_actions`). Leader only."""
        return self.term.operator

    def request_files(
        self,
        view: View,
        agent_id: str,
        framework_id: str,
        operation: str,
        path: str,
        offset: int,
        length: int,
    ) -> Awaitable[tuple[int, bytes]]:
        """Ask an agent for a sandbox's files for the HTTP proxy (:mod:`.file_requests`)."""
        return self.file_requests.request(
            self.state, view, agent_id, framework_id, operation, path, offset, length
        )

    # -- metrics ------------------------------------------------------------------------

    def metrics(self) -> dict[str, Any]:
        """Counters for monitoring and the benchmarks; O(frameworks + agent connections),
        never O(agents).

        Message counts are this process's (``mezzo.rpc.TRAFFIC``), which for a
        master process is the master's.
        """
        term, totals = self.term, self.totals
        state = term.state
        return {
            "uptime_seconds": round(time.time() - self.started_at, 3),
            "messages_received": TRAFFIC.received,
            "messages_sent": TRAFFIC.sent,
            "transport_reads": TRAFFIC.reads,
            "transport_writes": TRAFFIC.writes,
            "allocation_cycles": totals.cycles,
            "allocation_seconds": round(totals.seconds, 6),
            "allocation_cycles_failed": totals.failed,
            "offers_made": totals.offers_made,
            "offers_outstanding": len(state.offer_book),
            "leading": term.leading,
            "recovering": term.recovery.holding,
            "agents": len(state.agents),
            "agents_connected": term.service.agents_connected(),
            "frameworks": len(state.frameworks),
            "frameworks_connected": state.frameworks_connected(),
            "tasks_running": state.tasks_running(),
            "tasks_revoked": term.tasks_revoked(),
            "agent_removals_deferred": term.agents.removal_limit.deferred,
            "frameworks_found_silent": term.framework_health.found_silent if term.framework_health else 0,
            "framework_calls_dropped": term.service.call_rates.dropped,
            "framework_calls_refused": term.service.call_rates.refused,
            "loop_lag_seconds": round(self.loop_watch.lag, 4),
            "loop_max_lag_seconds": round(self.loop_watch.max_lag, 4),
            "loop_stalls": self.loop_watch.stalls,
            "loop_stalled_seconds": round(self.loop_watch.stalled_seconds, 3),
            "plugin_failures": self.guard.counts(),
            "state_snapshots": self.snapshots.forks,
            "state_snapshots_deferred": self.snapshots.deferred,
            "state_snapshots_inline": self.snapshots.rendered_inline,
            "statistics_shed": term.service.statistics_shed,
            "status_resends_not_forwarded": term.tasks.resends_not_forwarded,
            "status_updates_dropped": term.tasks.updates_dropped,
            "cpu_seconds": round(time.process_time(), 3),
            "rss_bytes": _rss_bytes(),
            "gc": GC_PAUSES.stats(),
            "connections": self.connection_limiter.stats(),
        }


def _rss_bytes() -> int:
    """This process's resident memory now (Linux), else its peak."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
