"""The containerizer: runs the configured isolators around a container's process.

Usage::

    containerizer = Containerizer.from_config(config, plugins)   # ConfigError if unknown
    running = await containerizer.launch(container, stdout=..., stderr=...)
    ...                                   # running.terminate() / running.kill()
    status = await running.wait()
    running.kill()                        # leftovers of the tree, if any
    await containerizer.destroy(container)

The order is the one the :class:`~mezzo.hookspecs.Isolator` contract promises:
``prepare`` of every isolator in ``agent.isolation`` order, spawn, ``isolate`` in
order, ``update`` when resources change, ``cleanup`` in reverse order.

Running as the task's user (``container.launch.user``, set by an agent that switches
users). Everything the isolators do in the child needs root (join a cgroup, enter a
network namespace, ``lxc-execute``), and so does the exit wrapper, whose status the task
must not be able to forge; so the switch is the last step before the command, never
``subprocess``'s ``user=``/``group=``/``extra_groups=``, which it applies *before*
``preexec_fn``:

- the command is what the child execs (no exit wrapper, no isolator wrapper): the
  child drops to the user after the last ``preexec`` function (:func:`~.users.become`:
  groups, gid, uid), right before exec;
- otherwise ``setpriv`` (:func:`~.users.switch_argv`) is put right before the command,
  inside the wrappers: ``[*wrapper, /bin/sh -c EXIT_WRAPPER ..., setpriv ... --, *argv]``.

The container's ``stdout`` and ``stderr`` are given to that user; the agent opens and
reads them assuming the user may have replaced them (:func:`~.work_dir.open_output`,
:func:`~.work_dir.read_tail`). The root exit wrapper runs ``/bin/sh`` with the task's
environment, which the framework chose: where ``/bin/sh`` is bash, exported functions
(``BASH_FUNC_*``) and ``SHELLOPTS`` (with ``PS4``) would run the framework's code in it as
root, so a switched container's environment loses :data:`SHELL_STARTUP_VARIABLES` (dash,
Debian's ``/bin/sh``, reads none of them).

Error handling: a ``prepare`` or ``isolate`` that raises fails the launch with
:class:`LaunchError` naming the isolator, after the isolators that had already
prepared are cleaned up in reverse (and the process, if spawned, is killed).
``cleanup`` failures are gathered, never raised: a container that is gone must
not take the agent down with it. ``recover``, ``update``, ``usage`` and
``limitation`` failures are otherwise ignored (a limitation that cannot be told is
no answer). Every one of these failures, and a ``preexec`` function that fails in
the child, is also reported to :attr:`Containerizer.guard`, a
:class:`~mezzo.plugin_guard.PluginGuard`: counted per isolator and call, and logged.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import structlog

from ..config import AgentConfig
from ..errors import MezzoError
from ..hookspecs import Container, ContainerLaunch, Isolator, Limitation, RunAs
from ..isolation import program_problem  # noqa: F401 - re-exported (was defined here)
from ..plugin_guard import PluginGuard, describe
from ..plugins import Plugins, check_settings_tables
from ..resources import Resources
from . import posix
from .exit_wrapper import (  # noqa: F401 - EXIT_FILE, EXIT_WRAPPER, SHELL_EXIT_WRAPPER re-exported
    EXIT_FILE,
    EXIT_WRAPPER,
    SHELL_EXIT_WRAPPER,
    command_reachable,
    exit_wrapped,
    read_exit_file,
)
from .users import become, switch_argv
from .work_dir import Owner, open_output, read_tail

log = structlog.get_logger("mezzo.agent", component="agent")

SPAWNER_THREADS = 4
"""Threads that fork and exec the container processes :func:`spawns_on_loop` does not
start on the event loop: fork+exec then blocks until the child has exec'd, which on a
busy machine takes milliseconds; the threads keep the event loop serving and let
launches overlap."""

SHELL_STARTUP_VARIABLES = ("SHELLOPTS", "BASHOPTS", "BASH_ENV", "ENV", "PS4")
"""Variables (with every ``BASH_FUNC_*``) that steer how a shell starts, dropped from the
environment of a container run as another user, whose exit wrapper shell runs as root."""

LOADER_VARIABLES = frozenset(
    {
        "GCONV_PATH",
        "GETCONF_DIR",
        "GLIBC_TUNABLES",
        "HOSTALIASES",
        "LOCALDOMAIN",
        "LOCPATH",
        "MALLOC_TRACE",
        "NIS_PATH",
        "NLSPATH",
        "RESOLV_HOST_CONF",
        "RES_OPTIONS",
        "TZDIR",
    }
)
"""With every ``LD_*``: the variables glibc ignores in setuid programs because they make
it load or read files a user chose. A container switched to another user may not set
them while a root stage (the exit wrapper, an isolator's wrapper, setpriv) runs first with
its environment (:meth:`Containerizer._spawn`)."""

SETTLE_TIMEOUT = 1.0
"""Seconds :meth:`RunningContainer.terminate` waits at most for the command of a container
just launched to be reachable by a signal before sending SIGTERM regardless."""
SETTLE_FIRST_POLL = 0.001
SETTLE_MAX_POLL = 0.02
"""Seconds between its checks: the first, then doubling up to this."""


class LaunchError(MezzoError):
    """A container could not be started; the message says which step failed and why."""


class RunningContainer:
    """A container whose first process has started.

    The process is a plain :class:`subprocess.Popen`; its exit is watched through
    a pidfd on the event loop (no thread per container, no global child watcher),
    falling back to one waiting thread where pidfds are unavailable.

    :meth:`adopt` makes one for a process an earlier agent started (not our child):
    its exit is watched through a pidfd too, and its status read from the exit file
    the wrapper writes (see :data:`EXIT_WRAPPER`).
    """

    def __init__(
        self,
        container: Container,
        process: subprocess.Popen | None,
        *,
        start_time: int = 0,
        exit_file: str | None = None,
    ) -> None:
        self.container = container
        self.process = process
        self.pid = process.pid if process is not None else 0
        self.start_time = start_time
        """The process's start time (``/proc/<pid>/stat``), 0 if not read."""
        self.exit_file = exit_file
        self.legacy_exit_file: str | None = None
        self.adopted = False
        self.exit_known = True
        """False for an adopted container that ended without writing its exit status."""
        self._known: set[posix.ProcessEntry] = set()
        self._settling: asyncio.TimerHandle | None = None
        """The next check of a :meth:`terminate` waiting for the command to be reachable."""
        self._exited: asyncio.Future[int] = _watch_exit(process) if process is not None else _done(0)

    @classmethod
    def adopt(
        cls,
        container: Container,
        pid: int,
        start_time: int,
        exit_file: str,
        *,
        legacy_exit_file: str | None = None,
    ) -> RunningContainer:
        """Watch a container whose leader ``pid`` (started at ``start_time``) an earlier
        agent launched under the exit wrapper. If it is already gone, :meth:`wait`
        returns at once. Its return code comes from ``exit_file`` (else from
        ``legacy_exit_file``, where an older agent had it written): when there is none
        (the wrapper was killed, e.g. with SIGKILL), :attr:`exit_known` is False and
        the return code reads as -9."""
        self = cls(container, None, start_time=start_time, exit_file=exit_file)
        self.legacy_exit_file = legacy_exit_file
        self.pid = pid
        self.adopted = True
        container.pid = pid
        self._exited = _watch_adopted(self)
        return self

    def _adopted_exit(self) -> int:
        assert self.exit_file is not None
        code = read_exit_file(self.exit_file)
        if code is None and self.legacy_exit_file is not None:
            code = read_exit_file(self.legacy_exit_file)
        if code is None:
            self.exit_known = False
            return -signal.SIGKILL
        return code

    def terminate(self) -> None:
        """Ask politely: SIGTERM to the container's process group.

        The tree is snapshotted first so that :meth:`kill` can still find
        processes that left the group and are orphaned by the leader's exit.

        Under the exit wrapper, a container asked to stop while its command is being
        forked gets the signal only once it would reach the command (see
        :mod:`.exit_wrapper`): checked at once, then every few milliseconds, for at
        most :data:`SETTLE_TIMEOUT` seconds, after which it is sent regardless.
        """
        if self._settling is not None:
            return  # a SIGTERM is already on its way
        if not self.exit_file or self.container.launch.wrapper or self.returncode is not None:
            self._send_term()  # no exit wrapper leads this container (or it is over)
            return
        self._settle(time.monotonic() + SETTLE_TIMEOUT, SETTLE_FIRST_POLL)

    def _settle(self, deadline: float, delay: float) -> None:
        self._settling = None
        if self.returncode is not None:
            return
        if command_reachable(self.pid) or time.monotonic() >= deadline:
            self._send_term()
            return
        self._settling = asyncio.get_running_loop().call_later(
            delay, self._settle, deadline, min(delay * 2, SETTLE_MAX_POLL)
        )

    def _send_term(self) -> None:
        if self.adopted and posix.identify(self.pid, self.start_time) == posix.OTHER:
            return  # the adopted leader is gone and its pid names another process now
        self._known |= posix.snapshot(self.pid)
        posix.signal_group(self.pid, signal.SIGTERM)

    def kill(self) -> int:
        """SIGKILL everything left of the container; returns how many processes."""
        if self._settling is not None:
            self._settling.cancel()
            self._settling = None
        if self.returncode is not None and not self._known and not posix.group_exists(self.pid):
            # The usual end of a task: leader reaped, its process group empty, and
            # no snapshot of escapees to chase. Skip scanning /proc.
            return 0
        # An adopted leader is not our child: once it exits, init reaps it and its
        # pid may name another process. The start time tells them apart.
        return posix.kill_tree(
            self.pid, also=self._known, start_time=self.start_time if self.adopted else None
        )

    async def wait(self) -> int:
        """The first process's return code (negative: killed by that signal)."""
        return await asyncio.shield(self._exited)

    @property
    def returncode(self) -> int | None:
        return self._exited.result() if self._exited.done() else None


def _watch_exit(process: subprocess.Popen) -> asyncio.Future[int]:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[int] = loop.create_future()

    def finish() -> None:
        if not done.done():
            done.set_result(process.returncode if process.returncode is not None else -1)

    try:
        pidfd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):

        def wait_in_thread() -> None:
            process.wait()
            loop.call_soon_threadsafe(finish)

        threading.Thread(target=wait_in_thread, name=f"wait-{process.pid}", daemon=True).start()
        return done

    def readable() -> None:
        if process.poll() is None:
            return  # not yet reaped (cannot happen for a pidfd, but be safe)
        loop.remove_reader(pidfd)
        os.close(pidfd)
        finish()

    loop.add_reader(pidfd, readable)
    return done


