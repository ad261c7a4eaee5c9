"""Custom executors: a framework's own long-lived process running many of its tasks.

A task whose ``TaskInfo.executor`` is set goes to that framework's executor on
this agent, one :class:`ExecutorRun` per ``(framework_id, executor_id)``,
launched by the first such task. The paper's Spark executor is the example: it
stays up and caches data across tasks.

Life of an executor::

    LAUNCHING    container launched with MEZZO_AGENT_ENDPOINT, MEZZO_FRAMEWORK_ID,
                 MEZZO_EXECUTOR_ID, MEZZO_SANDBOX (and PYTHONUNBUFFERED=1); tasks queue
    REGISTERED   the executor driver dialled the agent and called register_executor;
                 the agent answered registered(...) and launch_task for each queued task
    TERMINATING  shutdown asked for, or the agent is killing the process tree
    TERMINATED   the process exited; unfinished tasks failed; executor_exited sent

Error handling, the cases the tech report (§4.3) cares about:

- No ``register_executor`` within ``executor_register_timeout``: the tree is killed
  and its tasks fail with reason ``executor_register_timeout``.
- ``kill_task`` is forwarded to the executor. If the task is not terminal within
  ``kill_grace_period`` the executor is presumed stuck and its whole tree is
  killed: that task ends TASK_KILLED, its other unfinished tasks TASK_FAILED with
  reason ``executor_terminated``.
- Whatever ends the process, every task it had not finished fails (reason
  ``executor_exited`` unless a more specific one applies, message with the exit
  status), and then the master hears ``executor_exited``.
- An executor whose connection drops is given ``kill_grace_period`` to exit on
  its own (so its real exit status is reported) and is then killed: without
  checkpointing the agent cannot reattach to it.
"""

from __future__ import annotations

import asyncio
import uuid as uuidlib
from typing import TYPE_CHECKING

import structlog

from ..hookspecs import Container, ContainerLaunch
from ..resources import Resources
from ..rpc import Connection
from ..services import EXECUTOR
from ..wire.ttypes import ExecutorInfo, FrameworkInfo, TaskInfo, TaskState, TaskStatus
from .command_executor import command_argv, command_env
from .containerizer import LaunchError, RunningContainer
from .posix import describe_exit
from .sandbox import Sandbox

if TYPE_CHECKING:
    from .agent import Agent

log = structlog.get_logger("mezzo.agent", component="agent")

LAUNCHING = "launching"
REGISTERED = "registered"
TERMINATING = "terminating"
TERMINATED = "terminated"


