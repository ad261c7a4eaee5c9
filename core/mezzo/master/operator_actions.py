"""What operators do to a running cluster, besides tearing frameworks down: drain an
agent, reactivate it, kill one task.

**Draining** takes an agent out of service without losing track of it::

    actions.drain(principal, peer, agent_id, grace=600.0)   # (DRAINING, "...")
    actions.reactivate(principal, peer, agent_id)           # (REACTIVATED, "...")

From the call on the agent is never offered (it leaves the index of offerable
agents, see :attr:`~.records.AgentRecord.drain`), its outstanding offers are
rescinded (their frameworks hear ``offer_rescinded``), and after ``grace`` seconds
the tasks still running on it are killed, with reason :data:`DRAIN_REASON`, each
with the agent's own kill grace period. The agent is ``DRAINING`` while it has
tasks and ``DRAINED`` once it has none (worked out when shown, nothing to keep in
step). Reactivating it cancels a kill not yet done and makes it offerable again.
A drain is the master's soft state, like everything else it knows of agents: a
master that takes over after a failover knows no drain (the operator drains again).

**Killing a task** is what its framework's ``kill_task`` does, asked by an operator
(the task's update says who, reason :data:`KILLED_BY_OPERATOR_REASON`).

Who may: ``drain_agents`` and ``kill_tasks`` in ``[master.acls]`` (the latter per
framework principal, like ``teardown_frameworks``). A refusal is answered with the
ACL's name and written to the audit log; it does not tell whether the agent or task
exists. Every call returns ``(outcome, message)``, the message one line for people.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from ..acls import Acls
from ..wire.ttypes import KillPolicy
from .audit import refused, refuses_on_framework

if TYPE_CHECKING:
    from .records import AgentRecord
    from .state import ClusterState

log = structlog.get_logger("mezzo.master", component="master")

DRAINING = "DRAINING"
DRAINED = "DRAINED"
REACTIVATED = "reactivated"
KILLING = "killing"
REFUSED = "refused"
UNKNOWN = "unknown"
DRAIN_REASON = "agent_drained"
"""``TaskStatus.reason`` of the kill updates of a task ended by a drain."""
KILLED_BY_OPERATOR_REASON = "killed_by_operator"
"""``TaskStatus.reason`` of the kill updates of a task an operator killed."""
GRACE_MAX = 7 * 24 * 3600.0
"""Longest grace a drain takes (a week): longer is a mistake, not a plan."""


@dataclass(slots=True, eq=False)
class DrainInfo:
    """An agent being drained: since when, by whom, and when its tasks get killed."""

    started_at: float
    """Unix time of the drain call."""
    grace: float
    """Seconds the tasks got to end on their own before being killed."""
    by: str | None
    """The principal that drained it (None: a caller without a certificate)."""
    kill_timer: Any = None
    """The timer killing the tasks at the deadline; None once fired or cancelled."""

    @property
    def deadline(self) -> float:
        """Unix time the agent's remaining tasks are (were) killed."""
        return self.started_at + self.grace

    def state_of(self, agent: AgentRecord) -> str:
        """:data:`DRAINING` while ``agent`` has tasks, :data:`DRAINED` once it has none."""
        return DRAINING if agent.tasks else DRAINED

    def shown(self, agent: AgentRecord) -> dict[str, Any]:
        """As the HTTP API shows it (Mesos' ``drain_info``, with mezzo's deadline)."""
        return {
            "state": self.state_of(agent),
            "config": {"max_grace_period": {"nanoseconds": int(self.grace * 1e9)}},
            "started_time": self.started_at,
            "deadline": self.deadline,
            "by": self.by,
        }