def _done(value: int) -> asyncio.Future[int]:
    done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    done.set_result(value)
    return done


ADOPTED_POLL_INTERVAL = 0.2
"""Seconds between checks of an adopted process where pidfds are unavailable."""


def _watch_adopted(running: RunningContainer) -> asyncio.Future[int]:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[int] = loop.create_future()

    def finish() -> None:
        if not done.done():
            done.set_result(running._adopted_exit())

    def gone() -> bool:
        return posix.identify(running.pid, running.start_time) != posix.SAME

    try:
        pidfd = os.pidfd_open(running.pid)
    except ProcessLookupError:
        loop.call_soon(finish)
        return done
    except (AttributeError, OSError):

        def poll() -> None:
            if gone():
                finish()
            else:
                loop.call_later(ADOPTED_POLL_INTERVAL, poll)

        poll()
        return done
    if gone():  # the pid was reused before we held it
        os.close(pidfd)
        loop.call_soon(finish)
        return done

    def readable() -> None:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        finish()

    loop.add_reader(pidfd, readable)
    return done


class Containerizer:
    """Launches containers through an ordered list of isolators.

    Every call into an isolator that raises is reported to :attr:`guard` (counted per
    ``isolator/<name>.<method>``, logged with the isolator's name, at most once a minute
    per call site after the first), in addition to what the failure means for the
    container (see the module docstring)."""

    def __init__(self, isolators: Sequence[Isolator], guard: PluginGuard | None = None) -> None:
        self.isolators = list(isolators)
        self.guard = guard if guard is not None else PluginGuard(log)
        """Where isolator failures are counted; the agent passes its own."""
        self._spawner: ThreadPoolExecutor | None = None
        self._non_finite_seen: set[tuple[str, object]] = set()
        """(isolator, key) of the non-finite measurements logged already (:meth:`usage`)."""

    @classmethod
    def from_config(
        cls, config: AgentConfig, plugins: Plugins, guard: PluginGuard | None = None
    ) -> Containerizer:
        """Create the isolators ``config.isolation`` names, in order.

        Raises :class:`~mezzo.errors.ConfigError` for a name that is not
        installed (listing those that are) or for settings an isolator refuses.
        """
        check_settings_tables(plugins, "isolator", config.isolator_settings, "agent.isolators")
        isolators = []
        for name in config.isolation:
            isolators.append(
                plugins.registry.create(
                    "isolator",
                    name,
                    config.isolator_settings.get(name, {}),
                    key=f"agent.isolators.{name}",
                    selected_by="agent.isolation",
                )
            )
        return cls(isolators, guard)

    @property
    def names(self) -> list[str]:
        return [iso.name for iso in self.isolators]

    async def recover(self, containers: Sequence[Container] = ()) -> None:
        """At start-up: ``containers`` are those the agent recovered from its checkpoint;
        every other leftover the isolators find is stale."""
        for iso in self.isolators:
            try:
                await iso.recover(list(containers))
            except Exception as exc:
                self.guard.failed(iso, "recover", exc)

    async def launch(
        self, container: Container, *, stdout: str, stderr: str, exit_file: str | None = None
    ) -> RunningContainer:
        """Prepare, spawn and isolate ``container``; raises :class:`LaunchError`.

        With ``exit_file`` the process runs under :data:`EXIT_WRAPPER`, which writes
        its exit status there (how a restarted agent learns it), and the returned
        container knows its leader's start time."""
        prepared: list[Isolator] = []
        running: RunningContainer | None = None
        if container.launch.user is not None:
            container.launch.env = _without_shell_startup(container.launch.env)
        try:
            preexec_owners: dict[int, str] = {}
            for iso in self.isolators:
                try:
                    await iso.prepare(container)
                except Exception as exc:
                    self.guard.failed(iso, "prepare", exc, container=container.container_id)
                    raise LaunchError(
                        f"isolator {iso.name!r} failed to prepare the container: {exc}"
                    ) from exc
                prepared.append(iso)
                for fn in container.launch.preexec:
                    preexec_owners.setdefault(id(fn), iso.name)
            running = await self._spawn(container, stdout, stderr, exit_file, preexec_owners)
            for iso in self.isolators:
                try:
                    await iso.isolate(container)
                except Exception as exc:
                    self.guard.failed(iso, "isolate", exc, container=container.container_id)
                    raise LaunchError(
                        f"isolator {iso.name!r} failed to isolate the container: {exc}"
                    ) from exc
            return running
        except BaseException:
            # Covers LaunchError and cancellation (agent stopping mid-launch) alike.
            if running is not None:
                running.kill()
                await _reap(running)
            await self._cleanup(container, prepared)
            raise

    async def _spawn(
        self,
        container: Container,
        stdout: str,
        stderr: str,
        exit_file: str | None = None,
        preexec_owners: Mapping[int, str] | None = None,
    ) -> RunningContainer:
        launch = container.launch
        argv = [*launch.wrapper, *launch.argv]
        if not argv:
            raise LaunchError("nothing to run: the command is empty")
        wrapped = exit_file is not None and bool(launch.argv)
        command = list(launch.argv)
        # The user switch comes last (see the module docstring): in the child after the
        # preexec functions when it execs the command itself, else setpriv inside the wrappers.
        drop_in_child = launch.user is not None and not wrapped and not launch.wrapper
        if launch.user is not None and not drop_in_child:
            # Root runs the wrappers and setpriv with the task's environment: the dynamic
            # loader would run a library the user names there as root.
            unsafe = sorted(k for k in launch.env if k.startswith("LD_") or k in LOADER_VARIABLES)
            if unsafe:
                raise LaunchError(
                    f"the environment sets {', '.join(unsafe)}, which the agent's root wrapper would "
                    f"obey before switching to user {launch.user.name!r}; set it inside the command "
                    "(sh -c 'VAR=... exec PROGRAM') instead"
                )
        if launch.user is not None and not drop_in_child and command:
            try:
                command = [*switch_argv(launch.user), *command]
            except FileNotFoundError as exc:
                raise LaunchError(f"cannot run as user {launch.user.name!r}: {exc}") from None
        if exit_file is not None and wrapped:
            argv = [*launch.wrapper, *exit_wrapped(command, exit_file)]
        else:
            argv = [*launch.wrapper, *command]
        become_user = launch.user if drop_in_child else None
        args = (argv, launch, stdout, stderr, wrapped, preexec_owners or {}, become_user)
        try:
            if spawns_on_loop(argv, launch, become_user):
                process, start_time = _popen(*args)
            else:
                spawn = asyncio.get_running_loop().run_in_executor(self._threads(), _popen, *args)
                try:
                    process, start_time = await asyncio.shield(spawn)
                except asyncio.CancelledError:
                    spawn.add_done_callback(_abandon)
                    raise
        except _NoProgram as exc:
            raise LaunchError(f"cannot start {launch.argv[0]!r}: {exc}") from None
        except subprocess.SubprocessError as exc:
            # A preexec function raised in the child; it said which and why on stderr.
            failure = _preexec_failure(stderr, launch.user.uid if launch.user is not None else None)
            owner = next((iso for iso in self.isolators if iso.name == _preexec_owner(failure)), None)
            if owner is not None and failure is not None:
                self.guard.failed(owner, "preexec", RuntimeError(failure), container=container.container_id)
            raise LaunchError(failure or f"cannot start {argv[0]!r}: {exc}") from exc
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            raise LaunchError(f"cannot start {argv[0]!r}: {reason}") from exc
        container.pid = process.pid
        return RunningContainer(container, process, start_time=start_time, exit_file=exit_file)

    def _threads(self) -> ThreadPoolExecutor:
        if self._spawner is None:
            self._spawner = ThreadPoolExecutor(SPAWNER_THREADS, thread_name_prefix="mezzo-spawn")
        return self._spawner

    def close(self) -> None:
        """Release the spawner threads (the agent is stopping)."""
        if self._spawner is not None:
            self._spawner.shutdown(wait=False)
            self._spawner = None

    async def update(self, container: Container, resources: Resources) -> None:
        """The container's resources changed; tell every isolator (failures are reported, not raised)."""
        container.resources = resources
        for iso in self.isolators:
            try:
                await iso.update(container, resources)
            except Exception as exc:
                self.guard.failed(iso, "update", exc, container=container.container_id)

    async def usage(self, container: Container) -> dict[str, float]:
        """Merged measurements of every isolator (later isolators win on equal keys).

        A measurement that is not finite (NaN or an infinity, also inside a nested
        value) is dropped: it is not JSON, and the master would drop the agent's whole
        report for it (:mod:`.statistics`). The first such value of each isolator and
        key is logged as a warning naming them."""
        out: dict[str, float] = {}
        for iso in self.isolators:
            try:
                measured = dict(await iso.usage(container))
            except Exception as exc:
                self.guard.failed(iso, "usage", exc, container=container.container_id)
                continue
            for key, value in measured.items():
                if _finite(value):
                    out[key] = value
                elif (describe(iso), key) not in self._non_finite_seen:
                    self._non_finite_seen.add((describe(iso), key))
                    log.warning(
                        "an isolator measured a value that is not a finite number; dropped from the "
                        "container statistics (logged once per isolator and key)",
                        isolator=describe(iso),
                        key=key,
                        value=repr(value)[:100],
                        container=container.container_id,
                    )
        return out

    async def limitation(self, container: Container) -> Limitation | None:
        """Whether an isolator's limit ended the container: the first isolator's answer
        in ``agent.isolation`` order (a failure counts as no answer)."""
        for iso in self.isolators:
            try:
                found = await iso.limitation(container)
            except Exception as exc:
                self.guard.failed(iso, "limitation", exc, container=container.container_id)
                continue
            if found is not None:
                return found
        return None

    async def destroy(self, container: Container) -> list[str]:
        """Clean up after a container whose processes are gone; returns error texts."""
        return await self._cleanup(container, self.isolators)

    async def _cleanup(self, container: Container, isolators: Sequence[Isolator]) -> list[str]:
        errors = []
        for iso in reversed(isolators):
            try:
                await iso.cleanup(container)
            except Exception as exc:
                self.guard.failed(iso, "cleanup", exc, container=container.container_id)
                errors.append(f"{iso.name}: {exc}")
        return errors


