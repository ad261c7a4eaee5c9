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
environment allowlist (``agent.inherited_environment``) plus ``CommandInfo.environment``,
``MEZZO_TASK_ID``, ``MEZZO_FRAMEWORK_ID`` and ``MEZZO_SANDBOX``; its stdout and stderr go
to files in the sandbox. An agent that switches users runs it as the task's user
(:func:`mezzo.task_user.task_user`; see :mod:`.container_run`); a user this host does not
have fails the task (TASK_FAILED, reason ``user_unknown``, the message naming the user and
the agent).

The terminal update carries the tail of the task's stdout (at most
:data:`OUTPUT_TAIL_BYTES`) in ``TaskStatus.data``, which is how ``mezzo run``
shows a remote command's output without reading the agent's disk.

The container's life (launch, journal, wait, cleanup, resumption after a restart) is
:class:`~.container_run.ContainerRun`'s; :class:`CommandTask` says what each step
means for the task.

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
from typing import TYPE_CHECKING

from .. import is_terminal
from ..hookspecs import ContainerLaunch, Limitation
from ..resources import Resources
from ..task_user import task_user
from ..wire.ttypes import FrameworkInfo, TaskInfo, TaskState, TaskStatus
from . import checkpoint
from .container_run import ContainerRun, command_argv, command_env
from .posix import describe_exit
from .sandbox import Sandbox
from .work_dir import read_tail

if TYPE_CHECKING:
    from .agent import Agent

__all__ = ["OUTPUT_TAIL_BYTES", "CommandTask", "command_argv", "command_env"]

OUTPUT_TAIL_BYTES = 64 * 1024
"""How much of the end of a command task's stdout its terminal update carries."""


class CommandTask(ContainerRun):
    """One command task in one container. :meth:`run` drives it to a terminal state."""

    what = "command task"
    noun = "task"
    pid_kind = checkpoint.TASK

    def __init__(self, agent: Agent, framework: FrameworkInfo, task: TaskInfo) -> None:
        super().__init__(agent, framework.framework_id, task.task_id, {"task": task.task_id})
        self.framework = framework
        self.task = task
        self.task_id = task.task_id
        self._running_reported = False
        self.kill_requested = False
        self._kill_hard = False
        self._terminal_sent = False
        self.finished = False
        self._kill_timer: asyncio.TimerHandle | None = None
        self._grace: float | None = None
        """The grace period the kill asked for; None: the agent's ``kill_grace_period``."""

    @classmethod
    def recovered(
        cls,
        agent: Agent,
        framework: FrameworkInfo,
        task: TaskInfo,
        container: checkpoint.ContainerEntry,
        latest: TaskStatus | None,
    ) -> CommandTask:
        """The task as a restarted agent takes it back; :meth:`run` then resumes it."""
        self = cls(agent, framework, task)
        self.take_over(container)
        state = latest.state if latest is not None else None
        self._running_reported = state in (TaskState.TASK_RUNNING, TaskState.TASK_KILLING)
        self.kill_requested = state == TaskState.TASK_KILLING
        return self

    # -- the container's life (see ContainerRun) -----------------------------

    @property
    def end_reported(self) -> bool:
        return self._terminal_sent

    @property
    def user_name(self) -> str:
        return task_user(self.framework, self.task)

    def _container_resources(self) -> Resources:
        return Resources.of(self.task.resources)

    def _sandbox_ready(self) -> None:
        self._status(TaskState.TASK_STARTING)

    def _launch_spec(self, sandbox: Sandbox) -> ContainerLaunch:
        command = self.task.command
        return ContainerLaunch(
            argv=command_argv(command),
            env=command_env(
                command,
                {
                    "MEZZO_TASK_ID": self.task_id,
                    "MEZZO_FRAMEWORK_ID": self.framework_id,
                    "MEZZO_SANDBOX": sandbox.path,
                },
                self.agent.config.inherited_environment,
                self.user,
            ),
            cwd=sandbox.path,
            user=self.run_as,
        )

    def _launched(self) -> None:
        assert self.running is not None
        self.log.debug("command task started", pid=self.running.pid, container=self.container_id)
        if self._kill_hard:
            self.running.kill()
        elif self.kill_requested:
            self._start_kill()
        else:
            self._status(TaskState.TASK_RUNNING)

    def _adopted(self) -> None:
        assert self.running is not None
        self.log.info(
            "command task adopted after the agent restarted",
            pid=self.running.pid,
            container=self.container_id,
        )
        if self._kill_hard:
            self.running.kill()
        elif self.kill_requested:
            self._start_kill()  # a kill was in progress: carry on with it
        elif not self._running_reported:
            self._status(TaskState.TASK_RUNNING)

    def _lost_at_launch(self, code: int | None) -> None:
        if code is None:
            self._status(
                TaskState.TASK_FAILED,
                reason="container_lost",
                message="the agent died while launching the task and, restarted, found no "
                "process of it and no exit status",
            )
        else:
            self._report_exit(code)

    def _exited(self) -> None:
        self._cancel_kill_timer()

    def _report_end(self, returncode: int, limitation: Limitation | None) -> None:
        assert self.running is not None
        if limitation is not None and not self.kill_requested:
            exit_code, _how = describe_exit(returncode)
            self._status(
                TaskState.TASK_FAILED,
                reason=limitation.reason,
                message=limitation.message,
                exit_code=exit_code,
                data=self._output_tail(),
            )
        elif self.running.exit_known:
            self._report_exit(returncode)
        elif self.kill_requested:
            self._status(
                TaskState.TASK_KILLED, message="command killed after a kill request", data=self._output_tail()
            )
        else:
            self._status(
                TaskState.TASK_FAILED,
                reason="container_lost",
                message="the command ended without recording its exit status (killed together with "
                "its wrapper, e.g. by SIGKILL); the agent, restarted since it launched the task, "
                "cannot tell how it ended",
                data=self._output_tail(),
            )

    def _not_started(self, reason: str, message: str) -> None:
        self._status(TaskState.TASK_FAILED, reason=reason, message=message)

    def _cleanup(self) -> None:
        self.finished = True
        self._cancel_kill_timer()

    def _report_exit(self, returncode: int) -> None:
        exit_code, how = describe_exit(returncode)
        output = self._output_tail()
        if self.kill_requested:
            self._status(
                TaskState.TASK_KILLED,
                message=f"command {how} after a kill request",
                exit_code=exit_code,
                data=output,
            )
        elif returncode == 0:
            self._status(
                TaskState.TASK_FINISHED, message="command exited with status 0", exit_code=0, data=output
            )
        else:
            self._status(
                TaskState.TASK_FAILED,
                reason="command_failed",
                message=f"command {how}",
                exit_code=exit_code,
                data=output,
            )

    def _output_tail(self) -> bytes | None:
        """The end of its stdout, a file of the sandbox's user (:func:`~.work_dir.read_tail`)."""
        assert self.sandbox is not None
        return read_tail(self.sandbox.stdout, OUTPUT_TAIL_BYTES, self.sandbox.uid) or None

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

    def _status(
        self,
        state: int,
        *,
        message: str = "",
        reason: str = "",
        exit_code: int | None = None,
        data: bytes | None = None,
    ) -> None:
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
