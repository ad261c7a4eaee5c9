"""Peer health: silent agents and schedulers are pinged, and given up past a timeout.

Any bytes from a peer's connection show it is alive (a busy peer is never quiet),
so only a connection silent for a ping interval is pinged, and the peer answers
``pong``. One silent for the timeout is given up:

- **Agents** (``master.agent_ping_interval``, ``master.agent_ping_timeout``): every
  agent on the connection is declared lost (TASK_LOST for its tasks, ``agent_lost``
  to every framework, out of the registry) and the connection is closed. Should the
  agent come back, it is refused and starts over as a new agent (see
  :mod:`.registry`), so its tasks cannot come back from the dead.
- **Schedulers** (``master.framework_ping_interval``, ``master.framework_idle_timeout``):
  the framework is treated as disconnected, as if its connection had broken (its
  ``failover_timeout`` applies, see :mod:`.framework_lifecycle`), and the
  connection is closed. A healthy scheduler with nothing to say answers the pings
  (the driver does, on its own thread), so only a peer that keeps a connection open
  and answers nothing (a hung process, a host gone behind a half-open connection, a
  client that registered and went quiet) is given up. The ping interval is Apache
  Mesos' heartbeat interval for v1 schedulers (15 s); the timeout is long (5
  minutes by default), since a scheduler given up by mistake loses its tasks when
  its ``failover_timeout`` is 0.

Silence is measured on the master's listening clock (:mod:`.loop_watch`): when the
master itself was stalled, nobody could reach it, and that time is not held against
its peers. How many agents may be declared lost at once is bounded too
(:mod:`.agent_removals`).

Pings go per connection, not per agent: a process hosting many agents (the
emulated agents of the benchmarks) answers for all of them at once, and at
50,000 agents a ping per agent every few seconds would cost the master more than
the work it checks on. A scheduler has a connection of its own.

Cost: one timer per kind of peer, checking every ``min(interval, timeout / 3)``
seconds each connection of that kind (a bisection in the listening clock's history).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any, Protocol

from ..services import AGENT, SCHEDULER

if TYPE_CHECKING:
    from .loop_watch import LoopWatch
    from .ports import Clock, Timer


class AgentLinks(Protocol):
    """What the agents' health check needs of the master service."""

    @property
    def agent_links(self) -> Collection[Any]:
        """Connections that carry agents (each has ``last_received``, in clock time)."""

    def agent_link_silent(self, link: Any, silent: float) -> None:
        """Nothing came from ``link`` for ``silent`` seconds: its agents are lost."""


class FrameworkLinks(Protocol):
    """What the schedulers' health check needs of the master service."""

    def framework_links(self) -> Collection[Any]:
        """Connections of connected frameworks (each has ``last_received``, in clock time)."""

    def framework_link_silent(self, link: Any, silent: float) -> None:
        """Nothing came from ``link`` for ``silent`` seconds: its framework is disconnected."""


class PeerHealth:
    """The periodic check of one kind of peer for one leadership term; :meth:`stop`
    ends it. Subclasses say which links to check, how to ping one and what to do
    with one found silent."""

    def __init__(self, clock: Clock, watch: LoopWatch, *, interval: float, timeout: float) -> None:
        self._clock = clock
        self._watch = watch
        self.interval = interval
        self.timeout = timeout
        self.found_silent = 0
        """Connections found silent past the timeout this term."""
        self._handle: Timer | None = None

    def links(self) -> Collection[Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def ping(self, link: Any) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def silent(self, link: Any, seconds: float) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

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
        for conn in list(self.links()):
            silent = watch.listened_since(conn.last_received)
            if silent >= self.timeout:
                self.found_silent += 1
                self.silent(conn, silent)
            elif silent >= self.interval:
                self.ping(conn)
        self._handle = self._clock.call_later(self._period(), self._check)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class AgentHealth(PeerHealth):
    """Agents' connections: pinged with ``Agent.ping``; silent ones lose their agents."""

    def __init__(
        self, links: AgentLinks, clock: Clock, watch: LoopWatch, *, interval: float, timeout: float
    ) -> None:
        super().__init__(clock, watch, interval=interval, timeout=timeout)
        self._links = links

    def links(self) -> Collection[Any]:
        return self._links.agent_links

    def ping(self, link: Any) -> None:
        link.remote(AGENT).ping()

    def silent(self, link: Any, seconds: float) -> None:
        self._links.agent_link_silent(link, seconds)


class FrameworkHealth(PeerHealth):
    """Schedulers' connections: pinged with ``Scheduler.ping``; a silent one's framework
    is disconnected."""

    def __init__(
        self, links: FrameworkLinks, clock: Clock, watch: LoopWatch, *, interval: float, timeout: float
    ) -> None:
        super().__init__(clock, watch, interval=interval, timeout=timeout)
        self._links = links

    def links(self) -> Collection[Any]:
        return self._links.framework_links()

    def ping(self, link: Any) -> None:
        link.remote(SCHEDULER).ping()

    def silent(self, link: Any, seconds: float) -> None:
        self._links.framework_link_silent(link, seconds)
