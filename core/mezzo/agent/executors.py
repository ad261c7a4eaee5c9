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
    RECOVERING   (instead of LAUNCHING) a restarted agent took the executor back from
                 its checkpoint and waits for the executor driver to re-register

The container's life (launch, journal, wait, cleanup, resumption after a restart) is
:class:`~.container_run.ContainerRun`'s; :class:`ExecutorRun` adds the executor's
registration, its tasks and its connection.

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
  its own (so its real exit status is reported) and is then killed.

Checkpointing (``agent.checkpoint``): the executor runs under the containerizer's
exit wrapper; its run (ExecutorInfo, container, pid and start time) and each of its
tasks (and whether it was handed to the executor yet) are journaled. A restarted
agent makes a RECOVERING run of each (:meth:`ExecutorRun.recovered`): the process
is watched through a pidfd, the executor driver (which re-dials its agent for
``recovery_timeout``) re-registers, tasks not yet handed over are launched then.
An executor that does not re-register within ``executor_register_timeout`` is
killed and its tasks fail with reason ``executor_reregister_timeout``; one that
ended while the agent was down fails its tasks with its recorded exit status.
"""

from __future__ import annotations

import asyncio
import hmac
import os
import secrets
from typing import TYPE_CHECKING

from ..hookspecs import ContainerLaunch, Limitation
from ..resources import Resources
from ..rpc import Connection
from ..rpc.tls import EXECUTOR_CA_ENV
from ..services import EXECUTOR, EXECUTOR_TOKEN_ENV
from ..task_user import task_user
from ..wire.ttypes import ExecutorInfo, FrameworkInfo, TaskInfo, TaskState, TaskStatus
from . import checkpoint
from .container_run import ContainerRun, command_argv, command_env
from .posix import describe_exit
from .sandbox import Sandbox
from .work_dir import open_no_follow

CA_COPY = ".mezzo-tls-ca.pem"
"""The copy of the agent's CA certificate in an executor's sandbox, for an executor that
runs as another user: the agent's own file may be where only root can read it."""

if TYPE_CHECKING:
    from .agent import Agent

LAUNCHING = "launching"
REGISTERED = "registered"
TERMINATING = "terminating"
TERMINATED = "terminated"
RECOVERING = "recovering"


