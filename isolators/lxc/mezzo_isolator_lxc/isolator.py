"""The ``lxc`` isolator: each container runs as an LXC application container.

    [agent]
    isolation = ["lxc"]

    [agent.isolators.lxc]
    lxc_path = "/run/mezzo/lxc"     # container directories (lxc's -P); default shown
    cfs_quota = false               # also cap CPU time at `cpus` (CFS quota)
    network = "host"                # or "loopback": a network namespace of its own
    config = []                     # extra "lxc.key = value" lines for every container

``prepare`` writes ``<lxc_path>/mezzo-<container_id[:12]>/lxc.conf`` and a stop hook,
and sets ``container.launch.wrapper`` to ``lxc-execute -n NAME -P LXC_PATH -f CONF --``,
so the agent's process is lxc-execute, which runs the command as pid 2 of a new pid
namespace on the host's root file system, with memory (``mem``, at least
:data:`~.lxc_config.MIN_MEMORY_MB`) and CPU shares (1024 per ``cpus``) limits in the
cgroups ``lxc.payload.NAME``. See :mod:`.lxc_config` for each line of the config.

How the agent's process handling carries over:

- Exit status: lxc's init exits with its command's status (128 + N if a signal N killed
  it) and lxc-execute with init's, so ``exit 3`` is reported as 3. A command killed by
  a signal reads as ``exited with status 128+N`` rather than ``killed by signal``; the
  exit code is the same.
- Kill: the agent's SIGTERM to the container's process group reaches lxc-execute, which
  forwards it to init; init sends SIGTERM to every process of the container and SIGKILLs
  what is left one second after the last one exited. The agent's SIGKILL of the tree
  (after ``kill_grace_period``) reaches lxc-execute, init and the command alike, since
  they are its descendants.
- With ``agent.checkpoint`` the agent's exit-status wrapper runs *inside* the container
  (``wrapper + /bin/sh -c EXIT_WRAPPER ...``): its exit file (beside the sandbox) is on the
  shared root file system, where a restarted agent finds it.
- A task run as its own user (``agent.switch_user``): lxc-execute, init and the exit wrapper
  run as root, and ``setpriv`` inside the container switches to the user right before the
  command (``... EXIT_WRAPPER ... setpriv ... -- ARGV``); nothing here changes for it.

Error handling: at construction (agent start-up) the isolator checks that it can work
here — root, the cgroup v1 controllers, lxc-execute present, and one trial container
(``lxc-execute ... -- true``) — and raises :class:`~mezzo.errors.ConfigError` saying
what is missing; it never falls back to running without LXC. ``cleanup`` and
``recover`` tolerate anything already gone.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping
from typing import Any

import structlog

from mezzo.errors import ConfigError
from mezzo.hookspecs import Container, Isolator, Limitation
from mezzo.isolation import process_alive, process_start_time, program_problem

from . import cgroups, lxc_config
from .cgroups import LxcCgroups
from .lxc_config import MB

log = structlog.get_logger("mezzo_isolator_lxc")

DEFAULT_LXC_PATH = "/run/mezzo/lxc"
NAME_PREFIX = "mezzo-"
LOCK_ROOT = "/run/lxc/lock"
"""Where lxc (as root) keeps ``<lxc_path>/.<name>`` lock files."""

NETWORKS = {"host": "none", "loopback": "empty"}
"""The ``network`` setting and lxc's ``lxc.net.0.type`` for it."""

STARTUP_CHECK_TIMEOUT = 20.0
REMOVE_TIMEOUT = 2.0
"""How long ``cleanup`` waits for the container's killed processes to leave its cgroups."""

_SAFE_PATH = re.compile(r"^/[A-Za-z0-9_./+-]*$")


