"""One container's life on the agent, from launch (or adoption after a restart) to cleanup.

Both things the agent runs in a container, a command task (:mod:`.command_executor`)
and a custom executor (:mod:`.executors`), go through the same steps, which
:class:`ContainerRun` owns::

    run()                                 resumed after a restart?
      user     -> the unix user to run as (agent.switch_user): looked up on this host
      sandbox  -> _sandbox_ready()        (report TASK_STARTING / make task directories)
      launch   -> the containerizer prepares, spawns and isolates _launch_spec()
      journal  -> the leader's pid and start time, before anything is said about it
      _launched()                         (TASK_RUNNING, or carry on with a kill / wait for
                                           the executor to register)
      wait     -> the leader exits
      finish   -> _exited(); kill what it left behind; ask the isolators for a
                  limitation; destroy (isolator cleanup); _report_end(...)
      finally  -> _cleanup(); a leader still alive (the agent is stopping) is killed

    resume (take_over() was called with what an earlier agent journaled):
      no pid journaled, no process found  -> destroy; _lost_at_launch(exit file status)
      otherwise the leader is adopted     -> _adopted() if it is still alive; wait; finish

A subclass supplies only what differs: what to launch (:meth:`_launch_spec`) with which
resources, and what each step means for the tasks it runs (the ``_`` methods above,
:meth:`_not_started` and :meth:`_ended`). A user this host does not know, a failure to
create the sandbox or to launch is :meth:`_not_started` with reason
:data:`USER_UNKNOWN`, ``sandbox_creation_failed`` or ``container_launch_failed``; an
exception of ours anywhere is logged with its traceback and becomes :meth:`_not_started`
with reason ``agent_error`` unless the end was reported already, then propagates (the
agent logs it again as a failed background task).

Users. When the agent switches users (:attr:`Agent.switches_users
<mezzo.agent.agent.Agent.switches_users>`) the container runs as :attr:`ContainerRun.user_name`
(:func:`mezzo.task_user.task_user`), looked up when the container is launched: its
sandbox is given to that user and its command runs as it (:mod:`.containerizer`), with
that user's ``HOME``, ``USER`` and ``LOGNAME`` (:func:`command_env`). A user with the
agent's own uid (root) needs no switch: its container runs as a non-switching agent's
does. The journal does not record the user: after a restart the sandbox's owner says
whose the container's files are (:meth:`.Sandbox.existing`), and nothing else needs it.
"""

from __future__ import annotations

import asyncio
import os
import uuid as uuidlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import structlog

from ..hookspecs import Container, ContainerLaunch, Limitation, RunAs
from ..resources import Resources
from ..wire.ttypes import CommandInfo
from . import posix
from .checkpoint import ContainerEntry
from .containerizer import EXIT_FILE, LaunchError, RunningContainer, read_exit_file
from .exit_wrapper import exit_file_for
from .sandbox import Sandbox
from .users import UnknownUser, identity_env, resolve

if TYPE_CHECKING:
    from .agent import Agent

log = structlog.get_logger("mezzo.agent", component="agent")

USER_UNKNOWN = "user_unknown"
"""``TaskStatus.reason`` of a task whose unix user does not exist on the agent's host."""


def command_argv(command: CommandInfo) -> list[str]:
    """The argv a :class:`CommandInfo` asks for (shell form or program form)."""
    if command.shell is None or command.shell:
        return ["/bin/sh", "-c", command.value or ""]
    return [command.value or "", *(command.arguments or [])]


def command_env(
    command: CommandInfo, extra: dict[str, str], inherited: Iterable[str], user: RunAs | None = None
) -> dict[str, str]:
    """The agent's variables named in ``inherited`` (``agent.inherited_environment``),
    then, for a task run as ``user``, that user's ``HOME``, ``USER`` and ``LOGNAME``
    (not the agent's, root's, which the allowlist passes on), then the command's own,
    then mezzo's. Not the agent's whole environment: it may hold the agent's own secrets
    (cloud credentials, tokens), which a task must not read."""
    env = {name: os.environ[name] for name in inherited if name in os.environ}
    if user is not None:
        env.update(identity_env(user))
    env.update({str(k): str(v) for k, v in (command.environment or {}).items()})
    env.update(extra)
    return env


