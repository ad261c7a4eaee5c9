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
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import structlog

from .. import is_terminal, state_name
from ..config import AgentConfig
from ..discovery import peer_address
from ..errors import ConfigError, MezzoError
from ..hookspecs import Container
from ..plugins import Plugins, load_plugins
from ..resources import InvalidResources, Resources
from ..rpc import Connection, parse_address, serve
from ..services import AGENT, EXECUTOR, MASTER
from ..wire.ttypes import AgentInfo, FrameworkInfo, KillPolicy, RunningTask, TaskInfo, TaskState, TaskStatus
from . import posix
from .checkpoint import Checkpoint, CheckpointState, ContainerEntry, WorkDirBusy
from .command_executor import CommandTask
from .containerizer import Containerizer
from .executors import ExecutorRun
from .host import agent_hostname, agent_resources
from .master_link import DEFAULT_MASTER_PORT, MasterLink
from .sandbox import InvalidId, Sandbox, check_id
from .service import AgentService
from .statistics import StatisticsReporter
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
    runner: CommandTask | ExecutorRun | None
    """None for a task recovered with its end still being reported."""


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
        self.kill_reasons: dict[StreamKey, tuple[str, str]] = {}
        """(reason, message) of the master's own kills (revocation) per task, stamped on
        the task's TASK_KILLING and TASK_KILLED updates until its terminal one."""
        self.checkpoint = Checkpoint(config.work_dir, enabled=config.checkpoint)
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
        try:
            self.checkpoint.lock()
        except WorkDirBusy as exc:
            raise ConfigError("agent.work_dir", f"{config.work_dir!r}: {exc}") from None
        state = self.checkpoint.load()
        recovered = self._recover(state) if not state.empty() else []
        await self.containerizer.recover([c for c, _start in recovered])
        for _container, start in recovered:
            start()  # after the isolators recovered: a container that ended is cleaned up now
        host, port = self._listen
        self._server = await self._bind(host, port, state.port)
        bound = self._server.sockets[0].getsockname()
        self.port = bound[1]
        self.address = _join(bound[0], self.port)
        wildcard = bound[0] in ("0.0.0.0", "::", "")
        self.endpoint = _join("127.0.0.1" if wildcard else bound[0], self.port)
        self.checkpoint.begin(self.port, self.agent_id)
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
        self.statistics.start()
        self.log.info(
            "agent started", address=self.address, master=self._link.address,
            resources=str(self.resources), isolation=self.containerizer.names,
        )

    async def _bind(self, host: str, port: int, recovered_port: int) -> asyncio.base_events.Server:
        max_frame = self.config.max_frame_bytes
        executors = any(fw.executors for fw in self.frameworks.values())
        if recovered_port and port == 0 and self.frameworks:
            # Executors find their agent through MEZZO_AGENT_ENDPOINT: be where they look.
            try:
                return await serve(host, recovered_port, AGENT, self._service, max_frame=max_frame)
            except OSError as exc:
                (self.log.error if executors else self.log.info)(
                    "cannot bind the port the agent had before its restart" +
                    ("; its executors will not find it" if executors else ""),
                    port=recovered_port, error=exc.strerror or str(exc))
        elif recovered_port and port not in (0, recovered_port) and executors:
            self.log.warning("agent.listen names another port than the agent had before its restart; its "
                             "executors will not find it", port=port, before=recovered_port)
        return await serve(host, port, AGENT, self._service, max_frame=max_frame)

    # -- recovery -----------------------------------------------------------

    def _recover(self, state: CheckpointState) -> list[tuple[Container, Callable[[], None]]]:
        """Rebuild frameworks, tasks, executors and update streams from the checkpoint
        (see the module docstring). Runs before the agent serves or dials anything.
        Returns each container recovered, with what starts watching it."""
        cp = self.checkpoint
        if state.agent_id:
            self.agent_id = state.agent_id
            self.log = log.bind(agent=self.agent_id)
        self.log.info("recovering from the checkpoint", checkpoint=cp.path, frameworks=len(state.frameworks),
                      tasks=len(state.tasks), executors=len(state.executors), problems=len(state.problems))
        self._find_unrecorded_pids(state)

        # Frameworks being shut down: kill what is left of them, report nothing.
        for fid in list(state.shutting_down):
            for key in [k for k in state.tasks if k[0] == fid]:
                entry = state.tasks.pop(key)
                _kill_recorded(entry.container)
            for key in [k for k in state.executors if k[0] == fid]:
                _kill_recorded(state.executors.pop(key).container)
            state.frameworks.pop(fid, None)
            state.shutting_down.discard(fid)
            self.log.info("killed what was left of a framework being shut down", framework=fid)

        def framework(fid: str) -> FrameworkState | None:
            fw = self.frameworks.get(fid)
            if fw is None and fid in state.frameworks:
                fw = self.frameworks[fid] = FrameworkState(state.frameworks[fid])
            return fw

        runs: list[ExecutorRun] = []
        for (fid, eid), ex in list(state.executors.items()):
            fw = framework(fid)
            damaged = ex.damaged or state.damaged_frameworks.get(fid) or (
                None if fw is not None and ex.info is not None else "its framework's record is missing")
            if damaged is not None:
                self.log.error("cannot recover an executor: its checkpoint is damaged; killing it",
                               framework=fid, executor=eid, why=damaged)
                _kill_recorded(ex.container)
                del state.executors[(fid, eid)]
                for key, t in state.tasks.items():
                    if key[0] == fid and t.executor_id == eid:
                        t.damaged = t.damaged or f"its executor's checkpoint is unusable: {damaged}"
                continue
            assert fw is not None and ex.info is not None
            run = fw.executors[eid] = ExecutorRun.recovered(self, fw.info, ex.info, ex.container)
            runs.append(run)

        commands: list[tuple[FrameworkState, CommandTask]] = []
        for key, t in list(state.tasks.items()):
            fid, tid = key
            if t.updates or t.latest is not None:
                self.updates.recover(key, list(t.updates), set(t.seen), t.latest)
            terminal = t.latest is not None and is_terminal(t.latest.state)
            if terminal and not t.updates:
                self.updates.streams.pop(key, None)  # reported and acknowledged: done with
                cp.task_gone(fid, tid)
                continue
            if t.info is None and not t.damaged and terminal:
                continue  # an answer (e.g. a rejection) still being delivered
            fw = framework(fid)
            problem = t.damaged or state.damaged_frameworks.get(fid)
            if problem is None and t.info is None:
                problem = "its task record is missing from the checkpoint"
            if problem is None and fw is None:
                problem = "its framework's record is missing"
            if problem is None and not terminal and not t.executor_id and t.container is None:
                problem = "its container's record is missing"
            if problem is None and not terminal and t.executor_id and (fid, t.executor_id) not in state.executors:
                problem = f"its executor {t.executor_id!r} is not in the checkpoint"
            if problem is not None:
                if not terminal:
                    _kill_recorded(t.container)
                self._fail_recovered(key, t.info, fw, problem, terminal)
                t.damaged = None  # dealt with: its end is in its update stream now
                continue
            assert fw is not None and t.info is not None
            runner: CommandTask | ExecutorRun | None = None
            if terminal:
                pass  # its end is being reported
            elif not t.executor_id:
                assert t.container is not None
                runner = CommandTask.recovered(self, fw.info, t.info, t.container, t.latest)
                fw.command_tasks[tid] = runner
                commands.append((fw, runner))
            else:
                runner = fw.executors[t.executor_id]
                runner.recover_task(t.info, t.launched)
            self.tasks[key] = TaskRecord(fid, t.info, runner)
            fw.task_ids.add(tid)
            latest = t.latest
            if not terminal and latest is not None and latest.state == TaskState.TASK_KILLING and latest.reason:
                # A kill of the master's own (revocation) was under way: its end carries
                # the same reason and message (a command task's TASK_KILLING has no message
                # of its own, so that is the kill's). Its grace is not recorded; the
                # agent's own applies.
                self.kill_reasons[key] = (latest.reason, latest.message or "")

        for fid in list(state.frameworks):
            fw = self.frameworks.get(fid)
            if fw is None or fw.idle():
                self.frameworks.pop(fid, None)
                cp.framework_gone(fid)
        recovered: list[tuple[Container, Callable[[], None]]] = []
        for fw, task in commands:
            assert task.container is not None
            recovered.append((task.container, lambda fw=fw, task=task: self.background(
                self._run_command(fw, task), what=f"command task {task.task_id}")))
        for run in runs:
            assert run.container is not None
            recovered.append((run.container, lambda run=run: self.background(
                run.run(), what=f"executor {run.executor_id}")))
        self.log.info("recovered from the checkpoint", command_tasks=len(commands), executors=len(runs),
                      tasks=len(self.tasks), updates_pending=sum(len(s) for s in self.updates.streams.values()))
        return recovered

    def _find_unrecorded_pids(self, state: CheckpointState) -> None:
        """Containers journaled without a pid (the agent died while launching them):
        look for their leader by its working directory, the sandbox."""
        missing = [t.container for t in state.tasks.values() if t.container is not None and not t.container.pid]
        missing += [ex.container for ex in state.executors.values() if not ex.container.pid]
        if not missing:
            return
        leaders = posix.session_leaders_in(c.sandbox for c in missing)
        for c in missing:
            entry = leaders.get(os.path.realpath(c.sandbox))
            if entry is not None:
                c.pid, c.start_time = entry.pid, entry.start_time
                self.log.info("found the process of a container launched as the agent died",
                              container=c.container_id, pid=entry.pid)

    def _fail_recovered(self, key: StreamKey, info: TaskInfo | None, fw: FrameworkState | None, problem: str,
                        terminal: bool) -> None:
        fid, tid = key
        self.log.error("cannot recover a task from the checkpoint; it is reported failed",
                       framework=fid, task=tid, why=problem)
        if not terminal:
            self.emit_status(TaskStatus(
                task_id=tid, framework_id=fid, state=TaskState.TASK_FAILED, reason="checkpoint_unreadable",
                message=f"the agent restarted and could not recover the task: {problem}",
                executor_id=(info.executor.executor_id if info is not None and info.executor is not None else tid),
            ))
        if info is not None and fw is not None:
            self.tasks[key] = TaskRecord(fid, info, None)
            fw.task_ids.add(tid)

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
        self.statistics.stop()
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
        # Every container was killed: nothing to recover (only a crash leaves a journal).
        self.checkpoint.clear()
        self.checkpoint.unlock()
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
        return self.updates.update(status, source=source)

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
        if fw is None:
            fw = self.frameworks[fid] = FrameworkState(framework)
        fw.info = framework
        self.checkpoint.framework(framework)
        if task.command is not None:
            runner: CommandTask | ExecutorRun = CommandTask(self, framework, task)
            if self.checkpoint.enabled:
                self.checkpoint.task(fid, task, container_id=runner.container_id, sandbox=Sandbox.path_for(
                    os.path.abspath(self.config.work_dir), fid, tid, runner.container_id))
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
                if self.checkpoint.enabled:
                    self.checkpoint.executor(fid, runner.info, runner.container_id, Sandbox.path_for(
                        os.path.abspath(self.config.work_dir), fid, eid, runner.container_id))
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
            self.emit_status(TaskStatus(
                task_id=task_id, framework_id=framework_id, state=TaskState.TASK_LOST,
                reason="unknown_task", message="unknown task",
            ))
            return
        grace = _grace_of(kill)
        if kill is not None and (kill.reason or kill.message):
            self.kill_reasons[(framework_id, task_id)] = (str(kill.reason or ""), str(kill.message or ""))
        self.log.info("killing task", framework=framework_id, task=task_id,
                      grace=grace, reason=kill.reason if kill is not None else None)
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
        self.log.info("shutting down framework", framework=framework_id,
                      tasks=len(fw.command_tasks), executors=len(fw.executors))
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
                self.log.info("master unreachable: executor exit reported once re-registered",
                              framework=run.framework_id, executor=run.executor_id)
                self._unreported_exits.append((run.framework_id, run.executor_id, exit_status, message))
                gone = False  # kept in the checkpoint until reported
        if gone:
            self.checkpoint.executor_gone(run.framework_id, run.executor_id)
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


def _grace_of(kill: KillPolicy | None) -> float | None:
    """The grace period a kill asks for, or None for the agent's own. A value that is
    not a finite number >= 0 is ignored (a malformed message must not kill at once)."""
    grace = kill.grace_seconds if kill is not None else None
    if isinstance(grace, (int, float)) and not isinstance(grace, bool) and 0 <= grace < float("inf"):
        return float(grace)
    return None


def _kill_recorded(container: ContainerEntry | None) -> None:
    """Kill what is left of a journaled container the agent does not take back."""
    if container is not None and container.pid:
        posix.kill_tree(container.pid, start_time=container.start_time)


def _join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