class ExecutorRun(ContainerRun):
    """One custom executor process on this agent and the tasks given to it."""

    what = "executor"
    noun = "executor"
    sandbox_noun = "the executor's sandbox"
    pid_kind = checkpoint.EXECUTOR

    def __init__(self, agent: Agent, framework: FrameworkInfo, info: ExecutorInfo) -> None:
        super().__init__(agent, framework.framework_id, info.executor_id, {"executor": info.executor_id})
        self.framework = framework
        self.executor_id = info.executor_id
        self.info = ExecutorInfo(
            executor_id=info.executor_id,
            command=info.command,
            resources=Resources.of(info.resources),
            name=info.name or "",
            framework_id=self.framework_id,
        )
        self.state = LAUNCHING
        self.token = secrets.token_urlsafe(24)
        """The secret only this executor's process is given (``MEZZO_EXECUTOR_TOKEN``):
        a ``register_executor`` without it is refused, so that no other process that
        reaches the agent's port can register first and be handed this executor's
        tasks. "" for a run recovered from a journal older than tokens (then any
        registration for its ids is taken, as before)."""
        self.conn: Connection | None = None
        self.tasks: dict[str, TaskInfo] = {}
        """Unfinished tasks, queued or launched."""
        self._queued: list[str] = []
        self._killed: set[str] = set()
        self._kill_on_register: dict[str, float | None] = {}
        """Tasks killed while RECOVERING, with the grace their kill asked for."""
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._ended = False
        self.reason: str | None = None
        self.message: str | None = None

    @classmethod
    def recovered(
        cls,
        agent: Agent,
        framework: FrameworkInfo,
        info: ExecutorInfo,
        container: checkpoint.ContainerEntry,
        token: str = "",
    ) -> ExecutorRun:
        """The executor as a restarted agent takes it back (tasks follow through
        :meth:`recover_task`); :meth:`run` then watches it. ``token``: the one journaled
        at its launch."""
        self = cls(agent, framework, info)
        self.token = token
        self.take_over(container)
        self.state = RECOVERING
        return self

    def recover_task(self, task: TaskInfo, launched: bool) -> None:
        """A task the checkpoint says this executor had, not finished (``launched``:
        handed to the executor already, else it is launched once it re-registers)."""
        self.tasks[task.task_id] = task
        if not launched:
            self._queued.append(task.task_id)
        if self.container is not None:
            self.container.resources = self._resources()

    @property
    def alive(self) -> bool:
        return self.state in (LAUNCHING, REGISTERED, RECOVERING)

    @property
    def user_name(self) -> str:
        # The rule for a task with this executor: its command's user, else the framework's.
        return task_user(self.framework, TaskInfo(executor=self.info))

    # -- the container's life (see ContainerRun) -----------------------------

    @property
    def end_reported(self) -> bool:
        return self._ended

    def _container_resources(self) -> Resources:
        return self._resources()

    def _sandbox_ready(self) -> None:
        assert self.sandbox is not None
        for task_id in self.tasks:
            self.sandbox.task_dir(task_id)
        if self.agent.tls is not None and self.sandbox.owner is not None:
            self._copy_ca(self.sandbox)

    def _copy_ca(self, sandbox: Sandbox) -> None:
        """Put the agent's CA certificate (public) in the sandbox, the executor's user's: an
        executor of another user may not be able to read the agent's file. O_EXCL and
        O_NOFOLLOW: the sandbox is that user's already. OSError: the sandbox is not ready."""
        assert self.agent.tls is not None and sandbox.owner is not None
        with open(self.agent.tls.ca, "rb") as f:
            pem = f.read()
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        with os.fdopen(open_no_follow(os.path.join(sandbox.path, CA_COPY), flags, 0o644), "wb") as out:
            os.fchown(out.fileno(), *sandbox.owner)
            out.write(pem)

    def _ca_env(self, sandbox: Sandbox) -> dict[str, str]:
        """``MEZZO_TLS_CA`` when the agent's port is TLS: the CA the executor checks it against."""
        if self.agent.tls is None:
            return {}
        if sandbox.owner is not None:
            return {EXECUTOR_CA_ENV: os.path.join(sandbox.path, CA_COPY)}
        return {EXECUTOR_CA_ENV: os.path.abspath(self.agent.tls.ca)}

    def _mesos_env(self, sandbox: Sandbox) -> dict[str, str]:
        """What an executor written for Apache Mesos reads to find its agent's v1 executor
        API (:mod:`mezzo.http.executor_api`), when the agent serves HTTP; ``MESOS_CHECKPOINT``
        only when the agent checkpoints (pymesos takes any value, even "0", as on: such an
        executor outlives a lost connection and subscribes again)."""
        agent = self.agent
        if not agent.config.http.enabled:
            return {}
        env = {
            "MESOS_AGENT_ENDPOINT": agent.endpoint,
            "MESOS_FRAMEWORK_ID": self.framework_id,
            "MESOS_EXECUTOR_ID": self.executor_id,
            "MESOS_AGENT_ID": agent.agent_id,
            "MESOS_SLAVE_ID": agent.agent_id,
            "MESOS_DIRECTORY": sandbox.path,
            "MESOS_SANDBOX": sandbox.path,
            "MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD": f"{agent.config.kill_grace_period:g}secs",
            "MESOS_EXECUTOR_AUTHENTICATION_TOKEN": self.token,
        }
        if agent.config.checkpoint:
            env["MESOS_CHECKPOINT"] = "1"
        return env

    def _launch_spec(self, sandbox: Sandbox) -> ContainerLaunch:
        command = self.info.command
        return ContainerLaunch(
            argv=command_argv(command),
            env=command_env(
                command,
                {
                    "MEZZO_AGENT_ENDPOINT": self.agent.endpoint,
                    "MEZZO_FRAMEWORK_ID": self.framework_id,
                    "MEZZO_EXECUTOR_ID": self.executor_id,
                    "MEZZO_SANDBOX": sandbox.path,
                    EXECUTOR_TOKEN_ENV: self.token,
                    "PYTHONUNBUFFERED": "1",
                    **self._ca_env(sandbox),
                    **self._mesos_env(sandbox),
                },
                self.agent.config.inherited_environment,
                self.user,
            ),
            cwd=sandbox.path,
            user=self.run_as,
        )

    def _launched(self) -> None:
        assert self.running is not None
        self.log.info("executor launched", pid=self.running.pid, container=self.container_id)
        if self.state == TERMINATING:
            self.running.kill()  # shut down while it was being launched
        else:
            self._timers["register"] = asyncio.get_running_loop().call_later(
                self.agent.config.executor_register_timeout, self._register_timed_out
            )

    def _adopted(self) -> None:
        assert self.running is not None
        timeout = self.agent.config.executor_register_timeout
        self.log.info(
            "executor adopted after the agent restarted; waiting for it to re-register",
            pid=self.running.pid,
            timeout=timeout,
            tasks=len(self.tasks),
        )
        if self.state == RECOVERING:
            self._timers["register"] = asyncio.get_running_loop().call_later(
                timeout, self._reregister_timed_out
            )
        elif self.state == TERMINATING:
            self.running.kill()  # shut down before it came back

    def _lost_at_launch(self, code: int | None) -> None:
        self._end(
            -1,
            "container_lost",
            "the agent died while launching the executor and, restarted, found no process of it",
        )

    def _exited(self) -> None:
        self.state = TERMINATED
        if self.conn is not None:
            self.conn.close()

    def _report_end(self, returncode: int, limitation: Limitation | None) -> None:
        assert self.running is not None
        exit_status, how = describe_exit(returncode)
        if not self.running.exit_known:
            how = "ended without recording its exit status (killed with its wrapper, e.g. by SIGKILL)"
        self.log.info(
            "executor exited",
            status=exit_status,
            how=how,
            limitation=limitation.reason if limitation is not None else None,
        )
        if limitation is not None and self.reason is None:
            self._end(exit_status, limitation.reason, f"{limitation.message}; executor {how}")
        else:
            self._end(exit_status, self.reason or "executor_exited", self.message or f"executor {how}")

    def _not_started(self, reason: str, message: str) -> None:
        self._end(-1, reason, message)

    def _cleanup(self) -> None:
        self.state = TERMINATED
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        if self.conn is not None:
            self.conn.close()

    def _end(self, exit_status: int, reason: str, message: str) -> None:
        """Fail every unfinished task, then tell the agent (which tells the master)."""
        self._ended = True
        self.state = TERMINATED
        for task_id in list(self.tasks):
            if task_id in self._killed or task_id in self._kill_on_register:
                self._status(task_id, TaskState.TASK_KILLED, message=f"task killed; {message}")
            else:
                self._status(task_id, TaskState.TASK_FAILED, reason=reason, message=message)
        self.tasks.clear()
        self._queued.clear()
        self.agent.executor_terminated(self, exit_status, message)

    # -- tasks ------------------------------------------------------------

    def add_task(self, task: TaskInfo) -> None:
        """Take ``task``: launch it now if the executor is registered, else queue it."""
        launch_now = self.state == REGISTERED and self.conn is not None
        self.agent.checkpoint.task(self.framework_id, task, executor_id=self.executor_id, launched=launch_now)
        self.tasks[task.task_id] = task
        if self.sandbox is not None:
            try:
                self.sandbox.task_dir(task.task_id)
            except OSError as exc:
                self.log.warning("cannot create the task's directory", task=task.task_id, error=str(exc))
        if launch_now and self.conn is not None:
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

    def kill_task(self, task_id: str, grace: float | None = None) -> None:
        """Forward a kill; escalate to killing the executor if the task is still
        there after ``grace`` seconds (None: the agent's ``kill_grace_period``)."""
        if task_id not in self.tasks:
            return
        if task_id in self._queued:
            # Never reached the executor: nobody else to ask.
            self._queued.remove(task_id)
            del self.tasks[task_id]
            self._status(task_id, TaskState.TASK_KILLED, message="task killed before its executor registered")
            return
        if self.state == RECOVERING:
            self._kill_on_register[task_id] = grace  # forwarded once the executor is back
            return
        if self.state != REGISTERED or self.conn is None:
            self._killed.add(task_id)  # reported TASK_KILLED when the process is gone
            return
        self.conn.remote(EXECUTOR).kill_task(task_id)
        key = f"kill:{task_id}"
        if key not in self._timers:
            grace = self.agent.config.kill_grace_period if grace is None else grace
            self._timers[key] = asyncio.get_running_loop().call_later(
                grace, self._kill_timed_out, task_id, grace
            )

    def _kill_timed_out(self, task_id: str, grace: float) -> None:
        self._timers.pop(f"kill:{task_id}", None)
        if task_id not in self.tasks:
            return
        self.log.warning(
            "executor did not kill its task in time; killing the executor", task=task_id, grace=grace
        )
        self._killed.add(task_id)
        self.terminate(
            "executor_terminated",
            f"executor was killed: task {task_id} was not killed within the {grace:g}s grace period",
        )

    # -- executor connection ---------------------------------------------

    def holds_token(self, token: str) -> bool:
        """``token`` is this executor's (compared in constant time)."""
        return not self.token or hmac.compare_digest(self.token.encode(), (token or "").encode())

    def accepts_registration(self) -> bool:
        """True while waiting for the executor to register, or to come back after
        its connection dropped or the agent restarted (the executor driver re-dials
        and re-registers)."""
        if self.state in (LAUNCHING, RECOVERING):
            return self.conn is None
        return self.state == TERMINATING and self.conn is None and "disconnect" in self._timers

    def on_registered(self, conn: Connection) -> None:
        again = self.state in (TERMINATING, RECOVERING)
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
                self.agent.checkpoint.launched(self.framework_id, task_id)
                remote.launch_task(task)
        self._queued.clear()
        self._update_resources()
        self.log.info("executor re-registered" if again else "executor registered", peer=conn.peer)
        kills, self._kill_on_register = self._kill_on_register, {}
        for task_id, grace in kills.items():
            self.kill_task(task_id, grace)

    def on_disconnected(self, conn: Connection) -> None:
        if conn is not self.conn:
            return
        self.conn = None
        if self.state == REGISTERED:
            self.log.warning(
                "executor disconnected; killing it unless it exits", grace=self.agent.config.kill_grace_period
            )
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
                self.terminate,
                None,
                "executor was shut down",
            )
        elif self.state in (LAUNCHING, RECOVERING):
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

    def _reregister_timed_out(self) -> None:
        self._timers.pop("register", None)
        if self.state != RECOVERING:
            return
        timeout = self.agent.config.executor_register_timeout
        self.log.warning(
            "executor did not re-register after the agent restarted; killing it", timeout=timeout
        )
        self.terminate(
            "executor_reregister_timeout",
            f"executor did not re-register within {timeout:g}s after the agent restarted",
        )

    def _register_timed_out(self) -> None:
        self._timers.pop("register", None)
        if self.state != LAUNCHING:
            return
        timeout = self.agent.config.executor_register_timeout
        self.log.warning("executor did not register in time; killing it", timeout=timeout)
        self.terminate("executor_register_timeout", f"executor did not register within {timeout:g}s")

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
