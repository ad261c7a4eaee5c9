"""How frameworks come, fail over and go.

A framework registers (and gets an id), or comes back under the id an earlier
master gave it (failover: it keeps its tasks). When its scheduler disconnects,
its tasks keep running for ``FrameworkInfo.failover_timeout``; a scheduler that
comes back in time gets ``reregistered`` and every status update held for it
meanwhile, one that does not has the framework removed: its offers rescinded, its
tasks killed on their agents and reported TASK_KILLED, its id refused from then on
(a framework id comes back only with its tasks, never without them).

The master also ends a scheduler's connection itself, and then treats the
framework as disconnected in the same way, naming the reason in its log: a
scheduler silent past ``master.framework_idle_timeout`` (:mod:`.health`), and one
whose calls go over ``master.framework_call_rate`` (:mod:`.call_rates`).

A new master may learn of a framework from an agent's report before its
scheduler re-registers (:meth:`FrameworkLifecycle.recover`); tasks agents report
for frameworks it does not know at all wait in :attr:`ClusterState.orphans` and
join their framework when it registers.

Callers (:mod:`.service`) have checked who is calling and validated the input.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import structlog

from ..wire.ttypes import FrameworkInfo, TaskState
from .audit import principal_of
from .records import FrameworkRecord, TaskRecord, known_capabilities

if TYPE_CHECKING:
    from ..resources import Resources
    from .state import ClusterState

log = structlog.get_logger("mezzo.master", component="master")


class FrameworkLifecycle:
    """Framework registration, failover and removal over one :class:`ClusterState`."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state

    def register(self, link: Any, info: FrameworkInfo, address: str) -> FrameworkRecord:
        """A scheduler on ``link`` registers ``info``. A framework id the state does
        not know comes from a scheduler that registered with an earlier master
        (failover): it keeps its id, so its tasks stay its own, and hears
        ``reregistered``; without an id it is given one and hears ``registered``.
        ``address`` is this master's, for the answer. The caller has checked that the
        id is not one of a removed framework."""
        state = self.state
        fid = info.framework_id
        recovered = bool(fid)
        if not recovered:
            fid = info.framework_id = state.new_framework_id()
        record = FrameworkRecord(id=fid, info=info, conn=link, principal=principal_of(link))
        state.frameworks[fid] = record
        state.allocator.add_framework(fid, info)
        if recovered:
            self._adopt_orphans(record)
        log.info("framework registered", framework=fid, name=info.name, role=info.role, recovered=recovered)
        state.observe.mezzo_framework_added(framework=info)
        state.events.framework_added(record)
        scheduler = state.outbox.scheduler(link)
        if recovered:
            scheduler.reregistered(fid, address)
        else:
            scheduler.registered(fid, address)
        # Prompt, as for freed resources: a framework that just registered waits for
        # nothing but its first offer (``mezzo run`` at a shell), and registrations are
        # bounded by their handshakes, unlike declines.
        state.request_allocation(prompt=True)
        return record

    def reattach(self, record: FrameworkRecord, link: Any, info: FrameworkInfo, address: str) -> None:
        """The framework's scheduler is back on ``link`` (the caller dealt with any
        old link): it hears ``reregistered`` and the updates held for it."""
        state = self.state
        if record.failover_handle is not None:
            record.failover_handle.cancel()
            record.failover_handle = None
        record.failover_deadline = None
        record.conn = link
        record.info = info
        if record.principal is None:
            # Known only from agents' reports (a new master), or registered without a
            # certificate: the first scheduler back names its owner.
            record.principal = principal_of(link)
        if record.active:
            state.allocator.activate(record.id)
        log.info("framework re-registered", framework=record.id, held_updates=len(record.held_updates))
        scheduler = state.outbox.scheduler(link)
        scheduler.reregistered(record.id, address)
        held, record.held_updates = record.held_updates, {}
        record.forwarded.clear()  # forwards to the old connection: resends go to this one
        for status in held.values():
            scheduler.status_update(status)
        state.events.framework_updated(record)
        state.request_allocation()

    def recover(self, info: FrameworkInfo) -> FrameworkRecord:
        """A framework known only from an agent's report (this master is new): keep its
        tasks its own until its scheduler re-registers, for ``failover_timeout`` or
        ``master.framework_recovery_timeout``, whichever is longer."""
        state = self.state
        fid = info.framework_id
        info.role = info.role if isinstance(info.role, str) and info.role else "*"
        info.capabilities = known_capabilities(info.capabilities)  # an agent's word: checked
        record = FrameworkRecord(id=fid, info=info, conn=None)
        state.frameworks[fid] = record
        state.allocator.add_framework(fid, info)
        state.allocator.deactivate(fid)
        failover = info.failover_timeout if isinstance(info.failover_timeout, (int, float)) else 0.0
        timeout = max(failover if math.isfinite(failover) else 0.0, state.config.framework_recovery_timeout)
        record.failover_handle = state.clock.call_later(timeout, self._failover_expired, fid)
        record.failover_deadline = time.time() + timeout
        log.info(
            "framework recovered from an agent's report; awaiting its scheduler",
            framework=fid,
            name=info.name,
            timeout=timeout,
        )
        return record

    def _adopt_orphans(self, framework: FrameworkRecord) -> None:
        """A framework came back: take in what agents reported running for it before
        it did (entries gone from their agent meanwhile are skipped)."""
        state = self.state
        fid = framework.id
        for agent, item in state.orphans.pop(fid, ()):
            if state.agents.get(agent.id) is not agent:
                continue  # the agent was removed since
            if isinstance(item, TaskRecord):
                if agent.tasks.get((fid, item.id)) is item and item.id not in framework.tasks:
                    framework.tasks[item.id] = item
                    state.allocator.allocated(fid, item.resources)
            elif item in agent.executors:
                state.allocator.allocated(fid, agent.executors[item].resources)

    def remove(self, record: FrameworkRecord, reason: str) -> None:
        """The framework is gone for good: offers rescinded, tasks killed (their agents
        told to shut the framework down) and ended TASK_KILLED, id refused from now on."""
        state = self.state
        fid = record.id
        state.rescind_offers(list(record.offers.values()), notify=False)
        # Only the agents holding a task or an executor of it have anything to shut
        # down (an agent forgets a framework once nothing of it is left there).
        # O(its tasks and executors), not O(agents).
        hosts = {task.agent_id for task in record.tasks.values()} | state.executor_hosts.pop(fid, set())
        for task in list(record.tasks.values()):
            state.end_task(
                task,
                state.agents.get(task.agent_id),
                TaskState.TASK_KILLED,
                task.reason,
                f"framework removed: {reason}",
            )
        for agent_id in hosts:
            agent = state.agents.get(agent_id)
            if agent is None:
                continue
            for key in [k for k in agent.executors if k[0] == fid]:
                state.release_executor(agent, key)
            if agent.conn is not None:
                state.outbox.agent(agent.conn).shutdown_framework(fid)
        for task in record.unreachable_tasks.values():
            state.forget_unreachable(task)
        state.refusals.clear_framework(fid)
        if record.failover_handle is not None:
            record.failover_handle.cancel()
        state.framework_ended(record, reason)
        del state.frameworks[fid]
        state.forget_framework(fid, reason)
        state.allocator.remove_framework(fid)
        log.info("framework removed", framework=fid, reason=reason)
        state.observe.mezzo_framework_removed(framework_id=fid, reason=reason)
        state.events.framework_removed(record, reason)
        state.request_allocation()

    def disconnected(self, record: FrameworkRecord, reason: str | None = None) -> None:
        """Its scheduler's link is gone: offers rescinded, and removal after its
        ``failover_timeout`` (at once for 0) unless it comes back. ``reason``: why
        the master closed the link itself (None: the link broke)."""
        state = self.state
        record.conn = None
        state.allocator.deactivate(record.id)
        state.rescind_offers(list(record.offers.values()), notify=False)
        timeout = record.info.failover_timeout or 0.0
        if reason is None:
            log.info("framework disconnected", framework=record.id, failover_timeout=timeout)
        else:
            log.warning(
                "framework disconnected by the master",
                framework=record.id,
                name=record.info.name,
                reason=reason,
                failover_timeout=timeout,
            )
        if timeout <= 0:
            self.remove(record, f"{reason or 'scheduler disconnected'} (failover_timeout 0)")
        else:
            record.failover_handle = state.clock.call_later(timeout, self._failover_expired, record.id)
            record.failover_deadline = time.time() + timeout
            state.events.framework_updated(record)

    def _failover_expired(self, framework_id: str) -> None:
        record = self.state.frameworks.get(framework_id)
        if record is not None and record.conn is None:
            self.remove(record, "scheduler did not fail over within failover_timeout")

    def set_needs_offers(self, record: FrameworkRecord, needs_offers: bool) -> None:
        """Revive (and clear the framework's refuse filters) or suppress offers."""
        state = self.state
        if needs_offers:
            # Reviving clears refuse filters: the framework says it can use resources now.
            state.refusals.clear_framework(record.id)
            if not record.active:
                record.active = True
                state.allocator.activate(record.id)
            state.request_allocation()
        elif record.active:
            record.active = False
            state.allocator.deactivate(record.id)
        log.info("framework needs offers", framework=record.id, needs_offers=bool(needs_offers))
        state.events.framework_updated(record)

    def set_filters(
        self, record: FrameworkRecord, agents: frozenset[str] | None, min_free: Resources | None
    ) -> None:
        """The paper's two persistent filters: only agents from ``agents`` (ids or
        hostnames; None = any), only agents with at least ``min_free`` free."""
        record.agent_whitelist = agents
        record.min_free = min_free if min_free else None
        log.info(
            "framework filters set",
            framework=record.id,
            agents=len(agents) if agents is not None else None,
            min_free=str(record.min_free) if record.min_free else None,
        )
        self.state.request_allocation()
