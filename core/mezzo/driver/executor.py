"""The executor side of the framework protocol: :class:`Executor` and :class:`ExecutorDriver`.

Usage (a program the agent starts as a framework's executor)::

    import mezzo

    class Worker(mezzo.Executor):
        def launch_task(self, driver, task):
            driver.send_status_update(mezzo.TaskStatus(task_id=task.task_id,
                                                       state=mezzo.TaskState.TASK_RUNNING))
            ...  # start the work on a thread of your own, report TASK_FINISHED later

    if __name__ == "__main__":
        mezzo.ExecutorDriver(Worker()).run()   # returns after the agent's shutdown

The agent starts the executor with ``MEZZO_AGENT_ENDPOINT`` (``host:port``),
``MEZZO_FRAMEWORK_ID``, ``MEZZO_EXECUTOR_ID`` and ``MEZZO_SANDBOX`` in the
environment, with ``MEZZO_EXECUTOR_TOKEN`` (the secret it registers with) and
``MEZZO_TLS_CA`` when its port is TLS; the driver reads them, dials the agent, calls ``register_executor``
and dispatches what the agent sends. Callbacks run on the process-wide driver
thread (:mod:`mezzo.driver.runtime`): hand long work to your own threads.

Status updates are reliable: :meth:`ExecutorDriver.send_status_update` stamps each
update with a fresh uuid and keeps it until the agent answers
``status_update_acknowledged``; after a reconnection every unacknowledged update is
sent again (the agent de-duplicates by uuid). :meth:`ExecutorDriver.stop` waits up
to ``linger`` seconds for outstanding acknowledgements, so the usual "send
TASK_FINISHED, then stop" does not lose the last update.

Shutdown: when the agent sends ``shutdown``, :meth:`Executor.shutdown` is called
and then the driver stops, so ``run()``/``join()`` return STOPPED and the executor
process may exit.

Error handling: a lost connection is redialled after ``reconnect_interval`` (the
agent may be restarting), backing off with jitter up to :data:`AGENT_REDIAL_CAP`
while the agent stays away. When the agent stays unreachable for
``recovery_timeout`` seconds, :meth:`Executor.error` is called with the reason,
then :meth:`Executor.shutdown` (kill your tasks: nobody will report them), and the
driver aborts.
"""

from __future__ import annotations

import asyncio
import copy
import os
import pathlib
import time
import uuid as uuidlib
from collections.abc import Mapping
from typing import Any

from ..config import TlsConfig
from ..discovery import FixedAddress
from ..resources import InvalidResources, Resources
from ..rpc import Connection, client_tls, parse_address
from ..rpc.tls import EXECUTOR_CA_ENV
from ..services import AGENT, EXECUTOR, EXECUTOR_TOKEN_ENV
from ..wire.ttypes import AgentInfo, ExecutorInfo, FrameworkInfo, TaskInfo, TaskState, TaskStatus
from .lifecycle import DriverError, DriverLifecycle, DriverStatus

__all__ = ["ENVIRONMENT", "DriverError", "DriverStatus", "Executor", "ExecutorDriver"]

DEFAULT_AGENT_PORT = 5051

AGENT_REDIAL_CAP = 2.0
"""Seconds: the longest wait between two dials of an agent that is away. Lower than a
scheduler's cap: the agent is on the same host, few executors dial it, and once back it
gives them only ``agent.executor_register_timeout`` (20 s by default) to re-register."""

ENVIRONMENT = ("MEZZO_AGENT_ENDPOINT", "MEZZO_FRAMEWORK_ID", "MEZZO_EXECUTOR_ID", "MEZZO_SANDBOX")

"""Variables the agent sets for an executor; the driver needs all of them."""


class Executor:
    """Callbacks of a framework executor. Subclass and override what you need.

    Every callback receives the driver first and runs on the driver thread.
    """

    def registered(
        self,
        driver: ExecutorDriver,
        executor_info: ExecutorInfo,
        framework_info: FrameworkInfo,
        agent_info: AgentInfo,
    ) -> None:
        """The agent accepted this executor (once per driver; re-registration after a
        reconnection is not reported again)."""

    def launch_task(self, driver: ExecutorDriver, task: TaskInfo) -> None:
        """Run ``task`` (``task.resources`` is a :class:`mezzo.Resources`). Return quickly:
        start the work elsewhere and report progress with ``send_status_update``."""

    def kill_task(self, driver: ExecutorDriver, task_id: str) -> None:
        """Kill ``task_id`` and report TASK_KILLED; the agent kills the executor if this
        takes longer than its grace period."""

    def framework_message(self, driver: ExecutorDriver, data: bytes) -> None:
        """The scheduler sent ``data`` (best effort)."""

    def shutdown(self, driver: ExecutorDriver) -> None:
        """Kill every task; the driver stops when this returns and ``run()`` returns."""

    def error(self, driver: ExecutorDriver, message: str) -> None:
        """A fatal problem (the agent stayed unreachable); ``shutdown`` follows."""


