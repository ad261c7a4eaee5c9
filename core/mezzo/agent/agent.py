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
  ``registered(agent_id)``. A lost connection is re-dialled every
  ``reconnect_interval`` and followed by ``reregister_agent`` carrying every task
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

Error handling: a call that makes no sense (unknown task, duplicate task id, a
master-only call from an executor's connection, ...) is logged with who it is
about and answered where the protocol has an answer (TASK_LOST "unknown task",
TASK_ERROR "duplicate task id on agent"); nothing a peer sends raises. Malformed
frames never reach this module: the transport closes that one connection.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import structlog

from .. import is_terminal, state_name
from ..config import AgentConfig
from ..discovery import peer_address
from ..errors import ConfigError, MezzoError
from ..plugins import Plugins, load_plugins
from ..resources import InvalidResources, Resources
from ..rpc import Connection, parse_address, serve
from ..services import AGENT, EXECUTOR, MASTER
from ..wire.ttypes import AgentInfo, FrameworkInfo, RunningTask, TaskInfo, TaskState, TaskStatus
from .command_executor import CommandTask
from .containerizer import Containerizer
from .executors import ExecutorRun
from .host import agent_hostname, agent_resources
from .master_link import DEFAULT_MASTER_PORT, MasterLink
from .sandbox import InvalidId, check_id
from .service import AgentService
from .status_updates import StatusUpdateManager, StreamKey

log = structlog.get_logger("mezzo.agent", component="agent")

DEFAULT_AGENT_PORT = 5051
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
    runner: CommandTask | ExecutorRun


class Agent:
    """One agent daemon. See the module docstring."""

    def __init__(self, config: AgentConfig, plugins: Plugins | None = None) -> None:
        self.config = config
        self.plugins = plugins if plugins is not None else load_plugins()
        try:
            self._listen = parse_address(config.listen, DEFAULT_AGENT_PORT)
        except ValueError as exc:
            raise ConfigError("agent.listen", str(exc)) from None
        try:
            peer_address(config.master, DEFAULT_MASTER_PORT)
        except ValueError as exc:
            raise ConfigError("agent.master", str(exc)) from None
        self.containerizer = Containerizer.from_config(config, self.plugins)

        self.agent_id = ""
        self.address = ""
        """``host:port`` the agent actually bound (after start())."""
        self.endpoint = ""
        """``host:port`` executors dial (the bound address; loopback for a wildcard bind)."""
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
        self.updates = StatusUpdateManager(
            send=self._send_status,
            agent_id=lambda: self.agent_id,
            retry=config.status_update_retry,
            on_stream_end=self._forget_task,
        )
        self.log = log
        self._service = AgentService(self)
        self._server: asyncio.base_events.Server | None = None
        self._link: MasterLink | None = None
        self._background: set[asyncio.Task] = set()
        self._stopping = False
        self._starting_over = False
        self._stop_task: asyncio.Task | None = None

    # -- life cycle -------------------------------------------------------

    async def start(self) -> None:
        """Bind, then keep registering with the master in the background."""
        config = self.config
        try:
            os.makedirs(config.work_dir, exist_ok=True)
        except OSError as exc:
            raise ConfigError("agent.work_dir", f"cannot create {config.work_dir!r}: {exc.strerror}") from None
        self.resources = agent_resources(config.resources, config.work_dir)
        await self.containerizer.recover()
        host, port = self._listen
        self._server = await serve(host, port, AGENT, self._service, max_frame=config.max_frame_bytes)
        bound = self._server.sockets[0].getsockname()
        self.port = bound[1]
        self.address = _join(bound[0], self.port)
        wildcard = bound[0] in ("0.0.0.0", "::", "")
        self.endpoint = _join("127.0.0.1" if wildcard else bound[0], self.port)
        self._link = MasterLink(
            config.master,
            self._service,
            interval=config.reconnect_interval,
            max_frame=config.max_frame_bytes,
            on_connected=self._master_connected,
            on_lost=self._master_lost,
        )
        try:
            await self._link.start()
        except TimeoutError as exc:
            raise MezzoError(f"agent.master: {exc}") from None
        self.log.info(
            "agent started", address=self.address, master=self._link.address,
            resources=str(self.resources), isolation=self.containerizer.names,
        )

    async def wait_registered(self, timeout: float | None = None) -> str:
        """Wait until registered with a master; returns the agent id.

        Raises :class:`TimeoutError` after ``timeout`` seconds, and
        :class:`~mezzo.errors.MezzoError` if the agent stops first (e.g. the
        master refused it with ``error``).
        """
        registered = asyncio.ensure_future(self.registered.wait())
        stopped = asyncio.ensure_future(self.stopped.wait())
        try:
            done, _ = await asyncio.wait({registered, stopped}, timeout=timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            registered.cancel()
            stopped.cancel()
        if registered in done:
            return self.agent_id
        if stopped in done:
            raise MezzoError(f"the agent stopped before registering: {self.error_message or 'stop() called'}")
        raise TimeoutError(f"not registered with the master at {self.config.master} within {timeout:g}s")

    async def stop(self) -> None:
        """Kill every container, clean up, close every connection. Idempotent."""
        if self._stopping:
            await self.stopped.wait()
            return
        self._stopping = True
        self.registered.clear()
        if self._link is not None:
            await self._link.close()
        for fw in self.frameworks.values():
            for task in fw.command_tasks.values():
                task.kill_now()
            for run in fw.executors.values():
                run.terminate(None, "agent stopped")
        pending = set(self._background)
        if pending:
            _done, pending = await asyncio.wait(pending, timeout=STOP_TIMEOUT)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        self.updates.close()
        self.containerizer.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        self.log.info("agent stopped")
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
        self.log = log.bind(agent=agent_id)
        self.log.info("re-registered with the master" if again else "registered with the master")
        self.registered.set()
        self.updates.resend_all()

    def _on_error(self, message: str) -> None:
        self.log.error("the master refused this agent; stopping", message=message)
        self.error_message = message
        if self._stop_task is None:
            self._stop_task = asyncio.get_running_loop().create_task(self.stop())

    def _on_reregistration_refused(self, message: str) -> None:
        if self._starting_over or self._stopping:
            return
        self.log.warning("the cluster declared this agent lost; killing its tasks and registering anew",
                         message=message)
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
                self.log.warning("containers of the lost agent outlived their kill; registering anyway",
                                 frameworks=sorted(self.frameworks))
                self.frameworks.clear()
            self.agent_id = ""
            self.log = log
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
        return self.updates.update(status, source=source)

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
        if fw is None:
            fw = self.frameworks[fid] = FrameworkState(framework)
        fw.info = framework
        if task.command is not None:
            runner: CommandTask | ExecutorRun = CommandTask(self, framework, task)
            fw.command_tasks[tid] = runner
            self.background(self._run_command(fw, runner), what=f"command task {tid}")
        else:
            eid = task.executor.executor_id
            runner = fw.executors.get(eid)
            if runner is not None and not runner.alive:
                self._reject(fid, tid, TaskState.TASK_DROPPED, "executor_terminating",
                             f"executor {eid!r} is shutting down")
                return
            if runner is None:
                runner = fw.executors[eid] = ExecutorRun(self, framework, task.executor)
                self.background(runner.run(), what=f"executor {eid}")
            runner.add_task(task)
        self.tasks[key] = TaskRecord(fid, task, runner)
        fw.task_ids.add(tid)
        self.log.debug("task accepted", framework=fid, task=tid,
                       executor=getattr(runner, "executor_id", "command"))

    async def _run_command(self, fw: FrameworkState, task: CommandTask) -> None:
        try:
            await task.run()
        finally:
            if fw.command_tasks.get(task.task_id) is task:
                del fw.command_tasks[task.task_id]
            self._maybe_forget_framework(fw.info.framework_id)

    def kill_task(self, framework_id: str, task_id: str) -> None:
        if not framework_id or not task_id:
            self.log.warning("kill without a framework or task id", framework=framework_id, task=task_id)
            return
        rec = self.tasks.get((framework_id, task_id))
        if rec is None:
            if (framework_id, task_id) in self.updates.streams:
                return  # already answered (rejected or lost), awaiting its acknowledgement
            self.log.warning("kill for an unknown task", framework=framework_id, task=task_id)
            self.emit_status(TaskStatus(
                task_id=task_id, framework_id=framework_id, state=TaskState.TASK_LOST,
                reason="unknown_task", message="unknown task",
            ))
            return
        self.log.info("killing task", framework=framework_id, task=task_id)
        if isinstance(rec.runner, CommandTask):
            rec.runner.kill()
        else:
            rec.runner.kill_task(task_id)

    def shutdown_framework(self, framework_id: str) -> None:
        # Nobody will acknowledge this framework's updates any more: drop them.
        self.updates.drop_framework(framework_id)
        for key in [k for k in self.tasks if k[0] == framework_id]:
            del self.tasks[key]
        fw = self.frameworks.get(framework_id)
        if fw is None:
            self.log.info("shutdown of a framework with nothing here", framework=framework_id)
            return
        self.log.info("shutting down framework", framework=framework_id,
                      tasks=len(fw.command_tasks), executors=len(fw.executors))
        fw.shutting_down = True
        fw.task_ids.clear()
        for task in list(fw.command_tasks.values()):
            task.kill()
        for run in list(fw.executors.values()):
            run.shutdown()
        self._maybe_forget_framework(framework_id)

    def _reject(self, fid: str, tid: str, state: int, reason: str, message: str) -> None:
        self.log.warning("rejecting task", framework=fid, task=tid, reason=reason, message=message)
        status = TaskStatus(task_id=tid, state=state, reason=reason, message=message,
                            source="agent", framework_id=fid)
        if not fid or not tid or (fid, tid) in self.tasks or (fid, tid) in self.updates.streams:
            # The stream of this task id (if any) belongs to the task already here:
            # answer once, outside it, with no uuid (no acknowledgement wanted).
            status.timestamp = time.time()
            self._send_status(status)
        else:
            self.emit_status(status)

    def _forget_task(self, key: StreamKey) -> None:
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

    # -- executors --------------------------------------------------------

    def executor_terminated(self, run: ExecutorRun, exit_status: int, message: str) -> None:
        """Called by an :class:`ExecutorRun` once its process is gone and its tasks failed."""
        fw = self.frameworks.get(run.framework_id)
        if fw is not None and fw.executors.get(run.executor_id) is run:
            del fw.executors[run.executor_id]
        if not self._stopping and not (fw is not None and fw.shutting_down):
            master = self._master()
            if master is not None:
                master.executor_exited(self.agent_id, run.framework_id, run.executor_id, exit_status, message)
            else:
                self.log.warning("master unreachable: executor exit not reported",
                                 framework=run.framework_id, executor=run.executor_id)
        self._maybe_forget_framework(run.framework_id)

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
            self.log.warning("ignoring executor update", framework=run.framework_id,
                             executor=run.executor_id, task=tid, state=state_name(status.state or 0),
                             why="task not running on this executor" if not run.owns(tid) else "bad state")
            remote.status_update_acknowledged(tid, status.uuid or "")
            return
        self.emit_status(status, source="executor")
        if is_terminal(status.state):
            run.task_terminal(tid)
        remote.status_update_acknowledged(tid, status.uuid)

    def executor_message(self, run: ExecutorRun, data: bytes) -> None:
        master = self._master()
        if master is None:
            self.log.info("master unreachable: dropping executor message",
                          framework=run.framework_id, executor=run.executor_id)
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


def _join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
