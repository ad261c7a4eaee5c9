"""Task calls of the master: launch, kill, status updates, acknowledgements,
reconciliation and framework-to-executor messages.

Part of :class:`mezzo.master.Master` (a mixin over the master's state). Launch
validation itself lives in :mod:`.launch` (pure functions); this module applies
the outcome: consumed offers, unused resources handed back with a refuse filter,
tasks sent to their agent, rejections answered with their reasons.
"""

from __future__ import annotations

import time
from typing import Any

import structlog

from .. import is_terminal, state_name
from ..resources import Resources
from ..services import AGENT, SCHEDULER
from ..wire.ttypes import Filters, TaskInfo, TaskState, TaskStatus
from . import launch as launch_rules
from . import long_tasks
from .records import AgentRecord, FrameworkRecord, TaskRecord
from .registry import REFUSE

log = structlog.get_logger("mezzo.master", component="master")


class TaskCalls:
    """``launch_tasks``, ``kill_task``, ``status_update``, ``acknowledge_status_update``,
    ``reconcile_tasks``, ``framework_to_executor`` and releasing what tasks held."""

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
            self.observe.mezzo_task_status(framework_id=framework_id, status=status)
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
        if plan.accepted and self.revocation is not None:
            self.revocation.launched(record.id)
        self.request_allocation()

    def _give_back(self, record: FrameworkRecord, agent: AgentRecord | None, resources: Resources,
                   refuse: float) -> None:
        self.allocator.recovered(record.id, resources)
        if agent is not None and resources:
            self._free_up(agent, resources)
            if refuse > 0:
                self.refusals.add(record.id, agent.id, resources, self.now + refuse, agent.free)

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
        long_tasks.task_started(agent, tr)
        if self.short_tasks is not None:
            self.short_tasks.task_started(tr)
        log.info("launching task", framework=record.id, agent=agent.id, task=task.task_id,
                 resources=accepted.resources)  # rendered only if logged
        agent.conn.remote(AGENT).run_task(record.info, task)

    def kill_task(self, conn: Any, framework_id: str, task_id: str) -> None:
        record = self._framework_of(conn, framework_id, "kill_task")
        if record is None:
            return
        task = record.tasks.get(task_id)
        agent = self.agents.get(task.agent_id) if task is not None else None
        if task is None or agent is None:
            conn.remote(SCHEDULER).status_update(TaskStatus(
                task_id=task_id if isinstance(task_id, str) else "", state=TaskState.TASK_LOST,
                reason="unknown_task", message="kill_task: the master knows no such running task",
                source="master", framework_id=framework_id, timestamp=time.time(),
            ))
            return
        if agent.conn is None:
            # Sent when the agent re-registers (or moot if it is declared lost).
            log.info("kill deferred: agent disconnected", framework=framework_id, task=task_id, agent=agent.id)
            agent.pending_kills.add((framework_id, task_id))
            task.kill_requested = True
            return
        log.info("killing task", framework=framework_id, task=task_id, agent=agent.id)
        task.kill_requested = True
        agent.conn.remote(AGENT).kill_task(framework_id, task_id)

    def status_update(self, conn: Any, status: TaskStatus) -> None:
        if not isinstance(status, TaskStatus):
            self._agent_of(conn, "status_update")  # logs who sent it
            return
        agent = self._agent_of(conn, "status_update", status.agent_id)
        if agent is None:
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
                if self.revocation is not None:
                    self.revocation.task_ended(task, agent)
                self.completed_tasks.append(task)
                self.request_allocation(prompt=True)
        self.observe.mezzo_task_status(framework_id=fid, status=status)
        if record is None:
            # Nobody will acknowledge for a framework that is gone: do it for it so the
            # agent's stream does not retry forever.
            if status.uuid:
                conn.remote(AGENT).status_update_acknowledged(fid, status.task_id, status.uuid)
            return
        self._tell_status(record, status)

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
        # After a failover, "unknown" may only mean "its agent has not re-registered
        # yet": answer once recovery is over.
        if not self.recovery.defer(lambda: self._reconcile(conn, record, statuses)):
            self._reconcile(conn, record, statuses)

    def _reconcile(self, conn: Any, record: FrameworkRecord, statuses: list[TaskStatus]) -> None:
        """Answer the latest state this master knows of each task (every task of the
        framework when ``statuses`` is empty), as status updates with no uuid."""
        framework_id = record.id
        scheduler = conn.remote(SCHEDULER)
        wanted = [s.task_id for s in statuses or () if s is not None] or list(record.tasks)
        for tid in wanted:
            task = record.tasks.get(tid)
            if task is None:
                done = next((t for t in reversed(self.completed_tasks)
                             if t.framework_id == framework_id and t.id == tid), None)
                if done is None:
                    scheduler.status_update(self._unknown_task_status(framework_id, tid, statuses))
                    continue
                task = done
            scheduler.status_update(TaskStatus(
                task_id=tid, state=task.state, reason="reconciliation", message=task.message,
                source="master", agent_id=task.agent_id, executor_id=task.executor_id,
                framework_id=framework_id, timestamp=time.time()))

    def _unknown_task_status(self, framework_id: str, task_id: str, statuses: list[TaskStatus]) -> TaskStatus:
        """The answer for a task this master has no record of, from what it knows of
        the agent the framework names (as Apache Mesos answers):

        - the agent is registered here and does not hold the task: it never got
          there (a launch lost with a failed master) or is long gone, TASK_DROPPED;
        - the agent was declared lost: TASK_LOST;
        - otherwise (no agent named, or one this master has not heard from):
          TASK_UNKNOWN, which is not terminal.
        """
        agent_id = next((s.agent_id for s in statuses or () if s is not None and s.task_id == task_id), "")
        agent_id = agent_id if isinstance(agent_id, str) else ""
        state, message = TaskState.TASK_UNKNOWN, "the master knows no such task"
        if agent_id in self.agents:
            state, message = TaskState.TASK_DROPPED, f"agent {agent_id} does not hold this task"
        elif agent_id and self.registry.verdict(agent_id) == REFUSE:
            state, message = TaskState.TASK_LOST, f"agent {agent_id} was declared lost"
        return TaskStatus(task_id=task_id, state=state, reason="reconciliation", message=message,
                          source="master", agent_id=agent_id, framework_id=framework_id,
                          timestamp=time.time())

    def _release_task(self, task: TaskRecord, agent: AgentRecord | None) -> None:
        """Free a task's resources: it ended, or its framework or agent went away."""
        framework = self.frameworks.get(task.framework_id)
        if framework is not None:
            framework.tasks.pop(task.id, None)
            self.allocator.recovered(task.framework_id, task.resources)
        if agent is not None and agent.tasks.pop((task.framework_id, task.id), None) is not None:
            long_tasks.task_released(agent, task)
            self._free_up(agent, task.resources)

    def _release_executor(self, agent: AgentRecord, key: tuple[str, str]) -> None:
        executor = agent.executors.pop(key, None)
        if executor is None:
            return
        resources = Resources.of(executor.resources)
        self._free_up(agent, resources)
        if key[0] in self.frameworks:
            self.allocator.recovered(key[0], resources)

    def framework_to_executor(self, conn: Any, framework_id: str, agent_id: str, executor_id: str,
                              data: bytes) -> None:
        record = self._framework_of(conn, framework_id, "framework_to_executor")
        agent = self.agents.get(agent_id)
        if record is not None and agent is not None and agent.conn is not None:
            agent.conn.remote(AGENT).framework_to_executor(framework_id, executor_id, data or b"")
