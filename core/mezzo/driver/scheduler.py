"""The scheduler side of the framework protocol: :class:`Scheduler` and :class:`SchedulerDriver`.

Usage::

    import mezzo

    class Echo(mezzo.Scheduler):
        launched = False

        def resource_offers(self, driver, offers):
            for offer in offers:
                if self.launched or not mezzo.Resources(cpus=1, mem=64).fits_in(offer.resources):
                    driver.decline_offer(offer.offer_id)
                    continue
                task = mezzo.TaskInfo(task_id="t1", agent_id=offer.agent_id,
                                      resources=mezzo.Resources(cpus=1, mem=64),
                                      command=mezzo.CommandInfo(value="echo hi"))
                driver.launch_tasks(offer.offer_id, [task])
                self.launched = True

        def status_update(self, driver, status):
            if mezzo.is_terminal(status.state):
                driver.stop()

    framework = mezzo.FrameworkInfo(name="echo")
    mezzo.SchedulerDriver(Echo(), framework, "127.0.0.1:5050").run()

Threading: callbacks run on the process-wide driver thread
(:mod:`mezzo.driver.runtime`), one at a time, in the order the master sent the
messages. A callback that blocks delays every driver in the process; hand slow work
to your own thread. The driver answers the master's health checks (``Scheduler.ping``)
on that thread too, so a callback holding it for longer than the master's
``framework_idle_timeout`` (5 minutes unless configured) gets the framework
disconnected. Driver actions may be called from any thread, including from
inside callbacks, except :meth:`SchedulerDriver.join` and
:meth:`SchedulerDriver.guaranteed_share`, which wait and so refuse to run on the
driver thread.

Before registration: offers only exist while registered, so
:meth:`~SchedulerDriver.launch_tasks` called while not registered answers each task
at once with a local TASK_DROPPED update (reason ``master_disconnected``), and
:meth:`~SchedulerDriver.decline_offer` is dropped with a warning (the master forgets
the offers of a disconnected framework). Every other message that carries the
framework id (kill, acknowledge, reconcile, framework message, guaranteed-share
request) is held in order, up to :data:`~mezzo.driver.lifecycle.HOLD_LIMIT`, and sent
right after ``registered``/``reregistered``. The last ``set_needs_offers`` and
``set_filters`` values are re-sent after every (re)registration, because a master
that failed over knows neither.

Masters: ``"host:port"`` dials one master; ``"zk://host:port/path"`` follows the
master elected in ZooKeeper, dialling a new leader as soon as ZooKeeper names it.

Error handling: a lost connection calls ``disconnected`` (if we were registered),
then the driver redials after ``reconnect_interval``, backing off with jitter up
to :data:`~mezzo.backoff.REDIAL_CAP` while the master stays away (at once when a
new leader was elected), and re-registers with its framework id, which the master answers
with ``reregistered``. A master that answers ``not_leader`` is left for the
leader. A ZooKeeper that cannot be reached when the driver starts is fatal:
``Scheduler.error`` is called and the driver aborts. A master ``error``
is fatal: ``Scheduler.error`` is called and the driver aborts. An exception from a
callback is logged and the driver carries on; from ``status_update`` it also
withholds the acknowledgement, so the update will be delivered again.
"""

from __future__ import annotations

import collections
import concurrent.futures
import copy
import getpass
import itertools
import socket
from collections.abc import Iterable
from typing import Any

from ..config import TlsConfig
from ..discovery import FixedAddress, LeaderAddress, peer_address
from ..resources import InvalidResources, Resources
from ..rpc import Connection
from ..rpc.tls import client_tls_for
from ..services import MASTER, SCHEDULER
from ..wire.ttypes import (
    Filters,
    FrameworkFilters,
    FrameworkInfo,
    Offer,
    TaskInfo,
    TaskState,
    TaskStatus,
)
from .lifecycle import DriverError, DriverLifecycle, DriverStatus

__all__ = ["DriverError", "DriverStatus", "Scheduler", "SchedulerDriver", "parse_master"]

DEFAULT_MASTER_PORT = 5050

DEDUPE_WINDOW = 200_000
"""Status-update uuids remembered per driver for de-duplication (least recently seen go first).

A retried update is dropped only while its uuid is remembered, so the window must
outlast the retries of every update in flight: a framework running 50,000 tasks
sees 100,000 uuids per task generation (the scale benchmark caught a 10,000 window
re-delivering retried updates). At about 150 bytes an entry, a full window costs
some 30 MB; the dict only grows that big for a framework that busy."""


