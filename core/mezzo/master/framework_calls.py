"""Framework calls of the master: registration, failover, suppression, filters.

Part of :class:`mezzo.master.Master` (a mixin: the state it touches is the
master's, see ``master.py``). Every call checks first that it comes from the
connection the framework registered on (``_framework_of``), so one scheduler
cannot act for another.
"""

from __future__ import annotations

import math
from typing import Any

import structlog

from ..resources import InvalidResources, Resources
from ..services import AGENT, SCHEDULER
from ..wire.ttypes import FrameworkFilters, FrameworkInfo, TaskState
from .records import AgentTag, FrameworkRecord, FrameworkTag

log = structlog.get_logger("mezzo.master", component="master")

REMEMBER_REMOVED = 10_000
"""How many removed framework ids the master remembers, to refuse their return."""


class FrameworkCalls:
    """``register_framework``, ``unregister_framework``, ``set_needs_offers``,
    ``set_filters``, ``request_guaranteed_share`` and what a scheduler's
    disconnection sets off."""

    def register_framework(self, conn: Any, framework: FrameworkInfo) -> None:
        scheduler = conn.remote(SCHEDULER)
        if not isinstance(framework, FrameworkInfo) or not isinstance(framework.name, str) or not framework.name.strip():
            scheduler.error("register_framework: FrameworkInfo.name is required")
            return
        if isinstance(conn.tag, AgentTag):
            scheduler.error("register_framework: this connection belongs to an agent")
            return
        timeout = framework.failover_timeout
        if not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout < 0:
            scheduler.error(f"register_framework: failover_timeout {timeout!r} must be a finite number >= 0")
            return
        framework.role = framework.role if isinstance(framework.role, str) and framework.role else "*"
        fid = framework.framework_id
        if isinstance(conn.tag, FrameworkTag) and conn.tag.framework_id != fid:
            scheduler.error(f"register_framework: this connection is already framework {conn.tag.framework_id}")
            return
        existing = self.frameworks.get(fid) if fid else None
        if existing is not None:
            self._reattach_framework(existing, conn, framework)
            return
        if fid in self.removed_frameworks:
            # Its tasks were killed when it was removed; letting it back in under the
            # same id would make them vanish without a word. It must register anew.
            scheduler.error(f"framework {fid} was removed ({self.removed_frameworks[fid]}); "
                            "register without a framework id to start again")
            return
        # An unknown id comes from a scheduler that registered with an earlier master
        # (failover): keep its id so its tasks stay its own, and say "re-registered".
        recovered = bool(fid)
        if not recovered:
            fid = framework.framework_id = f"{self.id}-{next(self._framework_ids):04d}"
        record = FrameworkRecord(id=fid, info=framework, conn=conn)
        self.frameworks[fid] = record
        conn.tag = FrameworkTag(fid)
        self.allocator.add_framework(fid, framework)
        if recovered:
            self._adopt_framework_tasks(record)
        log.info("framework registered", framework=fid, name=framework.name, role=framework.role,
                 recovered=recovered)
        self.observe.mezzo_framework_added(framework=framework)
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
        conn.tag = FrameworkTag(record.id)
        if record.active:
            self.allocator.activate(record.id)
        log.info("framework re-registered", framework=record.id, held_updates=len(record.held_updates))
        scheduler = conn.remote(SCHEDULER)
        scheduler.reregistered(record.id, self.address)
        held, record.held_updates = record.held_updates, {}
        for status in held.values():
            scheduler.status_update(status)
        self.request_allocation()

    def _recover_framework(self, info: FrameworkInfo) -> FrameworkRecord:
        """A framework known only from an agent's report (this master is new): keep its
        tasks its own until its scheduler re-registers, for ``failover_timeout`` or
        ``master.framework_recovery_timeout``, whichever is longer."""
        fid = info.framework_id
        info.role = info.role if isinstance(info.role, str) and info.role else "*"
        record = FrameworkRecord(id=fid, info=info, conn=None)
        self.frameworks[fid] = record
        self.allocator.add_framework(fid, info)
        self.allocator.deactivate(fid)
        failover = info.failover_timeout if isinstance(info.failover_timeout, (int, float)) else 0.0
        timeout = max(failover if math.isfinite(failover) else 0.0, self.config.framework_recovery_timeout)
        if self._loop is not None:
            record.failover_handle = self._loop.call_later(timeout, self._failover_expired, fid)
        log.info("framework recovered from an agent's report; awaiting its scheduler", framework=fid,
                 name=info.name, timeout=timeout)
        return record

    def _tell_status(self, record: FrameworkRecord, status: Any) -> None:
        """Send ``status`` to the framework's scheduler, or hold it until one connects."""
        if record.conn is not None:
            record.conn.remote(SCHEDULER).status_update(status)
        else:
            record.held_updates[status.uuid or f"master:{status.task_id}"] = status

    def _framework_of(self, conn: Any, framework_id: Any, call: str) -> FrameworkRecord | None:
        """The framework registered on ``conn``, if ``framework_id`` names it; else answer an error."""
        tag = conn.tag
        if not isinstance(tag, FrameworkTag) or tag.framework_id != framework_id:
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
        self.removed_frameworks[fid] = reason
        if len(self.removed_frameworks) > REMEMBER_REMOVED:
            self.removed_frameworks.popitem(last=False)
        self.allocator.remove_framework(fid)
        log.info("framework removed", framework=fid, reason=reason)
        self.observe.mezzo_framework_removed(framework_id=fid, reason=reason)
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