class OperatorActions:
    """Drain, reactivate and kill, for one leadership term's :class:`~.state.ClusterState`."""

    def __init__(self, state: ClusterState, acls: Acls) -> None:
        self.state = state
        self.acls = acls

    def drain(self, principal: str | None, peer: str, agent_id: str, grace: float = 0.0) -> tuple[str, str]:
        """Drain ``agent_id`` (see the module docstring); its tasks are killed after
        ``grace`` seconds (0: now). Draining a draining agent again sets a new grace,
        counted from now. Returns (:data:`DRAINING` | :data:`REFUSED` | :data:`UNKNOWN`, message)."""
        who = principal or "a caller without a certificate"
        if not self.acls.allows("drain_agents", principal):
            refused("drain_agent", principal, f"agent {agent_id:.100}", "master.acls.drain_agents", peer)
            return REFUSED, f"drain_agent: principal {who} may not drain agents (master.acls.drain_agents)"
        if not (math.isfinite(grace) and 0 <= grace <= GRACE_MAX):
            raise ValueError(f"{grace} is not between 0 and {GRACE_MAX:g} seconds")
        state = self.state
        agent = state.agents.get(agent_id)
        if agent is None:
            return UNKNOWN, f"drain_agent: no agent {agent_id[:100]!r} is registered"
        previous = agent.drain
        if previous is not None and previous.kill_timer is not None:
            previous.kill_timer.cancel()
        drain = DrainInfo(started_at=time.time(), grace=grace, by=principal)
        agent.drain = drain  # off the offerable index from now on
        offers = list(agent.offers.values())
        state.rescind_offers(offers, notify=True)
        drain.kill_timer = state.clock.call_later(grace, self._deadline, agent.id, drain)
        log.warning(
            "agent draining",
            agent=agent.id,
            principal=principal,
            grace_seconds=grace,
            tasks=len(agent.tasks),
            offers_rescinded=len(offers),
        )
        return DRAINING, (
            f"agent {agent.id} ({agent.hostname}) draining: {len(offers)} offer(s) rescinded, "
            f"{len(agent.tasks)} task(s) killed in {grace:g} s unless they end first"
        )

    def reactivate(self, principal: str | None, peer: str, agent_id: str) -> tuple[str, str]:
        """End ``agent_id``'s drain: offered again, a kill not yet done cancelled.
        Returns (:data:`REACTIVATED` | :data:`REFUSED` | :data:`UNKNOWN`, message)."""
        who = principal or "a caller without a certificate"
        if not self.acls.allows("drain_agents", principal):
            refused("reactivate_agent", principal, f"agent {agent_id:.100}", "master.acls.drain_agents", peer)
            return REFUSED, (
                f"reactivate_agent: principal {who} may not reactivate agents (master.acls.drain_agents)"
            )
        agent = self.state.agents.get(agent_id)
        if agent is None:
            return UNKNOWN, f"reactivate_agent: no agent {agent_id[:100]!r} is registered"
        drain = agent.drain
        if drain is None:
            return REACTIVATED, f"agent {agent.id} was not draining"
        if drain.kill_timer is not None:
            drain.kill_timer.cancel()
        agent.drain = None
        self.state.request_allocation(prompt=True)
        log.warning("agent reactivated", agent=agent.id, principal=principal)
        return REACTIVATED, f"agent {agent.id} ({agent.hostname}) reactivated: offered again"

    def kill_task(self, principal: str | None, peer: str, framework_id: str, task_id: str) -> tuple[str, str]:
        """Kill one task for an operator, as its framework's ``kill_task`` would.
        Returns (:data:`KILLING` | :data:`REFUSED` | :data:`UNKNOWN`, message)."""
        who = principal or "a caller without a certificate"
        record = self.state.frameworks.get(framework_id)
        obj = f"task {task_id:.100} of {framework_id:.100}"
        if refuses_on_framework(self.acls, "kill_tasks", "kill_task", principal, record, obj, peer):
            return REFUSED, (
                f"kill_task: principal {who} may not kill tasks of framework {framework_id:.100} "
                "(master.acls.kill_tasks)"
            )
        task = record.tasks.get(task_id) if record is not None else None
        if record is None or task is None:
            return UNKNOWN, (
                f"kill_task: no running task {task_id[:100]!r} of framework {framework_id[:100]!r}"
            )
        agent = self.state.agents.get(task.agent_id)
        if agent is not None:
            self._kill(agent, framework_id, task_id, KILLED_BY_OPERATOR_REASON, f"killed by {who}")
        log.warning("task killed by operator", framework=framework_id, task=task_id, principal=principal)
        return KILLING, f"task {task_id} of framework {framework_id} is being killed"

    def _deadline(self, agent_id: str, drain: DrainInfo) -> None:
        """The grace of ``drain`` ran out: kill what still runs on the agent."""
        drain.kill_timer = None
        agent = self.state.agents.get(agent_id)
        if agent is None or agent.drain is not drain:
            return  # gone, reactivated or drained again since
        keys = list(agent.tasks)
        for framework_id, task_id in keys:
            self._kill(agent, framework_id, task_id, DRAIN_REASON, "the agent is drained")
        if keys:
            log.warning("drain: killing the agent's tasks", agent=agent.id, tasks=len(keys))

    def _kill(self, agent: AgentRecord, framework_id: str, task_id: str, reason: str, message: str) -> None:
        task = agent.tasks.get((framework_id, task_id))
        if task is None:
            return
        task.kill_requested = True  # revocation leaves it alone
        policy = KillPolicy(reason=reason, message=message)
        if agent.conn is None:
            agent.pending_kills[(framework_id, task_id)] = policy  # sent when it re-registers
            return
        self.state.outbox.agent(agent.conn).kill_task(framework_id, task_id, policy)

    def cancel(self) -> None:
        """End of the term: no drain kills anything any more."""
        for agent in self.state.agents.values():
            drain = agent.drain
            if drain is not None and drain.kill_timer is not None:
                drain.kill_timer.cancel()
                drain.kill_timer = None