class Scheduler:
    """Callbacks of a framework scheduler. Subclass and override what you need.

    Every callback receives the driver first. They run on the driver thread;
    see the module docstring for what that implies.
    """

    def registered(self, driver: SchedulerDriver, framework_id: str, master: str) -> None:
        """The master accepted the framework and assigned ``framework_id``."""

    def reregistered(self, driver: SchedulerDriver, framework_id: str, master: str) -> None:
        """The driver reconnected (to the same or a newly elected master) and kept its id."""

    def disconnected(self, driver: SchedulerDriver) -> None:
        """The connection to the master dropped; the driver is redialling.
        Outstanding offers are void from now on."""

    def resource_offers(self, driver: SchedulerDriver, offers: list[Offer]) -> None:
        """New offers; ``offer.resources`` (and ``offer.long_task_room``, None when long
        tasks are not bounded) is a :class:`mezzo.Resources`. Answer each with
        ``launch_tasks`` or ``decline_offer`` (unanswered offers are rescinded after the
        master's offer timeout)."""

    def offer_rescinded(self, driver: SchedulerDriver, offer_id: str) -> None:
        """The offer is no longer valid; launching on it would give TASK_DROPPED."""

    def status_update(self, driver: SchedulerDriver, status: TaskStatus) -> None:
        """A task changed state. With implicit acknowledgements the driver acknowledges
        after this returns; otherwise call ``driver.acknowledge_status_update(status)``."""

    def framework_message(
        self, driver: SchedulerDriver, agent_id: str, executor_id: str, data: bytes
    ) -> None:
        """An executor sent ``data`` (best effort: framework messages may be lost)."""

    def agent_lost(self, driver: SchedulerDriver, agent_id: str) -> None:
        """An agent is gone; its tasks are reported TASK_LOST through status updates."""

    def executor_lost(self, driver: SchedulerDriver, agent_id: str, executor_id: str, status: int) -> None:
        """An executor exited with ``status``; its unfinished tasks have been failed."""

    def error(self, driver: SchedulerDriver, message: str) -> None:
        """A fatal error from the master (e.g. registration refused); the driver aborts after this."""


def parse_master(master: str) -> FixedAddress | LeaderAddress:
    """``"host:port"`` or ``"zk://host:port/path"`` (follow the elected leader) to what
    the driver dials; :class:`ValueError` naming the text when it is neither."""
    return peer_address(master, DEFAULT_MASTER_PORT)


