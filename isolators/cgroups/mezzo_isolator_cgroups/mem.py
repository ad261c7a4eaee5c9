"""``cgroups/mem``: a hard memory limit from a container's mem; OOM ends the container.

Each container gets a cgroup in the ``memory`` hierarchy whose
``memory.limit_in_bytes`` is its mem (MB), but at least ``min_mb`` (the limit
counts everything the container's processes use, the interpreter and page cache
included). With ``limit_swap = true`` memory plus swap is capped at the same
amount, so a container cannot swap its way past its limit (needs swap
accounting in the kernel).

When the container reaches its limit and the kernel cannot reclaim enough, the
kernel's OOM killer kills one of its processes and notifies us through an
eventfd; we then SIGKILL the rest of the container, as Apache Mesos does, so a
container over its memory limit ends as a whole. ``limitation`` tells the agent,
which fails the container's tasks with reason ``memory_limit`` and a message with
the limit and the peak usage.

``update`` raises the limit at once. Lowering it makes the kernel reclaim what
it can; if the processes still use more than the new limit, the kernel refuses
(``EBUSY``) and the old limit stays, with a warning in the log.

``usage`` reports ``mem_bytes`` (now), ``mem_peak_bytes``, ``mem_limit_bytes``,
``mem_rss_bytes``, ``mem_cache_bytes``, ``mem_limit_hits`` (allocations that hit
the limit) and ``mem_oom_kills``.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Mapping
from typing import Any

from mezzo.hookspecs import Container, Limitation
from mezzo.resources import Resources

from .base import CgroupIsolator
from .settings import boolean, number

MB = 1 << 20


class MemIsolator(CgroupIsolator):
    name = "cgroups/mem"
    description = "cgroup v1 memory limit from mem; a container over it is OOM-killed (memory_limit)"

    SETTINGS = ("min_mb", "limit_swap")

    def parse(self, settings: Mapping[str, Any], key: str) -> None:
        self.min_mb = number(settings, key, "min_mb", 32, low=4)
        self.limit_swap = boolean(settings, key, "limit_swap", False)

    def needs(self) -> dict[str, list[str]]:
        files = [
            "memory.limit_in_bytes",
            "memory.max_usage_in_bytes",
            "memory.oom_control",
            "cgroup.event_control",
        ]
        if self.limit_swap:
            files.append("memory.memsw.limit_in_bytes")
        return {"memory": files}

    def limit_bytes(self, resources: Resources) -> int:
        return int(max(resources.get("mem"), self.min_mb) * MB)

    def configure(self, container_id: str, resources: Resources) -> None:
        self.backend.set_memory_limit(
            self.cgroup("memory", container_id), self.limit_bytes(resources), with_swap=self.limit_swap
        )

    # -- OOM ------------------------------------------------------------------

    # Per container, in container.state["cgroups/mem"]: "listener" (the OomListener) and
    # "oom" (the OOM notice came: the kernel may not have counted a kill, see below).

    def _listen(self, container: Container) -> None:
        state = container.state.setdefault(self.name, {})
        if "listener" not in state:
            cg = self.cgroup("memory", container.container_id)
            state["listener"] = self.backend.OomListener(cg, lambda: self._out_of_memory(container))

    def _out_of_memory(self, container: Container) -> None:
        # An event-loop callback: nothing may escape it. Our SIGKILL can reach the
        # OOM killer's victim first, and then the kernel counts no oom_kill.
        container.state.setdefault(self.name, {})["oom"] = True
        cg = self.cgroup("memory", container.container_id)
        killed = self.backend.signal_all(cg)
        try:
            limit = _mb(self.backend.memory_limit(cg))
        except self.backend.CgroupError:
            limit = None  # already gone
        self.log.warning(
            "container reached its memory limit; killing it",
            container=container.container_id,
            limit_mb=limit,
            killed=killed,
        )

    # -- the Isolator contract ------------------------------------------------

    async def isolate(self, container: Container) -> None:
        self._listen(container)

    async def recover(self, containers: list[Container]) -> None:
        await super().recover(containers)
        for c in containers:
            if self.backend.exists(self.cgroup("memory", c.container_id)):
                self._listen(c)

    async def update(self, container: Container, resources: Resources) -> None:
        cg = self.cgroup("memory", container.container_id)
        limit = self.limit_bytes(resources)
        try:
            # Lowering makes the kernel reclaim first, which can take a while.
            await asyncio.to_thread(self.backend.set_memory_limit, cg, limit, with_swap=self.limit_swap)
        except self.backend.CgroupError as exc:
            if exc.errno != errno.EBUSY:
                raise
            self.log.warning(
                "cannot lower the memory limit below what the container uses; keeping the old one",
                container=container.container_id,
                wanted_mb=_mb(limit),
                limit_mb=_mb(self.backend.memory_limit(cg)),
                usage_mb=_mb(self.backend.memory_stats(cg)["mem_bytes"]),
            )

    async def limitation(self, container: Container) -> Limitation | None:
        cg = self.cgroup("memory", container.container_id)
        if not self.backend.exists(cg):
            return None
        noticed = container.state.get(self.name, {}).get("oom", False)
        if not noticed and not self.backend.oom_kills(cg):
            return None
        limit, peak = self.backend.memory_limit(cg), self.backend.memory_peak(cg)
        return Limitation(
            reason="memory_limit",
            message=f"memory limit of {_mb(limit):g} MB reached: the kernel's OOM killer ended the container "
            f"(peak {_mb(peak):.1f} MB)",
        )

    async def usage(self, container: Container) -> dict[str, float]:
        cg = self.cgroup("memory", container.container_id)
        if not self.backend.exists(cg):
            return {}
        return self.backend.memory_stats(cg)

    async def cleanup(self, container: Container) -> None:
        listener = container.state.get(self.name, {}).pop("listener", None)
        if listener is not None:
            listener.close()
        await super().cleanup(container)


def _mb(n: float) -> float:
    return round(n / MB, 1)