class ContainerRun:
    """The life of one container; see the module docstring. :meth:`run` drives it."""

    what = "container"
    """What it is, for the log (``command task``, ``executor``)."""
    pid_kind = ""
    """How its pid is journaled (:data:`~.checkpoint.TASK` or :data:`~.checkpoint.EXECUTOR`)."""

    def __init__(self, agent: Agent, framework_id: str, ident: str, log_context: dict[str, Any]) -> None:
        self.agent = agent
        self.framework_id = framework_id
        self.ident = ident
        """The executor id the container runs under (a command task's is its task id)."""
        self.container_id = uuidlib.uuid4().hex
        self.recovering: ContainerEntry | None = None
        """Set by :meth:`take_over`: the container an earlier agent started."""
        self.sandbox: Sandbox | None = None
        self.container: Container | None = None
        self.running: RunningContainer | None = None
        self.user: RunAs | None = None
        """The user it runs as, once looked up (None: the agent does not switch users)."""
        self.log = log.bind(agent=agent.agent_id, framework=framework_id, **log_context)

    @property
    def user_name(self) -> str:
        """The unix user its command is to run as (:func:`mezzo.task_user.task_user`)."""
        raise NotImplementedError

    @property
    def run_as(self) -> RunAs | None:
        """The user the containerizer switches to: :attr:`user`, unless it is the agent's own."""
        return self.user if self.user is not None and self.user.uid != os.geteuid() else None

    def take_over(self, recorded: ContainerEntry) -> None:
        """Make this the container an earlier agent journaled; :meth:`run` then resumes it."""
        self.container_id = recorded.container_id
        self.recovering = recorded
        self.sandbox = Sandbox.existing(recorded.sandbox)
        self.container = self._container(ContainerLaunch(argv=[], env={}, cwd=recorded.sandbox))
        self.container.pid = recorded.pid or None

    def _container(self, launch: ContainerLaunch) -> Container:
        assert self.sandbox is not None
        return Container(
            container_id=self.container_id,
            framework_id=self.framework_id,
            executor_id=self.ident,
            resources=self._container_resources(),
            sandbox=self.sandbox.path,
            launch=launch,
        )

    # -- the life ----------------------------------------------------------

    async def run(self) -> None:
        try:
            await self._run()
        except Exception as exc:
            # A bug of ours: the tasks must still end, or they would never be forgotten.
            self.log.exception(f"{self.what} failed on the agent")
            if not self.end_reported:
                self._not_started("agent_error", f"the agent failed running the {self.noun}: {exc!r}")
            raise
        finally:
            self._cleanup()
            if self.running is not None and self.running.returncode is None and not self.agent.leaving_tasks:
                self.running.kill()  # cancelled while alive: the agent is stopping

    async def _run(self) -> None:
        if self.recovering is not None:
            await self._resume(self.recovering)
            return
        config = self.agent.config
        if self.agent.switches_users and not await self._look_up_user():
            return
        run_as = self.run_as
        try:
            # Absolute, as journaled: MEZZO_SANDBOX then names it exactly (recovery checks it).
            work_dir = os.path.abspath(config.work_dir)
            self.sandbox = Sandbox.create(
                work_dir,
                self.framework_id,
                self.ident,
                self.container_id,
                owner=run_as.owner if run_as is not None else None,
            )
            self._sandbox_ready()
        except OSError as exc:
            self._not_started("sandbox_creation_failed", f"cannot create {self.sandbox_noun}: {exc}")
            return
        container = self.container = self._container(self._launch_spec(self.sandbox))
        journal = self.agent.checkpoint
        try:
            self.running = await self.agent.containerizer.launch(
                container,
                stdout=self.sandbox.stdout,
                stderr=self.sandbox.stderr,
                exit_file=exit_file_for(self.sandbox.path) if journal.enabled else None,
            )
        except LaunchError as exc:
            self.log.warning(f"{self.what} failed to launch", error=str(exc))
            self._not_started("container_launch_failed", str(exc))
            return
        if journal.enabled:
            journal.pid(
                self.framework_id, self.ident, self.pid_kind, self.running.pid, self.running.start_time
            )
        self._launched()
        await self._finish(await self.running.wait())

    async def _look_up_user(self) -> bool:
        """Set :attr:`user`; False (the container is not started) when this host has no such user."""
        name = self.user_name
        try:
            # NSS may ask a directory server: not on the event loop.
            self.user = await asyncio.get_running_loop().run_in_executor(None, resolve, name)
        except UnknownUser:
            self.log.warning(f"{self.what} names a user this host does not have", user=name)
            self._not_started(
                USER_UNKNOWN,
                f"user {name!r} does not exist on agent {self.agent.agent_id} ({self.agent.hostname}): "
                f"the {self.noun} cannot run as it",
            )
            return False
        return True

    async def _resume(self, recorded: ContainerEntry) -> None:
        """Take back the container an earlier agent started."""
        assert self.sandbox is not None and self.container is not None
        exit_file = exit_file_for(self.sandbox.path)
        # An agent before exit_file_for had it in the sandbox: trusted only in a sandbox
        # of the agent's own (a task's user could have written one in its sandbox).
        legacy = os.path.join(self.sandbox.path, EXIT_FILE) if self.sandbox.owner is None else None
        if not recorded.pid:
            # The agent died between starting the launch and journaling the pid, and no
            # process of the container was found: it never started, or ended unrecorded.
            code = read_exit_file(exit_file)
            if code is None and legacy is not None:
                code = read_exit_file(legacy)
            await self.agent.containerizer.destroy(self.container)
            self._lost_at_launch(code)
            return
        alive = posix.identify(recorded.pid, recorded.start_time) == posix.SAME
        self.running = RunningContainer.adopt(
            self.container, recorded.pid, recorded.start_time, exit_file, legacy_exit_file=legacy
        )
        if alive:
            self._adopted()
        else:
            self.log.info(f"{self.what} ended while the agent was down", pid=recorded.pid)
        await self._finish(await self.running.wait())

    async def _finish(self, returncode: int) -> None:
        assert self.running is not None and self.container is not None
        self._exited()
        # The leader is gone; whatever it left in its session goes with it.
        leftovers = self.running.kill()
        if leftovers:
            self.log.debug(f"killed processes left behind by the {self.noun}", count=leftovers)
        limitation = await self.agent.containerizer.limitation(self.container)
        await self.agent.containerizer.destroy(self.container)
        self._report_end(returncode, limitation)

    # -- what a subclass supplies --------------------------------------------

    noun = "container"
    """How its messages name it (``task``, ``executor``)."""
    sandbox_noun = "the sandbox"

    @property
    def end_reported(self) -> bool:
        """True once the end of its tasks was reported."""
        raise NotImplementedError

    def _container_resources(self) -> Resources:
        raise NotImplementedError

    def _launch_spec(self, sandbox: Sandbox) -> ContainerLaunch:
        """What to run, with which environment, in ``sandbox``."""
        raise NotImplementedError

    def _sandbox_ready(self) -> None:
        """The sandbox exists; the container is about to be launched. An OSError counts
        as failing to create the sandbox."""

    def _launched(self) -> None:
        """The leader runs and its pid is journaled."""

    def _adopted(self) -> None:
        """After a restart: the leader an earlier agent started is still alive."""

    def _lost_at_launch(self, code: int | None) -> None:
        """After a restart: no process of a container launched as the agent died was
        found; ``code`` is the status its exit file holds, if any."""
        raise NotImplementedError

    def _exited(self) -> None:
        """The leader exited (before its leftovers are killed and the isolators clean up)."""

    def _report_end(self, returncode: int, limitation: Limitation | None) -> None:
        """Everything of the container is gone: report how it ended (``limitation``: the
        isolator limit that ended it, if any; :attr:`RunningContainer.exit_known` says
        whether ``returncode`` is real)."""
        raise NotImplementedError

    def _not_started(self, reason: str, message: str) -> None:
        """It could not start, or the agent failed running it: end its tasks with ``reason``."""
        raise NotImplementedError

    def _cleanup(self) -> None:
        """Last, whatever happened: cancel timers, close connections."""