def spawns_on_loop(argv: Sequence[str], launch: ContainerLaunch, become_user: RunAs | None) -> bool:
    """Whether the agent starts this container's process on the event loop rather than
    on a spawner thread: when the child execs the local ``/bin/sh`` (the exit wrapper, or
    a shell command without it) straight after ``vfork``.

    ``subprocess`` uses ``vfork`` when there is no ``preexec_fn`` and no user to become,
    and then the caller waits only until the child has exec'd, here the shell: the whole
    ``Popen`` took 0.38 ms (median; p90 0.71) on this project's 2-core VM. Handing that
    to a thread costs more than it saves (the hop there and back, and the GIL passed
    between threads): spawning such launches on the loop ran 6 % more ``true`` tasks a
    second than four spawner threads in ``bench/short_tasks.py`` (732 against 689) and
    5 % more jobs in ``bench/queue_throughput.py`` (589 against 560; medians of 5 and 6
    alternated runs, 2026-11-28).

    Anything else goes to the threads: a ``preexec`` function forces a ``fork`` (its
    page-table copy grows with the agent's memory) and the caller then waits for the
    preexec functions too; the program of an unwrapped launch or an isolator's wrapper
    may be slow to exec (a network file system) or to check
    (:func:`~mezzo.isolation.program_problem`)."""
    return (
        not launch.preexec
        and become_user is None
        and not launch.wrapper
        and argv[:1] == ["/bin/sh"]
        and launch.argv[:1] == ["/bin/sh"]
    )


