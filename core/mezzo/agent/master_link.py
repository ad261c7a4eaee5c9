"""The agent's connection to its master, re-dialled whenever it is lost.

Usage::

    link = MasterLink("127.0.0.1:5050", handler, interval=0.5,
                      on_connected=send_registration, on_lost=mark_disconnected)
    link.start()
    link.conn        # the open Connection, or None
    await link.close()

The agent dials, so on this connection the master calls the agent's ``Agent``
service (dispatched to ``handler``) and the agent calls ``Master`` through
``link.conn.remote(MASTER)``.

Error handling: an unreachable master is not an error, it is the normal state
while a master restarts or fails over. The link retries every ``interval``
seconds forever, logging the first failure and then every twentieth so a long
outage does not flood the log. What to do on (re)connection (register or
re-register) is the agent's business, in ``on_connected``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog

from ..rpc import Connection, connect, parse_address
from ..services import AGENT

log = structlog.get_logger("mezzo.agent", component="agent")

DEFAULT_MASTER_PORT = 5050


class MasterLink:
    """Keeps one connection to the master open."""

    def __init__(
        self,
        address: str,
        handler: Any,
        *,
        interval: float,
        max_frame: int,
        on_connected: Callable[[Connection], None],
        on_lost: Callable[[Connection], None],
    ) -> None:
        self.host, self.port = parse_address(address, DEFAULT_MASTER_PORT)
        self.address = f"{self.host}:{self.port}"
        self._handler = handler
        self._interval = max(interval, 0.01)
        self._max_frame = max_frame
        self._on_connected = on_connected
        self._on_lost = on_lost
        self.conn: Connection | None = None
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="mezzo-agent-master-link")

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                conn = await connect(self.host, self.port, AGENT, self._handler, max_frame=self._max_frame)
            except OSError as exc:
                if failures % 20 == 0:
                    log.warning("master unreachable; retrying", master=self.address,
                                error=str(exc), every=self._interval)
                failures += 1
                await asyncio.sleep(self._interval)
                continue
            failures = 0
            self.conn = conn
            log.info("connected to master", master=self.address)
            try:
                self._on_connected(conn)
            except Exception:
                log.exception("registration with the master failed", master=self.address)
            await conn.closed
            self.conn = None
            log.warning("lost the master connection", master=self.address)
            try:
                self._on_lost(conn)
            except Exception:
                log.exception("handling the lost master connection failed")
            await asyncio.sleep(self._interval)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            # Our own cancellation of the link comes back as a result; a
            # cancellation of close() itself still propagates.
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self.conn is not None:
            self.conn.close()
            self.conn = None
