"""One leadership term: a fresh cluster state and everything that works on it, wired.

A master rebuilds its soft state from re-registrations each time it becomes the
leader (paper §3.6), and must forget it entirely when it steps down: a deposed
leader that went on acting on its old state would be a split brain. So each term
gets a :class:`Term` of its own (state, lifecycles, allocation cycles, recovery,
revocation, agent and framework health, the RPC service), and :meth:`Term.close` ends all of it
at once: no timer of an old term fires into a new one.

A standby master holds an idle term too, so tools can ask it for its (empty)
state and its metrics.
"""

from __future__ import annotations

from dataclasses import dataclass

from .agent_lifecycle import AgentLifecycle
from .allocation import Allocation
from .framework_lifecycle import FrameworkLifecycle
from .health import AgentHealth, FrameworkHealth
from .long_tasks import ShortTaskLimit
from .operator_actions import OperatorActions
from .recovery import Recovery
from .revocation_monitor import RevocationMonitor
from .service import MasterService
from .state import ClusterState
from .task_lifecycle import TaskLifecycle


@dataclass(eq=False)
class Term:
    """The parts of one term. Built by :meth:`mezzo.master.Master.new_term`."""

    state: ClusterState
    frameworks: FrameworkLifecycle
    agents: AgentLifecycle
    tasks: TaskLifecycle
    recovery: Recovery
    allocation: Allocation
    service: MasterService
    health: AgentHealth
    operator: OperatorActions
    """Drain, reactivate, kill (the HTTP API's operator calls)."""
    framework_health: FrameworkHealth | None = None
    """Pings quiet schedulers and disconnects silent ones, while leading."""
    revocation: RevocationMonitor | None = None
    """Watches for starved frameworks while leading, if ``master.revocation_delay`` > 0."""
    short_tasks: ShortTaskLimit | None = None
    """Revokes short tasks past ``master.short_task_max`` while leading, if it is > 0."""
    leading: bool = False
    closed: bool = False

    def begin(self, admitted: set[str]) -> None:
        """The term starts leading: timers run, and recovery awaits ``admitted`` agents."""
        self.leading = True
        clock = self.state.clock
        self.health.start()
        if self.framework_health is not None:
            self.framework_health.start()
        if self.revocation is not None:
            self.revocation.start(clock)
        if self.short_tasks is not None:
            self.short_tasks.start(clock)
        self.recovery.begin(admitted)

    def close(self) -> None:
        """End the term: every timer of it is cancelled (adoptions of agents' reports
        under way too) and no cycle runs any more."""
        self.leading = False
        self.closed = True
        self.allocation.cancel()
        self.health.stop()
        if self.framework_health is not None:
            self.framework_health.stop()
        if self.revocation is not None:
            self.revocation.stop()
        if self.short_tasks is not None:
            self.short_tasks.stop()
        self.recovery.cancel()
        self.agents.stop()
        self.operator.cancel()
        self.state.cancel_timers()

    def tasks_revoked(self) -> int:
        """Tasks revoked this term, by revocation and by the short-task limit."""
        return (self.revocation.tasks_revoked if self.revocation is not None else 0) + (
            self.short_tasks.tasks_revoked if self.short_tasks is not None else 0
        )