class _NoProgram(Exception):
    """The program of a wrapped launch cannot be executed (the message says why)."""


def _popen(
    argv: list[str],
    launch: ContainerLaunch,
    stdout: str,
    stderr: str,
    wrapped: bool,
    preexec_owners: Mapping[int, str],
    become_user: RunAs | None = None,
) -> tuple[subprocess.Popen, int]:
    """Open the output files, fork and exec (on a spawner thread, or on the event loop
    when :func:`spawns_on_loop`).

    ``wrapped`` (under :data:`EXIT_WRAPPER`): first check that the program can be
    executed (under the wrapper a missing one would be the shell's exit 127, not a
    failed launch), and afterwards read the leader's start time. Returns the process
    and that start time (0 when not wrapped). ``become_user``: the child becomes that user
    after the preexec functions."""
    if wrapped and launch.argv[0] != "/bin/sh":  # the wrapper needs /bin/sh anyway
        problem = program_problem(launch.argv[0], launch.env, launch.cwd)
        if problem is not None:
            raise _NoProgram(problem)
    process = _start(argv, launch, stdout, stderr, preexec_owners, become_user)
    if not wrapped:
        return process, 0
    # Not reaped yet (its watcher runs on the event loop, later): readable even if it exited.
    entry = posix.read_stat(process.pid)
    return process, entry.start_time if entry is not None else 0


