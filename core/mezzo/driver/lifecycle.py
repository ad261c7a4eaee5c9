"""What the scheduler and executor drivers share: status, start/stop/join, redialling.

A driver owns one connection to one peer (the master for a scheduler driver, the
local agent for an executor driver). :class:`DriverLifecycle` dials it on the
driver thread (:mod:`mezzo.driver.runtime`), hands each new connection to the
subclass (which registers), notices when it drops, and dials again until the
driver is stopped or aborted: after ``reconnect_interval`` at first, backing off
exponentially with jitter (:class:`~mezzo.backoff.Backoff`) up to a cap while the
peer stays unreachable or keeps dropping the connection before registration
answers; registration starts the backoff afresh. A new leader named by ZooKeeper
is dialled at once.

Status follows Mesos: ``start()`` moves NOT_STARTED to RUNNING and is a no-op
afterwards; ``stop()`` and ``abort()`` move RUNNING to STOPPED or ABORTED, once;
``join()`` blocks until that has happened and the connection is closed. Every
action returns the status the driver was in when called, and does nothing unless
it was RUNNING. A driver is not restartable: make a new one.

Threading: public methods may be called from any thread, including from inside
callbacks (which run on the driver thread). Everything that touches the
connection or protocol state runs on the driver thread; the only state shared
with other threads is the status (guarded by a lock) and the ``done`` event.

Error handling: a peer that cannot be reached is retried forever (the scheduler
driver) or until ``recovery_timeout`` (the executor driver, whose agent is on the
same host), with the backoff above: a master in trouble sees fewer dials the
longer its trouble lasts, and thousands of drivers that lost it together do not
come back in lock-step. An exception raised by a user callback is logged with its traceback
and the driver carries on; a callback that holds the driver thread longer than
:data:`~mezzo.driver.runtime.SLOW_CALLBACK_SECONDS` is logged as a warning because
it delayed every driver in the process.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from ..backoff import REDIAL_CAP, Backoff
from ..discovery import FixedAddress, LeaderAddress
from ..errors import MezzoError
from ..rpc import ClientTls, Connection, ServiceSchema, connect
from .runtime import SLOW_CALLBACK_SECONDS, get_runtime


class DriverError(MezzoError, RuntimeError):
    """A driver used in a way that cannot work (e.g. a blocking call on the driver
    thread, an executor started outside an agent). A :class:`RuntimeError` too."""


class DriverStatus(enum.IntEnum):
    """Where a driver is in its life (Mesos' ``DRIVER_*`` values)."""

    NOT_STARTED = 1
    RUNNING = 2
    ABORTED = 3
    STOPPED = 4


HOLD_LIMIT = 10_000
"""Messages held while not registered; beyond this the oldest are dropped (logged)."""

CONNECT_TIMEOUT = 5.0
"""Seconds one dial attempt may take before it counts as failed."""

TAKEOVER_RETRY = 0.05
"""Ceiling of the first redial of a master that ZooKeeper names leader but that answered
``not_leader`` (it is still taking over); backs off, jittered, up to ``reconnect_interval``."""


class DriverLifecycle:
    """Base class of :class:`SchedulerDriver` and :class:`ExecutorDriver`.

    Subclasses implement :meth:`_connected`, :meth:`_disconnected`, and may
    override :meth:`_before_close`, :meth:`_after_close` and :meth:`_unreachable`.
    The driver logs through structlog logger ``logger`` bound to ``log_context``
    (the base class binds it, once the process's logging default is in place).
    """

    def __init__(
        self,
        target: FixedAddress | LeaderAddress,
        schema: ServiceSchema,
        handler: Any,
        *,
        reconnect_interval: float,
        logger: str,
        log_context: Mapping[str, Any],
        recovery_timeout: float | None = None,
        redial_cap: float = REDIAL_CAP,
        tls: ClientTls | None = None,
    ) -> None:
        if not reconnect_interval > 0:
            raise ValueError(f"reconnect_interval must be > 0 seconds, got {reconnect_interval!r}")
        self._target = target
        self._schema = schema
        self._handler = handler
        self._tls = tls
        self._reconnect_interval = float(reconnect_interval)
        self._recovery_timeout = recovery_timeout
        # get_runtime() first: it gives a process that never configured structlog the
        # quiet default, and a logger bound before that would keep structlog's own
        # default (every info line, on stdout) for the driver's whole life.
        self._runtime = get_runtime()
        self._log = structlog.get_logger(logger).bind(**log_context)
        self._lock = threading.Lock()
        self._status = DriverStatus.NOT_STARTED
        self._done = threading.Event()
        # Driver-thread state.
        self._conn: Connection | None = None
        self._conn_address: tuple[str, int] | None = None
        # Redials back off until the peer answers a registration; see the module docstring.
        interval = self._reconnect_interval
        self._redial = Backoff(interval, max(redial_cap, interval))
        self._takeover = Backoff(min(TAKEOVER_RETRY, interval), interval)
        self._taking_over = False
        self._answered = False
        """The peer of the current connection answered our registration."""
        self._dial_task: asyncio.Task | None = None
        self._held: collections.deque[tuple[str, Callable[..., None], tuple]] = collections.deque()

    # -- public life cycle --------------------------------------------------

    @property
    def status(self) -> DriverStatus:
        """The current :class:`DriverStatus`."""
        return self._status

    @property
    def peer(self) -> str:
        """What this driver dials: ``host:port``, or the ``zk://`` URL and its current leader."""
        return str(self._target)

    def start(self) -> DriverStatus:
        """Begin connecting. Returns RUNNING, or the current status if already started."""
        with self._lock:
            if self._status is not DriverStatus.NOT_STARTED:
                return self._status
            self._status = DriverStatus.RUNNING
        self._log.info("driver starting", peer=self.peer)
        self._runtime.call(self._begin)
        return DriverStatus.RUNNING

    def join(self) -> DriverStatus:
        """Block until the driver is stopped or aborted; return that status.

        Returns at once when the driver was never started. Raises
        :class:`RuntimeError` on the driver thread, where it could never return.
        """
        if self._runtime.on_driver_thread():
            raise DriverError(
                "join() was called on the driver thread (inside a callback?) and would wait "
                "forever; call it from your own thread"
            )
        if self._status is DriverStatus.NOT_STARTED:
            return self._status
        self._done.wait()
        return self._status

    def run(self) -> DriverStatus:
        """``start()`` then ``join()``."""
        status = self.start()
        if status is not DriverStatus.RUNNING:
            return status
        return self.join()

    def abort(self) -> DriverStatus:
        """Drop the connection at once, without any goodbye to the peer; join() returns ABORTED."""
        return self._terminate(DriverStatus.ABORTED, {})

    # -- helpers for subclasses ---------------------------------------------

    def _act(self, fn: Callable[..., None], *args: Any) -> DriverStatus:
        """Run ``fn(*args)`` on the driver thread if RUNNING; return the status either way."""
        status = self._status
        if status is DriverStatus.RUNNING:
            self._runtime.call(fn, *args)
        return status

    def _terminate(self, final: DriverStatus, options: dict, wait: float = 5.0) -> DriverStatus:
        """Move RUNNING to ``final`` once and close down on the driver thread.

        From another thread, wait (up to ``wait`` seconds) until the close-down
        is done, so that a process exiting right after ``stop()`` has sent its
        goodbye. On the driver thread the close-down is scheduled and we return.
        """
        with self._lock:
            if self._status is not DriverStatus.RUNNING:
                return self._status
            self._status = final
        self._runtime.run_coroutine(self._shutdown(final, options))
        if not self._runtime.on_driver_thread():
            self._done.wait(wait)
        return final

    def _callback(self, target: Any, name: str, *args: Any) -> bool:
        """Call ``target.name(self, *args)``; False when it raised (already logged)."""
        started = time.monotonic()
        try:
            getattr(target, name)(self, *args)
        except Exception:  # noqa: BLE001 - user code: log it, keep every other driver going
            self._log.exception("callback raised", callback=name)
            return False
        finally:
            held = time.monotonic() - started
            if held > SLOW_CALLBACK_SECONDS:
                self._log.warning(
                    "callback held the driver thread; every driver in this process waited",
                    callback=name,
                    seconds=round(held, 3),
                )
        return True

    def _hold(self, what: str, fn: Callable[..., None], *args: Any) -> None:
        """Keep ``fn(*args)`` until :meth:`_release_held` (bounded, oldest dropped first)."""
        if len(self._held) >= HOLD_LIMIT:
            dropped, _, _ = self._held.popleft()
            self._log.warning(
                "hold queue full; dropping the oldest message", dropped=dropped, limit=HOLD_LIMIT
            )
        self._held.append((what, fn, args))

    def _release_held(self) -> None:
        held, self._held = self._held, collections.deque()
        if held:
            self._log.info("sending messages held while not registered", count=len(held))
        for _what, fn, args in held:
            fn(*args)

    # -- hooks ----------------------------------------------------------------

    def _connected(self, conn: Connection) -> None:
        """A new connection is up (driver thread): register."""
        raise NotImplementedError

    def _disconnected(self) -> None:
        """The connection dropped while RUNNING (driver thread)."""
        raise NotImplementedError

    async def _before_close(self, final: DriverStatus, options: dict) -> None:
        """Last words on the still-open connection (e.g. unregister)."""

    def _after_close(self, final: DriverStatus) -> None:
        """Clean-up after the connection is closed (e.g. fail waiters)."""

    def _unreachable(self, seconds: float) -> None:
        """The peer has been unreachable for ``recovery_timeout`` seconds."""

    # -- driver thread ----------------------------------------------------------

    def _begin(self) -> None:
        if self._status is DriverStatus.RUNNING:
            self._dial_task = self._runtime.loop.create_task(self._dial_forever())

    async def _dial_forever(self) -> None:
        target = self._target
        try:
            await target.start()
        except (TimeoutError, OSError) as exc:
            self._log.error("cannot find the peer; aborting", peer=self.peer, error=str(exc))
            self._give_up(f"cannot find the peer {self.peer}: {exc}")
            return
        # A new leader replaces the one we talk to: leave it, even if its
        # connection still looks open (a demoted master may not have closed it yet).
        target.add_listener(self._peer_moved)
        failures = 0
        lost_since = time.monotonic()
        while self._status is DriverStatus.RUNNING:
            if self._recovery_timeout is not None:
                gone = time.monotonic() - lost_since
                if gone >= self._recovery_timeout:
                    self._unreachable(gone)
                    return
            address = target.current()
            if address is None:  # nobody leads right now: wait for ZooKeeper's news
                await target.changed(self._reconnect_interval)
                continue
            try:
                conn = await asyncio.wait_for(
                    connect(address[0], address[1], self._schema, self._handler, tls=self._tls),
                    CONNECT_TIMEOUT,
                )
            except (TimeoutError, OSError) as exc:
                failures += 1
                wait = self._redial.next()
                if self._recovery_timeout is not None:  # give up on time, not a backoff later
                    wait = min(wait, max(0.0, lost_since + self._recovery_timeout - time.monotonic()))
                # The first failure and then every 20th, so a long outage does not flood the log.
                if failures == 1 or failures % 20 == 0:
                    self._log.warning(
                        "cannot reach peer; retrying",
                        peer=self.peer,
                        attempts=failures,
                        retry_in=round(wait, 3),
                        error=str(exc) or repr(exc),
                    )
                await target.changed(wait)
                continue
            if self._status is not DriverStatus.RUNNING:
                conn.close()
                return
            if failures:
                self._log.info("reached peer", peer=self.peer, attempts=failures + 1)
            failures = 0
            self._conn = conn
            self._conn_address = address
            self._answered = False
            self._connected(conn)
            await asyncio.shield(conn.closed)
            if self._conn is conn:
                self._conn = None
            if self._status is not DriverStatus.RUNNING:
                return
            lost_since = time.monotonic()
            if not self._answered and self._tls is None:
                # What a TLS port does to a plaintext client: the handshake fails, the
                # connection is closed, nothing is ever answered.
                self._log.warning(
                    "connection to peer lost before it answered; will redial (if it listens with "
                    "TLS, give [tls] settings: tls=, or $MEZZO_CONFIG)",
                    peer=self.peer,
                )
            else:
                self._log.warning("connection to peer lost; will redial", peer=self.peer)
            self._disconnected()
            if target.current() == address:
                # The same peer again: give it a moment (longer each time it drops us
                # before registering). A new leader is dialled at once.
                await target.changed(self._takeover.next() if self._taking_over else self._redial.next())

    def _peer_registered(self) -> None:
        """The peer answered our registration (driver thread): the next redial, if the
        connection drops, waits ``reconnect_interval`` again, not the backoff reached."""
        self._redial.reset()
        self._takeover.reset()
        self._taking_over = False
        self._answered = True

    def _peer_not_leading(self, conn: Connection) -> None:
        """The master we dialled says it does not lead. If ZooKeeper names it all the
        same, it is still taking over: dial it again shortly (from :data:`TAKEOVER_RETRY`,
        backing off with jitter), not after a whole ``reconnect_interval``. Registration
        resets the backoff."""
        if self._target.current() == self._conn_address:
            self._taking_over = True
        conn.close()

    def _peer_moved(self, address: tuple[str, int] | None) -> None:
        conn = self._conn
        if conn is not None and address != self._conn_address:
            self._log.info("the leading master changed; leaving the old one", peer=self.peer)
            conn.close()

    def _give_up(self, message: str) -> None:
        """The peer cannot even be looked up: abort (subclasses may say more first)."""
        self.abort()

    async def _shutdown(self, final: DriverStatus, options: dict) -> None:
        try:
            await self._before_close(final, options)
        except Exception:  # noqa: BLE001 - the close-down below must happen regardless
            self._log.exception("error while closing down")
        finally:
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()
            task = self._dial_task
            if task is not None and not task.done() and task is not asyncio.current_task():
                task.cancel()
            self._target.close()
            self._held.clear()
            try:
                self._after_close(final)
            finally:
                self._done.set()
                self._log.info("driver " + final.name.lower(), peer=self.peer)