class ExecutorDriver(DriverLifecycle):
    """Connects an :class:`Executor` to the agent that started this process.

    ``environ`` defaults to ``os.environ``; a missing variable raises
    :class:`~mezzo.driver.lifecycle.DriverError` naming it.
    """

    def __init__(
        self,
        executor: Executor,
        *,
        reconnect_interval: float = 0.5,
        recovery_timeout: float = 60.0,
        linger: float = 2.0,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if environ is None else environ
        missing = [name for name in ENVIRONMENT if not env.get(name)]
        if missing:
            raise DriverError(
                f"{', '.join(missing)} not set: an executor must be started by a mezzo agent, "
                f"which sets {', '.join(ENVIRONMENT)}"
            )
        try:
            host, port = parse_address(env["MEZZO_AGENT_ENDPOINT"], DEFAULT_AGENT_PORT)
        except ValueError as exc:
            raise DriverError(f"MEZZO_AGENT_ENDPOINT: {exc}") from None
        self.executor = executor
        self._framework_id = env["MEZZO_FRAMEWORK_ID"]
        self._executor_id = env["MEZZO_EXECUTOR_ID"]
        self._sandbox = pathlib.Path(env["MEZZO_SANDBOX"])
        self._token = env.get(EXECUTOR_TOKEN_ENV, "")
        """What proves to the agent that this process is the executor it started."""
        self._linger = float(linger)
        # The agent's port is TLS when the agent's is: it names its CA, and the
        # executor checks the agent against it (no certificate of its own).
        ca = env.get(EXECUTOR_CA_ENV)
        tls = client_tls(TlsConfig(enabled=True, ca=ca)) if ca else None
        super().__init__(
            FixedAddress(host, port),
            EXECUTOR,
            _FromAgent(self),
            reconnect_interval=reconnect_interval,
            logger="mezzo.driver.executor",
            log_context={
                "component": "executor-driver",
                "framework": self._framework_id,
                "executor": self._executor_id,
            },
            recovery_timeout=recovery_timeout,
            redial_cap=AGENT_REDIAL_CAP,
            tls=tls,
        )
        # Driver-thread state.
        self._registered_once = False
        self._agent_id = ""
        self._unacked: dict[str, TaskStatus] = {}  # uuid -> update, in sending order
        self._all_acked = asyncio.Event()
        self._all_acked.set()

    # -- introspection ----------------------------------------------------------

    @property
    def framework_id(self) -> str:
        return self._framework_id

    @property
    def executor_id(self) -> str:
        return self._executor_id

    @property
    def sandbox(self) -> pathlib.Path:
        """This executor's sandbox directory (``MEZZO_SANDBOX``)."""
        return self._sandbox

    @property
    def unacknowledged(self) -> int:
        """Status updates sent but not yet acknowledged by the agent."""
        return len(self._unacked)

    # -- actions -------------------------------------------------------------------

    def stop(self) -> DriverStatus:
        """Stop: wait up to ``linger`` seconds for outstanding acknowledgements (only
        while connected), then disconnect. ``join()`` returns STOPPED afterwards.
        Called inside a callback it returns at once and the lingering happens behind."""
        return self._terminate(DriverStatus.STOPPED, {"linger": self._linger}, wait=self._linger + 5.0)

    def send_status_update(self, status: TaskStatus) -> DriverStatus:
        """Report a task's state to the scheduler, reliably.

        ``status`` is copied and stamped with a fresh ``uuid``, ``timestamp``,
        ``executor_id``, ``framework_id``, ``agent_id`` and ``source="executor"``.
        """
        if not isinstance(status, TaskStatus):
            raise TypeError(f"status must be a mezzo.TaskStatus, got {type(status).__name__}")
        if not status.task_id:
            raise ValueError("status.task_id must be set")
        if status.state is None:
            raise ValueError("status.state must be set")
        if status.state == TaskState.TASK_STAGING:
            raise ValueError(
                "executors may not send TASK_STAGING (a task is staging until its executor starts it)"
            )
        update = copy.copy(status)
        update.uuid = uuidlib.uuid4().hex
        update.timestamp = time.time()
        update.executor_id = self._executor_id
        update.framework_id = self._framework_id
        update.source = "executor"
        return self._act(self._queue_update, update)

    def send_framework_message(self, data: bytes | str) -> DriverStatus:
        """Send ``data`` to the scheduler (best effort; held while disconnected)."""
        payload = data.encode() if isinstance(data, str) else bytes(data)
        return self._act(self._send_message, payload)

    # -- action bodies (driver thread) -------------------------------------------------

    def _queue_update(self, update: TaskStatus) -> None:
        if self._status is not DriverStatus.RUNNING:
            return
        if not update.agent_id:
            update.agent_id = self._agent_id
        self._unacked[update.uuid] = update
        self._all_acked.clear()
        if self._conn is not None:
            self._conn.remote(AGENT).executor_status_update(update)
        # Otherwise it goes out with the others right after the next connection.

    def _send_message(self, data: bytes) -> None:
        if self._status is not DriverStatus.RUNNING:
            return
        if self._conn is not None:
            self._conn.remote(AGENT).executor_to_framework(self._framework_id, self._executor_id, data)
        else:
            self._hold("executor_to_framework", self._send_message, data)

    # -- messages from the agent (driver thread) ----------------------------------------

    def _connected(self, conn: Connection) -> None:
        agent = conn.remote(AGENT)
        agent.register_executor(self._framework_id, self._executor_id, self._token)
        if self._unacked:
            self._log.info("re-sending unacknowledged status updates", count=len(self._unacked))
            for update in self._unacked.values():
                agent.executor_status_update(update)
        self._release_held()

    def _disconnected(self) -> None:
        pass  # the executor API has no callback for it; the redial is logged by the base

    def _on_registered(self, executor: ExecutorInfo, framework: FrameworkInfo, agent: AgentInfo) -> None:
        self._peer_registered()
        if agent is not None:
            self._agent_id = agent.agent_id or ""
            agent.resources = _lift(agent.resources)
        if executor is not None:
            executor.resources = _lift(executor.resources)
        if self._registered_once:
            self._log.info("re-registered with the agent", agent=self._agent_id)
            return
        self._registered_once = True
        self._log.info("registered with the agent", agent=self._agent_id)
        self._callback(self.executor, "registered", executor, framework, agent)

    def _on_launch(self, task: TaskInfo) -> None:
        task.resources = _lift(task.resources)
        if task.executor is not None:
            task.executor.resources = _lift(task.executor.resources)
        self._callback(self.executor, "launch_task", task)

    def _on_acknowledged(self, task_id: str, uuid: str) -> None:
        if self._unacked.pop(uuid, None) is not None and not self._unacked:
            self._all_acked.set()

    def _on_shutdown(self) -> None:
        self._log.info("agent asked the executor to shut down")
        self._callback(self.executor, "shutdown")
        self.stop()

    def _unreachable(self, seconds: float) -> None:
        message = f"the agent at {self.peer} has been unreachable for {seconds:.1f} s"
        self._log.error("giving up on the agent; shutting down", seconds=round(seconds, 1))
        self._callback(self.executor, "error", message)
        self._callback(self.executor, "shutdown")
        self.abort()

    # -- close-down ----------------------------------------------------------------------

    async def _before_close(self, final: DriverStatus, options: dict) -> None:
        linger = options.get("linger", 0.0)
        if not linger or not self._unacked or self._conn is None:
            return
        try:
            await asyncio.wait_for(self._all_acked.wait(), linger)
        except TimeoutError:
            self._log.warning(
                "stopping with unacknowledged status updates",
                count=len(self._unacked),
                tasks=sorted({u.task_id for u in self._unacked.values()}),
            )


class _FromAgent:
    """Handler of the ``Executor`` service on the driver's connection to its agent."""

    __slots__ = ("_d",)

    def __init__(self, driver: ExecutorDriver) -> None:
        self._d = driver

    def _live(self, conn: Connection) -> bool:
        d = self._d
        return conn is d._conn and d._status is DriverStatus.RUNNING

    def registered(
        self, conn: Connection, executor: ExecutorInfo, framework: FrameworkInfo, agent: AgentInfo
    ) -> None:
        if self._live(conn):
            self._d._on_registered(executor, framework, agent)

    def launch_task(self, conn: Connection, task: TaskInfo) -> None:
        if self._live(conn) and task is not None:
            self._d._on_launch(task)

    def kill_task(self, conn: Connection, task_id: str) -> None:
        if self._live(conn):
            self._d._callback(self._d.executor, "kill_task", task_id)

    def framework_message(self, conn: Connection, data: bytes) -> None:
        if self._live(conn):
            self._d._callback(self._d.executor, "framework_message", data)

    def status_update_acknowledged(self, conn: Connection, task_id: str, uuid: str) -> None:
        # Also while stopping: stop() lingers on the open connection for these.
        if conn is self._d._conn:
            self._d._on_acknowledged(task_id, uuid)

    def shutdown(self, conn: Connection) -> None:
        if self._live(conn):
            self._d._on_shutdown()


def _lift(wire: Any) -> Any:
    """``Resources.of`` that leaves a malformed struct as it is (the agent validated it)."""
    try:
        return Resources.of(wire)
    except InvalidResources:
        return wire