def _start(
    argv: list[str],
    launch: ContainerLaunch,
    stdout: str,
    stderr: str,
    preexec_owners: Mapping[int, str],
    become_user: RunAs | None,
) -> subprocess.Popen:
    # The container's own output files in its sandbox, its user's: never written through
    # a symlink, nor anything but a file of the agent's or that user's.
    owner: Owner | None = launch.user.owner if launch.user is not None else None
    preexec = _chain(launch.preexec, preexec_owners, become_user) if launch.preexec or become_user else None
    with (
        os.fdopen(open_output(stdout, owner), "ab") as out,
        os.fdopen(open_output(stderr, owner), "ab") as err,
    ):
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            cwd=launch.cwd,
            env=launch.env,
            start_new_session=True,
            # Isolators' preexec functions run between fork and exec of a threaded
            # process (as they would from the event loop's thread): the contract is
            # that they only make system calls (join a cgroup, enter a namespace).
            preexec_fn=preexec,  # noqa: PLW1509
        )


def _abandon(spawn: asyncio.Future[tuple[subprocess.Popen, int]]) -> None:
    """The launch was cancelled while its process was being spawned: kill it."""
    if spawn.cancelled() or spawn.exception() is not None:
        return
    process, _start_time = spawn.result()
    posix.signal_group(process.pid, signal.SIGKILL)
    threading.Thread(target=process.wait, daemon=True).start()


