"""The ``example/procstat`` isolator: see the package README.

What it shows about the isolator contract (``mezzo.hookspecs.Isolator``):

- settings are validated in ``__init__``, with errors naming the dotted key;
- per-container state lives in ``container.state[self.name]``, not on the isolator,
  since one isolator serves every container of the agent;
- ``isolate`` runs after the process exists (``container.pid`` is set);
- ``usage`` is called while the container runs; ``limitation`` once its processes
  are gone, before ``cleanup``; ``cleanup`` must be idempotent.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Mapping
from typing import Any

from mezzo.errors import ConfigError
from mezzo.hookspecs import Container, Isolator, Limitation

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


class ProcStatIsolator(Isolator):
    name = "example/procstat"
    description = "example: CPU and memory of each container from /proc, and an optional run-time limit"
    known_settings = ("max_seconds",)

    def __init__(self, settings: Mapping[str, Any], *, key: str) -> None:
        super().__init__(settings, key=key)  # refuses settings not in known_settings
        self.max_seconds: float | None = None
        if "max_seconds" in settings:
            v = settings["max_seconds"]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ConfigError(f"{key}.max_seconds", f"expected a number of seconds > 0, got {v!r}")
            self.max_seconds = float(v)

    async def isolate(self, container: Container) -> None:
        state = container.state.setdefault(self.name, {})
        if self.max_seconds is not None:
            loop = asyncio.get_running_loop()
            state["timer"] = loop.call_later(self.max_seconds, self._time_up, container)

    def _time_up(self, container: Container) -> None:
        container.state[self.name]["time_up"] = True
        if container.pid:
            try:
                # The container leads its own session and process group: end all of it.
                os.killpg(container.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    async def usage(self, container: Container) -> dict[str, float]:
        if not container.pid:
            return {}
        cpu_ticks = rss_pages = 0
        processes = 0
        for pid in _session_members(container.pid):
            fields = _stat_fields(pid)
            if fields is None:
                continue
            # utime, stime, and the times of reaped children (cutime, cstime).
            cpu_ticks += sum(int(fields[i]) for i in (11, 12, 13, 14))
            rss_pages += int(fields[21])
            processes += 1
        if not processes:
            return {}
        return {
            "cpu_seconds": round(cpu_ticks / CLOCK_TICKS, 3),
            "mem_rss_bytes": rss_pages * PAGE_SIZE,
            "processes": processes,
        }

    async def limitation(self, container: Container) -> Limitation | None:
        if container.state.get(self.name, {}).get("time_up"):
            return Limitation(
                reason="time_limit",
                message=f"ran longer than its limit of {self.max_seconds:g} s and was killed",
            )
        return None

    async def cleanup(self, container: Container) -> None:
        timer = container.state.get(self.name, {}).pop("timer", None)
        if timer is not None:
            timer.cancel()


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state is index 0)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except OSError:
        return None
    return raw.rpartition(")")[2].split()


def _session_members(session: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None and len(fields) > 3 and fields[3] == str(session):
                members.append(int(entry))
    return members
