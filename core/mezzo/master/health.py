"""Agent health: silent agents are pinged, and declared lost past a timeout.

Any bytes from an agent's connection show it is alive (at scale the connection
is never quiet), so only a connection silent for ``master.agent_ping_interval``
is pinged; the agent answers ``pong``. One silent for ``master.agent_ping_timeout``
is declared lost: every agent on it is removed (TASK_LOST for its tasks,
``agent_lost`` to every framework, out of the registry) and the connection is
closed. Should the agent come back, it is refused and starts over as a new agent
(see :mod:`.registry`), so its tasks cannot come back from the dead.

Silence is measured on the master's listening clock (:mod:`.loop_watch`): when the
master itself was stalled, nobody could reach it, and that time is not held against
its agents. How many agents may be declared lost at once is bounded too
(:mod:`.agent_removals`).

Pings go per connection, not per agent: a process hosting many agents (the
emulated agents of the benchmarks) answers for all of them at once, and at
50,000 agents a ping per agent every few seconds would cost the master more than
the work it checks on.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any, Protocol

from ..services import AGENT

if TYPE_CHECKING:
    from .loop_watch import LoopWatch
    from .ports import Clock, Timer


class AgentLinks(Protocol):
    """What the health check needs of the master service."""

    @property
    def agent_links(self) -> Collection[Any]:
        """Connections that carry agents (each has ``last_received``, in clock time)."""

    def agent_link_silent(self, link: Any, silent: float) -> None:
        """Nothing came from ``link`` for ``silent`` seconds: its agents are lost."""


class AgentHealth:
    """The periodic check of one leadership term; :meth:`stop` ends it."""

    def __init__(
        self, links: AgentLinks, clock: Clock, watch: LoopWatch, *, interval: float, timeout: float
    ) -> None:
        self._links = links
        self._clock = clock
        self._watch = watch
        self.interval = interval
        self.timeout = timeout
        self._handle: Timer | None = None

    def start(self) -> None:
        if self.interval > 0 and self.timeout > 0:
            self._handle = self._clock.call_later(self._period(), self._check)

    def _period(self) -> float:
        # Checked at least three times per timeout, so a loss is noticed at most
        # a third of a timeout late.
        return min(self.interval, self.timeout / 3)

    def _check(self) -> None:
        watch = self._watch
        watch.sample()  # a stall that has just ended is the master's, not its peers'
        links = self._links
        for conn in list(links.agent_links):
            silent = watch.listened_since(conn.last_received)
            if silent >= self.timeout:
                links.agent_link_silent(conn, silent)
            elif silent >= self.interval:
                conn.remote(AGENT).ping()
        self._handle = self._clock.call_later(self._period(), self._check)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
