"""``cgroups/cpu``: CPU shares in proportion to a container's cpus, optionally a hard cap.

Each container gets a cgroup in the ``cpu`` and ``cpuacct`` hierarchies.
``cpu.shares`` is 1024 per cpu (at least 2, the kernel's minimum, which is also
what a container without cpus gets), so under contention containers get CPU time
in proportion to their cpus, and an idle machine lets any of them use it all.
With ``cfs_quota = true`` each container is also capped at its cpus: a CFS quota
of ``cpus × cfs_period_us`` per period (at least 1 ms, the kernel's minimum).
Both follow the container's resources when they change.

``usage`` reports ``cpu_seconds`` (all CPUs together), ``cpu_user_seconds``,
``cpu_system_seconds``, ``cpu_periods``, ``cpu_throttled_periods``,
``cpu_throttled_seconds``, ``cpu_shares`` and, when capped, ``cpus_limit``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mezzo.hookspecs import Container
from mezzo.resources import Resources

from .base import CgroupIsolator
from .settings import boolean, integer

SHARES_PER_CPU = 1024
MIN_QUOTA_US = 1000


class CpuIsolator(CgroupIsolator):
    name = "cgroups/cpu"
    description = "cgroup v1 cpu.shares of 1024 per cpu; optional CFS quota (cfs_quota = true)"

    SETTINGS = ("cfs_quota", "cfs_period_us")

    def parse(self, settings: Mapping[str, Any], key: str) -> None:
        self.cfs_quota = boolean(settings, key, "cfs_quota", False)
        # The kernel accepts periods from 1 ms to 1 s.
        self.cfs_period_us = integer(settings, key, "cfs_period_us", 100_000, low=1_000, high=1_000_000)

    def needs(self) -> dict[str, list[str]]:
        cpu = ["cpu.shares", "cpu.stat"]
        if self.cfs_quota:
            cpu += ["cpu.cfs_period_us", "cpu.cfs_quota_us"]
        return {"cpu": cpu, "cpuacct": ["cpuacct.usage", "cpuacct.stat"]}

    def shares(self, resources: Resources) -> int:
        return max(2, int(SHARES_PER_CPU * resources.get("cpus")))

    def quota_us(self, resources: Resources) -> int | None:
        if not self.cfs_quota:
            return None
        return max(MIN_QUOTA_US, int(resources.get("cpus") * self.cfs_period_us))

    def configure(self, container_id: str, resources: Resources) -> None:
        cg = self.cgroup("cpu", container_id)
        self.backend.set_cpu_shares(cg, self.shares(resources))
        if self.cfs_quota:
            self.backend.set_cpu_quota(cg, self.cfs_period_us, self.quota_us(resources))

    async def usage(self, container: Container) -> dict[str, float]:
        cpu = self.cgroup("cpu", container.container_id)
        if not self.backend.exists(cpu):
            return {}
        return self.backend.cpu_stats(cpu, self.cgroup("cpuacct", container.container_id))
