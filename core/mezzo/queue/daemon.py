"""The whole queue as one daemon: its journal, its framework, its API.

``start`` replays the journal, registers the framework with the master (failing over
into the framework id the journal holds, so tasks that ran on through a restart are
the queue's again), and serves the API on the unix socket. ``stop`` disconnects from
the master *without* unregistering: the master keeps the queue's tasks running for
``failover_timeout`` seconds, waiting for it to come back.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import stat
import time
from dataclasses import dataclass
from pathlib import Path

import structlog
from aiohttp import web

import mezzo

from ..config import TlsConfig
from ..errors import ConfigError
from .api import queue_app
from .client import default_socket, default_state_dir
from .framework import QueueFramework
from .jobs import JobTable, Limits
from .journal import Journal

log = structlog.get_logger("mezzo.queue", component="queue")

TICK_SECONDS = 5.0
CLUSTER_VIEW_SECONDS = 5.0
"""How long what the master said of its largest agent is used before it is asked again."""
DEFAULT_FAILOVER_TIMEOUT = 7 * 24 * 3600.0
"""A week: a queue down over a long weekend still finds its tasks."""


@dataclass
class QueueSettings:
    master: str = "127.0.0.1:5050"
    socket: str = ""
    """Empty: :func:`~.client.default_socket`."""
    state_dir: str = ""
    """Empty: :func:`~.client.default_state_dir`."""
    name: str = "mezzo-queue"
    role: str = "*"
    failover_timeout: float = DEFAULT_FAILOVER_TIMEOUT
    limits: Limits = Limits()


class QueueDaemon:
    """See the module docstring. ``stopped`` is set when the master refuses the queue."""

    def __init__(self, settings: QueueSettings, *, tls: TlsConfig | None = None) -> None:
        self.settings = settings
        self.socket_path = settings.socket or default_socket()
        self.table = JobTable(settings.limits)
        self.journal = Journal(settings.state_dir or default_state_dir())
        self.framework = QueueFramework(self.table, self.journal)
        self.tls = tls
        self.stopped = asyncio.Event()
        self.driver: mezzo.SchedulerDriver | None = None
        self._runner: web.AppRunner | None = None
        self._ticker: asyncio.Task | None = None
        self._cluster_viewed_at = -float("inf")

    async def start(self) -> None:
        self.journal.load(self.table)
        await self._claim_socket()
        framework = mezzo.FrameworkInfo(
            name=self.settings.name,
            role=self.settings.role,
            framework_id=self.journal.framework_id or "",
            failover_timeout=self.settings.failover_timeout,
        )
        loop = asyncio.get_running_loop()

        def refused() -> None:
            loop.call_soon_threadsafe(self.stopped.set)

        self.framework.on_refused = refused
        self.driver = mezzo.SchedulerDriver(self.framework, framework, self.settings.master, tls=self.tls)
        self.framework.driver = self.driver
        self._runner = web.AppRunner(
            queue_app(self.framework, self.learn_cluster), handle_signals=False, access_log=None
        )
        await self._runner.setup()
        site = web.UnixSite(self._runner, self.socket_path)
        await site.start()
        # Every local user may submit: the kernel tells the queue who they are.
        os.chmod(self.socket_path, 0o666)
        self.driver.start()
        self._ticker = asyncio.ensure_future(self._tick())
        log.info(
            "queue serving",
            socket=self.socket_path,
            journal=str(self.journal.path),
            master=self.settings.master,
            queued=len(self.table.queued),
            running=len(self.table.running),
            framework=self.journal.framework_id,
        )

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        if self.driver is not None:
            # Not unregistering: the master keeps the tasks for failover_timeout.
            self.driver.stop(failover=True)
            await asyncio.get_running_loop().run_in_executor(None, self.driver.join)
        if self._runner is not None:
            await self._runner.cleanup()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.socket_path)
        with self.framework.lock:
            self.journal.close()

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            try:
                self.framework.tick()
            except Exception:  # keep the queue serving; the journal error is logged
                log.exception("queue housekeeping failed")
            await self.learn_cluster()

    async def learn_cluster(self) -> None:
        """Refresh :attr:`QueueFramework.largest_agent` from the master's ``/overview``
        when it is older than :data:`CLUSTER_VIEW_SECONDS` (blocking HTTP, on a worker
        thread). Unknown when the master cannot be asked (not registered, its HTTP API
        off, or the queue's principal may not view the cluster): nothing is then checked."""
        master = self.framework.master
        now = time.monotonic()
        if master is None or now - self._cluster_viewed_at < CLUSTER_VIEW_SECONDS:
            return
        self._cluster_viewed_at = now

        def ask() -> dict[str, float] | None:
            from ..errors import RequestFailed
            from ..operator_client import OperatorClient

            try:
                with OperatorClient(master, timeout=2.0, tls=self.tls) as api:
                    overview = api.get("/overview")
            except RequestFailed as exc:
                log.debug("cannot learn the cluster's largest agent", master=master, error=str(exc))
                return None
            largest = (overview.get("resources") or {}).get("largest_agent") or {}
            return {k: float(v) for k, v in largest.items() if k in ("cpus", "mem")} or None

        self.framework.largest_agent = await asyncio.get_running_loop().run_in_executor(None, ask)

    async def _claim_socket(self) -> None:
        """Make the socket's directory; take over a socket file a dead queue left, refuse
        one a live queue serves."""
        path = Path(self.socket_path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError("queue.socket", f"cannot create {path.parent}: {exc.strerror}") from None
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(mode):
            raise ConfigError("queue.socket", f"{path} exists and is not a socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.settimeout(1.0)
            probe.connect(str(path))
        except OSError:
            path.unlink()  # nobody serves it: a queue that died left it
            return
        finally:
            probe.close()
        raise ConfigError("queue.socket", f"another queue serves {path} already")
