"""Agent health: silent agents are pinged, and declared lost past a timeout.

Any bytes from an agent's connection show it is alive (at scale the connection
is never quiet), so only a connection silent for ``master.agent_ping_interval``
is pinged; the agent answers ``pong``. One silent for ``master.agent_ping_timeout``
is declared lost: every agent on it is removed (TASK_LOST for its tasks,
``agent_lost`` to every framework, out of the registry) and the connection is
closed. Should the agent come back, it is refused and starts over as a new agent
(see :mod:`.registry`), so its tasks cannot come back from the dead.

Pings go per connection, not per agent: a process hosting many agents (the
emulated agents of the benchmarks) answers for all of them at once, and at
50,000 agents a ping per agent every few seconds would cost the master more than
the work it checks on.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import structlog

from ..services import AGENT

if TYPE_CHECKING:
    from .master import Master

log = structlog.get_logger("mezzo.master", component="master")


class AgentHealth:
    """The periodic check of one leadership term; :meth:`stop` ends it."""

    def __init__(self, master: Master, loop: asyncio.AbstractEventLoop) -> None:
        self._master = master
        self._loop = loop
        self.interval = master.config.agent_ping_interval
        self.timeout = master.config.agent_ping_timeout
        self._handle: asyncio.TimerHandle | None = None
        if self.interval > 0 and self.timeout > 0:
            self._handle = loop.call_later(self._period(), self._check)

    def _period(self) -> float:
        # Checked at least three times per timeout, so a loss is noticed at most
        # a third of a timeout late.
        return min(self.interval, self.timeout / 3)

    def _check(self) -> None:
        now = self._loop.time()
        master = self._master
        for conn in list(master.agent_conns):
            silent = now - conn.last_received
            if silent >= self.timeout:
                master.agent_connection_silent(conn, silent)
            elif silent >= self.interval:
                conn.remote(AGENT).ping()
        self._handle = self._loop.call_later(self._period(), self._check)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
