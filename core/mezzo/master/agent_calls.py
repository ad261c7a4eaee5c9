"""Agent calls of the master: registration, re-registration, loss, executors.

Part of :class:`mezzo.master.Master` (a mixin over the master's state). An agent
that loses its connection keeps its tasks for ``master.agent_reregister_timeout``;
one that comes back in time is re-attached with everything it runs, one that does
not is removed and its tasks reported TASK_LOST. So is one that stops answering
pings (:mod:`.health`).

Whether an agent unknown to this master may re-register is the registry's call
(:mod:`.registry`): an admitted one (after a failover) is adopted with its tasks,
executors and frameworks; one declared lost is told to start over.
"""

from __future__ import annotations

import json
import time
from typing import Any

import structlog

from .. import is_terminal, state_name
from ..resources import InvalidResources, Resources
from ..services import AGENT, SCHEDULER
from ..wire.ttypes import AgentInfo, ExecutorInfo, FrameworkInfo, RunningTask, TaskState, TaskStatus
from . import long_tasks
from .allocation import effective_min_offer
from .records import AgentRecord, AgentTag, FrameworkTag, TaskRecord
from .registry import REFUSE

log = structlog.get_logger("mezzo.master", component="master")


class AgentCalls:
    """``register_agent``, ``reregister_agent``, ``executor_exited``,
    ``executor_to_framework`` and what an agent's disconnection sets off."""

    def _agent_of(self, conn: Any, call: str, agent_id: Any = None) -> AgentRecord | None:
        """The agent a call on ``conn`` is from: ``agent_id`` if the call names one
        registered on this connection, else the connection's only agent."""
        tag = conn.tag
        agent = None
        if isinstance(tag, AgentTag):
            if isinstance(agent_id, str) and agent_id:
                agent = self.agents.get(agent_id) if agent_id in tag.agent_ids else None
            elif len(tag.agent_ids) == 1:
                agent = self.agents.get(next(iter(tag.agent_ids)))
        if agent is None:
            log.warning("agent call from a peer not registered as that agent", call=call,
                        agent=agent_id, peer=conn.peer)
        return agent

    def _attach_agent(self, conn: Any, agent_id: str) -> None:
        if isinstance(conn.tag, AgentTag):
            conn.tag.agent_ids.add(agent_id)
        else:
            conn.tag = AgentTag(agent_id)
        self.agent_conns.add(conn)

    def register_agent(self, conn: Any, agent: AgentInfo) -> None:
        total = self._check_agent(conn, agent, "register_agent")
        if total is None:
            return
        aid = f"{self.id}-S{next(self._agent_ids)}"
        agent.agent_id = aid
        # Not offered before the registry has it: were this master to die first, the
        # next one would refuse the agent, and tasks launched on it would be orphans.
        record = self._add_agent(conn, agent, total, connected=False)

        def admitted(ok: bool) -> None:
            if self.agents.get(aid) is not record:
                return  # removed meanwhile, or another leadership term
            if not ok:
                log.warning("agent not admitted: the registry write failed", agent=aid)
                self._remove_agent(record, "could not be recorded in the registry", notify=False)
                conn.close()
                return
            if record.conn is conn:
                record.connected = True
                conn.remote(AGENT).registered(aid)
                self.request_allocation()

        self.registry.admit(aid, admitted)

    def container_statistics(self, conn: Any, agent_id: str, statistics_json: str) -> None:
        """An agent's latest container usage (see :mod:`mezzo.agent.statistics`), kept for
        ``mezzo state``. Anything but a JSON list is logged and dropped."""
        agent = self._agent_of(conn, "container_statistics", agent_id)
        if agent is None:
            return
        try:
            stats = json.loads(statistics_json or "[]")
        except ValueError as exc:
            log.warning("container statistics are not JSON; dropped", agent=agent.id, error=str(exc))
            return
        if not isinstance(stats, list):
            log.warning("container statistics are not a list; dropped", agent=agent.id)
            return
        agent.statistics = stats

    def pong(self, conn: Any) -> None:
        """An agent answered a ping. Nothing to do: any message counts as a sign of
        life (``conn.last_received``), see :mod:`.health`."""

    def agent_connection_silent(self, conn: Any, silent: float) -> None:
        """Nothing came from ``conn`` for ``silent`` seconds: its agents are lost."""
        tag = conn.tag
        for agent_id in sorted(tag.agent_ids) if isinstance(tag, AgentTag) else ():
            agent = self.agents.get(agent_id)
            if agent is not None and agent.conn is conn:
                self._remove_agent(agent, f"no answer to pings for {silent:.1f} s")
        conn.tag = None
        self.agent_conns.discard(conn)
        conn.close()

    def reregister_agent(self, conn: Any, agent: AgentInfo, tasks: list[RunningTask],
                         executors: list[ExecutorInfo], frameworks: list[FrameworkInfo] | None = None) -> None:
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
            old = record.conn
            if old is not None and old is not conn and isinstance(old.tag, AgentTag):
                # The agent moved to a new connection: the old one no longer speaks
                # for it, and is closed once it speaks for nobody.
                old.tag.agent_ids.discard(aid)
                if not old.tag.agent_ids:
                    old.tag = None
                    old.close()
            record.conn = conn
            record.connected = True
            record.info = agent
            self._attach_agent(conn, aid)
            log.info("agent re-registered", agent=aid, hostname=agent.hostname)
            self._reconcile_agent(record, tasks or (), executors or ())
            self.observe.mezzo_agent_added(agent=agent)
        elif self.registry.verdict(aid) == REFUSE:
            # Declared lost (its tasks reported TASK_LOST), or never admitted: its
            # tasks must not come back. It kills them and registers anew.
            log.warning("refusing re-registration of a lost or unknown agent", agent=aid,
                        hostname=agent.hostname, tasks=len(tasks or ()))
            conn.remote(AGENT).reregistration_refused(
                aid, f"agent {aid} is not admitted in this cluster (declared lost, or never registered): "
                "kill its tasks and register as a new agent")
            return
        else:
            # An admitted agent this master has not seen (failover or restart): take
            # its word for what runs on it, so those resources are not offered twice.
            record = self._add_agent(conn, agent, total)
            self._adopt(record, tasks or (), executors or (), frameworks or ())
            self.registry.admit(aid, lambda ok: None)
            self.recovery.agent_back(aid)
        conn.remote(AGENT).reregistered(aid)
        self.request_allocation()

    def _adopt(self, agent: AgentRecord, running, executors, frameworks=()) -> None:
        """Record tasks and executors an agent reports.

        Frameworks it names that this master does not know are recovered
        (:meth:`_recover_framework`): their tasks are theirs again at once, and their
        schedulers have a while to come back. Tasks of frameworks the agent gave no
        info for stay on the agent record (their resources stay used) and join their
        framework when it registers (``_adopt_framework_tasks``)."""
        for info in frameworks:
            fid = info.framework_id if isinstance(info, FrameworkInfo) else None
            if isinstance(fid, str) and fid and fid not in self.frameworks and fid not in self.removed_frameworks:
                self._recover_framework(info)
        for ex in executors:
            if ex is None or not isinstance(ex.framework_id, str) or not isinstance(ex.executor_id, str):
                continue
            res = _safe_resources(ex.resources)
            ex.resources = res
            agent.executors[(ex.framework_id, ex.executor_id)] = ex
            agent.free = agent.free - res
            if ex.framework_id in self.frameworks:
                self.allocator.allocated(ex.framework_id, res)
            else:
                self.orphans.setdefault(ex.framework_id, []).append((agent, (ex.framework_id, ex.executor_id)))
        for rt in running:
            t = rt.task if rt is not None else None
            fid = rt.framework_id if rt is not None else None
            if t is None or not isinstance(fid, str) or not fid or not isinstance(t.task_id, str):
                continue
            latest = rt.latest
            state = latest.state if latest is not None and isinstance(latest.state, int) else TaskState.TASK_STAGING
            if (fid, t.task_id) in agent.tasks:
                continue
            res = _safe_resources(t.resources)
            tr = TaskRecord(framework_id=fid, agent_id=agent.id, info=t, resources=res, state=state)
            if latest is not None:
                tr.message, tr.reason = latest.message or "", latest.reason or ""
            if is_terminal(state):
                # Its end is still being reported: nothing to hold, but reconciliation
                # must know how it ended.
                self.completed_tasks.append(tr)
                continue
            agent.tasks[(fid, t.task_id)] = tr
            agent.free = agent.free - res
            long_tasks.task_started(agent, tr)
            if self.short_tasks is not None:
                self.short_tasks.task_started(tr)
            framework = self.frameworks.get(fid)
            if framework is None:
                self.orphans.setdefault(fid, []).append((agent, tr))
            elif t.task_id not in framework.tasks:
                framework.tasks[t.task_id] = tr
                self.allocator.allocated(fid, res)

    def _reconcile_agent(self, agent: AgentRecord, running, executors) -> None:
        """A known agent came back: square what this master holds for it with what it reports.

        - A task held here but not reported never reached the agent (its ``run_task``
          was lost with the old connection) or ended unseen: its framework gets
          TASK_DROPPED if it never started, else TASK_LOST (reason
          ``task_missing_on_agent``), and its resources are freed.
        - An executor held here but not reported is gone: its resources are freed.
        - Tasks of frameworks this master removed: the agent is told to shut them down.
        - Kills asked for while the agent was away are sent now.
        """
        reported = {(rt.framework_id, rt.task.task_id) for rt in running
                    if rt is not None and rt.task is not None}
        for key, task in list(agent.tasks.items()):
            if key in reported:
                continue
            state = TaskState.TASK_DROPPED if task.state == TaskState.TASK_STAGING else TaskState.TASK_LOST
            self._release_task(task, agent)
            task.state, task.reason = state, "task_missing_on_agent"
            task.message = f"agent {agent.id} re-registered without this task"
            self.completed_tasks.append(task)
            status = TaskStatus(task_id=task.id, state=state, reason=task.reason, message=task.message,
                                source="master", agent_id=agent.id, executor_id=task.executor_id,
                                framework_id=task.framework_id, timestamp=time.time())
            log.warning("task missing on a re-registered agent", agent=agent.id, framework=task.framework_id,
                        task=task.id, state=state_name(state))
            self.observe.mezzo_task_status(framework_id=task.framework_id, status=status)
            framework = self.frameworks.get(task.framework_id)
            if framework is not None:
                self._tell_status(framework, status)
        live = {(ex.framework_id, ex.executor_id) for ex in executors if ex is not None}
        for key in [k for k in agent.executors if k not in live]:
            self._release_executor(agent, key)
        remote = agent.conn.remote(AGENT)
        for fid in {fid for fid, _ in reported if fid in self.removed_frameworks}:
            remote.shutdown_framework(fid)
        kills, agent.pending_kills = agent.pending_kills, set()
        for fid, tid in kills:
            if (fid, tid) in agent.tasks:
                remote.kill_task(fid, tid)

    def _adopt_framework_tasks(self, framework) -> None:
        """A framework came back: take in what agents reported running for it before
        it did (``self.orphans``; entries gone from their agent meanwhile are skipped)."""
        fid = framework.id
        for agent, item in self.orphans.pop(fid, ()):
            if self.agents.get(agent.id) is not agent:
                continue  # the agent was removed since
            if isinstance(item, TaskRecord):
                if agent.tasks.get((fid, item.id)) is item and item.id not in framework.tasks:
                    framework.tasks[item.id] = item
                    self.allocator.allocated(fid, item.resources)
            elif item in agent.executors:
                self.allocator.allocated(fid, agent.executors[item].resources)

    def _check_agent(self, conn: Any, agent: AgentInfo, call: str) -> Resources | None:
        remote = conn.remote(AGENT)
        if isinstance(conn.tag, FrameworkTag):
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

    def _add_agent(self, conn: Any, info: AgentInfo, total: Resources, *, connected: bool = True) -> AgentRecord:
        record = AgentRecord(id=info.agent_id, info=info, conn=conn, total=total, free=total,
                             connected=connected, offerable=self.offerable,
                             min_offer=effective_min_offer(self.min_offer, total),
                             long_limit=long_tasks.long_task_limit(self.config.long_task_fraction, total))
        self.agents[record.id] = record
        self._attach_agent(conn, record.id)
        self.allocator.add_agent(record.id, total)
        log.info("agent registered", agent=record.id, hostname=info.hostname, resources=str(total))
        self.observe.mezzo_agent_added(agent=info)
        self.request_allocation()
        return record

    def _remove_agent(self, agent: AgentRecord, reason: str, *, notify: bool = True) -> None:
        """Declare ``agent`` lost: TASK_LOST for its tasks, ``agent_lost`` to every
        framework (unless not ``notify``: it never was registered), out of the registry."""
        self.registry.remove(agent.id)
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
            self.observe.mezzo_task_status(framework_id=task.framework_id, status=status)
            if record is not None:
                self._tell_status(record, status)
        for key in list(agent.executors):
            self._release_executor(agent, key)
        self.refusals.clear_agent(agent.id)
        del self.agents[agent.id]
        self.offerable.pop(agent.id, None)
        agent.offerable = None
        self.allocator.remove_agent(agent.id, agent.total)
        for record in self.frameworks.values() if notify else ():
            if record.conn is not None:
                record.conn.remote(SCHEDULER).agent_lost(agent.id)
        log.warning("agent removed", agent=agent.id, reason=reason)
        self.observe.mezzo_agent_removed(agent_id=agent.id, reason=reason)

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

    def executor_exited(self, conn: Any, agent_id: str, framework_id: str, executor_id: str,
                        exit_status: int, message: str) -> None:
        agent = self._agent_of(conn, "executor_exited", agent_id)
        if agent is None:
            return
        self._release_executor(agent, (framework_id, executor_id))
        log.info("executor exited", agent=agent.id, framework=framework_id, executor=executor_id,
                 status=exit_status, message=message)
        record = self.frameworks.get(framework_id)
        if record is not None and record.conn is not None:
            record.conn.remote(SCHEDULER).executor_lost(agent.id, executor_id, exit_status or 0)
        self.request_allocation()

    def executor_to_framework(self, conn: Any, agent_id: str, framework_id: str, executor_id: str,
                              data: bytes) -> None:
        agent = self._agent_of(conn, "executor_to_framework", agent_id)
        record = self.frameworks.get(framework_id)
        if agent is not None and record is not None and record.conn is not None:
            record.conn.remote(SCHEDULER).framework_message(agent.id, executor_id, data or b"")


def _safe_resources(wire: Any) -> Resources:
    try:
        return Resources.of(wire)
    except InvalidResources:
        return Resources()