class LxcIsolator(Isolator):
    name = "lxc"
    description = "each container is an LXC application container (lxc-execute) with cpu and memory limits"

    known_settings = ("lxc_execute", "lxc_path", "cfs_quota", "network", "config")

    def __init__(self, settings: Mapping[str, Any], *, key: str) -> None:
        super().__init__(settings, key=key)  # refuses settings not in known_settings
        self.key = key
        self.lxc_execute = _string(settings, key, "lxc_execute", "lxc-execute")
        self.lxc_path = _string(settings, key, "lxc_path", DEFAULT_LXC_PATH).rstrip("/") or "/"
        if not _SAFE_PATH.match(self.lxc_path) or "/../" in self.lxc_path + "/":
            raise ConfigError(
                f"{key}.lxc_path",
                f"expected an absolute path of letters, digits and _ . + - /, got {self.lxc_path!r}",
            )
        hard = settings.get("cfs_quota", False)
        if not isinstance(hard, bool):
            raise ConfigError(f"{key}.cfs_quota", f"expected true or false, got {hard!r}")
        self.cfs_quota = hard
        network = _string(settings, key, "network", "host")
        if network not in NETWORKS:
            raise ConfigError(f"{key}.network", f"expected one of {', '.join(NETWORKS)}, got {network!r}")
        self.net_type = NETWORKS[network]
        extra = settings.get("config", [])
        if not isinstance(extra, list) or not all(isinstance(line, str) for line in extra):
            raise ConfigError(f"{key}.config", f"expected a list of strings, got {extra!r}")
        for i, line in enumerate(extra):
            k, eq, v = line.partition("=")
            if not eq or not k.strip().startswith("lxc.") or "\n" in line or not v.strip():
                raise ConfigError(
                    f"{key}.config[{i}]", f"expected a line 'lxc.<key> = <value>', got {line!r}"
                )
        self.extra_config = [line.strip() for line in extra]

        self.program = self._find_program(settings)
        self.owner = f"{os.getpid()} {process_start_time(os.getpid()) or 0}"
        """Written into each container's directory: which agent process made it."""
        self.swap_accounted = cgroups.swap_accounted()
        self._check_host()

    # -- start-up ----------------------------------------------------------

    def _find_program(self, settings: Mapping[str, Any]) -> str:
        found = shutil.which(self.lxc_execute)
        if found is None:
            where = f"{self.key}.lxc_execute" if "lxc_execute" in settings else self.key
            raise ConfigError(
                where,
                f"{self.lxc_execute!r} not found: the lxc isolator needs lxc-execute from "
                "Debian's lxc package (apt-get install lxc)",
            )
        return found

    def _check_host(self) -> None:
        """Refuse to start where LXC cannot run, saying why (see the module docstring)."""
        if os.geteuid() != 0:
            raise ConfigError(
                self.key,
                f"the lxc isolator needs root (the agent runs as uid {os.geteuid()}): "
                "lxc-execute creates namespaces and cgroups",
            )
        missing = cgroups.missing_controllers()
        if missing:
            raise ConfigError(
                self.key,
                f"the lxc isolator needs the cgroup v1 controllers memory, cpu and cpuacct "
                f"mounted under {cgroups.CGROUP_ROOT}; missing: {', '.join(missing)}",
            )
        try:
            os.makedirs(self.lxc_path, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"{self.key}.lxc_path", f"cannot create {self.lxc_path!r}: {exc.strerror}"
            ) from None
        name = f"{NAME_PREFIX}check-{os.getpid()}"
        directory = os.path.join(self.lxc_path, name)
        conf = lxc_config.write_container_files(
            directory,
            name,
            owner=self.owner,
            config=lxc_config.config_text(
                name=name,
                directory=directory,
                cwd="/",
                env_keys=[],
                limits=lxc_config.limits_for(0.1, 32, hard_cpu=False),
                net_type=self.net_type,
                swap_accounted=self.swap_accounted,
                extra=self.extra_config,
            ),
        )
        started = time.monotonic()
        try:
            result = subprocess.run(
                [*self._wrapper(name, conf), "true"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=STARTUP_CHECK_TIMEOUT,
                check=False,
                start_new_session=True,
            )
            problem = (
                None
                if result.returncode == 0
                else (f"exited with status {result.returncode}: " + _tail(result.stderr or result.stdout))
            )
        except subprocess.TimeoutExpired:
            problem = f"did not finish within {STARTUP_CHECK_TIMEOUT:g} s"
        except OSError as exc:
            problem = f"cannot be started: {exc.strerror}"
        finally:
            self._remove_now(name)
        if problem is not None:
            raise ConfigError(
                self.key,
                f"the lxc isolator cannot run containers here: a trial container "
                f"({self.program} -n {name} ... -- true) {problem}",
            )
        log.debug("lxc works here", trial_seconds=round(time.monotonic() - started, 3))

    def _wrapper(self, name: str, conf: str) -> list[str]:
        return [self.program, "-n", name, "-P", self.lxc_path, "-f", conf, "--"]

    # -- per container -----------------------------------------------------

    def _name(self, container: Container) -> str:
        return NAME_PREFIX + container.container_id[:12]

    def _dir(self, name: str) -> str:
        return os.path.join(self.lxc_path, name)

    async def prepare(self, container: Container) -> None:
        name = self._name(container)
        directory = self._dir(name)
        launch = container.launch
        if launch.argv:
            problem = program_problem(launch.argv[0], launch.env, launch.cwd)
            if problem is not None:
                raise RuntimeError(f"cannot start {launch.argv[0]!r}: {problem}")
        limits = self._limits(container.resources)
        text = lxc_config.config_text(
            name=name,
            directory=directory,
            cwd=launch.cwd,
            env_keys=sorted(launch.env),
            limits=limits,
            net_type=self.net_type,
            swap_accounted=self.swap_accounted,
            extra=self.extra_config,
        )
        try:
            conf = lxc_config.write_container_files(directory, name, text, self.owner)
        except OSError:
            shutil.rmtree(directory, ignore_errors=True)  # a failed prepare is not cleaned up
            raise
        container.state[self.name] = {"name": name, "limits": limits}
        launch.wrapper = [*self._wrapper(name, conf), *launch.wrapper]

    def _limits(self, resources: Any) -> lxc_config.Limits:
        return lxc_config.limits_for(resources.get("cpus"), resources.get("mem"), hard_cpu=self.cfs_quota)

    async def update(self, container: Container, resources: Any) -> None:
        """Resize the running container's limits in its payload cgroups."""
        cg = LxcCgroups(self._name(container))
        if not cg.exists():
            return  # not started yet, or already ended
        old: lxc_config.Limits | None = container.state.get(self.name, {}).get("limits")
        new = self._limits(resources)
        if new.memory_bytes is not None:
            # memsw must stay >= memory: raise it first when growing, lower it last when shrinking.
            files = ["memory.limit_in_bytes"]
            if self.swap_accounted:
                grow = old is None or old.memory_bytes is None or new.memory_bytes > old.memory_bytes
                files = (
                    ["memory.memsw.limit_in_bytes", *files]
                    if grow
                    else [*files, "memory.memsw.limit_in_bytes"]
                )
            for file in files:
                cg.write("memory", file, new.memory_bytes)
        if new.cpu_shares is not None:
            cg.write("cpu", "cpu.shares", new.cpu_shares)
        if new.cfs_quota_us is not None:
            cg.write("cpu", "cpu.cfs_quota_us", new.cfs_quota_us)
        container.state.setdefault(self.name, {})["limits"] = new

    async def usage(self, container: Container) -> dict[str, float]:
        stats = LxcCgroups(self._name(container)).stats()
        if stats is None:
            return {}
        out: dict[str, float] = {}
        if "cpuacct_usage" in stats:
            out["cpu_seconds"] = round(stats["cpuacct_usage"] / 1e9, 3)
        for ours, theirs in (
            ("mem_bytes", "usage_in_bytes"),
            ("mem_max_bytes", "max_usage_in_bytes"),
            ("mem_limit_bytes", "limit_in_bytes"),
        ):
            if theirs in stats:
                out[ours] = stats[theirs]
        return out

    async def limitation(self, container: Container) -> Limitation | None:
        """The memory limit ended the container if the kernel's OOM killer killed any of
        its processes. Read from what the stop hook kept, or from the payload cgroup
        if lxc-execute was killed before it could remove it."""
        name = self._name(container)
        stats = lxc_config.read_final_stats(self._dir(name)) or LxcCgroups(name).stats()
        if not stats or stats.get("oom_kill", 0) <= 0:
            return None
        limit = stats.get("limit_in_bytes")
        peak = stats.get("max_usage_in_bytes")
        limit_text = f"memory limit of {limit / MB:g} MB" if limit else "memory limit"
        peak_text = f", peak {peak / MB:.1f} MB" if peak else ""
        kills = stats["oom_kill"]
        return Limitation(
            reason="memory_limit",
            message=f"{limit_text} reached: the kernel killed {kills} process"
            f"{'es' if kills > 1 else ''} of the container{peak_text}",
        )

    async def cleanup(self, container: Container) -> None:
        await self._remove(self._name(container))

    async def recover(self, containers: list[Container]) -> None:
        """Remove what crashed agents left: the directories and cgroups of containers
        that are not in ``containers``, have no process left and were made by an agent
        process that is gone. Anything else may be another agent's on this host (they
        may share ``lxc_path``) or a task an agent without checkpointing left running,
        and is left alone."""
        keep = {self._name(c) for c in containers}
        try:
            entries = set(os.listdir(self.lxc_path))
        except OSError:
            entries = set()
        names = {e for e in entries if e.startswith(NAME_PREFIX)} | cgroups.container_names(
            prefix=NAME_PREFIX
        )
        for name in sorted(names - keep):
            if _owner_alive(os.path.join(self._dir(name), lxc_config.OWNER)):
                continue
            if LxcCgroups(name).pids():
                log.info(
                    "an lxc container this agent did not recover is running; left alone",
                    container=name,
                    lxc_path=self.lxc_path,
                )
                continue
            await self._remove(name)
            log.info("removed the leftovers of an lxc container", container=name)

    # -- removal -----------------------------------------------------------

    async def _remove(self, name: str) -> None:
        """Idempotent: stop whatever is left of container ``name``, then remove its
        cgroups, its directory and lxc's lock file."""
        cg = LxcCgroups(name)
        deadline = time.monotonic() + REMOVE_TIMEOUT
        while True:
            cg.kill()
            busy = cg.remove()
            if not busy:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"cgroups of {name} still busy after {REMOVE_TIMEOUT:g} s: {'; '.join(busy)}"
                )
            await asyncio.sleep(0.01)  # SIGKILLed processes take a moment to leave their cgroups
        self._remove_files(name)

    def _remove_now(self, name: str) -> None:
        """:meth:`_remove` for the start-up check (no event loop)."""
        cg = LxcCgroups(name)
        deadline = time.monotonic() + REMOVE_TIMEOUT
        while True:
            cg.kill()
            if not cg.remove() or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        self._remove_files(name)

    def _remove_files(self, name: str) -> None:
        shutil.rmtree(self._dir(name), ignore_errors=True)
        try:  # lxc removes it on a clean exit, not when lxc-execute is killed
            os.unlink(os.path.join(LOCK_ROOT + self.lxc_path, "." + name))
        except OSError:
            pass


def _string(settings: Mapping[str, Any], key: str, name: str, default: str) -> str:
    value = settings.get(name, default)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{key}.{name}", f"expected a non-empty string, got {value!r}")
    return value


def _owner_alive(path: str) -> bool:
    """Whether the agent process named in an ``owner`` file is still alive."""
    try:
        with open(path) as f:
            pid, start_time = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        return False
    return process_alive(pid, start_time)


def _tail(text: str, lines: int = 4) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept) if kept else "(no output)"