PREEXEC_FAILED = "mezzo: isolator "
"""How the line a failing preexec function writes to the container's stderr starts."""
BECOME_FAILED = "mezzo: cannot run as user "
"""How the line written when the child cannot become the task's user starts."""


def _chain(
    functions: list[Callable[[], None]], owners: Mapping[int, str], user: RunAs | None = None
) -> Callable[[], None]:
    """One preexec function running ``functions`` in order, then becoming ``user`` if
    given (last: the functions need root). The child cannot send an exception back
    (``subprocess`` only says that one happened), so a failing step writes which isolator
    it belongs to (or which user) and why to the container's stderr (fd 2 by then) and
    re-raises."""
    named = [(fn, owners.get(id(fn), "?")) for fn in functions]

    def run_all() -> None:
        for fn, owner in named:
            try:
                fn()
            except BaseException as exc:
                line = f"{PREEXEC_FAILED}{owner!r} failed in the container's process before exec: {exc}\n"
                os.write(2, line.encode("utf-8", "replace"))
                raise
        if user is not None:
            try:
                become(user)
            except BaseException as exc:
                line = f"{BECOME_FAILED}{user.name!r} (uid {user.uid}, gid {user.gid}): {exc}\n"
                os.write(2, line.encode("utf-8", "replace"))
                raise

    return run_all


