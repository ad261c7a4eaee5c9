"""The master's RPC handler: who is calling, is what they sent sound, then the state.

Every call of the ``Master`` service (``thrift/mezzo.thrift``) on a connection
arrives as ``service.<call>(conn, *args)``. A handler does three things, in order:

1. **Who.** A connection is bound to the framework or the agents that registered
   on it (``conn.tag``: :class:`~.records.FrameworkTag`, :class:`~.records.AgentTag`),
   and a call naming another framework's or agent's id is refused. A peer never
   acts for another.
2. **What.** The arguments are checked for meaning (a framework needs a name, an
   agent a port and resources, filters must parse). Their structure was
   normalised when the message was decoded (:mod:`mezzo.rpc.codec`: left-out
   strings and lists arrive empty), so no handler checks for None but of a
   struct. A bad call is answered ``error`` naming the call and the field, and
   changes nothing.
3. **How often.** A framework's calls on its own initiative are charged to its
   call rate (:mod:`.call_rates`); over it they are dropped or refused. Calls whose
   number the master bounds itself (acknowledgements, answers to outstanding
   offers, the first kill of each task) are free.
4. **Then** the lifecycles of frameworks, agents and tasks change the state
   (:mod:`.framework_lifecycle`, :mod:`.agent_lifecycle`, :mod:`.task_lifecycle`).

Handlers run on the master's one event loop and must never raise on what a peer
sends: the rpc layer would log it, but a half-applied change leaves the state
inconsistent, which is why they validate before changing anything.

One service serves one leadership term; :class:`~.leadership.LeaderGate` routes
calls to the current one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import structlog

from ..acls import PERMISSIVE, Acls, View
from ..resources import InvalidResources, Resources, agent_resources_problem, wire_ranges_problem
from ..rpc.address import dialable_address, is_loopback, join_address, parse_address
from ..rpc.codec import Utf8Text
from ..services import AGENT, SCHEDULER, TOOL
from ..wire.ttypes import (
    AgentInfo,
    ExecutorInfo,
    Filters,
    FrameworkFilters,
    FrameworkInfo,
    RunningTask,
    TaskInfo,
    TaskStatus,
)
from .audit import principal_of, refused, refuses_on_framework
from .call_rates import CallRates, Verdict
from .file_requests import FileRequests
from .records import AgentRecord, AgentTag, FrameworkRecord, FrameworkTag, known_capabilities

if TYPE_CHECKING:
    from .agent_lifecycle import AgentLifecycle
    from .framework_lifecycle import FrameworkLifecycle
    from .state import ClusterState
    from .task_lifecycle import TaskLifecycle

log = structlog.get_logger("mezzo.master", component="master")

FILTER_AGENTS_MAX = 50_000
"""The most agents a framework's filter may name (``set_filters``): reading that many
takes the master about 10 ms. Beyond, a framework names hostnames or uses min_free."""
DECLINE_IDS_MAX = 100_000
"""The most offer ids of one ``decline_offer`` the master looks up (about 10 ms)."""
STATISTICS_MAX_CHARS = 1 << 20
"""The longest container statistics report an agent may send (``container_statistics``):
reading 1 MiB of JSON takes the master about 25 ms; a report of 16 MiB held it 0.44 s.
An agent's report of a hundred containers is about 40 KB."""


TORN_DOWN = "torn down"
REFUSED = "refused"

MAX_CAPABILITIES = 16
"""``FrameworkInfo.capabilities`` a framework may name (mezzo knows one, PARTITION_AWARE)."""
UNKNOWN = "unknown"
"""Outcomes of :meth:`MasterService.teardown`."""


