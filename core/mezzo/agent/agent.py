"""The mezzo agent: advertises a machine's resources and runs tasks on it.

Usage::

    agent = Agent(config.agent, load_plugins())   # ConfigError: unknown isolator, bad address
    await agent.start()                           # binds config.listen, dials config.master
    await agent.wait_registered(timeout=10)       # or: await agent.registered.wait()
    print(agent.agent_id, agent.address)
    await agent.stopped.wait()                    # until stop(), or the master refused us
    await agent.stop()                            # kill every container, close

What it does, by the message flows of ``docs/protocol.md``:

- Registration. Dials the master and calls ``register_agent``; the master answers
  ``registered(agent_id)``. A lost connection is re-dialled, backing off with
  jitter from ``reconnect_interval`` up to 10 s (:mod:`mezzo.backoff`), and
  followed by ``reregister_agent`` carrying every task
  the agent holds, the latest status of each, the executors running and the
  frameworks they belong to, so a master that failed over rebuilds its state
  from us. ``agent.master`` may be ``zk://...``: the link then follows the
  elected leader. ``error(message)`` means we were refused: logged, and the
  agent stops. ``reregistration_refused`` means the cluster declared us lost:
  every container is killed (without reporting: its tasks were already reported
  lost) and the agent registers anew under a new id. ``ping`` is answered with
  ``pong`` so the master knows we are alive.
- Tasks. ``run_task`` with a command runs it under the built-in command executor
  (:mod:`.command_executor`); with an executor it goes to that framework's
  executor (:mod:`.executors`). ``kill_task`` and ``shutdown_framework`` go to
  whichever runs the task.
- Status updates leave through :mod:`.status_updates`: ordered per task, retried
  until the master acknowledges them. A task is forgotten once its terminal
  update is acknowledged.
- Checkpointing (``agent.checkpoint``, on by default; :mod:`.checkpoint`). Every
  task, executor, framework and status update is journaled under
  ``<work_dir>/meta/`` before the agent acts on it. An agent that starts and finds
  a journal (it crashed, or was SIGKILLed, with containers running) recovers
  before it dials the master: it binds the port it had (when ``agent.listen``
  asks for port 0), so executors find it again; adopts each command task still
  running and reports those that ended meanwhile from their exit files; waits for
  each custom executor to re-register; re-sends every unacknowledged update with
  its uuid; then re-registers under the same agent id with all of it. A journal
  from before a reboot is discarded. A clean :meth:`Agent.stop` kills every
  container and removes the journal: only a crash leaves something to recover.
  The journal is compacted as it grows, so it stays proportional to what the agent
  runs now, and is bounded by ``agent.max_journal_bytes``: a task that would take
  its live state past half of that is refused (TASK_DROPPED, reason ``journal_full``).
- The work dir (:mod:`.work_dir`). Created 0700; the agent refuses to start (ConfigError
  ``agent.work_dir``) unless it, its ancestors and the journal are safe from other users:
  whoever could write the journal could make a restarted agent kill any process. Sandboxes
  are created 0750, never through a symlink. On recovery a journaled process is adopted or
  killed only if it can be tied to a container the agent started (:mod:`.provenance`).
- Users (``agent.switch_user``, on by default; :mod:`.users`). An agent running as root
  runs each command task and executor as its unix user (:func:`mezzo.task_user.task_user`:
  the command's, else the framework's, else ``nobody``), in a sandbox given to that user;
  the work dir and the directories down to the sandboxes are then 0711, so a task's user
  reaches its own sandbox and lists none. A user the host does not have fails the task
  (reason ``user_unknown``). Not root, or switch_user off: everything runs as the agent's
  user (said once, as a warning, at start when switch_user is on). A task for an executor
  already running as another user is refused (TASK_ERROR, ``executor_user_mismatch``).
- HTTP (``[agent.http]``, :mod:`mezzo.http.agent_api`). The port also answers HTTP, as the
  master's does: the sandboxes' files (:mod:`.files`), ``/metrics`` (:mod:`.metrics`). The
  master reads the same files for its ``/files/*`` proxy over the agent's link to it
  (``files_request``, answered ``files_reply``).

Error handling: a call that makes no sense (unknown task, duplicate task id, a
master-only call from an executor's connection, ...) is logged with who it is
about and answered where the protocol has an answer (TASK_LOST "unknown task",
TASK_ERROR "duplicate task id on agent"); nothing a peer sends raises. Malformed
frames never reach this module: the transport closes that one connection.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import structlog

from .. import is_terminal, state_name
from ..config import AgentConfig, TlsConfig
from ..discovery import peer_address
from ..errors import ConfigError, MezzoError
from ..hookspecs import Container
from ..http.agent_api import agent_app
from ..http.link import http_handoff
from ..http.server import HttpServer
from ..plugin_guard import PluginGuard
from ..plugins import Plugins, load_plugins
from ..resources import InvalidResources, Resources
from ..rpc import Connection, ConnectionLimiter, Listener, client_tls, parse_address, serve, server_tls
from ..rpc.address import WILDCARDS, dialable_address, join_address
from ..rpc.listener import listen_error
from ..services import AGENT, EXECUTOR, MASTER
from ..task_user import task_user
from ..wire.ttypes import AgentInfo, FrameworkInfo, KillPolicy, RunningTask, TaskInfo, TaskState, TaskStatus
from . import metrics, posix
from .checkpoint import Checkpoint, CheckpointState, WorkDirBusy
from .command_executor import CommandTask
from .containerizer import Containerizer
from .executors import ExecutorRun
from .files import SandboxFiles
from .host import agent_hostname, agent_resources
from .master_link import DEFAULT_MASTER_PORT, MasterLink
from .provenance import disown_strangers, is_sandbox
from .recovery_plan import (
    CHECKPOINT_UNREADABLE,
    RecoveryPlan,
    TaskFailure,
    plan_recovery,
    unrecorded_sandboxes,
)
from .sandbox import InvalidId, Sandbox, check_id
from .service import AgentService
from .statistics import StatisticsReporter
from .status_updates import StatusUpdateManager, StreamKey
from .users import find_setpriv, switches_users
from .work_dir import UnsafePath, prepare_work_dir, untraversable_ancestor

log = structlog.get_logger("mezzo.agent", component="agent")

DEFAULT_AGENT_PORT = 5051
JOURNAL_FULL = "journal_full"
"""``TaskStatus.reason`` of a task refused because the checkpoint journal's live state
would pass half of ``agent.max_journal_bytes`` (see :meth:`Checkpoint.room_for`)."""
STOP_TIMEOUT = 10.0
"""Seconds stop() waits for killed containers to be reaped and cleaned up."""


@dataclass
class FrameworkState:
    """What the agent runs for one framework."""

    info: FrameworkInfo
    command_tasks: dict[str, CommandTask] = field(default_factory=dict)
    executors: dict[str, ExecutorRun] = field(default_factory=dict)
    task_ids: set[str] = field(default_factory=set)
    shutting_down: bool = False

    def idle(self) -> bool:
        return not (self.command_tasks or self.executors or self.task_ids)


@dataclass
class TaskRecord:
    """A task the agent holds, until its terminal update is acknowledged."""

    framework_id: str
    info: TaskInfo
    runner: CommandTask | ExecutorRun | None
    """None for a task recovered with its end still being reported."""
    started_at: float = field(default_factory=time.monotonic)
    """When this agent process launched it (or recovered it: then its age here)."""


class Agent:
    """One agent daemon. See the module docstring."""

    def __init__(
        self, config: AgentConfig, plugins: Plugins | None = None, *, tls: TlsConfig | None = None
    ) -> None:
        self.config = config
        self.plugins = plugins if plugins is not None else load_plugins()
        self.tls = tls if tls is not None and tls.enabled else None
        """``[tls]`` when on: the agent dials its master with TLS and listens with it (its
        executors, which have no certificates, check it against ``tls.ca``)."""
        # Built now, so that a bad file is a ConfigError before anything starts.
        self._server_tls = server_tls(self.tls, certificates_optional=True) if self.tls else None
        self._client_tls = client_tls(self.tls) if self.tls else None
        try:
            self._listen = parse_address(config.listen, DEFAULT_AGENT_PORT)
        except ValueError as exc:
            raise ConfigError("agent.listen", str(exc)) from None
        try:
            peer_address(config.master, DEFAULT_MASTER_PORT)
        except ValueError as exc:
            raise ConfigError("agent.master", str(exc)) from None
        if config.advertise:
            try:
                dialable_address(config.advertise, DEFAULT_AGENT_PORT)
            except ValueError as exc:
                raise ConfigError("agent.advertise", str(exc)) from None
        self.switches_users = switches_users(config.switch_user)
        """Tasks and executors run as their unix users (``agent.switch_user``, and the agent
        is root); otherwise as the agent's own user."""
        if self.switches_users and find_setpriv() is None:
            raise ConfigError(
                "agent.switch_user",
                "running tasks as their users needs setpriv (util-linux), which is not installed: "
                "install it, or set agent.switch_user = false to run every task as root",
            )
        self.plugin_guard: PluginGuard = self.plugins.guard
        """This daemon's one boundary for calls into plugins (:mod:`mezzo.plugin_guard`):
        counts and logs the failures of isolator calls (see :attr:`plugin_failures`)."""
        self.containerizer = Containerizer.from_config(config, self.plugins, self.plugin_guard)

        self.agent_id = ""
        self.address = ""
        """``host:port`` the agent actually bound (after start())."""
        self.endpoint = ""
        """``host:port`` executors dial (the bound address; loopback for a wildcard bind)."""
        self.advertised = ""
        """``host:port`` peers reach the agent at, sent to the master (``agent.advertise``,
        else the bound address); empty for a wildcard bind without ``agent.advertise``:
        the master then takes the address the agent's connection comes from."""
        self.hostname = agent_hostname(config.hostname)
        self.port = 0
        self.resources = Resources()
        self.registered = asyncio.Event()
        """Set while the agent is registered with a master; cleared when the link drops."""
        self.stopped = asyncio.Event()
        self.error_message: str | None = None
        """The master's refusal, if it sent one (the agent then stopped)."""

        self.frameworks: dict[str, FrameworkState] = {}
        self.tasks: dict[StreamKey, TaskRecord] = {}
        self.kill_reasons: dict[StreamKey, tuple[str, str]] = {}
        """(reason, message) of the master's own kills (revocation) per task, stamped on
        the task's TASK_KILLING and TASK_KILLED updates until its terminal one."""
        self.checkpoint = Checkpoint(
            config.work_dir, enabled=config.checkpoint, max_bytes=config.max_journal_bytes
        )
        self.updates = StatusUpdateManager(
            send=self._send_status,
            agent_id=lambda: self.agent_id,
            retry=config.status_update_retry,
            on_stream_end=self._forget_task,
            journal=self.checkpoint,
        )
        self.statistics = StatisticsReporter(self, config.statistics_interval)
        self._unreported_exits: list[tuple[str, str, int, str]] = []
        """``executor_exited`` calls the master could not be sent yet."""
        self.log = log
        self._service = AgentService(self)
        self._server: Listener | None = None
        self._limiter = ConnectionLimiter(config.connections, max_frame=config.max_frame_bytes, logger=log)
        """Bounds on the peers of the agent's port (``[agent.connections]``)."""
        self._link: MasterLink | None = None
        self._http: HttpServer | None = None
        """The HTTP API sharing the port (``[agent.http]``, :mod:`mezzo.http.agent_api`)."""
        self._handoff: Callable[[Any], asyncio.Protocol] | None = None
        self.files = SandboxFiles(config.work_dir, latest=self.latest_run)
        """The sandboxes' files, for the HTTP API and the master's proxy (:mod:`.files`)."""
        self.task_ends: Counter[str] = Counter()
        """Tasks that ended here since the agent started, by terminal state name (metrics)."""
        self._background: set[asyncio.Task] = set()
        self._stopping = False
        self.leaving_tasks = False
        """True once the containers are to outlive this agent: set as :meth:`stop`
        begins with ``keep_tasks``, or when :meth:`start` fails after recovery."""
        self._starting_over = False
        self._stop_task: asyncio.Task | None = None

    @property
    def plugin_failures(self) -> dict[str, int]:
        """Failed calls into plugins so far, by ``isolator/<name>.<method>`` (empty when none)."""
        return self.plugin_guard.counts()

    # -- life cycle -------------------------------------------------------

    async def start(self) -> None:
        """Bind, then keep registering with the master in the background."""
        config = self.config
        self._prepare_work_dir()
        self._say_who_tasks_run_as()
        self.resources = agent_resources(config.resources, config.work_dir)
        try:
            self.checkpoint.lock()
        except WorkDirBusy as exc:
            raise ConfigError("agent.work_dir", f"{config.work_dir!r}: {exc}") from None
        state = self.checkpoint.load()
        recovered = self._recover(state) if not state.empty() else []
        await self.containerizer.recover([c for c, _start in recovered])
        try:
            for _container, start in recovered:
                start()  # after the isolators recovered: a container that ended is cleaned up now
            await self._serve(state.port)
        except BaseException:
            # Not started (a port taken, ZooKeeper out of reach): as after a crash, what
            # was taken back from the journal runs on, and the journal stays, for the
            # next agent; the watchers cancelled on the way out must not kill it.
            self.leaving_tasks = True
            self.checkpoint.flush()
            raise

    async def _serve(self, journaled_port: int) -> None:
        """Bind the port (``journaled_port`` if the listen address asks for any), start
        the HTTP API and the link to the master."""
        config = self.config
        host, port = self._listen
        if config.http.enabled:
            started = time.monotonic()
            self._http = HttpServer(
                agent_app(
                    self.files,
                    lambda: metrics.snapshot(self, started),
                    tls=self.tls is not None,
                    readers=config.http.readers,
                    executors=self,
                )
            )
            await self._http.start()
            self._handoff = http_handoff(self._http.handler, self._limiter)
        self._server = await self._bind(host, port, journaled_port)
        bound = self._server.sockets[0].getsockname()
        self.port = bound[1]
        self.address = join_address(bound[0], self.port)
        wildcard = bound[0] in WILDCARDS
        self.endpoint = join_address("127.0.0.1" if wildcard else bound[0], self.port)
        if config.advertise:
            self.advertised = dialable_address(config.advertise, self.port)
        elif not wildcard:
            self.advertised = self.address
        self.checkpoint.begin(self.port, self.agent_id)
        self._link = MasterLink(
            config.master,
            self._service,
            interval=config.reconnect_interval,
            max_frame=config.max_frame_bytes,
            on_connected=self._master_connected,
            on_lost=self._master_lost,
            tls=self._client_tls,
        )
        try:
            await self._link.start()
        except (TimeoutError, PermissionError) as exc:  # PermissionError: zk.client.UnprotectedPath
            raise MezzoError(f"agent.master: {exc}") from None
        self.statistics.start()
        self.log.info(
            "agent started",
            address=self.address,
            master=self._link.address,
            resources=str(self.resources),
            isolation=self.containerizer.names,
        )

    def _prepare_work_dir(self) -> None:
        """Create the work dir (0700) and refuse to start, with a one-line ConfigError, unless
        it and the journal in it are the agent's own (:mod:`.work_dir`): the agent replays
        that journal and signals the processes it names."""
        work_dir = self.config.work_dir
        try:
            prepare_work_dir(work_dir, shared=self.switches_users)
            self.checkpoint.check_files()
        except UnsafePath as exc:
            raise ConfigError("agent.work_dir", str(exc)) from None
        except OSError as exc:
            raise ConfigError(
                "agent.work_dir", f"cannot create {work_dir!r}: {exc.strerror or exc}"
            ) from None

    def _say_who_tasks_run_as(self) -> None:
        """Warn, once at start, where tasks will not run as the users they name, or will not
        reach their sandboxes by path."""
        if self.config.switch_user and not self.switches_users:
            self.log.warning(
                "agent.switch_user is on but the agent does not run as root: every task and "
                "executor runs as the agent's own user",
                uid=os.geteuid(),
            )
        elif self.switches_users:
            blocked = untraversable_ancestor(self.config.work_dir)
            if blocked is not None:
                self.log.warning(
                    "tasks run as their users, who cannot pass through a directory above the work "
                    "dir: they start in their sandbox, but its path ($MEZZO_SANDBOX) does not resolve "
                    "for them; chmod o+x it or pick another agent.work_dir",
                    directory=blocked,
                    work_dir=self.config.work_dir,
                )

    async def _bind(self, host: str, port: int, recovered_port: int) -> Listener:
        executors = any(fw.executors for fw in self.frameworks.values())

        def listen(on_port: int) -> Awaitable[Listener]:
            return serve(
                host,
                on_port,
                AGENT,
                self._service,
                max_frame=self.config.max_frame_bytes,
                limiter=self._limiter,
                tls=self._server_tls,
                handoff=self._handoff,
            )

        if recovered_port and port == 0 and self.frameworks:
            # Executors find their agent through MEZZO_AGENT_ENDPOINT: be where they look.
            try:
                return await listen(recovered_port)
            except OSError as exc:
                (self.log.error if executors else self.log.info)(
                    "cannot bind the port the agent had before its restart"
                    + ("; its executors will not find it" if executors else ""),
                    port=recovered_port,
                    error=exc.strerror or str(exc),
                )
        elif recovered_port and port not in (0, recovered_port) and executors:
            self.log.warning(
                "agent.listen names another port than the agent had before its restart; its "
                "executors will not find it",
                port=port,
                before=recovered_port,
            )
        try:
            return await listen(port)
        except OSError as exc:
            raise listen_error("agent.listen", host, port, exc) from None

    # -- recovery -----------------------------------------------------------

    def _recover(self, state: CheckpointState) -> list[tuple[Container, Callable[[], None]]]:
        """Rebuild frameworks, tasks, executors and update streams from the checkpoint
        (see the module docstring): plan (:mod:`.recovery_plan`), then carry the plan out.
        Runs before the agent serves or dials anything. Returns each container taken
        back, with what starts watching it."""
        if state.agent_id:
            self.log = log.bind(agent=state.agent_id)
        self.log.info(
            "recovering from the checkpoint",
            checkpoint=self.checkpoint.path,
            frameworks=len(state.frameworks),
            tasks=len(state.tasks),
            executors=len(state.executors),
            problems=len(state.problems),
        )
        work_dir = os.path.abspath(self.config.work_dir)
        for stranger in disown_strangers(state, work_dir):
            self.log.warning(
                "leaving alone what the checkpoint names: not a container this agent started",
                pid=stranger.pid or None,
                framework=stranger.framework_id,
                container=stranger.what,
                why=stranger.why,
            )
        # Only the agent's own sandboxes: a leader is found there by its working directory.
        sandboxes = [s for s in unrecorded_sandboxes(state) if is_sandbox(s, work_dir)]
        leaders = posix.session_leaders_in(sandboxes) if sandboxes else {}
        found = {}
        for sandbox in sandboxes:
            entry = leaders.get(os.path.realpath(sandbox))
            if entry is not None:
                found[sandbox] = (entry.pid, entry.start_time)
        return self._carry_out(plan_recovery(state, found))

    def _carry_out(self, plan: RecoveryPlan) -> list[tuple[Container, Callable[[], None]]]:
        """Apply a recovery plan: kill, journal, rebuild, restore, report, in that order."""
        cp = self.checkpoint
        if plan.agent_id:
            self.agent_id = plan.agent_id
            self.log = log.bind(agent=self.agent_id)
        for found in plan.found_pids:
            self.log.info(
                "found the process of a container launched as the agent died",
                container=found.container_id,
                pid=found.pid,
            )
            cp.pid(found.framework_id, found.ident, found.kind, found.pid, found.start_time)
        for damaged in plan.damaged_executors:
            self.log.error(
                "cannot recover an executor: its checkpoint is damaged; killing it",
                framework=damaged.framework_id,
                executor=damaged.executor_id,
                why=damaged.why,
            )
        for kill in plan.kills:
            posix.kill_tree(kill.container.pid, start_time=kill.container.start_time)
        for gone in plan.shut_down:
            for tid in gone.task_ids:
                cp.task_gone(gone.framework_id, tid)
            for eid in gone.executor_ids:
                cp.executor_gone(gone.framework_id, eid)
            cp.framework_gone(gone.framework_id)
            self.log.info("killed what was left of a framework being shut down", framework=gone.framework_id)
        for damaged in plan.damaged_executors:
            cp.executor_gone(damaged.framework_id, damaged.executor_id)

        for fid, framework in plan.frameworks.items():
            self.frameworks[fid] = FrameworkState(framework)
        runs: list[ExecutorRun] = []
        for ex in plan.executors:
            fw = self.frameworks[ex.framework_id]
            run = fw.executors[ex.info.executor_id] = ExecutorRun.recovered(
                self, fw.info, ex.info, ex.container, ex.token
            )
            for task_info, launched in ex.tasks:
                run.recover_task(task_info, launched)
                self._hold(ex.framework_id, task_info, run)
            runs.append(run)
        commands: list[tuple[FrameworkState, CommandTask]] = []
        for cmd in plan.command_tasks:
            fw = self.frameworks[cmd.framework_id]
            command = fw.command_tasks[cmd.info.task_id] = CommandTask.recovered(
                self, fw.info, cmd.info, cmd.container, cmd.latest
            )
            self._hold(cmd.framework_id, cmd.info, command)
            commands.append((fw, command))
        for key, task_info in plan.reporting:
            self._hold(key[0], task_info, None)  # its end is being reported
        self.kill_reasons.update(plan.kill_reasons)

        for stream in plan.streams:
            self.updates.recover(stream.key, stream.pending, stream.seen, stream.latest)
        for key in plan.forget_tasks:
            cp.task_gone(*key)  # reported and acknowledged: done with
        for failure in plan.failures:
            self._fail_recovered(failure)
        for fid in plan.forget_frameworks:
            cp.framework_gone(fid)

        recovered: list[tuple[Container, Callable[[], None]]] = []
        for fw, command in commands:
            assert command.container is not None
            recovered.append((command.container, functools.partial(self._start_command, fw, command)))
        for run in runs:
            assert run.container is not None
            recovered.append((run.container, functools.partial(self._start_executor, run)))
        self.log.info(
            "recovered from the checkpoint",
            command_tasks=len(commands),
            executors=len(runs),
            tasks=len(self.tasks),
            updates_pending=sum(len(s) for s in self.updates.streams.values()),
        )
        return recovered

    def _hold(self, framework_id: str, info: TaskInfo, runner: CommandTask | ExecutorRun | None) -> None:
        """Hold a recovered task until its terminal update is acknowledged."""
        self.tasks[(framework_id, info.task_id)] = TaskRecord(framework_id, info, runner)
        self.frameworks[framework_id].task_ids.add(info.task_id)

    def _fail_recovered(self, failure: TaskFailure) -> None:
        fid, tid = failure.key
        info = failure.info
        self.log.error(
            "cannot recover a task from the checkpoint; it is reported failed",
            framework=fid,
            task=tid,
            why=failure.problem,
        )
        if failure.report:
            self.emit_status(
                TaskStatus(
                    task_id=tid,
                    framework_id=fid,
                    state=TaskState.TASK_FAILED,
                    reason=CHECKPOINT_UNREADABLE,
                    message=f"the agent restarted and could not recover the task: {failure.problem}",
                    executor_id=(
                        info.executor.executor_id if info is not None and info.executor is not None else tid
                    ),
                )
            )
        if failure.journal_damaged:
            self.checkpoint.damage_settled(fid, tid)  # its end is in its update stream now
        if failure.keep_record:
            assert info is not None
            self._hold(fid, info, None)

    async def wait_registered(self, timeout: float | None = None) -> str:
        """Wait until registered with a master; returns the agent id.

        Raises :class:`TimeoutError` after ``timeout`` seconds, and
        :class:`~mezzo.errors.MezzoError` if the agent stops first (e.g. the
        master refused it with ``error``).
        """
        registered = asyncio.ensure_future(self.registered.wait())
        stopped = asyncio.ensure_future(self.stopped.wait())
        try:
            done, _ = await asyncio.wait(
                {registered, stopped}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            registered.cancel()
            stopped.cancel()
        if registered in done:
            return self.agent_id
        if stopped in done:
            raise MezzoError(f"the agent stopped before registering: {self.error_message or 'stop() called'}")
        from ..zk.url import shown

        raise TimeoutError(
            f"not registered with the master at {shown(self.config.master)} within {timeout:g}s"
        )

    async def stop(self, *, keep_tasks: bool | None = None) -> None:
        """Kill every container, clean up, close every connection. Idempotent: the
        first call decides.

        With ``keep_tasks`` (by default ``keep_tasks_on_stop``) the containers are left
        running instead, and the journal kept: the next agent on this work dir takes
        them back, as after a crash.
        """
        if self._stopping:
            await self.stopped.wait()
            return
        self._stopping = True
        keep = self.config.keep_tasks_on_stop if keep_tasks is None else keep_tasks
        # (Set already if start failed: what it took back is left as it found it.)
        self.leaving_tasks = self.leaving_tasks or (keep and self.checkpoint.enabled)
        self.statistics.stop()
        self.registered.clear()
        if self._link is not None:
            await self._link.close()
        if self.leaving_tasks and self._server is not None:
            self._server.close()  # executors cut off below redial the next agent, not this one
        if not self.leaving_tasks:
            for fw in self.frameworks.values():
                for command in fw.command_tasks.values():
                    command.kill_now()
                for run in fw.executors.values():
                    run.terminate(None, "agent stopped")
        pending = set(self._background)
        if pending and not self.leaving_tasks:
            _done, pending = await asyncio.wait(pending, timeout=STOP_TIMEOUT)
        # Left running, a container's watcher would wait for its end: stop watching.
        # (ContainerRun.run sees leaving_tasks and lets the process be.)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        self.updates.close()
        self.containerizer.close()
        if self.leaving_tasks:
            self.checkpoint.close()  # written out: the next agent reads it
            self.log.info(
                "leaving tasks running for the next agent on this work dir",
                tasks=len(self.tasks),
                executors=sum(len(fw.executors) for fw in self.frameworks.values()),
            )
        else:
            # Every container was killed: nothing to recover (only a crash leaves a journal).
            self.checkpoint.clear()
        self.checkpoint.unlock()
        if self._http is not None:
            await self._http.stop()  # the requests in flight, briefly; the links close with the port
            self._http = None
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        failures = self.plugin_failures
        self.log.info("agent stopped", **({"plugin_failures": failures} if failures else {}))
        self.stopped.set()

    def background(self, coro: Coroutine[Any, Any, Any], *, what: str) -> asyncio.Task:
        """Run ``coro`` as a task owned by the agent (awaited by stop(), errors logged)."""
        task = asyncio.get_running_loop().create_task(coro, name=f"mezzo-agent {what}")
        self._background.add(task)
        task.add_done_callback(lambda t: self._background_done(t, what))
        return task

    def _background_done(self, task: asyncio.Task, what: str) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.log.error(f"{what} failed", exc_info=task.exception())

    # -- the master link --------------------------------------------------

    def agent_info(self) -> AgentInfo:
        return AgentInfo(
            agent_id=self.agent_id,
            hostname=self.hostname,
            port=self.port,
            resources=self.resources,
            attributes=dict(self.config.attributes),
            address=self.advertised,
        )

    def _master_connected(self, conn: Connection) -> None:
        if self._starting_over:
            return  # registers as a new agent once the old containers are gone
        master = conn.remote(MASTER)
        if not self.agent_id:
            master.register_agent(self.agent_info())
            return
        tasks = [
            RunningTask(framework_id=rec.framework_id, task=rec.info, latest=self.updates.latest(*key))
            for key, rec in self.tasks.items()
        ]
        executors = [
            run.info for fw in self.frameworks.values() for run in fw.executors.values() if run.alive
        ]
        frameworks = [fw.info for fw in self.frameworks.values() if not fw.shutting_down]
        self.log.info("re-registering with the master", tasks=len(tasks), executors=len(executors))
        master.reregister_agent(self.agent_info(), tasks, executors, frameworks)

    def _master_lost(self, conn: Connection) -> None:
        self.registered.clear()

    def _on_registered(self, agent_id: str, again: bool) -> None:
        if not agent_id:
            self.log.error("master answered registration without an agent id")
            return
        if self.agent_id and agent_id != self.agent_id:
            self.log.warning("master assigned a new agent id", old=self.agent_id, new=agent_id)
        self.agent_id = agent_id
        self.checkpoint.agent(agent_id)
        self.log = log.bind(agent=agent_id)
        self.log.info("re-registered with the master" if again else "registered with the master")
        self.registered.set()
        self.updates.resend_all()
        master = self._master()
        exits, self._unreported_exits = self._unreported_exits, []
        for fid, eid, status, message in exits:
            if master is not None:
                master.executor_exited(agent_id, fid, eid, status, message)
            self.checkpoint.executor_gone(fid, eid)
            if fid not in self.frameworks and not any(e[0] == fid for e in self._unreported_exits):
                self.checkpoint.framework_gone(fid)

    def _on_error(self, message: str) -> None:
        self.log.error("the master refused this agent; stopping", message=message)
        self.error_message = message
        if self._stop_task is None:
            # With keep_tasks_on_stop its tasks outlive a refusal too: a leader's ACL
            # mistake, once fixed, must not have cost them (the next agent adopts them).
            self._stop_task = asyncio.get_running_loop().create_task(self.stop())

    def _on_reregistration_refused(self, message: str) -> None:
        if self._starting_over or self._stopping:
            return
        self.log.warning(
            "the cluster declared this agent lost; killing its tasks and registering anew", message=message
        )
        self._starting_over = True
        self.registered.clear()
        self.background(self._start_over(), what="starting over as a new agent")

    async def _start_over(self) -> None:
        """Kill what the lost agent ran (its frameworks were told TASK_LOST, so nothing
        is reported again), then register under a new id."""
        try:
            for fid in list(self.frameworks):
                self.shutdown_framework(fid)
            self.updates.close()
            self.tasks.clear()
            deadline = time.monotonic() + self.config.kill_grace_period + STOP_TIMEOUT
            while self.frameworks and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            if self.frameworks:
                self.log.warning(
                    "containers of the lost agent outlived their kill; registering anyway",
                    frameworks=sorted(self.frameworks),
                )
                self.frameworks.clear()
            self.agent_id = ""
            self.log = log
            self._unreported_exits.clear()
            self.checkpoint.clear()
            self.checkpoint.begin(self.port, "")
        finally:
            self._starting_over = False
        conn = self._link.conn if self._link is not None else None
        if conn is not None and not self._stopping:
            conn.remote(MASTER).register_agent(self.agent_info())

    def _master(self) -> Any | None:
        """The master's stub while registered, else None (messages would be dropped)."""
        conn = self._link.conn if self._link is not None else None
        if conn is None or not self.registered.is_set():
            return None
        return conn.remote(MASTER)

    def _send_status(self, status: TaskStatus) -> bool:
        master = self._master()
        if master is None:
            return False
        status.agent_id = self.agent_id
        master.status_update(status)
        return True

    # -- tasks ------------------------------------------------------------

    def emit_status(self, status: TaskStatus, *, source: str = "agent") -> TaskStatus | None:
        """Hand a task's status to its stream; None if it was dropped."""
        if self._stopping:
            return None
        fw = self.frameworks.get(status.framework_id)
        if fw is not None and fw.shutting_down:
            return None
        if self.kill_reasons:
            self._stamp_kill_reason(status)
        sent = self.updates.update(status, source=source)
        if sent is not None and is_terminal(status.state):
            self.task_ends[state_name(status.state)] += 1
            held = self.tasks.get((status.framework_id, status.task_id))
            self.log.info(
                "task ended",
                framework=status.framework_id,
                task=status.task_id,
                state=state_name(status.state),
                reason=status.reason or None,
                exit_code=status.exit_code,
                seconds=round(time.monotonic() - held.started_at, 3) if held is not None else None,
                message=(status.message or "")[:200] or None,
            )
        return sent

    def _stamp_kill_reason(self, status: TaskStatus) -> None:
        """Give a task the master killed for a reason of its own (revocation) that
        reason on its kill updates, whoever made them: the command executor, a
        custom executor, or the agent after killing a stuck executor."""
        key = (status.framework_id, status.task_id)
        why = self.kill_reasons.get(key)
        if why is None:
            return
        if status.state in (TaskState.TASK_KILLING, TaskState.TASK_KILLED):
            reason, message = why
            status.reason = reason or status.reason
            if message:
                status.message = f"{message}; {status.message}" if status.message else message
        if is_terminal(status.state):
            del self.kill_reasons[key]

    def run_task(self, framework: FrameworkInfo, task: TaskInfo) -> None:
        fid = framework.framework_id if framework is not None else ""
        tid = task.task_id if task is not None else ""
        try:
            check_id("framework id", fid)
            check_id("task id", tid)
        except InvalidId as exc:
            self._reject(fid or "", tid or "", TaskState.TASK_ERROR, "invalid_task", str(exc))
            return
        key = (fid, tid)
        if key in self.tasks or key in self.updates.streams:
            self._reject(fid, tid, TaskState.TASK_ERROR, "duplicate_task_id", "duplicate task id on agent")
            return
        fw = self.frameworks.get(fid)
        if fw is not None and fw.shutting_down:
            self.log.warning("ignoring a task of a framework being shut down", framework=fid, task=tid)
            return
        problem = _task_problem(task)
        if problem is not None:
            self._reject(fid, tid, TaskState.TASK_ERROR, "invalid_task", problem)
            return
        run = None
        if task.executor is not None and fw is not None:
            run = fw.executors.get(task.executor.executor_id)
            if run is not None and not run.alive:
                self._reject(
                    fid,
                    tid,
                    TaskState.TASK_DROPPED,
                    "executor_terminating",
                    f"executor {task.executor.executor_id!r} is shutting down",
                )
                return
            user = task_user(framework, task) if run is not None and self.switches_users else None
            if user is not None and run is not None and user != run.user_name:
                # The master checked the task's user against its ACLs; the executor would run
                # it as another one.
                self._reject(
                    fid,
                    tid,
                    TaskState.TASK_ERROR,
                    "executor_user_mismatch",
                    f"executor {task.executor.executor_id!r} runs as user {run.user_name!r}, "
                    f"not as {user!r}, the task's user",
                )
                return
        # Bounded by agent.max_journal_bytes: refused rather than growing the journal
        # without bound (a new executor's info counts too).
        no_room = self.checkpoint.room_for(framework, task, task.executor if run is None else None)
        if no_room is not None:
            self._reject(fid, tid, TaskState.TASK_DROPPED, JOURNAL_FULL, no_room)
            return
        if fw is None:
            fw = self.frameworks[fid] = FrameworkState(framework)
        fw.info = framework
        self.checkpoint.framework(framework)
        runner: CommandTask | ExecutorRun
        if task.command is not None:
            command = runner = CommandTask(self, framework, task)
            if self.checkpoint.enabled:
                self.checkpoint.task(
                    fid,
                    task,
                    container_id=command.container_id,
                    sandbox=Sandbox.path_for(
                        os.path.abspath(self.config.work_dir), fid, tid, command.container_id
                    ),
                )
            fw.command_tasks[tid] = command
            self._start_command(fw, command)
        else:
            eid = task.executor.executor_id
            run = fw.executors.get(eid)
            if run is None:
                run = fw.executors[eid] = ExecutorRun(self, framework, task.executor)
                if self.checkpoint.enabled:
                    self.checkpoint.executor(
                        fid,
                        run.info,
                        run.container_id,
                        Sandbox.path_for(os.path.abspath(self.config.work_dir), fid, eid, run.container_id),
                        run.token,
                    )
                self._start_executor(run)
            run.add_task(task)
            runner = run
        self.tasks[key] = TaskRecord(fid, task, runner)
        fw.task_ids.add(tid)
        self.log.debug(
            "task accepted", framework=fid, task=tid, executor=getattr(runner, "executor_id", "command")
        )

    def _start_command(self, fw: FrameworkState, task: CommandTask) -> None:
        self.background(self._run_command(fw, task), what=f"command task {task.task_id}")

    def _start_executor(self, run: ExecutorRun) -> None:
        self.background(run.run(), what=f"executor {run.executor_id}")

    async def _run_command(self, fw: FrameworkState, task: CommandTask) -> None:
        try:
            await task.run()
        finally:
            if fw.command_tasks.get(task.task_id) is task:
                del fw.command_tasks[task.task_id]
            key = (task.framework_id, task.task_id)
            if key not in self.tasks and key not in self.updates.streams and not self._stopping:
                self.checkpoint.task_gone(*key)  # its framework was shut down: nothing to report
            self._maybe_forget_framework(fw.info.framework_id)

    def kill_task(self, framework_id: str, task_id: str, kill: KillPolicy | None = None) -> None:
        """Kill a task: TASK_KILLING, then its process tree (or its whole executor)
        once the grace period is over. ``kill`` is set by the master's own kills
        (revocation): its grace replaces ``kill_grace_period``, and its reason and
        message go on the task's kill updates."""
        if not framework_id or not task_id:
            self.log.warning("kill without a framework or task id", framework=framework_id, task=task_id)
            return
        rec = self.tasks.get((framework_id, task_id))
        if rec is None:
            if (framework_id, task_id) in self.updates.streams:
                return  # already answered (rejected or lost), awaiting its acknowledgement
            self.log.warning("kill for an unknown task", framework=framework_id, task=task_id)
            self.emit_status(
                TaskStatus(
                    task_id=task_id,
                    framework_id=framework_id,
                    state=TaskState.TASK_LOST,
                    reason="task_unknown",
                    message="kill_task: the agent knows no such task",
                )
            )
            return
        grace = _grace_of(kill)
        if kill is not None and (kill.reason or kill.message):
            self.kill_reasons[(framework_id, task_id)] = (str(kill.reason or ""), str(kill.message or ""))
        self.log.info(
            "killing task",
            framework=framework_id,
            task=task_id,
            grace=grace,
            reason=kill.reason if kill is not None else None,
        )
        if rec.runner is None:
            return  # recovered with its end still being reported
        if isinstance(rec.runner, CommandTask):
            rec.runner.kill(grace)
        else:
            rec.runner.kill_task(task_id, grace)

    def shutdown_framework(self, framework_id: str) -> None:
        # Nobody will acknowledge this framework's updates any more: drop them.
        self.updates.drop_framework(framework_id)
        for key in [k for k in self.tasks if k[0] == framework_id]:
            del self.tasks[key]
            self.kill_reasons.pop(key, None)
        fw = self.frameworks.get(framework_id)
        for key in [k for k in self.checkpoint.state.tasks if k[0] == framework_id]:
            if fw is None or key[1] not in fw.command_tasks:
                self.checkpoint.task_gone(*key)  # running command tasks: once their process is gone
        if fw is None:
            self.log.info("shutdown of a framework with nothing here", framework=framework_id)
            return
        self.log.info(
            "shutting down framework",
            framework=framework_id,
            tasks=len(fw.command_tasks),
            executors=len(fw.executors),
        )
        # A restart before its containers are gone kills them and reports nothing.
        self.checkpoint.shutdown(framework_id)
        fw.shutting_down = True
        fw.task_ids.clear()
        for task in list(fw.command_tasks.values()):
            task.kill()
        for run in list(fw.executors.values()):
            run.shutdown()
        self._maybe_forget_framework(framework_id)

    def _reject(self, fid: str, tid: str, state: int, reason: str, message: str) -> None:
        self.log.warning("rejecting task", framework=fid, task=tid, reason=reason, message=message)
        status = TaskStatus(
            task_id=tid, state=state, reason=reason, message=message, source="agent", framework_id=fid
        )
        if not fid or not tid or (fid, tid) in self.tasks or (fid, tid) in self.updates.streams:
            # The stream of this task id (if any) belongs to the task already here:
            # answer once, outside it, with no uuid (no acknowledgement wanted).
            status.timestamp = time.time()
            self._send_status(status)
        else:
            self.emit_status(status)

    def _forget_task(self, key: StreamKey) -> None:
        self.checkpoint.task_gone(*key)
        # A kill that crossed the task's end (terminal update already sent) left its
        # reason with no update to stamp: drop it, or a later task reusing the id
        # would be reported revoked.
        self.kill_reasons.pop(key, None)
        rec = self.tasks.pop(key, None)
        if rec is None:
            return
        fw = self.frameworks.get(key[0])
        if fw is not None:
            fw.task_ids.discard(key[1])
            self._maybe_forget_framework(key[0])

    def _maybe_forget_framework(self, framework_id: str) -> None:
        fw = self.frameworks.get(framework_id)
        if fw is not None and fw.idle():
            del self.frameworks[framework_id]
            if not any(e[0] == framework_id for e in self._unreported_exits):
                self.checkpoint.framework_gone(framework_id)

    # -- executors --------------------------------------------------------

    def executor_terminated(self, run: ExecutorRun, exit_status: int, message: str) -> None:
        """Called by an :class:`ExecutorRun` once its process is gone and its tasks failed."""
        fw = self.frameworks.get(run.framework_id)
        if fw is not None and fw.executors.get(run.executor_id) is run:
            del fw.executors[run.executor_id]
        gone = True
        if not self._stopping and not (fw is not None and fw.shutting_down):
            master = self._master()
            if master is not None:
                master.executor_exited(self.agent_id, run.framework_id, run.executor_id, exit_status, message)
            else:
                self.log.info(
                    "master unreachable: executor exit reported once re-registered",
                    framework=run.framework_id,
                    executor=run.executor_id,
                )
                self._unreported_exits.append((run.framework_id, run.executor_id, exit_status, message))
                gone = False  # kept in the checkpoint until reported
        if gone:
            self.checkpoint.executor_gone(run.framework_id, run.executor_id)
        self._maybe_forget_framework(run.framework_id)

    def latest_run(self, framework_id: str, executor_id: str) -> str | None:
        """The container id of the run of that executor (or command task) the agent holds
        now, or None (the file API then takes the newest run on disk). Also called from
        the file API's worker threads: dict lookups only, each atomic under the GIL."""
        fw = self.frameworks.get(framework_id)
        if fw is None:
            return None
        runner = fw.command_tasks.get(executor_id) or fw.executors.get(executor_id)
        return runner.container_id if runner is not None else None

    def find_executor(self, framework_id: str, executor_id: str) -> ExecutorRun | None:
        fw = self.frameworks.get(framework_id)
        return fw.executors.get(executor_id) if fw is not None else None

    def executor_status(self, conn: Connection, run: ExecutorRun, status: TaskStatus) -> None:
        tid = status.task_id or ""
        remote = conn.remote(EXECUTOR)
        status.framework_id = run.framework_id
        status.executor_id = run.executor_id
        status.source = "executor"
        if status.uuid and self.updates.holds(run.framework_id, tid, status.uuid):
            remote.status_update_acknowledged(tid, status.uuid)  # a retry of one we hold
            return
        if not run.owns(tid) or status.state not in TaskState._value2member_map_:
            self.log.warning(
                "ignoring executor update",
                framework=run.framework_id,
                executor=run.executor_id,
                task=tid,
                state=state_name(status.state or 0),
                why="task not running on this executor" if not run.owns(tid) else "bad state",
            )
            remote.status_update_acknowledged(tid, status.uuid or "")
            return
        if self._stopping:
            # Not journaled now: unacknowledged, the executor sends it again to the
            # next agent (one started on this work dir takes the executor back).
            return
        self.emit_status(status, source="executor")
        if is_terminal(status.state):
            run.task_terminal(tid)
        remote.status_update_acknowledged(tid, status.uuid)

    def executor_message(self, run: ExecutorRun, data: bytes) -> None:
        master = self._master()
        if master is None:
            self.log.info(
                "master unreachable: dropping executor message",
                framework=run.framework_id,
                executor=run.executor_id,
            )
            return
        master.executor_to_framework(self.agent_id, run.framework_id, run.executor_id, data or b"")


def _task_problem(task: TaskInfo) -> str | None:
    """Why ``task`` cannot run here, or None."""
    if (task.command is None) == (task.executor is None):
        return "a task must set exactly one of command and executor"
    try:
        Resources.of(task.resources)
        if task.executor is not None:
            Resources.of(task.executor.resources)
    except InvalidResources as exc:
        return f"invalid resources: {exc}"
    if task.command is not None and not task.command.value:
        return "the task's command is empty"
    if task.executor is not None:
        try:
            check_id("executor id", task.executor.executor_id)
        except InvalidId as exc:
            return str(exc)
        if task.executor.command is None or not task.executor.command.value:
            return "the executor's command is empty"
    return None


def _grace_of(kill: KillPolicy | None) -> float | None:
    """The grace period a kill asks for, or None for the agent's own. A value that is
    not a finite number >= 0 is ignored (a malformed message must not kill at once)."""
    grace = kill.grace_seconds if kill is not None else None
    if isinstance(grace, (int, float)) and not isinstance(grace, bool) and 0 <= grace < float("inf"):
        return float(grace)
    return None