class SchedulerDriver(DriverLifecycle):
    """Connects a :class:`Scheduler` to the master (paper Table 1, framework side).

    ``framework`` is copied; an empty ``user`` or ``hostname`` is filled in from
    this process. A non-empty ``framework.framework_id`` makes the first
    registration a failover of that framework. ``tls`` (a ``[tls]`` table: the
    cluster's CA, this framework's certificate and key) secures the connection;
    without it the ``[tls]`` of ``$MEZZO_CONFIG`` applies, if that is set.
    """

    def __init__(
        self,
        scheduler: Scheduler,
        framework: FrameworkInfo,
        master: str,
        *,
        implicit_acknowledgements: bool = True,
        reconnect_interval: float = 0.5,
        tls: TlsConfig | None = None,
    ) -> None:
        target = parse_master(master)
        client = client_tls_for(tls)
        if not isinstance(framework, FrameworkInfo):
            raise TypeError(f"framework must be a mezzo.FrameworkInfo, got {type(framework).__name__}")
        self.scheduler = scheduler
        self._framework = copy.copy(framework)
        if not self._framework.user:
            self._framework.user = _current_user()
        if not self._framework.hostname:
            self._framework.hostname = socket.gethostname()
        self._implicit_acks = bool(implicit_acknowledgements)
        super().__init__(
            target,
            SCHEDULER,
            _FromMaster(self),
            reconnect_interval=reconnect_interval,
            logger="mezzo.driver.scheduler",
            log_context={"component": "scheduler-driver", "framework": self._framework.name},
            tls=client,
        )
        self._framework_id: str | None = self._framework.framework_id or None
        self._master_name = ""
        # Driver-thread state.
        self._registered = False
        self._seen: collections.OrderedDict[str, bool] = collections.OrderedDict()  # uuid -> acked
        self._needs_offers: bool | None = None
        self._filters: FrameworkFilters | None = None
        # Shared with caller threads; single dict operations are atomic under the GIL.
        self._share_requests = itertools.count(1)
        self._share_waiters: dict[int, concurrent.futures.Future] = {}

    # -- introspection -------------------------------------------------------

    @property
    def framework_id(self) -> str | None:
        """The id the master assigned, None before the first registration."""
        return self._framework_id

    @property
    def framework(self) -> FrameworkInfo:
        """A copy of the FrameworkInfo this driver registers with."""
        return copy.copy(self._framework)

    @property
    def connected(self) -> bool:
        """True while registered with a master."""
        return self._registered

    # -- actions ---------------------------------------------------------------

    def stop(self, failover: bool = False) -> DriverStatus:
        """Stop the driver; ``join()`` then returns STOPPED.

        Without ``failover`` the framework unregisters and the master kills its
        tasks. With ``failover=True`` the driver only disconnects, so that a new
        scheduler process registering with the same framework id can take over
        the running tasks within ``FrameworkInfo.failover_timeout``.
        """
        return self._terminate(DriverStatus.STOPPED, {"unregister": not failover})

    def launch_tasks(
        self,
        offer_ids: str | Offer | Iterable[str | Offer],
        tasks: TaskInfo | Iterable[TaskInfo],
        filters: Filters | None = None,
    ) -> DriverStatus:
        """Launch ``tasks`` on the offers (the paper's replyToOffer); an empty task list
        declines them. The unused rest of the offers is refused for
        ``filters.refuse_seconds`` (without filters: the master's ``refuse_seconds``,
        5 s unless configured). Tasks that fail validation come back
        as TASK_ERROR or TASK_DROPPED status updates."""
        ids = _offer_ids(offer_ids)
        task_list = _tasks(tasks)
        return self._act(self._launch, ids, task_list, _filters(filters))

    def decline_offer(
        self, offer_ids: str | Offer | Iterable[str | Offer], filters: Filters | None = None
    ) -> DriverStatus:
        """Decline whole offers; their resources are refused for ``filters.refuse_seconds``
        (without filters: the master's ``refuse_seconds``, 5 s unless configured)."""
        return self._act(self._decline, _offer_ids(offer_ids), _filters(filters))

    def set_needs_offers(self, needs_offers: bool) -> DriverStatus:
        """False suppresses offers; True revives them (and clears refuse filters).
        Remembered and re-sent after every re-registration."""
        return self._act(self._set_needs_offers, bool(needs_offers))

    def set_filters(self, filters: FrameworkFilters) -> DriverStatus:
        """Install persistent filters (agent list, minimum free); remembered and re-sent
        after every re-registration."""
        if not isinstance(filters, FrameworkFilters):
            raise TypeError(f"filters must be a mezzo.FrameworkFilters, got {type(filters).__name__}")
        return self._act(self._set_filters, copy.copy(filters))

    def kill_task(self, task_id: str) -> DriverStatus:
        """Ask the master to kill ``task_id``; the outcome arrives as a status update."""
        return self._act(self._send, "kill_task", _text(task_id, "task_id"))

    def acknowledge_status_update(self, status: TaskStatus) -> DriverStatus:
        """Acknowledge ``status`` (only with ``implicit_acknowledgements=False``).

        Updates with an empty uuid (made by the master itself) need none; acknowledging
        one is a no-op. Raises :class:`RuntimeError` when acknowledgements are implicit.
        """
        if self._implicit_acks:
            raise DriverError(
                "acknowledge_status_update() called but the driver acknowledges implicitly; "
                "create it with implicit_acknowledgements=False to acknowledge yourself"
            )
        if not isinstance(status, TaskStatus):
            raise TypeError(f"status must be a mezzo.TaskStatus, got {type(status).__name__}")
        if not status.uuid:
            return self._status
        return self._act(self._acknowledge, status.agent_id or "", status.task_id, status.uuid)

    def reconcile_tasks(self, statuses: Iterable[TaskStatus] = ()) -> DriverStatus:
        """Ask for the latest state of the given tasks (``task_id`` and ideally ``agent_id``
        set); an empty list asks about every task of the framework."""
        items = list(statuses)
        for s in items:
            if not isinstance(s, TaskStatus):
                raise TypeError(f"reconcile_tasks takes mezzo.TaskStatus items, got {type(s).__name__}")
        return self._act(self._send, "reconcile_tasks", items)

    def send_framework_message(self, executor_id: str, agent_id: str, data: bytes | str) -> DriverStatus:
        """Send ``data`` to an executor (best effort)."""
        payload = data.encode() if isinstance(data, str) else bytes(data)
        return self._act(
            self._send,
            "framework_to_executor",
            _text(agent_id, "agent_id"),
            _text(executor_id, "executor_id"),
            payload,
        )

    def guaranteed_share(self, timeout: float = 5.0) -> Resources:
        """Ask the master for this framework's guaranteed allocation (paper §3.3) and wait.

        Raises :class:`~mezzo.driver.lifecycle.DriverError` (a :class:`RuntimeError`) on
        the driver thread (the answer could never be read there), when the driver is not
        running or when it stops while waiting, and :class:`TimeoutError` when the master
        does not answer within ``timeout`` seconds. Before registration the request is
        held and sent once registered.
        """
        if self._runtime.on_driver_thread():
            raise DriverError(
                "guaranteed_share() waits for the master's answer and was called on the driver "
                "thread (inside a scheduler callback), where it would deadlock; call it from "
                "another thread"
            )
        if self._status is not DriverStatus.RUNNING:
            raise DriverError(f"guaranteed_share() needs a running driver; it is {self._status.name}")
        request_id = next(self._share_requests)
        waiter: concurrent.futures.Future = concurrent.futures.Future()
        self._share_waiters[request_id] = waiter
        self._runtime.call(self._send, "request_guaranteed_share", request_id)
        try:
            return waiter.result(timeout)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"the master did not answer guaranteed_share within {timeout} s") from None
        finally:
            self._share_waiters.pop(request_id, None)

    # -- action bodies (driver thread) ---------------------------------------------

    def _send(self, method: str, *args: Any) -> None:
        """Send a Master call that starts with our framework id, or hold it until registered."""
        if self._status is not DriverStatus.RUNNING:
            return
        conn = self._conn
        if self._registered and conn is not None:
            getattr(conn.remote(MASTER), method)(self._framework_id, *args)
        else:
            self._hold(method, self._send, method, *args)

    def _launch(self, offer_ids: list[str], tasks: list[TaskInfo], filters: Filters | None) -> None:
        if self._status is not DriverStatus.RUNNING:
            return
        if self._registered and self._conn is not None:
            self._conn.remote(MASTER).launch_tasks(self._framework_id, offer_ids, tasks, filters)
            return
        self._log.warning(
            "launch_tasks while not registered: offers are void, tasks dropped",
            offers=offer_ids,
            tasks=[t.task_id for t in tasks],
        )
        # Deliver on a later turn so that a launch made inside a callback does not
        # re-enter the scheduler before that callback has returned.
        self._runtime.loop.call_soon(self._drop_locally, tasks)

    def _drop_locally(self, tasks: list[TaskInfo]) -> None:
        for task in tasks:
            if self._status is not DriverStatus.RUNNING:
                return
            status = TaskStatus(
                task_id=task.task_id,
                state=TaskState.TASK_DROPPED,
                message="the scheduler driver was not registered with a master when the task was launched",
                reason="master_disconnected",
                source="master",
                agent_id=task.agent_id or "",
                framework_id=self._framework_id or "",
            )
            self._callback(self.scheduler, "status_update", status)

    def _decline(self, offer_ids: list[str], filters: Filters | None) -> None:
        if self._status is not DriverStatus.RUNNING:
            return
        if self._registered and self._conn is not None:
            self._conn.remote(MASTER).decline_offer(self._framework_id, offer_ids, filters)
        else:
            self._log.warning(
                "decline_offer while not registered: dropped (offers are void)", offers=offer_ids
            )

    def _set_needs_offers(self, needs: bool) -> None:
        self._needs_offers = needs
        if self._registered and self._conn is not None:
            self._conn.remote(MASTER).set_needs_offers(self._framework_id, needs)

    def _set_filters(self, filters: FrameworkFilters) -> None:
        self._filters = filters
        if self._registered and self._conn is not None:
            self._conn.remote(MASTER).set_filters(self._framework_id, filters)

    def _acknowledge(self, agent_id: str, task_id: str, uuid: str) -> None:
        if uuid in self._seen:
            self._seen[uuid] = True
        else:
            self._remember(uuid, True)
        self._send_ack(agent_id, task_id, uuid)

    def _remember(self, uuid: str, acked: bool) -> None:
        seen = self._seen
        seen[uuid] = acked
        if len(seen) > DEDUPE_WINDOW:
            seen.popitem(last=False)

    # -- messages from the master (driver thread) ------------------------------------

    def _connected(self, conn: Connection) -> None:
        self._registered = False
        self._framework.framework_id = self._framework_id or ""
        conn.remote(MASTER).register_framework(self._framework)

    def _disconnected(self) -> None:
        was_registered, self._registered = self._registered, False
        if was_registered:
            self._callback(self.scheduler, "disconnected")

    def _on_registered(self, framework_id: str, master: str, again: bool) -> None:
        if not framework_id:
            self._log.error("master answered registration without a framework id; ignored", master=master)
            return
        if self._framework_id and framework_id != self._framework_id:
            self._log.warning(
                "master assigned a new framework id; tasks of the old id are not ours any more",
                old=self._framework_id,
                new=framework_id,
            )
        self._framework_id = framework_id
        self._framework.framework_id = framework_id
        self._master_name = master
        self._registered = True
        self._peer_registered()
        self._log = self._log.bind(framework_id=framework_id)
        self._log.info("reregistered" if again else "registered", master=master)
        remote = self._conn.remote(MASTER) if self._conn is not None else None
        if remote is not None:
            if self._needs_offers is not None:
                remote.set_needs_offers(framework_id, self._needs_offers)
            if self._filters is not None:
                remote.set_filters(framework_id, self._filters)
        self._release_held()
        self._callback(self.scheduler, "reregistered" if again else "registered", framework_id, master)

    def _on_offers(self, offers: list[Offer]) -> None:
        good: list[Offer] = []
        bad: list[str] = []
        for offer in offers:
            try:
                offer.resources = Resources.of(offer.resources)
                if offer.long_task_room is not None:
                    offer.long_task_room = Resources.of(offer.long_task_room)
            except InvalidResources as exc:
                self._log.warning(
                    "declining an offer with invalid resources", offer=offer.offer_id, error=str(exc)
                )
                bad.append(offer.offer_id)
                continue
            good.append(offer)
        if bad:
            self._decline(bad, Filters())
        if good:
            self._callback(self.scheduler, "resource_offers", good)

    def _on_status(self, status: TaskStatus) -> None:
        try:
            status.state = TaskState(status.state)
        except (ValueError, TypeError):
            pass
        uuid = status.uuid
        if not uuid:
            # Made by the master itself (e.g. a validation error): never retried, never acked.
            self._callback(self.scheduler, "status_update", status)
            return
        acked = self._seen.get(uuid)
        if acked is not None:
            # A retry of an update already delivered: never deliver twice, but answer it
            # again if it has been acknowledged (that acknowledgement was evidently lost).
            self._seen.move_to_end(uuid)
            if acked:
                self._send_ack(status.agent_id or "", status.task_id, uuid)
            return
        if not self._callback(self.scheduler, "status_update", status):
            return  # not remembered, not acked: the retry will deliver it again
        self._remember(uuid, self._implicit_acks)
        if self._implicit_acks:
            self._send_ack(status.agent_id or "", status.task_id, uuid)

    def _send_ack(self, agent_id: str, task_id: str, uuid: str) -> None:
        # Sent even if the callback just called stop(): the update *was* delivered, and
        # the connection stays open until the close-down runs on a later turn.
        if self._registered and self._conn is not None:
            self._conn.remote(MASTER).acknowledge_status_update(self._framework_id, agent_id, task_id, uuid)
        else:
            self._send("acknowledge_status_update", agent_id, task_id, uuid)

    def _on_guaranteed_share(self, request_id: int, guarantee: Any) -> None:
        waiter = self._share_waiters.pop(request_id, None)
        if waiter is None:
            return  # the caller timed out already
        try:
            waiter.set_result(Resources.of(guarantee))
        except InvalidResources as exc:
            waiter.set_exception(exc)

    def _on_not_leader(self, conn: Connection, leader: str) -> None:
        # Not fatal: we dialled a standby (a stale address, or the election is
        # under way). Leave it; the dial loop finds the leader again.
        self._log.warning(
            "the master we reached does not lead; looking for the leader",
            peer=self.peer,
            leader=leader or "unknown",
        )
        self._peer_not_leading(conn)

    def _give_up(self, message: str) -> None:
        self._callback(self.scheduler, "error", message)
        self.abort()

    def _on_error(self, message: str) -> None:
        self._log.error("master reported a fatal error; aborting", message=message)
        self._callback(self.scheduler, "error", message)
        self.abort()

    # -- close-down ------------------------------------------------------------

    async def _before_close(self, final: DriverStatus, options: dict) -> None:
        if not options.get("unregister"):
            return
        if self._registered and self._conn is not None:
            self._conn.remote(MASTER).unregister_framework(self._framework_id)
        elif self._framework_id:
            self._log.warning(
                "stopping while disconnected: could not unregister; the master keeps the framework "
                "until its failover timeout"
            )

    def _after_close(self, final: DriverStatus) -> None:
        self._registered = False
        error = DriverError(f"the scheduler driver was {final.name.lower()}")
        for request_id in list(self._share_waiters):
            waiter = self._share_waiters.pop(request_id, None)
            if waiter is not None and not waiter.done():
                waiter.set_exception(error)


