"""How agents come, go and come back.

An agent that loses its link keeps its tasks for ``master.agent_reregister_timeout``;
one that comes back in time is re-attached with everything it runs, one that does
not is removed and its tasks reported TASK_LOST. So is one that stops answering
pings (:mod:`.health`). Both are *unreachable* rather than gone (the registry lists
them so): the tasks of partition-aware frameworks (``PARTITION_AWARE``) are reported
TASK_UNREACHABLE instead, and should the agent come back, they are adopted and their
frameworks told their state again, while the tasks of the other frameworks, reported
lost, are killed without a word (:meth:`AgentLifecycle._adopt`).

Whether an agent unknown to this master may re-register is the registry's call
(:mod:`.registry`): an admitted one (after a failover) is adopted with its tasks,
executors and frameworks, as far as its total goes (what does not fit is killed, reason
``agent_overcommitted``); one declared lost is told to start over. A big report is
adopted :data:`ADOPT_CHUNK` tasks per turn of the loop, so that no message holds the
master for long (issue 14): see :meth:`AgentLifecycle._adopt`.

Callers (:mod:`.service`) have checked who is calling, validated the input and
keep track of which link carries which agent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from .. import is_terminal, state_name
from ..resources import InvalidResources, Resources
from ..wire.ttypes import AgentInfo, ExecutorInfo, FrameworkInfo, KillPolicy, RunningTask, TaskState
from . import long_tasks
from .agent_removals import RemovalLimit
from .allocation import effective_min_offer
from .audit import principal_of
from .records import AgentRecord, FrameworkRecord, TaskRecord
from .registry import MAX_UNREACHABLE, REFUSE, UNREACHABLE

if TYPE_CHECKING:
    from .framework_lifecycle import FrameworkLifecycle
    from .ports import Timer
    from .recovery import Recovery
    from .state import ClusterState

log = structlog.get_logger("mezzo.master", component="master")

OVERCOMMITTED = "agent_overcommitted"
"""``TaskStatus.reason`` of the kill updates of a task a re-registering agent reported
that did not fit in what was left of the agent's total (see :meth:`AgentLifecycle._adopt`)."""

ADOPT_CHUNK = 250
"""The most tasks (and the most executors, and frameworks) of a re-registering agent's
report adopted in one turn of the loop (:meth:`AgentLifecycle._adopt`): 3 to 6 ms of
work (10 to 26 µs a task in a real master, bench/message_stalls.py). A report of
150,000 tasks held the loop 3.8 s in one go; chunks of 1,000 (10 to 35 ms each) still
kept a peer's answer waiting up to 60 ms, behind the chunks run before the turn that
read its request and before the turn that sent the answer."""