class ExecutorRun:
    """One custom executor process on this agent and the tasks given to it."""

    def __init__(self, agent: Agent, framework: FrameworkInfo, info: ExecutorInfo) -> None:
        self.agent = agent
        self.framework = framework
        self.framework_id = framework.framework_id
        self.executor_id = info.executor_id
        self.info = ExecutorInfo(
            executor_id=info.executor_id,
            command=info.command,
            resources=Resources.of(info.resources),
            name=info.name or "",
            framework_id=self.framework_id,
        )
        self.container_id = uuidlib.uuid4().hex
        self.state = LAUNCHING
        self.sandbox: Sandbox | None = None
        self.container: Container | None = None
        self.running: RunningContainer | None = None
        self.conn: Connection | None = None
        self.tasks: dict[str, TaskInfo] = {}
        """Unfinished tasks, queued or launched."""
        self._queued: list[str] = []
        self._killed: set[str] = set()
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._ended = False
        self.reason: str | None = None
        self.message: str | None = None
        self.log = log.bind(agent=agent.agent_id, framework=self.framework_id, executor=self.executor_id)

    @property
    def alive(self) -> bool:
        return self.state in (LAUNCHING, REGISTERED)

    # -- life -------------------------------------------------------------

    async def run(self) -> None:
        try:
            await self._run()
        except Exception as exc:
            # A bug of ours: still fail the tasks and release the executor.
            self.log.exception("executor run failed")
            if not self._ended:
                self._end(-1, "agent_error", f"the agent failed running the executor: {exc!r}")
            raise
        finally:
            self.state = TERMINATED
            for timer in self._timers.values():
                timer.cancel()
            self._timers.clear()
            if self.running is not None and self.running.returncode is None:
                self.running.kill()  # cancelled while alive: the agent is stopping
            if self.conn is not None:
                self.conn.close()

    async def _run(self) -> None:
        config = self.agent.config
        try:
            self.sandbox = Sandbox.create(config.work_dir, self.framework_id, self.executor_id, self.container_id)
            for task_id in self.tasks:
                self.sandbox.task_dir(task_id)
        except OSError as exc:
            self._end(-1, "sandbox_creation_failed", f"cannot create the executor's sandbox: {exc}")
            return
        command = self.info.command
        self.container = Container(
            container_id=self.container_id,
            framework_id=self.framework_id,
            executor_id=self.executor_id,
            resources=self._resources(),
            sandbox=self.sandbox.path,
            launch=ContainerLaunch(
                argv=command_argv(command),
                env=command_env(command, {
                    "MEZZO_AGENT_ENDPOINT": self.agent.endpoint,
                    "MEZZO_FRAMEWORK_ID": self.framework_id,
                    "MEZZO_EXECUTOR_ID": self.executor_id,
                    "MEZZO_SANDBOX": self.sandbox.path,
                    "PYTHONUNBUFFERED": "1",
                }),
                cwd=self.sandbox.path,
            ),
        )
        try:
            self.running = await self.agent.containerizer.launch(
                self.container, stdout=self.sandbox.stdout, stderr=self.sandbox.stderr
            )
        except LaunchError as exc:
            self.log.warning("executor failed to launch", error=str(exc))
            self._end(-1, "container_launch_failed", str(exc))
            return
        self.log.info("executor launched", pid=self.running.pid, container=self.container_id)
        if self.state == TERMINATING:
            self.running.kill()  # shut down while it was being launched
        else:
            self._timers["register"] = asyncio.get_running_loop().call_later(
                config.executor_register_timeout, self._register_timed_out
            )
        returncode = await self.running.wait()
        self.state = TERMINATED
        leftovers = self.running.kill()
        if leftovers:
            self.log.debug("killed processes left behind by the executor", count=leftovers)
        if self.conn is not None:
            self.conn.close()
        await self.agent.containerizer.destroy(self.container)
        exit_status, how = describe_exit(returncode)
        self.log.info("executor exited", status=exit_status, how=how)
        self._end(exit_status, self.reason or "executor_exited", self.message or f"executor {how}")

    def _end(self, exit_status: int, reason: str, message: str) -> None:
        """Fail every unfinished task, then tell the agent (which tells the master)."""
        self._ended = True
        self.state = TERMINATED
        for task_id in list(self.tasks):
            if task_id in self._killed:
                self._status(task_id, TaskState.TASK_KILLED, message=f"task killed; {message}")
            else:
                self._status(task_id, TaskState.TASK_FAILED, reason=reason, message=message)
        self.tasks.clear()
        self._queued.clear()
        self.agent.executor_terminated(self, exit_status, message)

    # -- tasks ------------------------------------------------------------

    def add_task(self, task: TaskInfo) -> None:
        """Take ``task``: launch it now if the executor is registered, else queue it."""
        self.tasks[task.task_id] = task
        if self.sandbox is not None:
            try:
                self.sandbox.task_dir(task.task_id)
            except OSError as exc:
                self.log.warning("cannot create the task's directory", task=task.task_id, error=str(exc))
        if self.state == REGISTERED and self.conn is not None:
            self.conn.remote(EXECUTOR).launch_task(task)
            self._update_resources()
        else:
            self._queued.append(task.task_id)

    def task_terminal(self, task_id: str) -> None:
        """The executor reported a terminal state for ``task_id``."""
        if self.tasks.pop(task_id, None) is not None:
            timer = self._timers.pop(f"kill:{task_id}", None)
            if timer is not None:
                timer.cancel()
            self._update_resources()

    def owns(self, task_id: str) -> bool:
        return task_id in self.tasks

    def kill_task(self, task_id: str) -> None:
        """Forward a kill; escalate to killing the executor after the grace period."""
        if task_id not in self.tasks:
            return
        if task_id in self._queued:
            # Never reached the executor: nobody else to ask.
            self._queued.remove(task_id)
            del self.tasks[task_id]
            self._status(task_id, TaskState.TASK_KILLED, message="task killed before its executor registered")
            return
        if self.state != REGISTERED or self.conn is None:
            self._killed.add(task_id)  # reported TASK_KILLED when the process is gone
            return
        self.conn.remote(EXECUTOR).kill_task(task_id)
        key = f"kill:{task_id}"
        if key not in self._timers:
            self._timers[key] = asyncio.get_running_loop().call_later(
                self.agent.config.kill_grace_period, self._kill_timed_out, task_id
            )

    def _kill_timed_out(self, task_id: str) -> None:
        self._timers.pop(f"kill:{task_id}", None)
        if task_id not in self.tasks:
            return
        grace = self.agent.config.kill_grace_period
        self.log.warning("executor did not kill its task in time; killing the executor", task=task_id, grace=grace)
        self._killed.add(task_id)
        self.terminate(
            "executor_terminated",
            f"executor was killed: task {task_id} was not killed within the {grace:g}s grace period",
        )

    # -- executor connection ---------------------------------------------

    def accepts_registration(self) -> bool:
        """True while waiting for the executor to register, or to come back after
        its connection dropped (the executor driver re-dials and re-registers)."""
        if self.state == LAUNCHING:
            return self.conn is None
        return self.state == TERMINATING and self.conn is None and "disconnect" in self._timers

    def on_registered(self, conn: Connection) -> None:
        again = self.state == TERMINATING
        self.conn = conn
        conn.tag = self
        self.state = REGISTERED
        for name in ("register", "disconnect"):
            timer = self._timers.pop(name, None)
            if timer is not None:
                timer.cancel()
        remote = conn.remote(EXECUTOR)
        remote.registered(self.info, self.framework, self.agent.agent_info())
        for task_id in self._queued:
            task = self.tasks.get(task_id)
            if task is not None:
                remote.launch_task(task)
        self._queued.clear()
        self._update_resources()
        self.log.info("executor re-registered" if again else "executor registered", peer=conn.peer)

    def on_disconnected(self, conn: Connection) -> None:
        if conn is not self.conn:
            return
        self.conn = None
        if self.state == REGISTERED:
            self.log.warning("executor disconnected; killing it unless it exits",
                             grace=self.agent.config.kill_grace_period)
            self.state = TERMINATING
            self._timers["disconnect"] = asyncio.get_running_loop().call_later(
                self.agent.config.kill_grace_period, self._disconnect_timed_out
            )

    def _disconnect_timed_out(self) -> None:
        self._timers.pop("disconnect", None)
        self.terminate(None, "executor disconnected from the agent and was killed")

    def send_framework_message(self, data: bytes) -> bool:
        if self.state != REGISTERED or self.conn is None:
            return False
        self.conn.remote(EXECUTOR).framework_message(data)
        return True

    # -- ending -----------------------------------------------------------

    def shutdown(self) -> None:
        """Ask the executor to shut down; kill its tree after the grace period."""
        if self.state == REGISTERED and self.conn is not None:
            self.conn.remote(EXECUTOR).shutdown()
            self.state = TERMINATING
            self._timers["shutdown"] = asyncio.get_running_loop().call_later(
                self.agent.config.kill_grace_period,
                self.terminate, None, "executor was shut down",
            )
        elif self.state == LAUNCHING:
            self.terminate(None, "executor was shut down")

    def terminate(self, reason: str | None, message: str) -> None:
        """Kill the executor's process tree now; ``reason``/``message`` go to its tasks."""
        if self.state == TERMINATED:
            return
        if self.reason is None and self.message is None:
            self.reason, self.message = reason, message
        self.state = TERMINATING
        if self.running is not None and self.running.returncode is None:
            self.running.kill()

    def _register_timed_out(self) -> None:
        self._timers.pop("register", None)
        if self.state != LAUNCHING:
            return
        timeout = self.agent.config.executor_register_timeout
        self.log.warning("executor did not register in time; killing it", timeout=timeout)
        self.terminate(
            "executor_register_timeout", f"executor did not register within {timeout:g}s"
        )

    # -- helpers ----------------------------------------------------------

    def _resources(self) -> Resources:
        total = Resources.of(self.info.resources)
        for task in self.tasks.values():
            total = total + Resources.of(task.resources)
        return total

    def _update_resources(self) -> None:
        if self.container is not None and self.running is not None and self.alive:
            self.agent.background(
                self.agent.containerizer.update(self.container, self._resources()),
                what="isolator update",
            )

    def _status(self, task_id: str, state: int, *, message: str = "", reason: str = "") -> None:
        self.agent.emit_status(
            TaskStatus(
                task_id=task_id,
                state=state,
                message=message,
                reason=reason,
                source="agent",
                executor_id=self.executor_id,
                framework_id=self.framework_id,
            )
        )
