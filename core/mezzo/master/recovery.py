"""After a failover: waiting for the admitted agents, and holding offers meanwhile.

A new leader knows from the registry (:mod:`.registry`) which agents the cluster
admitted, but not what they run until they re-register. Offering before they are
back would not double-book an agent (an agent is offered only after it
re-registered with its tasks), but it would hand the first frameworks to return
everything free and skew the shares the allocator keeps fair. So offers wait
until every admitted agent is back or ``master.recovery_hold_timeout`` passes,
and so do reconciliation requests, whose answers ("unknown task") would be wrong
while agents are still reporting in.

Admitted agents still missing after ``master.agent_reregister_timeout`` are
removed from the registry and every framework hears ``agent_lost``: their tasks
are gone with them, and reconciling them answers TASK_LOST.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from .ports import Timer
    from .state import ClusterState

log = structlog.get_logger("mezzo.master", component="master")


class Recovery:
    """The recovery of one leadership term (nothing to do for a cluster's first leader)."""

    def __init__(self, state: ClusterState) -> None:
        self.awaiting: set[str] = set()
        """Admitted agents that have not re-registered yet."""
        self.holding = False
        """True while offers (and reconciliation answers) wait."""
        self._state = state
        self._handles: list[Timer] = []
        self._deferred: list[Callable[[], None]] = []
        self._started = 0.0

    def begin(self, admitted: set[str]) -> None:
        """The term starts leading; ``admitted`` is the registry's list of agents."""
        state = self._state
        self.awaiting = set(admitted) - set(state.agents)
        if not self.awaiting:
            return
        self.holding = True
        clock = state.clock
        self._started = clock.now()
        config = state.config
        self._handles = [
            clock.call_later(config.recovery_hold_timeout, self._end_hold, "recovery_hold_timeout passed"),
            clock.call_later(config.agent_reregister_timeout, self._expire_missing),
        ]

    def agent_back(self, agent_id: str) -> None:
        self.awaiting.discard(agent_id)
        if self.holding and not self.awaiting:
            self._end_hold("every admitted agent re-registered")

    def defer(self, action: Callable[[], None]) -> bool:
        """Run ``action`` when the hold ends; False (and nothing kept) if there is no hold."""
        if not self.holding:
            return False
        self._deferred.append(action)
        return True

    def cancel(self) -> None:
        for handle in self._handles:
            handle.cancel()
        self._handles = []
        self._deferred.clear()
        self.holding = False

    def _end_hold(self, why: str) -> None:
        if not self.holding:
            return
        self.holding = False
        state = self._state
        log.info(
            "recovery: offers resume",
            why=why,
            missing_agents=len(self.awaiting),
            seconds=round(state.now() - self._started, 3),
        )
        deferred, self._deferred = self._deferred, []
        for action in deferred:
            try:
                action()
            except Exception:  # one bad request must not keep the others unanswered
                log.exception("deferred call failed")
        state.request_allocation()

    def _expire_missing(self) -> None:
        state = self._state
        missing, self.awaiting = sorted(self.awaiting), set()
        for agent_id in missing:
            state.registry.remove(agent_id)
            log.warning(
                "admitted agent did not re-register after failover; removed",
                agent=agent_id,
                timeout=state.config.agent_reregister_timeout,
            )
            state.observe.mezzo_agent_removed(agent_id=agent_id, reason="did not re-register after failover")
            state.events.agent_removed(agent_id, "did not re-register after failover")
            state.tell_agent_lost(agent_id)
        self._end_hold("agent_reregister_timeout passed")
