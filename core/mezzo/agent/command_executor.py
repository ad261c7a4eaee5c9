"""The built-in command executor: one container per command task.

A task whose ``TaskInfo.command`` is set needs no executor of the framework's
own. The agent runs the command itself, as Apache Mesos' command executor does,
and reports the task's life::

    TASK_STARTING  sandbox made, container being launched
    TASK_RUNNING   the process has started
    TASK_FINISHED  it exited 0
    TASK_FAILED    it exited non-zero (``exit_code``; "command exited with status N"),
                   was killed by a signal nobody asked for, or could not be launched
    TASK_KILLING   a kill was asked for (SIGTERM went to its process group)
    TASK_KILLED    ... and the process is gone (after at most ``kill_grace_period``,
                   when the whole process tree is SIGKILLed)

The command runs as ``/bin/sh -c <value>`` when ``CommandInfo.shell`` (the
default), else as ``[value, *arguments]``, in its sandbox, with the agent's
environment plus ``CommandInfo.environment``, ``MEZZO_TASK_ID``,
``MEZZO_FRAMEWORK_ID`` and ``MEZZO_SANDBOX``; its stdout and stderr go to files
in the sandbox.

The terminal update carries the tail of the task's stdout (at most
:data:`OUTPUT_TAIL_BYTES`) in ``TaskStatus.data``, which is how ``mezzo run``
shows a remote command's output without reading the agent's disk.

Error handling: whatever happens to the process becomes a terminal update, never
an exception out of :meth:`CommandTask.run`. When the process exits, any process
it left behind in its session is killed before the isolators clean up, so a
finished task never leaks a background child.

Checkpointing (``agent.checkpoint``): the process runs under the containerizer's
exit wrapper, which records its exit status in ``.mezzo-exit`` in the sandbox,
and its pid and start time are journaled before TASK_RUNNING is. A task
:meth:`CommandTask.recovered` by a restarted agent resumes where it was: a process
still alive is adopted (TASK_RUNNING reported if it had not been, a kill in
progress carried on); one that ended meanwhile is reported from its exit file
(TASK_FINISHED, TASK_FAILED with ``exit_code``, TASK_KILLED if a kill was asked
for). With no exit file (the wrapper was killed too, e.g. by SIGKILL) the task
fails with reason ``container_lost`` and a message saying the agent cannot tell
how it ended.
"""

from __future__ import annotations

import asyncio
import os
import uuid as uuidlib
from typing import TYPE_CHECKING

import structlog

from .. import is_terminal
from ..hookspecs import Container, ContainerLaunch
from ..resources import Resources
from ..wire.ttypes import CommandInfo, FrameworkInfo, TaskInfo, TaskState, TaskStatus
from . import checkpoint, posix
from .containerizer import EXIT_FILE, LaunchError, RunningContainer, read_exit_file
from .posix import describe_exit
from .sandbox import Sandbox

if TYPE_CHECKING:
    from .agent import Agent

log = structlog.get_logger("mezzo.agent", component="agent")

OUTPUT_TAIL_BYTES = 64 * 1024
"""How much of the end of a command task's stdout its terminal update carries."""


def command_argv(command: CommandInfo) -> list[str]:
    """The argv a :class:`CommandInfo` asks for (shell form or program form)."""
    if command.shell is None or command.shell:
        return ["/bin/sh", "-c", command.value or ""]
    return [command.value or "", *(command.arguments or [])]


def command_env(command: CommandInfo, extra: dict[str, str]) -> dict[str, str]:
    """The agent's environment, then the command's own, then mezzo's variables."""
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in (command.environment or {}).items()})
    env.update(extra)
    return env