class AgentLifecycle:
    """Agent registration, re-registration, loss and executors over one :class:`ClusterState`."""

    def __init__(self, state: ClusterState, frameworks: FrameworkLifecycle, recovery: Recovery) -> None:
        self.state = state
        self.frameworks = frameworks
        self.recovery = recovery
        config = state.config
        self.removal_limit = RemovalLimit(
            state.clock, fraction=config.agent_removal_fraction, window=config.agent_removal_window
        )
        """How many agents may be declared lost at once (:mod:`.agent_removals`)."""
        self.adopting: dict[str, _Adoption] = {}
        """Agents whose report is being adopted, or whose adoption was cut short by the
        loss of their link (they finish it when they re-register), by id."""

    def register(self, link: Any, info: AgentInfo, total: Resources) -> AgentRecord:
        """A new agent: given an id, and offered once the registry has admitted it.

        Not offered before: were this master to die first, the next one would refuse
        the agent, and tasks launched on it would be orphans. A failed registry write
        removes it again and closes its link.
        """
        state = self.state
        aid = info.agent_id = state.new_agent_id()
        record = self._add(link, info, total, connected=False)

        def admitted(ok: bool) -> None:
            if state.agents.get(aid) is not record:
                return  # removed meanwhile, or another leadership term
            if not ok:
                log.warning("agent not admitted: the registry write failed", agent=aid)
                self.remove(record, "could not be recorded in the registry", notify=False)
                state.outbox.close(link)
                return
            if record.conn is link:
                record.connected = True
                state.outbox.agent(link).registered(aid)
                state.request_allocation()

        state.registry.admit(aid, record.principal, admitted)
        return record

    def reregister(
        self,
        link: Any,
        info: AgentInfo,
        total: Resources,
        tasks: list[RunningTask],
        executors: list[ExecutorInfo],
        frameworks: Iterable[FrameworkInfo],
    ) -> bool:
        """An agent that had an id is back on ``link``; False if it is refused.

        - Known here: re-attached, and what it reports squared with what is held
          for it (:meth:`_reconcile`).
        - Unknown and refused by the registry (declared lost, or never admitted): told
          to kill its tasks and register anew, since they were reported lost already.
        - Unknown but admitted (this master is new, or restarted): its word is taken
          for what runs on it (:meth:`_adopt`), so that is not offered twice.
          ``reregistered`` is sent once that is done: at once for a report of at
          most :data:`ADOPT_CHUNK` tasks, else some turns of the loop later.
        - Known here but its adoption unfinished (its link was lost or replaced
          meanwhile): squared with what it reports (:meth:`_reconcile`), and the
          rest of the report adopted.
        """
        state = self.state
        aid = info.agent_id
        record = state.agents.get(aid)
        if record is not None:
            if record.removal_handle is not None:
                record.removal_handle.cancel()
                record.removal_handle = None
            record.conn = link
            unfinished = self.adopting.pop(aid, None)
            if unfinished is not None:
                unfinished.stop()
                record.info = info
                log.info("agent re-registered before its adoption ended; adopting the rest", agent=aid)
                # What is not held yet is the rest of the report, adopted next: not killed.
                self._reconcile(record, tasks, executors, kill_unheld=False)
                state.observe.mezzo_agent_added(agent=info)
                state.events.agent_added(record)
                self._start_adoption(record, link, tasks, executors, frameworks)
                return True
            record.connected = True
            record.info = info
            log.info("agent re-registered", agent=aid, hostname=info.hostname)
            self._reconcile(record, tasks, executors)
            state.observe.mezzo_agent_added(agent=info)
            state.events.agent_added(record)
        elif state.registry.verdict(aid) == REFUSE:
            log.warning(
                "refusing re-registration of a lost or unknown agent",
                agent=aid,
                hostname=info.hostname,
                tasks=len(tasks),
            )
            state.outbox.agent(link).reregistration_refused(
                aid,
                f"agent {aid} is not admitted in this cluster (declared lost, or never registered): "
                "kill its tasks and register as a new agent",
            )
            return False
        else:
            # Not connected (so not offered) until its report is adopted: what is free
            # on it is not known before.
            returning = state.registry.verdict(aid) == UNREACHABLE
            record = self._add(link, info, total, connected=False)
            record.was_unreachable = returning
            if returning:
                log.info("unreachable agent is back", agent=aid, hostname=info.hostname, tasks=len(tasks))
            self._start_adoption(record, link, tasks, executors, frameworks)
            return True
        state.outbox.agent(link).reregistered(aid)
        state.request_allocation()
        return True

    def _add(self, link: Any, info: AgentInfo, total: Resources, *, connected: bool = True) -> AgentRecord:
        state = self.state
        record = AgentRecord(
            id=info.agent_id,
            info=info,
            conn=link,
            total=total,
            free=total,
            connected=connected,
            offerable=state.offerable,
            min_offer=effective_min_offer(state.min_offer, total),
            long_limit=long_tasks.long_task_limit(state.config.long_task_fraction, total),
        )
        record.principal = principal_of(link)
        state.agents[record.id] = record
        state.allocator.add_agent(record.id, total)
        log.info("agent registered", agent=record.id, hostname=info.hostname, resources=str(total))
        state.observe.mezzo_agent_added(agent=info)
        state.events.agent_added(record)
        state.request_allocation()
        return record

    def _start_adoption(
        self,
        agent: AgentRecord,
        link: Any,
        running: Iterable[RunningTask],
        executors: Iterable[ExecutorInfo],
        frameworks: Iterable[FrameworkInfo],
    ) -> None:
        """Adopt what ``agent`` reported on ``link`` (:meth:`_adopt`), a chunk per turn."""
        job = _Adoption(agent, link, self._adopt(agent, running, executors, frameworks))
        self.adopting[agent.id] = job
        self._adopt_chunk(job)

    def _adopt_chunk(self, job: _Adoption) -> None:
        """Adopt the next :data:`ADOPT_CHUNK` items of ``job``'s report; then, if more
        are left, hold the agent's link and come back on the loop's next turn, once the
        I/O ready by then is served, else the agent is connected (:meth:`_adopted`). A
        job whose agent was removed or whose link was lost or replaced meanwhile stops."""
        job.timer = None
        agent = job.agent
        if (
            self.adopting.get(agent.id) is not job
            or self.state.agents.get(agent.id) is not agent
            or agent.conn is not job.link
        ):
            job.stop()
            return
        if next(job.steps, _DONE) is _DONE:
            self._adopted(job)
            return
        if job.release is _no_release:
            job.release = self.state.outbox.hold_reading(job.link)
        # A timer due now, not call_soon: a turn of the loop runs the callbacks asked
        # for with call_soon first, then those of the I/O that is ready, then the
        # timers due. So what other peers sent meanwhile is read before the next
        # chunk, and the answers it queued go out before the one after.
        job.timer = self.state.clock.call_later(0, self._adopt_chunk, job)

    def _adopted(self, job: _Adoption) -> None:
        """The whole report is adopted: the agent is connected (offered from now on),
        told ``reregistered``, and its link read again."""
        state = self.state
        agent = job.agent
        aid = agent.id
        del self.adopting[aid]
        agent.connected = True
        if agent.was_unreachable:
            self._settle_missing(agent)
        agent.was_unreachable = False
        state.registry.admit(aid, agent.principal, _ignore)
        self.recovery.agent_back(aid)
        state.outbox.agent(job.link).reregistered(aid)
        state.request_allocation()
        job.release()

    def stop(self) -> None:
        """The term ends: adoptions stop where they are. Their links are not released:
        the master drops every link of the term."""
        for job in self.adopting.values():
            if job.timer is not None:
                job.timer.cancel()
                job.timer = None
        self.adopting.clear()

    def _adopt(
        self,
        agent: AgentRecord,
        running: Iterable[RunningTask],
        executors: Iterable[ExecutorInfo],
        frameworks: Iterable[FrameworkInfo],
    ) -> Generator[None, None, None]:
        """Record tasks and executors an agent reports: a generator that stops after
        every :data:`ADOPT_CHUNK` tasks (executors, frameworks), driven a chunk per
        turn of the loop by :meth:`_adopt_chunk`.

        While it runs the agent is not connected, so not offered (what is free on it
        is known only at the end), and its link is held (``Outbox.hold_reading``):
        its next messages (status updates of tasks not adopted yet, a second
        re-registration) wait until it is done. Between chunks, anything else may
        happen: a framework it names registering (its tasks adopted so far are
        claimed from :attr:`ClusterState.orphans`, the next ones go to it at once)
        or removed (the agent is told to shut it down, and its tasks adopted later
        end as the agent reports them ended); the agent removed or its link lost
        (the adoption stops; an agent that re-registers squares what was adopted with
        what it reports, and the rest is adopted then); the term ended (stopped by
        :meth:`stop`). A report of at most :data:`ADOPT_CHUNK` tasks, executors and
        frameworks is adopted in one turn.

        Frameworks it names that this master does not know are recovered
        (:meth:`FrameworkLifecycle.recover`): their tasks are theirs again at once,
        and their schedulers have a while to come back. Tasks of frameworks the agent
        gave no info for stay on the agent record (their resources stay used) and
        join their framework when it registers (:attr:`ClusterState.orphans`).

        Its word is taken only as far as its total goes, so the books never hold
        more than the agent has:

        - an executor listed twice is taken once (the first entry; the repeat is
          logged);
        - executors, then tasks, in the order listed, are taken while they fit in
          what is left of the agent's total. One that does not fit is not adopted
          (a warning names the agent and what is short): each such task, and each
          task of such an executor, is killed on the agent the way the master kills
          for its own reasons (``KillPolicy``, reason :data:`OVERCOMMITTED`, see
          :meth:`_refuse_task`), so its framework hears TASK_KILLED with that reason
          from the agent, once and reliably, rather than a TASK_LOST from here
          followed by the agent's own end of the task.
        """
        state = self.state
        done = 0  # frameworks (then executors, then tasks) adopted this turn
        for info in frameworks:
            if done == ADOPT_CHUNK:
                yield
                done = 0
            done += 1
            fid = info.framework_id if isinstance(info, FrameworkInfo) else None
            if (
                isinstance(fid, str)
                and fid
                and fid not in state.frameworks
                and fid not in state.removed_frameworks
            ):
                self.frameworks.recover(info)
        listed: set[tuple[str, str]] = set()
        refused_executors: set[tuple[str, str]] = set()
        done = 0
        for ex in executors:
            if done == ADOPT_CHUNK:
                yield
                done = 0
            done += 1
            if ex is None or not isinstance(ex.framework_id, str) or not isinstance(ex.executor_id, str):
                continue
            key = (ex.framework_id, ex.executor_id)
            if key in listed:
                log.warning(
                    "re-registering agent listed an executor twice; taken once",
                    agent=agent.id,
                    framework=ex.framework_id,
                    executor=ex.executor_id,
                )
                continue
            listed.add(key)
            if key in agent.executors:
                continue  # held already: an adoption resumed (see reregister)
            res = _safe_resources(ex.resources)
            ex.resources = res
            if not res.fits_in(agent.free):
                refused_executors.add(key)
                log.warning(
                    "re-registering agent reports an executor that does not fit in what is left of "
                    "its total; not adopted, its tasks are killed",
                    agent=agent.id,
                    framework=ex.framework_id,
                    executor=ex.executor_id,
                    resources=str(res),
                    short="; ".join(res.shortfall(agent.free)),
                    total=str(agent.total),
                )
                continue
            state.add_executor(agent, key, ex)
            agent.free = agent.free - res
            if ex.framework_id in state.frameworks:
                state.allocator.allocated(ex.framework_id, res)
            else:
                state.orphans.setdefault(ex.framework_id, []).append((agent, key))
        refused: set[tuple[str, str]] = set()
        shut_down: set[str] = set()
        done = 0
        for rt in running:
            if done == ADOPT_CHUNK:
                yield
                done = 0
            done += 1
            t = rt.task if rt is not None else None
            fid = rt.framework_id if rt is not None else None
            if t is None or not isinstance(fid, str) or not fid or not isinstance(t.task_id, str):
                continue
            latest = rt.latest
            task_state = (
                latest.state
                if latest is not None and isinstance(latest.state, int)
                else TaskState.TASK_STAGING
            )
            if (fid, t.task_id) in agent.tasks or (fid, t.task_id) in refused:
                continue
            framework = state.frameworks.get(fid)
            unreachable: TaskRecord | None = None
            if agent.was_unreachable:
                if framework is None and fid in state.removed_frameworks:
                    # Removed while its agent was away (its tasks were ended then).
                    if fid not in shut_down:
                        shut_down.add(fid)
                        state.outbox.agent(agent.conn).shutdown_framework(fid)
                    continue
                if framework is not None:
                    unreachable = framework.unreachable_tasks.get(t.task_id)
                    if unreachable is not None and unreachable.agent_id != agent.id:
                        unreachable = None  # the same id on another agent: not this one's
                    if unreachable is not None:
                        del framework.unreachable_tasks[t.task_id]
                        state.forget_unreachable(unreachable)
                    elif not self._told_unreachable(agent, framework):
                        self._kill_quietly(agent, fid, t.task_id, task_state)
                        continue
            res = _safe_resources(t.resources)
            tr = TaskRecord(framework_id=fid, agent_id=agent.id, info=t, resources=res, state=task_state)
            if latest is not None:
                tr.message, tr.reason = latest.message or "", latest.reason or ""
                tr.exit_code = latest.exit_code
            if agent.was_unreachable and framework is not None and unreachable is not None:
                tr.statuses = unreachable.statuses  # its history goes on
            if is_terminal(task_state):
                # Its end is still being reported: nothing to hold, but reconciliation
                # must know how it ended, and the report, from this agent, must go on.
                # Not into the history: an agent re-registering again would add it again.
                state.task_ended(tr, history=False)
                agent.unadopted_tasks.add((fid, t.task_id))
                continue
            if t.executor is not None and (fid, tr.executor_id) in refused_executors:
                refused.add((fid, t.task_id))
                self._refuse_task(agent, tr, f"its executor {tr.executor_id!r} does not fit")
                continue
            if not res.fits_in(agent.free):
                refused.add((fid, t.task_id))
                self._refuse_task(agent, tr, "; ".join(res.shortfall(agent.free)))
                continue
            agent.free = agent.free - res
            state.add_task(agent, tr)
            if framework is None:
                state.orphans.setdefault(fid, []).append((agent, tr))
            elif t.task_id not in framework.tasks:
                framework.tasks[t.task_id] = tr
                state.allocator.allocated(fid, res)
                state.events.task_added(tr, framework)  # adopted: new to this master
                if agent.was_unreachable:
                    # Told TASK_UNREACHABLE (by this master or an earlier one): say it is back.
                    status = state.master_status(
                        tr, task_state, "agent_reregistered", f"agent {agent.id} is reachable again"
                    )
                    state.tell_status(framework, status)
                    if unreachable is not None and unreachable.kill_requested:
                        tr.kill_requested = True  # asked while it was out of reach
                        state.outbox.agent(agent.conn).kill_task(fid, t.task_id)

    def _settle_missing(self, agent: AgentRecord) -> None:
        """``agent`` is back and its report adopted: the tasks of partition-aware
        frameworks that were unreachable on it and that it did not report (a launch
        lost on the way, or ended and forgotten meanwhile) are lost after all (TASK_LOST,
        reason ``task_missing_on_agent``): their frameworks were told only that they
        were out of reach."""
        self._settle_unreachable(agent.id, "task_missing_on_agent", f"agent {agent.id} came back without it")

    def _settle_unreachable(self, agent_id: str, reason: str, message: str) -> None:
        """The tasks still held as unreachable on ``agent_id`` end as TASK_LOST with
        ``reason``: told only that they were out of reach, their frameworks learn
        they will not come back."""
        state = self.state
        for fid, tid in sorted(state.unreachable_on.pop(agent_id, ())):
            framework = state.frameworks.get(fid)
            task = framework.unreachable_tasks.get(tid) if framework is not None else None
            if framework is None or task is None or task.agent_id != agent_id:
                continue
            del framework.unreachable_tasks[tid]
            task.state, task.reason, task.message = TaskState.TASK_LOST, reason, message
            task.updated_at = time.time()
            task.moved_to(task.state, task.updated_at, task.reason, message, "master")
            state.events.task_updated(task, framework)
            state.task_ended(task)
            status = state.master_status(task, TaskState.TASK_LOST, reason, message)
            state.observe.mezzo_task_status(framework_id=fid, status=status)
            state.tell_status(framework, status)

    def _told_unreachable(self, agent: AgentRecord, framework: FrameworkRecord) -> bool:
        """Whether ``framework``'s tasks on ``agent``, which it does not hold as
        unreachable, were told TASK_UNREACHABLE (kept) rather than TASK_LOST (killed).
        This master knows for an agent it declared unreachable itself: only those in
        :attr:`FrameworkRecord.unreachable_tasks` were (so a framework that turned
        partition-aware since is not told a lost task runs again). For one an earlier
        master declared, what the framework asks for now is all there is to go by."""
        if agent.id in self.state.declared_unreachable:
            return False
        return framework.partition_aware

    def _kill_quietly(self, agent: AgentRecord, fid: str, task_id: str, task_state: int) -> None:
        """A returning unreachable agent reports a task of a framework that is not
        partition-aware: that framework was told TASK_LOST when the agent was declared
        lost, so the task is killed and nothing more of it is reported (its agent's
        updates about it are acknowledged and dropped: this master does not hold it)."""
        if is_terminal(task_state):
            return  # ended while away: its end, too, goes unreported
        log.info(
            "killing a task reported lost, on an agent that came back",
            agent=agent.id,
            framework=fid,
            task=task_id,
        )
        self.state.outbox.agent(agent.conn).kill_task(
            fid,
            task_id,
            KillPolicy(
                reason="agent_removed",
                message=f"agent {agent.id} was declared lost; the task was reported lost",
            ),
        )

    def _refuse_task(self, agent: AgentRecord, task: TaskRecord, short: str) -> None:
        """A task a re-registering agent reported does not fit in what is left of
        its total: it is not adopted, and the agent is told to kill it for that
        reason (its framework hears TASK_KILLED, reason :data:`OVERCOMMITTED`, from
        the agent)."""
        message = (
            f"agent {agent.id} re-registered running more than its total "
            f"({agent.total}); this task did not fit: {short}"
        )
        log.warning(
            "re-registering agent reports a task that does not fit in what is left of its total; "
            "not adopted, killing it",
            agent=agent.id,
            framework=task.framework_id,
            task=task.id,
            resources=str(task.resources),
            short=short,
            total=str(agent.total),
        )
        agent.unadopted_tasks.add((task.framework_id, task.id))
        self._kill_overcommitted(agent, task.framework_id, task.id, message)

    def _kill_overcommitted(self, agent: AgentRecord, fid: str, task_id: str, message: str) -> None:
        """Have ``agent`` kill a task it holds beyond its total (reason :data:`OVERCOMMITTED`)."""
        self.state.outbox.agent(agent.conn).kill_task(
            fid, task_id, KillPolicy(reason=OVERCOMMITTED, message=message)
        )

    def _reconcile(
        self,
        agent: AgentRecord,
        running: list[RunningTask],
        executors: list[ExecutorInfo],
        *,
        kill_unheld: bool = True,
    ) -> None:
        """A known agent came back: square what this master holds for it with what it reports.

        - A task held here but not reported never reached the agent (its ``run_task``
          was lost with the old link) or ended unseen: its framework gets
          TASK_DROPPED if it never started, else TASK_LOST (reason
          ``task_missing_on_agent``), and its resources are freed.
        - An executor held here but not reported is gone: its resources are freed.
        - Tasks of frameworks this master removed: the agent is told to shut them down.
        - Other tasks reported but not held here (unless ``kill_unheld`` is False: an
          adoption resumes and takes them): killed, unreported (:meth:`_kill_quietly`);
          one refused at adoption and still running is told again why
          (:data:`OVERCOMMITTED`), its first kill lost with a link.
        - Kills asked for while the agent was away are sent now.
        """
        state = self.state
        reported = {
            (rt.framework_id, rt.task.task_id) for rt in running if rt is not None and rt.task is not None
        }
        for key, task in list(agent.tasks.items()):
            if key in reported:
                continue
            ended = TaskState.TASK_DROPPED if task.state == TaskState.TASK_STAGING else TaskState.TASK_LOST
            state.end_task(
                task,
                agent,
                ended,
                "task_missing_on_agent",
                f"agent {agent.id} re-registered without this task",
            )
            status = state.master_status(task, ended, task.reason, task.message)
            log.warning(
                "task missing on a re-registered agent",
                agent=agent.id,
                framework=task.framework_id,
                task=task.id,
                state=state_name(ended),
            )
            state.observe.mezzo_task_status(framework_id=task.framework_id, status=status)
            framework = state.frameworks.get(task.framework_id)
            if framework is not None:
                state.tell_status(framework, status)
        # Reported but not held: a task whose quiet kill (see _kill_quietly) was lost
        # with the agent's last link, or one refused when it was adopted. Its framework
        # was told it ended, or never heard of it: it must not run on, unaccounted.
        for rt in running if kill_unheld else ():
            if rt is None or rt.task is None or rt.framework_id in state.removed_frameworks:
                continue
            key = (rt.framework_id, rt.task.task_id)
            if key in agent.tasks:
                continue
            latest = rt.latest.state if rt.latest is not None else TaskState.TASK_STAGING
            if key not in agent.unadopted_tasks:
                self._kill_quietly(agent, rt.framework_id, rt.task.task_id, latest)
            elif not is_terminal(latest):  # refused at adoption; that kill was lost
                self._kill_overcommitted(
                    agent,
                    rt.framework_id,
                    rt.task.task_id,
                    f"agent {agent.id} re-registered running more than its total; this task did not fit",
                )
        live = {(ex.framework_id, ex.executor_id) for ex in executors if ex is not None}
        for key in [k for k in agent.executors if k not in live]:
            state.release_executor(agent, key)
        remote = state.outbox.agent(agent.conn)
        for fid in {fid for fid, _ in reported if fid in state.removed_frameworks}:
            remote.shutdown_framework(fid)
        kills, agent.pending_kills = agent.pending_kills, {}
        for (fid, tid), policy in kills.items():
            if (fid, tid) in agent.tasks:
                if policy is None:
                    remote.kill_task(fid, tid)  # the agent's own grace, as a framework's kill
                else:
                    remote.kill_task(fid, tid, policy)

    def remove_lost(self, agent: AgentRecord, reason: str) -> bool:
        """Declare ``agent`` lost (silent, or gone past its re-registration timeout)
        unless too many were this window (:mod:`.agent_removals`): then False, and the
        caller asks again later."""
        if not self.removal_limit.allow(len(self.state.agents), agent_id=agent.id, reason=reason):
            return False
        self.remove(agent, reason, unreachable=True)
        return True

    def remove(
        self, agent: AgentRecord, reason: str, *, notify: bool = True, unreachable: bool = False
    ) -> None:
        """Declare ``agent`` lost: TASK_LOST for its tasks, ``agent_lost`` to every
        framework (unless not ``notify``: it never was registered), out of the registry.
        With ``unreachable`` (lost for its silence) the registry lists it as unreachable
        and the tasks of partition-aware frameworks are TASK_UNREACHABLE instead."""
        state = self.state
        adoption = self.adopting.pop(agent.id, None)
        if adoption is not None:
            adoption.stop()
        if unreachable:
            for forgotten in state.registry.mark_unreachable(agent.id):
                # The oldest unreachable agent, listed no more: should it come back, it
                # is refused and kills what it runs. Its tasks will not come back.
                self._settle_unreachable(
                    forgotten,
                    "agent_forgotten",
                    f"agent {forgotten} stayed unreachable while {MAX_UNREACHABLE:,} more recent ones "
                    "were listed; it is refused should it come back",
                )
            state.declared_unreachable[agent.id] = None
            while len(state.declared_unreachable) > MAX_UNREACHABLE:
                state.declared_unreachable.popitem(last=False)
        else:
            state.registry.remove(agent.id)
        state.rescind_offers(list(agent.offers.values()), notify=True)
        for task in list(agent.tasks.values()):
            framework = state.frameworks.get(task.framework_id)
            if unreachable and framework is not None and framework.partition_aware:
                state.task_unreachable(task, agent, framework, f"agent {agent.id} unreachable: {reason}")
                status = state.master_status(task, TaskState.TASK_UNREACHABLE, task.reason, task.message)
            else:
                state.end_task(
                    task, agent, TaskState.TASK_LOST, "agent_removed", f"agent {agent.id} lost: {reason}"
                )
                status = state.master_status(task, TaskState.TASK_LOST, "agent_removed", task.message)
            state.observe.mezzo_task_status(framework_id=task.framework_id, status=status)
            if framework is not None:
                state.tell_status(framework, status)
        for key in list(agent.executors):
            state.release_executor(agent, key)
        state.refusals.clear_agent(agent.id)
        if agent.drain is not None and agent.drain.kill_timer is not None:
            agent.drain.kill_timer.cancel()  # nothing left to kill; the timer would hold the term
            agent.drain.kill_timer = None
        del state.agents[agent.id]
        state.offerable.pop(agent.id, None)
        agent.offerable = None
        state.allocator.remove_agent(agent.id, agent.total)
        if notify:
            state.tell_agent_lost(agent.id)
        log.warning("agent removed", agent=agent.id, reason=reason)
        state.observe.mezzo_agent_removed(agent_id=agent.id, reason=reason)
        state.events.agent_removed(agent.id, reason)

    def disconnected(self, agent: AgentRecord) -> None:
        """Its link is gone: offers rescinded, and removal unless it re-registers within
        ``master.agent_reregister_timeout``. An adoption under way stops (it goes on
        when the agent re-registers, see :meth:`reregister`)."""
        state = self.state
        adoption = self.adopting.get(agent.id)
        if adoption is not None:
            adoption.stop()
        agent.conn = None
        agent.connected = False
        state.rescind_offers(list(agent.offers.values()), notify=True)
        timeout = state.config.agent_reregister_timeout
        log.warning("agent disconnected", agent=agent.id, reregister_timeout=timeout)
        agent.removal_handle = state.clock.call_later(timeout, self._reregister_timed_out, agent.id)

    def _reregister_timed_out(self, agent_id: str) -> None:
        state = self.state
        agent = state.agents.get(agent_id)
        if agent is None or agent.connected:
            return
        if not self.remove_lost(
            agent, f"did not re-register within {state.config.agent_reregister_timeout:g} s"
        ):
            # Too many at once: ask again when the window has room.
            agent.removal_handle = state.clock.call_later(
                self.removal_limit.next_chance() + 0.01, self._reregister_timed_out, agent_id
            )

    def executor_exited(
        self, agent: AgentRecord, framework_id: str, executor_id: str, exit_status: int, message: str
    ) -> None:
        """An executor ended: its resources are free, its framework hears ``executor_lost``."""
        state = self.state
        state.release_executor(agent, (framework_id, executor_id))
        log.info(
            "executor exited",
            agent=agent.id,
            framework=framework_id,
            executor=executor_id,
            status=exit_status,
            message=message,
        )
        record = state.frameworks.get(framework_id)
        if record is not None and record.conn is not None:
            state.outbox.scheduler(record.conn).executor_lost(agent.id, executor_id, exit_status or 0)
        state.request_allocation()


_DONE = object()


def _no_release() -> None:
    return None


@dataclass(slots=True, eq=False)
class _Adoption:
    """One agent's report being adopted a chunk at a time (:meth:`AgentLifecycle._adopt`)."""

    agent: AgentRecord
    link: Any
    """The link the report came on: the adoption stops if the agent's link changes."""
    steps: Generator[None, None, None]
    timer: Timer | None = None
    """The next chunk, if one is due."""
    release: Callable[[], None] = _no_release
    """Releases the hold on the link's reading (set once a second turn is needed)."""

    def stop(self) -> None:
        """No more chunks; the link is read again."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.steps.close()
        self.release()


def _safe_resources(wire: Any) -> Resources:
    try:
        return Resources.of(wire)
    except InvalidResources:
        return Resources()


def _ignore(ok: bool) -> None:
    return None