def _preexec_failure(stderr: str, uid: int | None = None) -> str | None:
    """The last line :func:`_chain` wrote to the container's ``stderr`` file (a file of
    user ``uid``, default the agent's), if any."""
    data = read_tail(stderr, 4096, uid)
    if data is None:
        return None
    tail = data.decode("utf-8", "replace")
    found = [line for line in tail.splitlines() if line.startswith((PREEXEC_FAILED, BECOME_FAILED))]
    return found[-1][len("mezzo: ") :] if found else None


_PREEXEC_OWNER = re.compile(r"""^isolator (['"])(.*?)\1 failed""")


def _preexec_owner(failure: str | None) -> str | None:
    """The isolator named by a :func:`_preexec_failure` line, if any."""
    found = _PREEXEC_OWNER.match(failure or "")
    return found.group(2) if found else None


async def _reap(running: RunningContainer) -> None:
    try:
        await asyncio.shield(running.wait())
    except asyncio.CancelledError:
        pass


def _without_shell_startup(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without :data:`SHELL_STARTUP_VARIABLES` and ``BASH_FUNC_*``."""
    return {
        k: v for k, v in env.items() if k not in SHELL_STARTUP_VARIABLES and not k.startswith("BASH_FUNC_")
    }


def _finite(value: object) -> bool:
    """No NaN or infinity in ``value`` (a number, or lists and dicts of them)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    return True