class MasterService:
    """The handler of one leadership term's connections. See the module docstring.

    ``address`` is this master's (sent to schedulers); ``render_state(reply)`` and
    ``metrics()`` answer the tools.
    """

    def __init__(
        self,
        state: ClusterState,
        frameworks: FrameworkLifecycle,
        agents: AgentLifecycle,
        tasks: TaskLifecycle,
        *,
        address: Callable[[], str],
        render_state: Callable[[Callable[[Utf8Text], None]], None],
        metrics: Callable[[], dict[str, Any]],
        call_rates: CallRates | None = None,
        saturated: Callable[[], bool] = lambda: False,
        acls: Acls = PERMISSIVE,
        render_view: Callable[[View, Callable[[Utf8Text], None]], None] | None = None,
        file_requests: FileRequests | None = None,
    ) -> None:
        self.state = state
        self.file_requests = file_requests if file_requests is not None else FileRequests()
        """The ``/files/*`` proxy's requests to agents in flight (:mod:`.file_requests`)."""
        self.frameworks = frameworks
        self.agents = agents
        self.tasks = tasks
        self._address = address
        self._render_state = render_state
        self._metrics = metrics
        self._saturated = saturated
        self.acls = acls
        """Who may do what (``[master.acls]``, :mod:`mezzo.acls`), decided for this master's TLS."""
        self._render_view = render_view
        """Renders the part of the state a viewer who may not see everything sees."""
        self.statistics_shed = 0
        """Container statistics reports dropped unread while the loop was saturated."""
        self.agent_links: dict[Any, None] = {}
        """Connections that carry agents, for the health check (:mod:`.health`), oldest
        first. A dict used as an ordered set, not a set: links hash by identity, so a
        set's order would follow memory addresses, and which agents the health check
        declares lost first (the removal limit lets only some go, see
        :mod:`.agent_removals`) would differ between two runs of the same calls
        (Hypothesis' replays of tests/unit/test_cluster_state.py diverged)."""
        config = state.config
        self.call_rates = call_rates or CallRates(
            state.clock, rate=config.framework_call_rate, burst=config.framework_call_burst
        )
        """Each framework's calls on its own initiative (``master.framework_call_rate``)."""

    # -- who is calling --------------------------------------------------------------

    def _framework_of(self, conn: Any, framework_id: str, call: str) -> FrameworkRecord | None:
        """The framework registered on ``conn``, if ``framework_id`` names it; else answer an error."""
        tag = conn.tag
        record = None
        if isinstance(tag, FrameworkTag) and tag.framework_id == framework_id:
            record = self.state.frameworks.get(framework_id)
        if record is None:
            log.warning("call from unregistered framework", call=call, framework=framework_id, peer=conn.peer)
            conn.remote(SCHEDULER).error(
                f"{call}: framework {framework_id!r} is not registered on this connection"
            )
        return record

    def _within_rate(
        self, conn: Any, record: FrameworkRecord, call: str, cost: int = 1, dropped_cost: int = 1
    ) -> bool:
        """Charge ``call`` to the framework's call rate: True to serve it. A call over
        the rate is dropped, or refused: the scheduler hears ``error`` and its
        connection is closed (see :mod:`.call_rates`)."""
        verdict = self.call_rates.charge(record.id, call, cost, dropped_cost)
        if verdict is Verdict.SERVE:
            return True
        if verdict is Verdict.REFUSE:
            rates = self.call_rates
            conn.remote(SCHEDULER).error(
                f"{call}: not served: this framework is over its call rate (master.framework_call_rate "
                f"{rates.rate:g} calls/s, master.framework_call_burst {rates.burst}); the master closes "
                "the connection"
            )
            self._drop_framework_link(
                conn,
                record,
                f"{call} over master.framework_call_rate ({rates.rate:g}/s, burst {rates.burst})",
            )
        return False

    def _drop_framework_link(self, conn: Any, record: FrameworkRecord | None, reason: str) -> None:
        """The master ends a scheduler's connection: its framework is disconnected for
        ``reason``, as if the connection had broken."""
        conn.tag = None
        if record is not None and record.conn is conn:
            self.frameworks.disconnected(record, reason)
        conn.close()

    def _agent_of(self, conn: Any, call: str, agent_id: str = "") -> AgentRecord | None:
        """The agent a call on ``conn`` is from: ``agent_id`` if the call names one
        registered on this connection, else the connection's only agent."""
        tag = conn.tag
        agent = None
        if isinstance(tag, AgentTag):
            if agent_id:
                agent = self.state.agents.get(agent_id) if agent_id in tag.agent_ids else None
            elif len(tag.agent_ids) == 1:
                agent = self.state.agents.get(next(iter(tag.agent_ids)))
        if agent is None:
            log.warning(
                "agent call from a peer not registered as that agent",
                call=call,
                agent=agent_id,
                peer=conn.peer,
            )
        return agent

    def _attach_agent(self, conn: Any, agent_id: str) -> None:
        if isinstance(conn.tag, AgentTag):
            conn.tag.agent_ids.add(agent_id)
        else:
            conn.tag = AgentTag(agent_id)
        self.agent_links[conn] = None

    def _detach_agent(self, conn: Any, agent_id: str) -> None:
        """``conn`` no longer speaks for ``agent_id`` (it moved to another connection);
        a connection that speaks for nobody any more is closed."""
        tag = conn.tag
        if isinstance(tag, AgentTag):
            tag.agent_ids.discard(agent_id)
            if not tag.agent_ids:
                conn.tag = None
                self.agent_links.pop(conn, None)
                conn.close()

    # -- frameworks ------------------------------------------------------------------

    def register_framework(self, conn: Any, framework: FrameworkInfo) -> None:
        scheduler = conn.remote(SCHEDULER)
        if (
            not isinstance(framework, FrameworkInfo)
            or not isinstance(framework.name, str)
            or not framework.name.strip()
        ):
            scheduler.error("register_framework: FrameworkInfo.name is required")
            return
        if isinstance(conn.tag, AgentTag):
            scheduler.error("register_framework: this connection belongs to an agent")
            return
        timeout = framework.failover_timeout
        if not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout < 0:
            scheduler.error(f"register_framework: failover_timeout {timeout!r} must be a finite number >= 0")
            return
        capabilities = framework.capabilities if framework.capabilities is not None else []
        if (
            not isinstance(capabilities, list)
            or len(capabilities) > MAX_CAPABILITIES
            or not all(isinstance(c, str) and 0 < len(c) <= 64 for c in capabilities)
        ):
            scheduler.error(
                f"register_framework: capabilities must be at most {MAX_CAPABILITIES} names of 1-64 "
                "characters (e.g. PARTITION_AWARE)"
            )
            return
        framework.capabilities = known_capabilities(capabilities)
        framework.role = framework.role if isinstance(framework.role, str) and framework.role else "*"
        fid = framework.framework_id if isinstance(framework.framework_id, str) else ""
        framework.framework_id = fid or None
        if isinstance(conn.tag, FrameworkTag) and conn.tag.framework_id != fid:
            scheduler.error(
                f"register_framework: this connection is already framework {conn.tag.framework_id}"
            )
            return
        principal = principal_of(conn)
        if not self.acls.allows("register_frameworks", principal, framework.role):
            who = principal or "a caller without a certificate"
            refused(
                "register_framework",
                principal,
                f"role {framework.role}",
                "master.acls.register_frameworks",
                conn.peer,
            )
            scheduler.error(
                f"register_framework: principal {who} may not register frameworks in role "
                f"{framework.role!r} (master.acls.register_frameworks)"
            )
            return
        state = self.state
        existing = state.frameworks.get(fid) if fid else None
        if existing is not None:
            if existing.conn is conn and not self._within_rate(conn, existing, "register_framework"):
                return
            if existing.principal is not None and principal != existing.principal:
                # Failing a framework over hands its tasks, offers and updates to the
                # new scheduler: only whoever registered it may.
                refused("register_framework", principal, f"framework {fid}", "not its principal", conn.peer)
                scheduler.error(
                    f"register_framework: framework {fid} belongs to another principal than "
                    f"{principal or 'this connection (no certificate)'}"
                )
                return
            old = existing.conn
            if old is not None and old is not conn:
                old.remote(SCHEDULER).error("framework failed over to another scheduler")
                old.tag = None
                old.close()
            conn.tag = FrameworkTag(fid)
            self.frameworks.reattach(existing, conn, framework, self._address())
            return
        if fid in state.removed_frameworks:
            # Its tasks were killed when it was removed; letting it back in under the
            # same id would make them vanish without a word. It must register anew.
            scheduler.error(
                f"framework {fid} was removed ({state.removed_frameworks[fid]}); "
                "register without a framework id to start again"
            )
            return
        record = self.frameworks.register(conn, framework, self._address())
        conn.tag = FrameworkTag(record.id)

    def unregister_framework(self, conn: Any, framework_id: str) -> None:
        record = self._framework_of(conn, framework_id, "unregister_framework")
        if record is not None:
            self.frameworks.remove(record, "unregistered by its scheduler")
            conn.tag = None

    def set_needs_offers(self, conn: Any, framework_id: str, needs_offers: bool) -> None:
        record = self._framework_of(conn, framework_id, "set_needs_offers")
        if record is not None and self._within_rate(conn, record, "set_needs_offers"):
            self.frameworks.set_needs_offers(record, bool(needs_offers))

    def set_filters(self, conn: Any, framework_id: str, filters: FrameworkFilters | None) -> None:
        record = self._framework_of(conn, framework_id, "set_filters")
        if record is None or not self._within_rate(conn, record, "set_filters"):
            return
        agents = filters.agents if filters is not None else None
        if agents is not None and len(agents) > FILTER_AGENTS_MAX:  # before reading them
            conn.remote(SCHEDULER).error(
                f"set_filters: {len(agents):,} agents are more than a filter may name (at most "
                f"{FILTER_AGENTS_MAX:,}); name hostnames or use min_free"
            )
            return
        if agents is not None and not all(isinstance(a, str) for a in agents):
            conn.remote(SCHEDULER).error("set_filters: agents must be a list of agent ids or hostnames")
            return
        wanted = filters.min_free if filters is not None else None
        problem = wire_ranges_problem(wanted, "set_filters: min_free")
        if problem is not None:
            conn.remote(SCHEDULER).error(problem)
            return
        try:
            min_free = Resources.of(wanted) if wanted is not None else None
        except InvalidResources as exc:
            conn.remote(SCHEDULER).error(f"set_filters: min_free: {exc}")
            return
        self.frameworks.set_filters(record, frozenset(agents) if agents is not None else None, min_free)

    def request_guaranteed_share(self, conn: Any, framework_id: str, request_id: int) -> None:
        record = self._framework_of(conn, framework_id, "request_guaranteed_share")
        if record is not None and self._within_rate(conn, record, "request_guaranteed_share"):
            conn.remote(SCHEDULER).guaranteed_share(
                request_id, self.state.allocator.guaranteed_share(framework_id)
            )

    # -- offers and tasks -----------------------------------------------------------------

    def launch_tasks(
        self,
        conn: Any,
        framework_id: str,
        offer_ids: list[str],
        tasks: list[TaskInfo],
        filters: Filters | None,
        groups: Sequence[tuple[int, int]] = (),
    ) -> None:
        """``groups``: the v1 façade's task groups (``LAUNCH_GROUP``), slices of ``tasks``
        which launch whole or not at all (:func:`~.launch.check_launch`); Thrift
        frameworks have none."""
        record = self._framework_of(conn, framework_id, "launch_tasks")
        if record is None:
            return
        # On stale offers, every task is answered TASK_DROPPED: a token each.
        if _answers_offers(record, offer_ids) or self._within_rate(conn, record, "launch_tasks", len(tasks)):
            self.tasks.launch(record, offer_ids, tasks, filters, groups)

    def decline_offer(
        self, conn: Any, framework_id: str, offer_ids: list[str], filters: Filters | None
    ) -> None:
        record = self._framework_of(conn, framework_id, "decline_offer")
        if record is None:
            return
        if not _answers_offers(record, offer_ids):
            n = len(offer_ids)  # each unknown id is looked up and logged
            if not self._within_rate(conn, record, "decline_offer", n, n):
                return
        state = self.state
        refuse = state.refuse_seconds(filters)
        if len(offer_ids) > DECLINE_IDS_MAX:
            # A framework holds at most an offer or so per agent: ids past these are not
            # looked up (a million of them held the loop 0.1 s).
            log.warning(
                "decline names more offers than are read; the rest ignored",
                framework=framework_id,
                offers=len(offer_ids),
                read=DECLINE_IDS_MAX,
            )
            offer_ids = offer_ids[:DECLINE_IDS_MAX]
        unknown: list[str] = []
        for oid in offer_ids:
            offer = record.offers.get(oid)
            if offer is None:
                unknown.append(oid)
                continue
            state.return_offer(offer, refuse)
        if unknown:
            # One line for the call, not one per id: a decline may name a million.
            log.info("decline of unknown offers ignored", framework=framework_id, offers=unknown)
        state.request_allocation()

    def kill_task(self, conn: Any, framework_id: str, task_id: str) -> None:
        record = self._framework_of(conn, framework_id, "kill_task")
        if record is None:
            return
        task = record.tasks.get(task_id)
        first = task is not None and not task.kill_requested  # later kills of it are retries
        if first or self._within_rate(conn, record, "kill_task"):
            self.tasks.kill(record, task_id)

    def acknowledge_status_update(
        self, conn: Any, framework_id: str, agent_id: str, task_id: str, uuid_: str
    ) -> None:
        record = self._framework_of(conn, framework_id, "acknowledge_status_update")
        if record is not None:
            self.tasks.acknowledge(record, agent_id, task_id, uuid_)

    def reconcile_tasks(self, conn: Any, framework_id: str, statuses: list[TaskStatus]) -> None:
        record = self._framework_of(conn, framework_id, "reconcile_tasks")
        if record is None:
            return
        # A token per task the master answers; dropped, it cost the reading of the list.
        cost = len(statuses or record.tasks)
        if self._within_rate(conn, record, "reconcile_tasks", cost, len(statuses)):
            self.tasks.reconcile(record, statuses)

    def framework_to_executor(
        self, conn: Any, framework_id: str, agent_id: str, executor_id: str, data: bytes
    ) -> None:
        record = self._framework_of(conn, framework_id, "framework_to_executor")
        if record is not None and self._within_rate(conn, record, "framework_to_executor"):
            self.tasks.framework_to_executor(record, agent_id, executor_id, data)

    # -- agents -----------------------------------------------------------------------

    def _check_agent(self, conn: Any, agent: AgentInfo, call: str) -> Resources | None:
        """The agent's total resources, once its info is sound; else answer an error."""
        remote = conn.remote(AGENT)
        if isinstance(conn.tag, FrameworkTag):
            remote.error(f"{call}: this connection belongs to a framework")
            return None
        principal = principal_of(conn)
        if not self.acls.allows("register_agents", principal):
            refused(call, principal, "agents", "master.acls.register_agents", conn.peer)
            remote.error(
                f"{call}: principal {principal or 'a caller without a certificate'} may not register "
                "agents (master.acls.register_agents)"
            )
            return None
        if not isinstance(agent, AgentInfo) or not isinstance(agent.hostname, str) or not agent.hostname:
            remote.error(f"{call}: AgentInfo.hostname is required")
            return None
        if not isinstance(agent.port, int) or not 0 < agent.port < 65536:
            remote.error(f"{call}: AgentInfo.port {agent.port!r} is not a valid port")
            return None
        try:
            agent.address = agent_address(agent.address, conn.peer, agent.port)
        except ValueError as exc:
            remote.error(f"{call}: AgentInfo.address: {exc}")
            return None
        problem = wire_ranges_problem(agent.resources, f"{call}: resources")
        if problem is not None:
            remote.error(problem)
            return None
        try:
            total = Resources.of(agent.resources)
        except InvalidResources as exc:
            remote.error(f"{call}: resources: {exc}")
            return None
        if not total:
            remote.error(f"{call}: the agent offers no resources")
            return None
        problem = agent_resources_problem(total)
        if problem is not None:
            # Accepted, it would overflow the cluster's totals and every share computed
            # from them (the state could no longer be rendered).
            remote.error(f"{call}: resources: {problem}")
            return None
        agent.resources = total
        agent.attributes = {str(k): str(v) for k, v in (agent.attributes or {}).items()}
        return total

    def register_agent(self, conn: Any, agent: AgentInfo) -> None:
        total = self._check_agent(conn, agent, "register_agent")
        if total is not None:
            record = self.agents.register(conn, agent, total)
            self._attach_agent(conn, record.id)

    def reregister_agent(
        self,
        conn: Any,
        agent: AgentInfo,
        tasks: list[RunningTask],
        executors: list[ExecutorInfo],
        frameworks: Sequence[FrameworkInfo] = (),
    ) -> None:
        total = self._check_agent(conn, agent, "reregister_agent")
        if total is None:
            return
        aid = agent.agent_id
        if not isinstance(aid, str) or not aid:
            conn.remote(AGENT).error("reregister_agent: agent_id is required")
            return
        known = self.state.agents.get(aid)
        principal = principal_of(conn)
        # After a failover the agent is not known here yet, but the registry says who registered it.
        owner = known.principal if known is not None else self.state.registry.owner(aid)
        if owner is not None and principal != owner:
            # Re-registering an agent id re-binds its tasks and resources to this
            # connection: only the agent that registered it may.
            refused("reregister_agent", principal, f"agent {aid}", "not its principal", conn.peer)
            conn.remote(AGENT).error(
                f"reregister_agent: agent {aid} belongs to another principal than "
                f"{principal or 'this connection (no certificate)'}"
            )
            return
        if known is not None and known.conn is not None and known.conn is not conn:
            # The agent moved to a new connection: the old one no longer speaks for it.
            self._detach_agent(known.conn, aid)
        if self.agents.reregister(conn, agent, total, tasks, executors, frameworks):
            self._attach_agent(conn, aid)

    def status_update(self, conn: Any, status: TaskStatus) -> None:
        if not isinstance(status, TaskStatus):
            self._agent_of(conn, "status_update")  # logs who sent it
            return
        agent = self._agent_of(conn, "status_update", status.agent_id or "")
        if agent is not None:
            status.agent_id = agent.id
            self.tasks.status_update(agent, status)

    def executor_exited(
        self, conn: Any, agent_id: str, framework_id: str, executor_id: str, exit_status: int, message: str
    ) -> None:
        agent = self._agent_of(conn, "executor_exited", agent_id)
        if agent is not None:
            self.agents.executor_exited(agent, framework_id, executor_id, exit_status, message)

    def executor_to_framework(
        self, conn: Any, agent_id: str, framework_id: str, executor_id: str, data: bytes
    ) -> None:
        agent = self._agent_of(conn, "executor_to_framework", agent_id)
        record = self.state.frameworks.get(framework_id)
        if agent is None or record is None or record.conn is None:
            return
        if (framework_id, executor_id) not in agent.executors:
            # The scheduler would take it for its executor's word: only the agent that
            # runs that executor may carry it.
            refused(
                "executor_to_framework",
                agent.principal,
                f"executor {executor_id} of framework {framework_id}",
                f"agent {agent.id} does not run it",
                conn.peer,
            )
            return
        self.state.outbox.scheduler(record.conn).framework_message(agent.id, executor_id, data)

    def container_statistics(self, conn: Any, agent_id: str, statistics_json: str) -> None:
        """An agent's latest container usage (see :mod:`mezzo.agent.statistics`), kept for
        ``mezzo state``. Anything but a JSON list is logged and dropped."""
        agent = self._agent_of(conn, "container_statistics", agent_id)
        if agent is None:
            return
        if self._saturated():
            # The first work to shed: the next report (statistics_interval) replaces it.
            self.statistics_shed += 1
            return
        try:
            # Strict JSON (NaN and Infinity refused: the state must stay JSON), and a
            # report nested past Python's recursion limit is as unreadable as a bad one.
            if len(statistics_json) > STATISTICS_MAX_CHARS:
                raise ValueError(
                    f"{len(statistics_json):,} characters, more than a report may have ({STATISTICS_MAX_CHARS:,})"
                )
            stats = json.loads(statistics_json or "[]", parse_constant=_no_constant, parse_float=_finite)
        except (ValueError, RecursionError) as exc:
            log.warning("container statistics are not JSON; dropped", agent=agent.id, error=str(exc)[:200])
            return
        if not isinstance(stats, list):
            log.warning("container statistics are not a list; dropped", agent=agent.id)
            return
        agent.statistics = stats

    def files_reply(self, conn: Any, request_id: int, status: int, body: bytes) -> None:
        """An agent's answer to ``Agent.files_request``: taken only from an agent's link
        the request went out on (:meth:`.file_requests.FileRequests.answer`)."""
        if isinstance(conn.tag, AgentTag):
            self.file_requests.answer(conn, request_id, status, body, peer=conn.peer)
        else:
            log.warning("file reply from a peer that is no agent; dropped", peer=conn.peer)

    def pong(self, conn: Any) -> None:
        """An agent or a scheduler answered a ping. Nothing to do: any message counts
        as a sign of life (``conn.last_received``), see :mod:`.health`."""

    def agent_link_silent(self, conn: Any, silent: float) -> None:
        """Nothing came from ``conn`` for ``silent`` seconds of the master's listening
        time: its agents are lost. Those the removal limit holds back stay on the
        link, which stays open, and the next health check asks again."""
        tag = conn.tag
        kept = False
        for agent_id in sorted(tag.agent_ids) if isinstance(tag, AgentTag) else ():
            agent = self.state.agents.get(agent_id)
            if agent is None or agent.conn is not conn:
                tag.agent_ids.discard(agent_id)
            elif self.agents.remove_lost(agent, f"no answer to pings for {silent:.1f} s"):
                tag.agent_ids.discard(agent_id)
            else:
                kept = True
        if not kept:
            conn.tag = None
            self.agent_links.pop(conn, None)
            conn.close()

    def framework_links(self) -> list[Any]:
        """Connections of connected frameworks, for the health check (:mod:`.health`).
        One the master has stopped reading (its peer does not read what it is sent,
        ``write_paused``) is left out: its silence is the master's doing, and the
        connection limits deal with a peer that takes nothing (``write_stall_timeout``)."""
        return [
            r.conn
            for r in self.state.frameworks.values()
            if r.conn is not None and not getattr(r.conn, "write_paused", False)
        ]

    def framework_link_silent(self, conn: Any, silent: float) -> None:
        """Nothing came from a scheduler's ``conn`` for ``silent`` seconds of the
        master's listening time, not even an answer to pings: the framework is
        disconnected (its ``failover_timeout`` applies) and the connection closed. The
        scheduler is not sent ``error``: should it only have been stuck, its driver
        redials and re-registers like after any broken connection."""
        tag = conn.tag
        record = self.state.frameworks.get(tag.framework_id) if isinstance(tag, FrameworkTag) else None
        reason = f"no answer to pings for {silent:.1f} s (master.framework_idle_timeout)"
        self._drop_framework_link(conn, record, reason)

    # -- connections -------------------------------------------------------------------

    def connection_lost(self, conn: Any) -> None:
        tag = conn.tag
        if isinstance(tag, FrameworkTag):
            record = self.state.frameworks.get(tag.framework_id)
            if record is not None and record.conn is conn:
                self.frameworks.disconnected(record)
        elif isinstance(tag, AgentTag):
            self.agent_links.pop(conn, None)
            for agent_id in list(tag.agent_ids):
                agent = self.state.agents.get(agent_id)
                if agent is not None and agent.conn is conn:
                    self.agents.disconnected(agent)

    def agents_connected(self) -> int:
        """Agents on live connections (metrics): O(agent connections), not O(agents)."""
        return sum(len(c.tag.agent_ids) for c in self.agent_links if isinstance(c.tag, AgentTag))

    # -- tools --------------------------------------------------------------------------

    def request_state(self, conn: Any, request_id: int) -> None:
        """The state as JSON, as much of it as the caller may see (``view_cluster``,
        ``view_frameworks``); a caller who may see none of it is answered ``error``."""
        principal = principal_of(conn)
        view = self.acls.view_of(principal)

        def reply(text: Utf8Text) -> None:
            conn.send(TOOL.encode_with_text("state", (request_id,), text))

        if view.everything:
            self._render_state(reply)
        elif view.nothing or self._render_view is None:  # None: a service that renders no parts
            self._refuse_tool(conn, request_id, "request_state", principal, "view_cluster, view_frameworks")
        else:
            self._render_view(view, reply)

    def request_metrics(self, conn: Any, request_id: int) -> None:
        principal = principal_of(conn)
        if not self.acls.allows("view_cluster", principal):
            self._refuse_tool(conn, request_id, "request_metrics", principal, "view_cluster")
            return
        conn.remote(TOOL).metrics(request_id, json.dumps(self._metrics()))

    def teardown_framework(self, conn: Any, request_id: int, framework_id: str) -> None:
        """``mezzo teardown``: :meth:`teardown`, answered to the tool."""
        outcome, message = self.teardown(principal_of(conn), conn.peer, framework_id)
        tool = conn.remote(TOOL)
        if outcome == TORN_DOWN:
            tool.done(request_id, message)
        else:
            tool.error(request_id, message)

    def teardown(self, principal: str | None, peer: str, framework_id: str) -> tuple[str, str]:
        """An operator ends a framework: as if its scheduler had unregistered it (tasks
        killed, id refused from now on), and its scheduler hears ``error``. Only a
        principal the ``teardown_frameworks`` ACL allows for the framework's principal.

        Returns ``(outcome, message)``: :data:`TORN_DOWN`, :data:`REFUSED` (also when
        the principal may tear down no framework at all, before the id is looked up:
        a refusal does not tell whether the framework exists) or :data:`UNKNOWN`."""
        who = principal or "a caller without a certificate"
        record = self.state.frameworks.get(framework_id) if isinstance(framework_id, str) else None
        obj = f"framework {framework_id!s:.100}"
        if refuses_on_framework(
            self.acls, "teardown_frameworks", "teardown_framework", principal, record, obj, peer
        ):
            return REFUSED, (
                f"teardown_framework: principal {who} may not tear down framework {framework_id!s:.100} "
                "(master.acls.teardown_frameworks)"
            )
        if record is None:
            return UNKNOWN, f"teardown_framework: no framework {str(framework_id)[:100]!r} is registered"
        tasks = len(record.tasks)
        scheduler = record.conn
        reason = f"torn down by {who}"
        if scheduler is not None:
            scheduler.remote(SCHEDULER).error(f"framework {framework_id} was {reason}")
            scheduler.tag = None
        self.frameworks.remove(record, reason)
        if scheduler is not None:
            scheduler.close()
        log.warning("framework torn down", framework=framework_id, principal=principal, tasks_killed=tasks)
        return TORN_DOWN, f"framework {framework_id} torn down; {tasks} task(s) killed"

    def _refuse_tool(
        self, conn: Any, request_id: int, call: str, principal: str | None, actions: str
    ) -> None:
        refused(call, principal, "state", f"master.acls.{actions}", conn.peer)
        conn.remote(TOOL).error(
            request_id,
            f"{call}: principal {principal or 'a caller without a certificate'} may not view the "
            f"cluster (master.acls: {actions})",
        )