class _FromMaster:
    """Handler of the ``Scheduler`` service on the driver's connection to the master."""

    __slots__ = ("_d",)

    def __init__(self, driver: SchedulerDriver) -> None:
        self._d = driver

    def _live(self, conn: Connection) -> bool:
        d = self._d
        return conn is d._conn and d._status is DriverStatus.RUNNING

    def registered(self, conn: Connection, framework_id: str, master: str) -> None:
        if self._live(conn):
            self._d._on_registered(framework_id, master, again=False)

    def reregistered(self, conn: Connection, framework_id: str, master: str) -> None:
        if self._live(conn):
            self._d._on_registered(framework_id, master, again=True)

    def resource_offers(self, conn: Connection, offers: list[Offer]) -> None:
        if self._live(conn):
            self._d._on_offers(offers or [])

    def offer_rescinded(self, conn: Connection, offer_id: str) -> None:
        if self._live(conn):
            self._d._callback(self._d.scheduler, "offer_rescinded", offer_id)

    def status_update(self, conn: Connection, status: TaskStatus) -> None:
        if self._live(conn) and status is not None:
            self._d._on_status(status)

    def framework_message(self, conn: Connection, agent_id: str, executor_id: str, data: bytes) -> None:
        if self._live(conn):
            self._d._callback(self._d.scheduler, "framework_message", agent_id, executor_id, data)

    def agent_lost(self, conn: Connection, agent_id: str) -> None:
        if self._live(conn):
            self._d._callback(self._d.scheduler, "agent_lost", agent_id)

    def executor_lost(self, conn: Connection, agent_id: str, executor_id: str, exit_status: int) -> None:
        if self._live(conn):
            self._d._callback(self._d.scheduler, "executor_lost", agent_id, executor_id, exit_status)

    def guaranteed_share(self, conn: Connection, request_id: int, guarantee: Any) -> None:
        if self._live(conn):
            self._d._on_guaranteed_share(request_id, guarantee)

    def error(self, conn: Connection, message: str) -> None:
        if self._live(conn):
            self._d._on_error(message)

    def not_leader(self, conn: Connection, leader: str) -> None:
        if self._live(conn):
            self._d._on_not_leader(conn, leader)

    def ping(self, conn: Connection) -> None:
        # The master's health check of a quiet scheduler (master.framework_ping_interval).
        if self._live(conn):
            conn.remote(MASTER).pong()


# -- argument normalisation (caller's thread, so mistakes raise where they are made) --


def _offer_ids(value: Any) -> list[str]:
    items = [value] if isinstance(value, (str, Offer)) else list(value)
    ids = []
    for item in items:
        oid = item.offer_id if isinstance(item, Offer) else item
        ids.append(_text(oid, "offer id"))
    return ids


def _tasks(value: Any) -> list[TaskInfo]:
    items = [value] if isinstance(value, TaskInfo) else list(value)
    for task in items:
        if not isinstance(task, TaskInfo):
            raise TypeError(f"tasks must be mezzo.TaskInfo, got {type(task).__name__}")
    return items


def _filters(filters: Filters | None) -> Filters | None:
    # None travels as an unset field: the master then applies its configured
    # master.refuse_seconds, so operators can tune the default for everyone.
    if filters is None:
        return None
    if not isinstance(filters, Filters):
        raise TypeError(f"filters must be a mezzo.Filters, got {type(filters).__name__}")
    return filters


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string, got {value!r}")
    return value


def _current_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry in some containers
        return ""
