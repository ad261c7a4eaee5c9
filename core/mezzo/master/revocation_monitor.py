"""Revocation (paper §3.3): watch for starved frameworks, and kill tasks for them.

The allocator says what each framework is guaranteed
(:meth:`~mezzo.hookspecs.Allocator.guaranteed_share`); the revocation policy
(``master.revocation_policy``) chooses victims; this module decides *when* to ask
it and does the killing. It runs only while ``master.revocation_delay`` is above 0.

About once a second (more often for short delays) the monitor checks every
framework that wants offers and has a connected scheduler:

- **Starved**: below its guarantee (:mod:`mezzo.guarantees`) and launched nothing
  for ``revocation_delay`` seconds (a launch, or a check finding it meeting its
  guarantee, restarts the wait). What it holds counts its tasks and the executors
  they run in, and what is being revoked for it already (not its offers, see below). Launches, not offers, because in a full cluster the
  offers a framework still gets are leftovers it cannot use (memory without cpus),
  and declining them is exactly what starving looks like. The price: a framework
  that wants offers with nothing to run looks starved too (it should call
  ``set_needs_offers(False)``), so a framework gets at most one round of
  revocations until it launches again.
- **Offers first**: if a framework above its guarantee has sat on offers for longer
  than the delay, those are rescinded (a task lost is work lost; an offer is not),
  held for the starved frameworks as below, and the policy is not asked this time.
- **Victims**: otherwise the policy gets the starved frameworks and every other
  framework's tasks that run on connected agents and are not being killed already.
  Each victim is checked (a task offered to the policy, named once), then killed
  with ``revocation_grace_period``: the agent asks the executor (SIGTERM for a
  command task), kills the process tree or the whole executor once the grace is
  over, and the framework sees ``TASK_KILLING``/``TASK_KILLED`` with reason
  ``revoked`` and the victim's reason as the message.
- **Held for the starved**: what a victim frees is refused to every other framework
  on that agent for ``HOLD_SECONDS``, so the allocator cannot hand it straight back
  (a strict-priority allocator would, and revocation would then kill in a loop).

A revocation still dying after its grace period plus ``STALE_AFTER`` (an agent that
never answers) is forgotten, so the task can be chosen again.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from .. import TERMINAL_STATES
from ..guarantees import above_guarantee, meets_guarantee, shortfall
from ..hookspecs import HeldTask, Holder, RevocationPolicy, Starved, Victim
from ..resources import Resources
from ..wire.ttypes import KillPolicy, TaskState
from .periodic import PeriodicCheck
from .records import AgentRecord, FrameworkRecord, TaskRecord, TaskTable

if TYPE_CHECKING:
    from .recovery import Recovery
    from .state import ClusterState

log = structlog.get_logger("mezzo.master", component="revocation")

HOLD_SECONDS = 5.0
"""How long what a revoked task freed is kept for the framework it was revoked for."""
STALE_AFTER = 30.0
"""Seconds past its grace period after which an unanswered revocation is forgotten."""
REVOKED_REASON = "revoked"
"""``TaskStatus.reason`` of the kill updates of a revoked task."""
_DYING_STATES = (TaskState.TASK_KILLING,)
_NOT_REVOCABLE = frozenset((*_DYING_STATES, *TERMINAL_STATES))
"""States of tasks never offered to the policy: dying or ended."""


@dataclass(slots=True)
class Revoking:
    """A task being killed by revocation."""

    framework_id: str
    task_id: str
    agent_id: str
    resources: Resources
    for_framework_id: str
    """The starved framework it was revoked for ("" for nobody in particular)."""
    reason: str
    at: float
    """Loop time of the kill."""


class RevocationMonitor(PeriodicCheck):
    """The revocation loop of one leadership term. See the module docstring.

    ``check()`` is the whole decision and can be called directly (the tests do);
    :meth:`start` runs it periodically on the state's clock.
    """

    log = log  # this module's logger, with its component

    def __init__(
        self, state: ClusterState, recovery: Recovery, policy: RevocationPolicy, *, delay: float, grace: float
    ) -> None:
        self.cluster = state
        self.recovery = recovery
        self.policy = policy
        self.delay = delay
        self.grace = grace
        self.interval = min(1.0, max(delay / 4, 0.05))
        """Seconds between checks: a starved framework waits at most this beyond ``delay``."""
        self.waiting_since: dict[str, float] = {}
        """Per framework that wants offers: loop time of its last launch, or of the
        latest check that found it meeting its guarantee (or of when it began to want
        offers, or of this monitor's start)."""
        self.served: set[str] = set()
        """Frameworks tasks were revoked for that have not launched anything since:
        not starved again until they do."""
        self.revoking: dict[tuple[str, str], Revoking] = {}
        """Tasks being killed by revocation, by (framework id, task id)."""
        self.tasks_revoked = 0
        self.offers_rescinded = 0
        self.recent: deque[dict[str, Any]] = deque(maxlen=20)
        """The latest revocations, for ``mezzo state``."""
        self.starved_now: list[Starved] = []
        """The starved frameworks of the latest check."""
        self._listed: set[str] = set()
        """The frameworks whose tasks the latest round offered to the policy."""

    # -- events from the master --------------------------------------------------

    def task_started(self, task: TaskRecord) -> None:
        """Nothing to do: a launch is what counts (:meth:`launched`)."""

    def launched(self, framework_id: str) -> None:
        """The framework just launched tasks: it is not starved (now)."""
        self.waiting_since.pop(framework_id, None)
        self.served.discard(framework_id)

    def task_ended(self, task: TaskRecord, agent: AgentRecord | None) -> None:
        """A task's terminal update arrived (its resources are free again). If it was
        revoked for a starved framework, hold what it freed for that framework."""
        entry = self.revoking.pop((task.framework_id, task.id), None)
        if entry is not None and entry.for_framework_id in self.cluster.frameworks:
            self._hold(agent, {entry.for_framework_id})

    def _hold(self, agent: AgentRecord | None, keep: set[str]) -> None:
        """Refuse what is free on ``agent`` to every framework but ``keep`` for
        ``HOLD_SECONDS`` (refuse filters lapse early once more is free there)."""
        state = self.cluster
        if agent is None or not agent.connected or not agent.free:
            return
        until = state.now() + HOLD_SECONDS
        for other in state.frameworks.values():
            if other.id not in keep:
                state.refusals.add(other.id, agent.id, agent.free, until, agent.free)

    # -- the check ----------------------------------------------------------------

    def check(self) -> list[Victim]:
        """One round: find the starved, rescind offers or revoke tasks. Returns the
        victims killed this round."""
        state = self.cluster
        if self.recovery.holding:
            return []
        now = state.now()
        self._forget_stale(now)
        coming = self._coming()
        starved: list[Starved] = []
        # Cheap first: only a framework that launched nothing for the whole delay can
        # be starved, and in a busy cluster that is few, so holdings are rarely summed.
        for record in state.frameworks.values():
            if not record.active or record.conn is None:
                self.waiting_since.pop(record.id, None)
                continue
            since = self.waiting_since.setdefault(record.id, now)
            if now - since < self.delay or record.id in self.served:
                continue
            guaranteed = state.allocator.guaranteed_share(record.id)
            if not guaranteed:
                continue
            # Its offers do not count here: in a full cluster they are leftovers it
            # cannot use (memory without cpus), held for the moment it takes to decline.
            have = holding(state, record, offers=False) + coming.get(record.id, Resources())
            if meets_guarantee(have, guaranteed):
                # The wait is for a framework *below* its guarantee: it starts over,
                # so one that drops below later waits the whole delay from then on.
                self.waiting_since[record.id] = now
            else:
                starved.append(Starved(record.id, shortfall(have, guaranteed), now - since))
        self.starved_now = starved
        for fid in [f for f in self.served if f not in state.frameworks]:
            self.served.discard(fid)
        if not starved:
            return []
        starving = {s.framework_id for s in starved}
        held: dict[str, Resources] = {}
        for record in state.frameworks.values():
            if record.id not in starving and (record.tasks or record.offers):
                held[record.id] = holding(state, record)
        if self._rescind_offers_above_guarantee(starving, held):
            return []
        holders = self._holders(starving, held)
        chosen = state.guard.call(self.policy, "select", starved, holders, default=None)
        try:
            victims = list(chosen) if chosen is not None else []
        except Exception as exc:  # an answer that is not a sequence of victims
            state.guard.failed(self.policy, "select", exc)
            return []
        return self._revoke(victims, holders, starving, now)

    def _coming(self) -> dict[str, Resources]:
        """Per starved framework, what the tasks being revoked for it will free."""
        coming: dict[str, Resources] = {}
        for entry in self.revoking.values():
            if entry.for_framework_id:
                coming[entry.for_framework_id] = (
                    coming.get(entry.for_framework_id, Resources()) + entry.resources
                )
        return coming

    def _rescind_offers_above_guarantee(self, starving: set[str], held: dict[str, Resources]) -> bool:
        """Rescind the offers that frameworks above their guarantee have sat on for
        longer than the delay; True if there were any. Younger offers are left
        alone: in a full cluster leftovers are offered all the time, and answered
        within milliseconds."""
        state = self.cluster
        offers = []
        old = time.time() - self.delay
        for record in state.frameworks.values():
            if record.id in starving or not record.offers:
                continue
            sat_on = [o for o in record.offers.values() if o.created_at <= old]
            if sat_on and above_guarantee(
                held.get(record.id, Resources()), state.allocator.guaranteed_share(record.id)
            ):
                offers.extend(sat_on)
        if not offers:
            return False
        log.info(
            "rescinding offers of frameworks above their guarantees for starved frameworks",
            offers=len(offers),
            starved=sorted(starving),
        )
        self.offers_rescinded += len(offers)
        state.rescind_offers(offers, notify=True)
        for agent_id in {o.agent_id for o in offers}:
            self._hold(state.agents.get(agent_id), starving)
        return True

    def _holders(self, starving: set[str], held: dict[str, Resources]) -> list[Holder]:
        """Every framework but the starved with a task the policy could be offered. Only
        the tasks of those above their guarantee are listed: the others may lose
        none, and listing their tasks cost O(every task in the cluster) per round.
        Those at or below it are still there, with no tasks, for what they hold."""
        state = self.cluster
        agents = state.agents
        excluded = _NOT_REVOCABLE
        holders = []
        self._listed = set()
        for record in state.frameworks.values():
            if record.id in starving or not record.tasks:
                continue
            fid = record.id
            allocated = held.get(fid, Resources())
            guaranteed = state.allocator.guaranteed_share(fid)
            dying = {tid for f, tid in self.revoking if f == fid} if self.revoking else ()
            candidates = (
                t
                for t in record.tasks.values()
                if not t.kill_requested
                and t.state not in excluded
                and (not dying or t.info.task_id not in dying)
                and (agent := agents.get(t.agent_id)) is not None
                and agent.conn is not None
                and agent.drain is None  # what it frees there is never offered
            )
            if above_guarantee(allocated, guaranteed):
                tasks = [t.held or _held_task(t) for t in candidates]
                if tasks:
                    self._listed.add(fid)
                    holders.append(
                        Holder(framework_id=fid, allocated=allocated, guaranteed=guaranteed, tasks=tasks)
                    )
            elif next(candidates, None) is not None:
                holders.append(Holder(framework_id=fid, allocated=allocated, guaranteed=guaranteed, tasks=()))
        return holders

    def _revocable(self, record: FrameworkRecord, task: TaskRecord) -> bool:
        """Whether ``task`` may be offered to the policy (the test ``_holders`` inlines)."""
        if task.kill_requested or (record.id, task.id) in self.revoking or task.state in _NOT_REVOCABLE:
            return False
        agent = self.cluster.agents.get(task.agent_id)
        return agent is not None and agent.conn is not None and agent.drain is None

    def _offered(self, key: tuple) -> bool:
        """Whether the task ``key`` (framework id, task id) was offered to the policy this
        round: the tasks ``_holders`` listed are those of the frameworks in ``_listed``
        that pass ``_revocable``, and nothing changed since but ``revoking``, which
        ``_revoke`` checks on its own. O(1), where a set of every offered task was
        O(tasks offered)."""
        fid, tid = key
        if fid not in self._listed or not isinstance(tid, str):
            return False
        record = self.cluster.frameworks.get(fid)
        if record is None:
            return False
        task = record.tasks.get(tid)
        return task is not None and self._revocable(record, task)

    def _revoke(
        self, victims: list[Victim], holders: list[Holder], starving: set[str], now: float
    ) -> list[Victim]:
        state = self.cluster
        killed = []
        for victim in victims:
            named = (getattr(victim, "framework_id", None), getattr(victim, "task_id", None))
            if not self._offered(named) or named in self.revoking:
                log.error(
                    "revocation policy named a task it was not offered, or one twice; skipped",
                    policy=self.policy.name,
                    framework=named[0],
                    task=named[1],
                )
                continue
            key = (str(named[0]), str(named[1]))  # both are ids: _offered checked them
            task = state.frameworks[key[0]].tasks[key[1]]
            agent = state.agents[task.agent_id]
            reason = str(victim.reason or "revoked")
            for_fid = victim.for_framework_id if victim.for_framework_id in starving else ""
            self.served.add(for_fid or next(iter(starving)))
            self.revoking[key] = Revoking(key[0], key[1], agent.id, task.resources, for_fid, reason, now)
            self.tasks_revoked += 1
            self.recent.append(
                {
                    "framework_id": key[0],
                    "task_id": key[1],
                    "agent_id": agent.id,
                    "for_framework_id": for_fid,
                    "reason": reason,
                    "at": time.time(),
                }
            )
            log.info(
                "revoking task",
                framework=key[0],
                task=key[1],
                agent=agent.id,
                starved=for_fid,
                grace=self.grace,
                reason=reason,
            )
            send_kill(state, agent, key[0], key[1], grace=self.grace, message=f"revoked: {reason}")
            killed.append(victim)
        return killed

    def _forget_stale(self, now: float) -> None:
        state = self.cluster
        for key, entry in list(self.revoking.items()):
            record = state.frameworks.get(entry.framework_id)
            gone = record is None or entry.task_id not in record.tasks
            if gone or now - entry.at > self.grace + STALE_AFTER:
                if not gone:
                    log.warning(
                        "revoked task still not gone; it may be chosen again",
                        framework=entry.framework_id,
                        task=entry.task_id,
                        agent=entry.agent_id,
                        seconds=round(now - entry.at, 1),
                    )
                del self.revoking[key]

    # -- state ----------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """The ``revocation`` part of ``mezzo state``."""
        return {
            "delay": self.delay,
            "grace_period": self.grace,
            "policy": self.policy.name,
            "starved": [
                {
                    "framework_id": s.framework_id,
                    "wants": s.wants.to_dict(),
                    "waiting_seconds": round(s.waiting_seconds, 3),
                }
                for s in self.starved_now
            ],
            "revoking": [
                {
                    "framework_id": e.framework_id,
                    "task_id": e.task_id,
                    "agent_id": e.agent_id,
                    "for_framework_id": e.for_framework_id,
                }
                for e in self.revoking.values()
            ],
            "tasks_revoked": self.tasks_revoked,
            "offers_rescinded": self.offers_rescinded,
            "recent": list(self.recent),
        }


def _held_task(task: TaskRecord) -> HeldTask:
    """The task as a policy sees it, made once and kept on its record."""
    task.held = HeldTask(
        task_id=task.info.task_id,
        agent_id=task.agent_id,
        resources=task.resources,
        started_at=task.launched_at,
        long=task.info.long is True,
    )
    return task.held


def send_kill(
    state: ClusterState, agent: AgentRecord, framework_id: str, task_id: str, *, grace: float, message: str
) -> None:
    """Ask ``agent`` to kill a task for the master's own reasons: with ``grace``
    instead of the agent's ``kill_grace_period``, and reason ``revoked`` and
    ``message`` on the task's kill updates. ``agent`` must be connected."""
    state.outbox.agent(agent.conn).kill_task(
        framework_id, task_id, KillPolicy(grace_seconds=grace, reason=REVOKED_REASON, message=message)
    )


def holding(state: ClusterState, record: FrameworkRecord, *, offers: bool = True) -> Resources:
    """What counts toward a framework (the :attr:`Holder.allocated` of the policy
    hook): its tasks, the executors they run in, and (with ``offers``) its outstanding
    offers. An executor left with no task is not counted. The tasks' part is kept
    summed by their :class:`~mezzo.master.records.TaskTable`, so this costs
    O(its executors + offers), not O(its tasks)."""
    tasks = record.tasks
    if isinstance(tasks, TaskTable):
        total = tasks.held()
        executors = tasks.executors()
    else:  # a plain dict (a record built by hand): sum from scratch
        total = Resources()
        for task in tasks.values():
            total = total + task.resources
        executors = {(t.agent_id, t.executor_id) for t in tasks.values() if t.executor_id}
    for offer in record.offers.values() if offers else ():
        total = total + offer.resources
    for agent_id, executor_id in executors:
        agent = state.agents.get(agent_id)
        executor = agent.executors.get((record.id, executor_id)) if agent is not None else None
        if executor is not None:
            total = total + Resources.of(executor.resources)
    return total
