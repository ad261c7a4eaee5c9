"""What this host offers: the agent's resources and hostname.

``agent.resources`` uses Mesos' syntax (``cpus:4;mem:4096;ports:[31000-32000]``).
As in Apache Mesos, the standard resources it leaves out are detected:

- ``cpus``: ``os.cpu_count()``
- ``mem``: MB of physical memory (``/proc/meminfo``) minus 1 GB left for the
  system, but at least 256
- ``disk``: MB of the file system holding ``work_dir``
- ``ports``: ``[31000-32000]``

So an empty setting advertises the whole machine, and ``cpus:2`` advertises two
cpus plus the detected memory, disk and ports.
"""

from __future__ import annotations

import os
import shutil
import socket

from ..errors import ConfigError
from ..resources import InvalidResources, Resources, agent_resources_problem

DEFAULT_PORTS = (31000, 32000)
MEM_HEADROOM_MB = 1024
MIN_MEM_MB = 256


def total_memory_mb(meminfo: str = "/proc/meminfo") -> int | None:
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def detect_resources(work_dir: str) -> Resources:
    """The whole machine, as the module docstring describes."""
    mem = total_memory_mb()
    mem = max(MIN_MEM_MB, (mem or 0) - MEM_HEADROOM_MB)
    try:
        disk = shutil.disk_usage(work_dir).total // (1024 * 1024)
    except OSError:
        disk = 0
    return Resources(
        {"cpus": float(os.cpu_count() or 1), "mem": float(mem), "disk": float(disk)},
        {"ports": [DEFAULT_PORTS]},
    )


def agent_resources(text: str, work_dir: str) -> Resources:
    """Parse ``agent.resources`` and fill in the detected standard resources it does not
    name (one it names as 0 stays 0).

    Raises :class:`ConfigError` on ``agent.resources`` when the text does not parse, or
    names more than any agent may have (the master would refuse it).
    """
    try:
        given = Resources.parse(text or "")
    except InvalidResources as exc:
        raise ConfigError("agent.resources", str(exc)) from None
    problem = agent_resources_problem(given)
    if problem is not None:
        raise ConfigError("agent.resources", problem)
    # Named is given, zero included: "cpus:0" is an agent without cpus (Resources drops
    # zeros, so the parsed value cannot tell "cpus:0" from no cpus at all).
    named = {part.split(":", 1)[0].strip() for part in (text or "").split(";") if ":" in part}
    detected = detect_resources(work_dir)
    missing_scalars = {n: detected.get(n) for n in ("cpus", "mem", "disk") if n not in named}
    missing_ranges = {} if "ports" in named else {"ports": detected.range_pairs("ports")}
    return given + Resources(missing_scalars, missing_ranges)


def agent_hostname(configured: str) -> str:
    return configured or socket.gethostname()
