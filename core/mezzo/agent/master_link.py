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
while a master restarts or fails over. The link retries forever: after
``interval`` seconds at first, then backing off exponentially with jitter
(:class:`~mezzo.backoff.Backoff`) up to :data:`~mezzo.backoff.REDIAL_CAP`, so that
a master in trouble sees fewer dials the longer it lasts and the agents of a whole
cluster do not redial in lock-step. A master that accepts the connection and drops
it before answering the registration is backed off from the same way; only a
registration answered (:meth:`MasterLink.registered`) starts the backoff afresh. A
new leader named by ZooKeeper is dialled at once. The first failure and then every
twentieth is logged, so a long outage does not flood the log. What to do on
(re)connection (register or re-register) is the agent's business, in
``on_connected``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog

from ..backoff import REDIAL_CAP, Backoff
from ..discovery import peer_address
from ..rpc import ClientTls, Connection, connect
from ..services import AGENT

log = structlog.get_logger("mezzo.agent", component="agent")

DEFAULT_MASTER_PORT = 5050

TAKEOVER_RETRY = 0.05
"""Ceiling of the first redial of a master ZooKeeper names but that answered
``not_leader`` (it is taking over); backs off, jittered, up to ``interval``."""


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
        tls: ClientTls | None = None,
    ) -> None:
        self.target = peer_address(address, DEFAULT_MASTER_PORT)
        self._tls = tls
        self._handler = handler
        self._interval = max(interval, 0.01)
        self._redial = Backoff(self._interval, max(REDIAL_CAP, self._interval))
        self._takeover = Backoff(min(TAKEOVER_RETRY, self._interval), self._interval)
        self._max_frame = max_frame
        self._on_connected = on_connected
        self._on_lost = on_lost
        self.conn: Connection | None = None
        self._conn_address: tuple[str, int] | None = None
        self.taking_over = False
        """A master ZooKeeper names said it does not lead yet: redial it soon; see
        :meth:`not_leading`."""
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
                conn = await connect(
                    address[0], address[1], AGENT, self._handler, max_frame=self._max_frame, tls=self._tls
                )
            except OSError as exc:
                wait = self._redial.next()
                if failures % 20 == 0:
                    log.warning(
                        "master unreachable; retrying",
                        master=self.address,
                        error=str(exc),
                        attempts=failures + 1,
                        retry_in=round(wait, 3),
                    )
                failures += 1
                await self.target.changed(wait)
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
                # The same master again: give it a moment (longer each time it drops us
                # before registering). A new leader is dialled at once.
                await self.target.changed(self.next_wait())

    def next_wait(self) -> float:
        """Seconds before redialling the master just lost (each call backs off further)."""
        return self._takeover.next() if self.taking_over else self._redial.next()

    def not_leading(self, conn: Connection) -> None:
        """The master answered ``not_leader``. If ZooKeeper names it all the same, it is
        still taking over: redial it shortly (from :data:`TAKEOVER_RETRY`, backing off
        with jitter), not after a whole interval. :meth:`registered` resets the backoff."""
        if self.target.current() == self._conn_address:
            self.taking_over = True
        conn.close()

    def registered(self) -> None:
        """The master answered the (re-)registration: the next redial starts from
        ``interval`` again."""
        self.taking_over = False
        self._redial.reset()
        self._takeover.reset()

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
