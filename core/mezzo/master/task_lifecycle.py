"""Tasks through the master: launch, kill, status updates, acknowledgements, reconciliation.

Launch validation itself is :func:`.launch.check_launch` (pure); this module
applies its outcome: the offers are consumed, what the accepted tasks do not use
goes back with the framework's refuse filter, the tasks go to their agent and the
rejected ones are answered with their reasons. Status updates flow from agents to
schedulers through here, and a task's terminal update frees what it held.

Callers (:mod:`.service`) have checked who is calling.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from .. import is_terminal, state_name
from ..resources import Resources
from ..wire.ttypes import Filters, TaskInfo, TaskState, TaskStatus
from . import launch as launch_rules
from .audit import refused
from .records import REASON_MAX, AgentRecord, FrameworkRecord, TaskRecord
from .registry import REFUSE, UNREACHABLE

if TYPE_CHECKING:
    from ..acls import Acls
    from .recovery import Recovery
    from .state import ClusterState

log = structlog.get_logger("mezzo.master", component="master")

RECONCILE_CHUNK = 2000
"""Reconciliation answers sent per turn of the event loop (about 10 ms of work)."""

TASK_UNKNOWN = "task_unknown"
"""``TaskStatus.reason`` of the answer to a kill of a task the master does not know."""


class TaskLifecycle:
    """Task launch, kill, status and reconciliation over one :class:`ClusterState`."""

    def __init__(self, state: ClusterState, recovery: Recovery, acls: Acls | None = None) -> None:
        self.state = state
        self.recovery = recovery
        self.acls = acls
        """The ``run_tasks`` ACL each task's user is checked against (None: no checks)."""
        self.limits = launch_rules.TaskLimits(
            data_bytes=state.config.max_task_data_bytes, metadata_bytes=state.config.max_task_metadata_bytes
        )
        self.updates_dropped = 0
        """Status updates about tasks the master does not hold (late resends, or made up),
        acknowledged to their agent and not forwarded (:meth:`_may_report`)."""
        self.resends_not_forwarded = 0
        """Agents' resends of updates their scheduler has not acknowledged yet, not forwarded
        again (:mod:`.forwarded_updates`)."""

    def launch(
        self,
        record: FrameworkRecord,
        offer_ids: list[str],
        tasks: list[TaskInfo],
        filters: Filters | None,
        groups: Sequence[tuple[int, int]] = (),
    ) -> None:
        """The framework answered ``offer_ids`` with ``tasks`` (the paper's replyToOffer);
        ``groups``: its task groups (:func:`~.launch.check_launch`)."""
        state = self.state
        plan = launch_rules.check_launch(
            record,
            offer_ids,
            tasks,
            state.offer_book.offers,
            state.agents,
            self.limits,
            self._may_run_as(record),
            groups,
        )
        scheduler = state.outbox.scheduler(record.conn)
        for status in plan.rejected:
            status.timestamp = time.time()
            if status.reason == launch_rules.TASK_UNAUTHORIZED:
                refused(
                    "run_tasks",
                    record.principal,
                    f"task {status.task_id}",
                    status.message,
                    getattr(record.conn, "peer", "?"),
                )
            log.info(
                "task rejected",
                framework=record.id,
                task=status.task_id,
                state=state_name(status.state),
                reason=status.reason,
                message=status.message,
            )
            state.observe.mezzo_task_status(framework_id=record.id, status=status)
            scheduler.status_update(status)
        agent = plan.agent
        # The offers are consumed: what the accepted tasks use stays allocated to
        # the framework, the rest goes back with the framework's refuse filter.
        refuse = state.refuse_seconds(filters)
        for offer in plan.offers:
            on = state.agents.get(offer.agent_id)
            state.offer_book.remove(offer, record, on)
            if agent is None:  # dropped launch: the whole offer comes back
                state.give_back(record, on, offer.resources, refuse)
        if agent is None:
            state.request_allocation()
            return
        unused = plan.offered - plan.used
        if unused:
            state.give_back(record, agent, unused, refuse)
        for accepted in plan.accepted:
            self._start(record, agent, accepted)
        if plan.accepted:
            for watcher in state.watchers:
                watcher.launched(record.id)
        state.request_allocation()

    def _start(self, record: FrameworkRecord, agent: AgentRecord, accepted: launch_rules.Accepted) -> None:
        task = accepted.task
        task.resources = accepted.resources
        if task.executor is not None:
            task.executor.framework_id = record.id
            task.executor.resources = Resources.of(task.executor.resources)
            if accepted.executor_resources is not None:
                self.state.add_executor(agent, (record.id, task.executor.executor_id), task.executor)
        tr = TaskRecord(framework_id=record.id, agent_id=agent.id, info=task, resources=accepted.resources)
        record.tasks[task.task_id] = tr
        self.state.add_task(agent, tr)
        self.state.events.task_added(tr, record)
        log.info(
            "launching task",
            framework=record.id,
            agent=agent.id,
            task=task.task_id,
            resources=accepted.resources,
        )  # rendered only if logged
        self.state.outbox.agent(agent.conn).run_task(record.info, task)

    def kill(self, record: FrameworkRecord, task_id: str) -> None:
        """The framework asks to kill ``task_id``: sent to its agent now, or when the
        agent re-registers (or comes back from unreachable: the kill is answered
        TASK_UNREACHABLE meanwhile); a task the master does not know is answered
        TASK_LOST, reason :data:`TASK_UNKNOWN`."""
        state = self.state
        unreachable = record.unreachable_tasks.get(task_id)
        if unreachable is not None:
            # It may still run, out of reach: killed if its agent comes back (and then
            # reported TASK_KILLED by it), not reported lost now. The answer says so,
            # so that a framework retrying its kill knows why nothing ends yet.
            unreachable.kill_requested = True
            log.info("kill deferred: agent unreachable", framework=record.id, task=task_id)
            status = state.master_status(
                unreachable,
                TaskState.TASK_UNREACHABLE,
                "agent_unreachable",
                f"kill_task: agent {unreachable.agent_id} is unreachable; the task is killed if it comes back",
            )
            state.tell_status(record, status)
            return
        task = record.tasks.get(task_id)
        agent = state.agents.get(task.agent_id) if task is not None else None
        if task is None or agent is None:
            state.outbox.scheduler(record.conn).status_update(
                TaskStatus(
                    task_id=task_id,
                    state=TaskState.TASK_LOST,
                    reason=TASK_UNKNOWN,
                    message="kill_task: the master knows no such running task",
                    source="master",
                    framework_id=record.id,
                    timestamp=time.time(),
                )
            )
            return
        task.kill_requested = True
        if agent.conn is None:
            # Sent when the agent re-registers (or moot if it is declared lost).
            log.info("kill deferred: agent disconnected", framework=record.id, task=task_id, agent=agent.id)
            agent.pending_kills.setdefault((record.id, task_id), None)
            return
        log.info("killing task", framework=record.id, task=task_id, agent=agent.id)
        state.outbox.agent(agent.conn).kill_task(record.id, task_id)

    def _may_run_as(self, record: FrameworkRecord) -> Callable[[str], bool] | None:
        """The ``run_tasks`` check of ``record``'s principal; None when every user is allowed."""
        acls = self.acls
        if acls is None or (acls.permissive and not acls.rules.get("run_tasks")):
            return None  # the common case without ACLs costs no call per task
        principal = record.principal
        return lambda user: acls.allows("run_tasks", principal, user)

    def status_update(self, agent: AgentRecord, status: TaskStatus) -> None:
        """An update from ``agent`` (the caller stamped ``status.agent_id`` with it):
        recorded, a terminal one frees what the task held, and it goes on to the
        framework's scheduler (held while none is connected; not again while a
        forward of it awaits the scheduler's acknowledgement). An update for a
        framework that is gone is acknowledged here, so the agent stops retrying it."""
        state = self.state
        fid = status.framework_id
        record = state.frameworks.get(fid)
        task = agent.tasks.get((fid, status.task_id))
        if task is None and record is not None and not self._may_report(agent, record, status):
            return
        if task is not None and isinstance(status.state, int):
            task.state = status.state
            task.message = status.message or ""
            task.reason = (status.reason or "")[:REASON_MAX]
            if status.exit_code is not None:
                task.exit_code = status.exit_code
            task.updated_at = time.time()
            task.moved_to(status.state, task.updated_at, task.reason, task.message, status.source or "")
            state.events.task_updated(task, record, status)
            if is_terminal(status.state):
                state.release_task(task, agent)
                for watcher in state.watchers:
                    watcher.task_ended(task, agent)
                state.task_ended(task)
                state.request_allocation(prompt=True)
        state.observe.mezzo_task_status(framework_id=fid, status=status)
        if record is None:
            if status.uuid:
                state.outbox.agent(agent.conn).status_update_acknowledged(fid, status.task_id, status.uuid)
            return
        if (
            status.uuid
            and record.conn is not None
            and record.forwarded.is_resend(status.uuid, record.conn, state.clock.now())
        ):
            # The scheduler has it, or has it queued: its acknowledgement is on its way.
            self.resends_not_forwarded += 1
            return
        state.tell_status(record, status)

    def _may_report(self, agent: AgentRecord, record: FrameworkRecord, status: TaskStatus) -> bool:
        """Whether ``agent`` may report on a task of ``record`` that it does not hold here.

        Yes for the resend of an update this master forwarded or holds (the task ended
        and was released; the scheduler's acknowledgement is not back yet: its uuid is
        random, so only the agent that sent it knows it) and for the end of a task its
        re-registration reported but that was not adopted (:attr:`AgentRecord.unadopted_tasks`:
        it had ended, or did not fit).

        Anything else goes no further (the scheduler would believe it: no agent reports
        on another's tasks, the finding of issue 15) and is acknowledged to the agent, so
        that it stops re-sending. An update about a task that runs on another agent is a
        forgery, or a badly confused agent: refused with an audit line. One about a task
        this master does not hold at all is, from an honest agent, a resend that arrived
        after the scheduler's acknowledgement of it (an overloaded master acknowledges
        late): counted (``status_updates_dropped``), not logged, since at 20,000 agents
        there are many and the scheduler already has it."""
        key = (record.id, status.task_id)
        uuid = status.uuid
        if uuid and (record.forwarded.knows(uuid) or uuid in record.held_updates):
            return True
        if key in agent.unadopted_tasks:
            if is_terminal(status.state):
                agent.unadopted_tasks.discard(key)
            return True
        held = record.tasks.get(status.task_id)
        if held is not None:
            refused(
                "status_update",
                agent.principal,
                f"task {status.task_id} of framework {record.id}",
                f"agent {agent.id} does not hold it; it runs on agent {held.agent_id}",
                getattr(agent.conn, "peer", "?"),
            )
        else:
            self.updates_dropped += 1
        if uuid and agent.conn is not None:
            self.state.outbox.agent(agent.conn).status_update_acknowledged(record.id, status.task_id, uuid)
        return False

    def acknowledge(self, record: FrameworkRecord, agent_id: str, task_id: str, uuid: str) -> None:
        """The scheduler acknowledged an update: the agent that sent it may forget it."""
        record.forwarded.acknowledged(uuid)
        agent = self.state.agents.get(agent_id)
        if agent is not None and agent.conn is not None:
            self.state.outbox.agent(agent.conn).status_update_acknowledged(record.id, task_id, uuid)

    def framework_to_executor(
        self, record: FrameworkRecord, agent_id: str, executor_id: str, data: bytes
    ) -> None:
        agent = self.state.agents.get(agent_id)
        if agent is not None and agent.conn is not None:
            self.state.outbox.agent(agent.conn).framework_to_executor(record.id, executor_id, data)

    def reconcile(self, record: FrameworkRecord, statuses: list[TaskStatus]) -> None:
        """Answer the latest state this master knows of each task named in
        ``statuses`` (every task of the framework when it is empty). After a
        failover "unknown" may only mean "its agent has not re-registered yet", so
        the answer waits until recovery is over."""
        if not self.recovery.defer(lambda: self._reconcile(record, statuses)):
            self._reconcile(record, statuses)

    def _reconcile(self, record: FrameworkRecord, statuses: list[TaskStatus]) -> None:
        state = self.state
        framework_id = record.id
        # Nothing here is proportional to the request: it is read a chunk at a time
        # (_answer). The completed tasks are bounded (master.max_completed_tasks).
        asked: list[TaskStatus] | list[str] = statuses or [*record.tasks, *record.unreachable_tasks]
        ended = {t.id: t for t in state.completed_tasks if t.framework_id == framework_id}
        self._answer(_Reconciliation(record, asked, {}, ended), 0)

    def _answer(self, job: _Reconciliation, start: int) -> None:
        """Answer ``RECONCILE_CHUNK`` of the tasks from ``start``, then let the loop run
        before the next chunk: a framework may ask about hundreds of thousands of
        tasks in one message, and the answers must not hold the loop for seconds."""
        state = self.state
        record = job.record
        if state.frameworks.get(record.id) is not record or record.conn is None:
            return  # gone, or disconnected, while the answer waited
        framework_id = record.id
        scheduler = state.outbox.scheduler(record.conn)
        end = min(start + RECONCILE_CHUNK, len(job.asked))
        named_agent = job.named_agent
        for asked in job.asked[start:end]:
            if isinstance(asked, str):  # implicit reconciliation: the framework's own tasks
                tid, agent_id = asked, ""
            else:
                tid = asked.task_id
                # The agent a task was first named with (later chunks repeat that one).
                agent_id = named_agent.setdefault(tid, asked.agent_id or "")
            task = record.tasks.get(tid) or record.unreachable_tasks.get(tid) or job.ended.get(tid)
            if task is None:
                scheduler.status_update(self._unknown_task_status(record, tid, agent_id))
                continue
            scheduler.status_update(
                TaskStatus(
                    task_id=tid,
                    state=task.state,
                    reason="reconciliation",
                    message=task.message,
                    source="master",
                    agent_id=task.agent_id,
                    executor_id=task.executor_id,
                    framework_id=framework_id,
                    timestamp=time.time(),
                )
            )
        if end < len(job.asked):
            state.clock.call_soon(self._answer, job, end)

    def _unknown_task_status(self, record: FrameworkRecord, task_id: str, agent_id: str) -> TaskStatus:
        """The answer for a task this master has no record of, from what it knows of
        the agent the framework names (as Apache Mesos answers):

        - the agent is registered here and does not hold the task: it never got
          there (a launch lost with a failed master) or is long gone, TASK_DROPPED;
        - the agent was declared lost: TASK_LOST; if for its silence (it may come
          back), TASK_UNREACHABLE to a partition-aware framework;
        - otherwise (no agent named, or one this master has not heard from):
          TASK_UNKNOWN, which is not terminal.
        """
        state = self.state
        framework_id = record.id
        task_state, message = TaskState.TASK_UNKNOWN, "the master knows no such task"
        verdict = state.registry.verdict(agent_id) if agent_id else None
        if agent_id in state.agents:
            task_state, message = TaskState.TASK_DROPPED, f"agent {agent_id} does not hold this task"
        elif verdict == UNREACHABLE and record.partition_aware:
            task_state, message = TaskState.TASK_UNREACHABLE, f"agent {agent_id} is unreachable"
        elif verdict in (REFUSE, UNREACHABLE):
            task_state, message = TaskState.TASK_LOST, f"agent {agent_id} was declared lost"
        return TaskStatus(
            task_id=task_id,
            state=task_state,
            reason="reconciliation",
            message=message,
            source="master",
            agent_id=agent_id,
            framework_id=framework_id,
            timestamp=time.time(),
        )


@dataclass(slots=True)
class _Reconciliation:
    """One framework's reconciliation request, answered a chunk at a time."""

    record: FrameworkRecord
    asked: list[TaskStatus] | list[str]
    """What the framework asked about, or the ids of all its tasks (implicit reconciliation)."""
    named_agent: dict[str, str]
    """The agent each task answered so far was first named with."""
    ended: dict[str, TaskRecord]
