"""The agent's connection to its master, re-dialled whenever it is lost.

Usage::

    link = MasterLink("127.0.0.1:5050", handler, interval=0.5,      # or "zk://..."
                      on_connected=send_registration, on_lost=mark_disconnected)
    await link.start()
    link.conn        # the open Connection, or None
    await link.close()

The agent dials, so on this connection the master calls the agent's ``Agent``
service (dispatched to ``handler``) and the agent calls ``Master`` through
``link.conn.remote(MASTER)``.

With a ``zk://`` address the link dials whichever master ZooKeeper says leads,
and moves to a new leader as soon as it is elected.

Error handling: an unreachable master is not an error, it is the normal state
while a master restarts or fails over. The link retries every ``interval``
seconds forever (at once when a new leader is named), logging the first failure and then every twentieth so a long
outage does not flood the log. What to do on (re)connection (register or
re-register) is the agent's business, in ``on_connected``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog

from ..discovery import peer_address
from ..rpc import Connection, connect
from ..services import AGENT

log = structlog.get_logger("mezzo.agent", component="agent")

DEFAULT_MASTER_PORT = 5050


class MasterLink:
    """Keeps one connection to the (leading) master open."""

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
        self.target = peer_address(address, DEFAULT_MASTER_PORT)
        self._handler = handler
        self._interval = max(interval, 0.01)
        self._max_frame = max_frame
        self._on_connected = on_connected
        self._on_lost = on_lost
        self.conn: Connection | None = None
        self._conn_address: tuple[str, int] | None = None
        self.takeover_wait = 0.0
        """Seconds before redialling a master ZooKeeper names but that said it does not
        lead yet (0: use ``interval``); see :meth:`not_leading`."""
        self._task: asyncio.Task | None = None

    @property
    def address(self) -> str:
        """The master as configured (``host:port``, or the ``zk://`` URL with its leader)."""
        return str(self.target)

    async def start(self) -> None:
        """Find the master (zk: connect to ZooKeeper) and keep dialling it in the background.

        Raises :class:`TimeoutError` when ZooKeeper cannot be reached.
        """
        await self.target.start()
        self.target.add_listener(self._leader_changed)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="mezzo-agent-master-link")

    def _leader_changed(self, address: tuple[str, int] | None) -> None:
        if self.conn is not None and address != self._conn_address:
            log.info("the leading master changed; leaving the old one", master=self.address)
            self.conn.close()

    async def _run(self) -> None:
        failures = 0
        while True:
            address = self.target.current()
            if address is None:
                await self.target.changed(self._interval)
                continue
            try:
                conn = await connect(address[0], address[1], AGENT, self._handler, max_frame=self._max_frame)
            except OSError as exc:
                if failures % 20 == 0:
                    log.warning(
                        "master unreachable; retrying",
                        master=self.address,
                        error=str(exc),
                        every=self._interval,
                    )
                failures += 1
                await self.target.changed(self._interval)
                continue
            failures = 0
            self.conn = conn
            self._conn_address = address
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
            if self.target.current() == address:
                await self.target.changed(self.takeover_wait or self._interval)

    def not_leading(self, conn: Connection) -> None:
        """The master answered ``not_leader``. If ZooKeeper names it all the same, it is
        still taking over: redial it shortly (backing off from 50 ms), not after a whole
        interval. ``registered()`` resets the backoff."""
        if self.target.current() == self._conn_address:
            self.takeover_wait = min(max(self.takeover_wait * 2, 0.05), self._interval)
        conn.close()

    def registered(self) -> None:
        self.takeover_wait = 0.0

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
        self.target.close()
