"""The files one LXC application container is started from: its config and its stop hook.

``lxc-execute -n NAME -P LXC_PATH -f LXC_PATH/NAME/lxc.conf -- ARGV...`` runs ARGV as
pid 2 of new pid, mount, IPC and UTS namespaces (``init``, lxc's own, is pid 1), on
the host's root file system, with its cgroups ``lxc.payload.NAME`` at the root of every
cgroup v1 hierarchy. What the config says, and why:

- ``lxc.net.0.type = none`` shares the host's network namespace (or whichever the
  process is already in, e.g. one a network isolator entered in ``preexec``), so an
  executor still reaches its agent on 127.0.0.1. ``empty`` gives a namespace with only
  loopback. ``lxc.mount.auto`` mounts /proc for the new pid namespace; /sys can only
  be mounted anew in a network namespace of the container's own, so it is only with
  ``empty``. The cgroup file systems are not mounted anew: lxc 5.0's ``cgroup:mixed``
  gave an empty /sys/fs/cgroup here, and with the host's /sys they are the host's.
- The sandbox (the working directory) is bind-mounted onto itself: lxc gives the
  container a /dev of its own, so a work dir under /dev/shm, say, would otherwise be
  missing inside. Paths in mount entries are blank-separated, so a working directory
  with blanks is refused.
- ``lxc.console.path = none`` and no ttys/ptys: the task's stdin, stdout and stderr
  are passed through as the agent opened them (without it lxc opens /dev/pts/0).
- lxc clears the environment; ``lxc.environment = KEY`` (no value) copies KEY from
  lxc-execute's environment, which is the launch's. Values never pass through the
  config file, so any value (newlines included) arrives intact. lxc adds
  ``container=lxc``.
- The stop hook runs after the container's processes are gone and before lxc
  removes its cgroups: it copies the final accounting (OOM kills, peak memory, CPU
  time) to ``final`` next to the config, which is how ``limitation`` can tell that
  the memory limit ended the container.

Lines are ``key = value`` with no quoting; :func:`check_line_value` refuses anything
that would not survive that (newlines, surrounding blanks).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

CONFIG_FILE = "lxc.conf"
STOP_HOOK = "stop-hook"
OWNER = "owner"
FINAL_STATS = "final"
"""Written by the stop hook: ``key value`` lines, see :data:`STOP_HOOK_SCRIPT`."""

MB = 1024 * 1024
CFS_PERIOD_US = 100_000

STOP_HOOK_SCRIPT = """#!/bin/sh
# Written by mezzo's lxc isolator. lxc runs it when the container's processes are
# gone, before it removes their cgroups: keep the final accounting for the agent.
m=/sys/fs/cgroup/memory/lxc.payload.{name}
a=/sys/fs/cgroup/cpuacct/lxc.payload.{name}
{{
  while read -r k v; do echo "$k $v"; done < "$m/memory.oom_control"
  read -r v < "$m/memory.failcnt" && echo "failcnt $v"
  read -r v < "$m/memory.max_usage_in_bytes" && echo "max_usage_in_bytes $v"
  read -r v < "$m/memory.limit_in_bytes" && echo "limit_in_bytes $v"
  read -r v < "$a/cpuacct.usage" && echo "cpuacct_usage $v"
}} > {final} 2>/dev/null
exit 0
"""


@dataclass(frozen=True)
class Limits:
    """The cgroup limits of one container, from its resources."""

    memory_bytes: int | None
    """``memory.limit_in_bytes`` (and ``memsw`` where swap is accounted); None: no limit."""
    cpu_shares: int | None
    cfs_quota_us: int | None
    """``cpu.cfs_quota_us`` for a hard CPU cap (period :data:`CFS_PERIOD_US`); None: no cap."""


MIN_MEMORY_MB = 32
"""The smallest memory limit given to a container: lxc's init and a shell need a few MB,
and a smaller limit would only make the task die in confusing ways (Apache Mesos uses the
same floor)."""


def limits_for(cpus: float, mem_mb: float, *, hard_cpu: bool) -> Limits:
    """Limits for a container with ``cpus`` and ``mem_mb`` (0 = that resource not given)."""
    memory = int(max(mem_mb, MIN_MEMORY_MB) * MB) if mem_mb > 0 else None
    shares = max(2, int(1024 * cpus)) if cpus > 0 else None
    quota = max(1000, int(cpus * CFS_PERIOD_US)) if hard_cpu and cpus > 0 else None
    return Limits(memory_bytes=memory, cpu_shares=shares, cfs_quota_us=quota)


def check_line_value(what: str, value: str) -> None:
    """Raise ValueError if ``value`` cannot be written as the value of a config line."""
    if not value or "\n" in value or "\r" in value or "\0" in value or value != value.strip():
        raise ValueError(
            f"{what} {value!r} cannot be written into an lxc config "
            "(empty, a line break, or leading/trailing blanks)"
        )


def config_text(
    *,
    name: str,
    directory: str,
    cwd: str,
    env_keys: list[str],
    limits: Limits,
    net_type: str,
    swap_accounted: bool,
    extra: list[str],
) -> str:
    """The ``lxc.conf`` of container ``name`` whose files are in ``directory``.
    ``net_type`` is lxc's: ``none`` (the host's network) or ``empty`` (loopback only)."""
    check_line_value("the working directory", cwd)
    if any(c.isspace() for c in cwd) or not os.path.isabs(cwd):
        raise ValueError(
            f"the working directory {cwd!r} cannot be mounted into an lxc container "
            "(it must be an absolute path without blanks)"
        )
    lines = [
        "# Written by mezzo's lxc isolator (mezzo-isolator-lxc); removed with the container.",
        f"lxc.net.0.type = {net_type}",
        "lxc.apparmor.profile = unconfined",
        "lxc.console.path = none",
        "lxc.tty.max = 0",
        "lxc.pty.max = 0",
        "lxc.mount.auto = " + ("proc:mixed" if net_type == "none" else "proc:mixed sys:mixed"),
        f"lxc.init.cwd = {cwd}",
    ]
    if cwd != "/":
        lines.append(f"lxc.mount.entry = {cwd} {cwd.lstrip('/')} none bind,create=dir 0 0")
    for key in env_keys:
        if "=" in key:
            raise ValueError(f"the environment variable name {key!r} contains '='")
        check_line_value("the environment variable name", key)
        lines.append(f"lxc.environment = {key}")
    if limits.memory_bytes is not None:
        lines.append(f"lxc.cgroup.memory.limit_in_bytes = {limits.memory_bytes}")
        if swap_accounted:  # memory plus swap: the same limit, so the task cannot swap instead
            lines.append(f"lxc.cgroup.memory.memsw.limit_in_bytes = {limits.memory_bytes}")
    if limits.cpu_shares is not None:
        lines.append(f"lxc.cgroup.cpu.shares = {limits.cpu_shares}")
    if limits.cfs_quota_us is not None:
        lines.append(f"lxc.cgroup.cpu.cfs_period_us = {CFS_PERIOD_US}")
        lines.append(f"lxc.cgroup.cpu.cfs_quota_us = {limits.cfs_quota_us}")
    lines += [
        "lxc.hook.version = 1",
        f"lxc.hook.stop = {os.path.join(directory, STOP_HOOK)}",
        *extra,
    ]
    return "\n".join(lines) + "\n"


def write_container_files(directory: str, name: str, config: str, owner: str) -> str:
    """Create ``directory`` with the config, the stop hook and the ``owner`` file (which
    agent process made it: ``"<pid> <start time>"``); returns the config's path."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, OWNER), "w") as f:
        f.write(owner + "\n")
    hook = os.path.join(directory, STOP_HOOK)
    with open(hook, "w") as f:
        f.write(STOP_HOOK_SCRIPT.format(name=name, final=os.path.join(directory, FINAL_STATS)))
    os.chmod(hook, 0o755)
    path = os.path.join(directory, CONFIG_FILE)
    with open(path, "w") as f:
        f.write(config)
    return path


def read_final_stats(directory: str) -> dict[str, int] | None:
    """What the stop hook recorded, or None if it did not run (lxc-execute was killed)."""
    try:
        with open(os.path.join(directory, FINAL_STATS)) as f:
            text = f.read()
    except OSError:
        return None
    return parse_key_values(text) or None


def parse_key_values(text: str) -> dict[str, int]:
    """``key value`` lines (as in ``memory.oom_control``) to a dict; other lines are skipped."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                pass
    return out
