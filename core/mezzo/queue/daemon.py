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
SOCKET_PATH_MAX = 107
"""Bytes of a unix socket's path (sun_path, less its terminating NUL)."""
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
        self.serves_everyone = os.geteuid() == 0
        """Root's queue takes every local user's jobs; anyone else's only its own user's."""
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
        """Claim the socket, then the journal (each refused, one line, when another queue
        holds it), connect to the master and serve. Raises ConfigError naming the key."""
        await self._claim_socket()
        self.journal.load(self.table)
        loop = asyncio.get_running_loop()

        def refused(removed: bool) -> None:
            loop.call_soon_threadsafe(self._register_anew if removed else self.stopped.set)

        self.framework.on_refused = refused
        self._runner = web.AppRunner(
            queue_app(self.framework, self.learn_cluster, everyone=self.serves_everyone),
            handle_signals=False,
            access_log=None,
        )
        await self._runner.setup()
        site = web.UnixSite(self._runner, self.socket_path)
        # The socket is made with its mode (no chmod after the bind, which a path swapped
        # for a symlink meanwhile would redirect): everyone's when root runs the queue (the
        # kernel names each caller, and jobs run as their submitter), else its user's alone.
        umask = os.umask(0o111 if self.serves_everyone else 0o177)
        try:
            await site.start()
        except OSError as exc:
            raise ConfigError(
                "queue.socket", f"cannot listen at {self.socket_path}: {exc.strerror}"
            ) from None
        finally:
            os.umask(umask)
        self._start_driver(self.journal.framework_id or "")
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

    def _start_driver(self, framework_id: str) -> None:
        framework = mezzo.FrameworkInfo(
            name=self.settings.name,
            role=self.settings.role,
            framework_id=framework_id,
            failover_timeout=self.settings.failover_timeout,
        )
        try:
            self.driver = mezzo.SchedulerDriver(self.framework, framework, self.settings.master, tls=self.tls)
        except ValueError as exc:  # the master's address
            raise ConfigError("queue.master", str(exc)) from None
        self.framework.driver = self.driver
        self.driver.start()

    def _register_anew(self) -> None:
        """The master removed the queue's framework (down past its failover timeout, or torn
        down): its tasks were killed, so its running jobs are queued again
        (:meth:`QueueFramework.forget_framework`), and the queue registers as a new framework."""
        log.warning("the master removed the queue's framework; registering anew")
        self._start_driver("")

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

        try:
            largest = await asyncio.get_running_loop().run_in_executor(None, ask)
        except Exception:  # a bug of ours must not fail a submission already queued
            log.exception("learning the cluster's largest agent failed")
            return
        with self.framework.lock:
            self.framework.largest_agent = largest

    async def _claim_socket(self) -> None:
        """Make the socket's directory; take over a socket file a dead queue left, refuse
        one a live queue serves."""
        path = Path(self.socket_path)
        if len(os.fsencode(path)) > SOCKET_PATH_MAX:
            raise ConfigError(
                "queue.socket", f"{path} is longer than a unix socket's {SOCKET_PATH_MAX} bytes"
            )
        try:
            # Made reachable by others only for root's queue (/run/mezzo), else private.
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o755 if self.serves_everyone else 0o700)
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
            try:
                path.unlink()  # nobody serves it: a queue that died left it
            except OSError as exc:
                raise ConfigError(
                    "queue.socket", f"cannot remove the stale socket {path}: {exc.strerror}"
                ) from None
            return
        finally:
            probe.close()
        raise ConfigError("queue.socket", f"another queue serves {path} already")