def _answers_offers(record: FrameworkRecord, offer_ids: list[str]) -> bool:
    """True if every one of ``offer_ids`` is outstanding to the framework: the call
    answers offers the master made (each is answered once, so such calls are as many
    as the offers), and costs nothing of its call rate."""
    offers = record.offers
    return bool(offer_ids) and all(oid in offers for oid in offer_ids)


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    """A JSON number as a float; one too large for a float (``1e999``) would be read
    as infinity, which is not JSON either."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is too large a number")
    return value


MAX_ADDRESS_CHARS = 300
"""Longest ``AgentInfo.address`` accepted: a DNS name (253) and a port, with room."""


def agent_address(claimed: object, peer: str, port: int) -> str:
    """Where peers reach an agent, from what it claims (``AgentInfo.address``, checked)
    and where its connection comes from (``peer``, ``"host:port"`` or ``"?"``).

    The claim, unless it is empty or a loopback address while the connection comes from
    another host: an agent bound to 127.0.0.1 (the default) is reached at its
    machine's address, so the host the connection came from stands in, with the
    claimed port. ``""`` when nothing is known. Raises :class:`ValueError` saying what
    is wrong with a claim."""
    peer_host = peer.rpartition(":")[0]
    if isinstance(claimed, str) and not claimed.strip():
        return join_address(peer_host, port) if peer_host else ""
    if not isinstance(claimed, str) or len(claimed) > MAX_ADDRESS_CHARS:
        raise ValueError(f"not HOST:PORT of at most {MAX_ADDRESS_CHARS} characters")
    address = dialable_address(claimed, port)
    host, claimed_port = parse_address(address, port)
    if is_loopback(host) and peer_host and not is_loopback(peer_host):
        return join_address(peer_host, claimed_port)
    return address