class CommandTask:
    """One command task in one container. :meth:`run` drives it to a terminal state."""

    def __init__(self, agent: Agent, framework: FrameworkInfo, task: TaskInfo) -> None:
        self.agent = agent
        self.framework_id = framework.framework_id
        self.task = task
        self.task_id = task.task_id
        self.container_id = uuidlib.uuid4().hex
        self.recovering: checkpoint.ContainerEntry | None = None
        """Set by :meth:`recovered`: the container an earlier agent started."""
        self.container: Container | None = None
        self._running_reported = False
        self.sandbox: Sandbox | None = None
        self.running: RunningContainer | None = None
        self.kill_requested = False
        self._kill_hard = False
        self._terminal_sent = False
        self.finished = False
        self._kill_timer: asyncio.TimerHandle | None = None
        self._grace: float | None = None
        """The grace period the kill asked for; None: the agent's ``kill_grace_period``."""
        self.log = log.bind(agent=agent.agent_id, framework=self.framework_id, task=self.task_id)

    @classmethod
    def recovered(cls, agent: Agent, framework: FrameworkInfo, task: TaskInfo, container: checkpoint.ContainerEntry,
                  latest: TaskStatus | None) -> CommandTask:
        """The task as a restarted agent takes it back; :meth:`run` then resumes it."""
        self = cls(agent, framework, task)
        self.container_id = container.container_id
        self.recovering = container
        self.sandbox = Sandbox(container.sandbox)
        state = latest.state if latest is not None else None
        self._running_reported = state in (TaskState.TASK_RUNNING, TaskState.TASK_KILLING)
        self.kill_requested = state == TaskState.TASK_KILLING
        self.container = self._container(ContainerLaunch(argv=[], env={}, cwd=container.sandbox))
        self.container.pid = container.pid or None
        return self

    def _container(self, launch: ContainerLaunch) -> Container:
        assert self.sandbox is not None
        return Container(
            container_id=self.container_id,
            framework_id=self.framework_id,
            executor_id=self.task_id,
            resources=Resources.of(self.task.resources),
            sandbox=self.sandbox.path,
            launch=launch,
        )

    # -- life -------------------------------------------------------------

    async def run(self) -> None:
        try:
            await self._run()
        except Exception as exc:
            # A bug of ours: the task must still end, or it would never be forgotten.
            self.log.exception("command task failed on the agent")
            if not self._terminal_sent:
                self._status(TaskState.TASK_FAILED, reason="agent_error",
                             message=f"the agent failed running the task: {exc!r}")
            raise
        finally:
            self.finished = True
            self._cancel_kill_timer()
            if self.running is not None and self.running.returncode is None:
                # Cancelled (agent stopping) while the process lives: take it down.
                self.running.kill()

    async def _run(self) -> None:
        if self.recovering is not None:
            await self._resume(self.recovering)
            return
        config = self.agent.config
        try:
            self.sandbox = Sandbox.create(config.work_dir, self.framework_id, self.task_id, self.container_id)
        except OSError as exc:
            self._status(TaskState.TASK_FAILED, reason="sandbox_creation_failed",
                         message=f"cannot create the sandbox: {exc}")
            return
        self._status(TaskState.TASK_STARTING)
        command = self.task.command
        container = self.container = self._container(ContainerLaunch(
            argv=command_argv(command),
            env=command_env(command, {
                "MEZZO_TASK_ID": self.task_id,
                "MEZZO_FRAMEWORK_ID": self.framework_id,
                "MEZZO_SANDBOX": self.sandbox.path,
            }),
            cwd=self.sandbox.path,
        ))
        journal = self.agent.checkpoint
        containerizer = self.agent.containerizer
        try:
            self.running = await containerizer.launch(
                container, stdout=self.sandbox.stdout, stderr=self.sandbox.stderr,
                exit_file=os.path.join(self.sandbox.path, EXIT_FILE) if journal.enabled else None,
            )
        except LaunchError as exc:
            self.log.warning("command task failed to launch", error=str(exc))
            self._status(TaskState.TASK_FAILED, reason="container_launch_failed", message=str(exc))
            return
        if journal.enabled:
            journal.pid(self.framework_id, self.task_id, checkpoint.TASK, self.running.pid, self.running.start_time)
        self.log.debug("command task started", pid=self.running.pid, container=self.container_id)
        if self._kill_hard:
            self.running.kill()
        elif self.kill_requested:
            self._start_kill()
        else:
            self._status(TaskState.TASK_RUNNING)
        await self._finish(await self.running.wait())

    async def _resume(self, recorded: checkpoint.ContainerEntry) -> None:
        """Take back the container an earlier agent started (see the module docstring)."""
        assert self.sandbox is not None and self.container is not None
        exit_file = os.path.join(self.sandbox.path, EXIT_FILE)
        if not recorded.pid:
            # The agent died between starting the launch and recording the pid, and
            # no process of the task was found: it never started, or ended unrecorded.
            code = read_exit_file(exit_file)
            await self.agent.containerizer.destroy(self.container)
            if code is None:
                self._status(TaskState.TASK_FAILED, reason="container_lost",
                             message="the agent died while launching the task and, restarted, found no "
                                     "process of it and no exit status")
            else:
                self._report_exit(code)
            return
        alive = posix.identify(recorded.pid, recorded.start_time) == posix.SAME
        self.running = RunningContainer.adopt(self.container, recorded.pid, recorded.start_time, exit_file)
        if alive:
            self.log.info("command task adopted after the agent restarted", pid=recorded.pid,
                          container=self.container_id)
            if self._kill_hard:
                self.running.kill()
            elif self.kill_requested:
                self._start_kill()  # a kill was in progress: carry on with it
            elif not self._running_reported:
                self._status(TaskState.TASK_RUNNING)
        else:
            self.log.info("command task ended while the agent was down", pid=recorded.pid,
                          container=self.container_id)
        await self._finish(await self.running.wait())

    async def _finish(self, returncode: int) -> None:
        assert self.running is not None and self.container is not None
        self._cancel_kill_timer()
        # The leader is gone; whatever it left in its session goes with it.
        leftovers = self.running.kill()
        if leftovers:
            self.log.debug("killed processes left behind by the task", count=leftovers)
        limitation = await self.agent.containerizer.limitation(self.container)
        await self.agent.containerizer.destroy(self.container)
        if limitation is not None and not self.kill_requested:
            exit_code, _how = describe_exit(returncode)
            self._status(TaskState.TASK_FAILED, reason=limitation.reason, message=limitation.message,
                         exit_code=exit_code, data=self._output_tail())
        elif self.running.exit_known:
            self._report_exit(returncode)
        elif self.kill_requested:
            self._status(TaskState.TASK_KILLED, message="command killed after a kill request",
                         data=self._output_tail())
        else:
            self._status(TaskState.TASK_FAILED, reason="container_lost",
                         message="the command ended without recording its exit status (killed together with "
                                 "its wrapper, e.g. by SIGKILL); the agent, restarted since it launched the task, "
                                 "cannot tell how it ended",
                         data=self._output_tail())

    def _report_exit(self, returncode: int) -> None:
        exit_code, how = describe_exit(returncode)
        output = self._output_tail()
        if self.kill_requested:
            self._status(TaskState.TASK_KILLED, message=f"command {how} after a kill request",
                         exit_code=exit_code, data=output)
        elif returncode == 0:
            self._status(TaskState.TASK_FINISHED, message="command exited with status 0", exit_code=0,
                         data=output)
        else:
            self._status(TaskState.TASK_FAILED, reason="command_failed", message=f"command {how}",
                         exit_code=exit_code, data=output)

    def _output_tail(self) -> bytes | None:
        assert self.sandbox is not None
        try:
            with open(self.sandbox.stdout, "rb") as f:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(0, size - OUTPUT_TAIL_BYTES))
                return f.read() or None
        except OSError:
            return None

    # -- killing ----------------------------------------------------------

    def kill(self, grace: float | None = None) -> None:
        """Ask the task to stop: TASK_KILLING, SIGTERM, and SIGKILL after ``grace``
        seconds (None: the agent's ``kill_grace_period``)."""
        if self.kill_requested or self.finished:
            return
        self.kill_requested = True
        self._grace = grace
        self._status(TaskState.TASK_KILLING)
        if self.running is not None:
            self._start_kill()
        # else: the launch in progress sees kill_requested once the process exists.

    def kill_now(self) -> None:
        """SIGKILL the task's tree at once (agent stopping, framework gone)."""
        self.kill_requested = self._kill_hard = True
        if self.running is not None and self.running.returncode is None:
            self.running.kill()

    def _start_kill(self) -> None:
        assert self.running is not None
        self.running.terminate()
        grace = self.grace
        self._kill_timer = asyncio.get_running_loop().call_later(grace, self._escalate)

    def _escalate(self) -> None:
        self._kill_timer = None
        if self.running is not None and self.running.returncode is None:
            self.log.info("task outlived its kill grace period; killing its process tree", grace=self.grace)
            self.running.kill()

    @property
    def grace(self) -> float:
        """Seconds from SIGTERM to SIGKILL for this task's kill."""
        return self.agent.config.kill_grace_period if self._grace is None else self._grace

    def _cancel_kill_timer(self) -> None:
        if self._kill_timer is not None:
            self._kill_timer.cancel()
            self._kill_timer = None

    # -- reporting --------------------------------------------------------

    def _status(self, state: int, *, message: str = "", reason: str = "", exit_code: int | None = None,
                data: bytes | None = None) -> None:
        self._terminal_sent = self._terminal_sent or is_terminal(state)
        self.agent.emit_status(
            TaskStatus(
                task_id=self.task_id,
                state=state,
                message=message,
                reason=reason,
                source="agent",
                executor_id=self.task_id,
                framework_id=self.framework_id,
                exit_code=exit_code,
                data=data,
            )
        )
