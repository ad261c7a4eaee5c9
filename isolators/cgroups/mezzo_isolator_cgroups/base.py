"""What the cgroups isolators share: one cgroup per container per hierarchy.

A subclass names the controllers it needs (with the control files it writes),
its extra settings, and how a container's resources become control-file values::

    class CpuIsolator(CgroupIsolator):
        name = "cgroups/cpu"
        SETTINGS = ("cfs_quota",)
        def parse(self, settings, key): ...           # the settings beyond ``root``
        def needs(self): return {"cpu": [...], "cpuacct": [...]}
        def configure(self, container_id, resources): ...   # write the limits

Life of a container's cgroups: ``prepare`` creates them and appends a ``preexec``
that makes the child join them before it execs, so nothing of the container ever
runs outside; ``update`` calls ``configure`` again; ``cleanup`` SIGKILLs whatever
is still inside (processes that escaped the session, which the agent's posix kill
cannot find) and removes them. ``recover`` does the same to every cgroup under
``root`` that belongs to no container the agent still knows.

Several agents on one machine need one ``root`` each: an agent's ``recover``
treats every cgroup under its root that it does not know as a leftover.

Error handling: a ``prepare`` that fails removes what it made before raising (the
containerizer does not clean up an isolator whose ``prepare`` raised). Cleanup
is idempotent and quiet about cgroups already gone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import structlog

from mezzo.hookspecs import Container, Isolator
from mezzo.resources import Resources

from . import v1
from .settings import cgroup_root

log = structlog.get_logger("mezzo.agent", component="agent")


class CgroupIsolator(Isolator):
    """Base of ``cgroups/cpu`` and ``cgroups/mem``; see the module docstring."""

    SETTINGS: ClassVar[tuple[str, ...]] = ()
    """Settings beyond ``root`` that the subclass reads in :meth:`parse`."""

    backend = v1
    """The cgroup version's module (only v1 so far)."""

    destroy_timeout = 5.0
    """Seconds that cleanup waits for killed processes to leave a cgroup."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Every cgroups isolator takes ``root``; the component contract checks the rest.
        super().__init_subclass__(**kwargs)
        cls.known_settings = ("root", *cls.SETTINGS)

    def __init__(self, settings: Mapping[str, Any], *, key: str) -> None:
        # Settings first, so that a bad table is reported as such on any machine;
        # then whether this machine can run the isolator at all.
        super().__init__(settings, key=key)
        self.root = cgroup_root(settings, key)
        self.parse(settings, key)
        try:
            self.mounts = self.backend.require(self.needs())
        except self.backend.CgroupsUnavailable as exc:
            raise self.backend.CgroupsUnavailable(
                f"isolator {self.name!r} cannot run on this machine: {exc}"
            ) from None
        self.log = log.bind(isolator=self.name)

    # -- what a subclass provides ------------------------------------------

    def parse(self, settings: Mapping[str, Any], key: str) -> None:
        """Read the settings named in :attr:`SETTINGS` (ConfigError on ``key.<name>``)."""

    def needs(self) -> dict[str, list[str]]:
        """Controller → the control files this isolator uses."""
        raise NotImplementedError

    def configure(self, container_id: str, resources: Resources) -> None:
        """Write the limits for ``resources`` into the container's cgroups."""
        raise NotImplementedError

    # -- cgroups of a container ---------------------------------------------

    def cgroup(self, controller: str, container_id: str) -> v1.Cgroup:
        return self.backend.Cgroup.of(self.mounts[controller], controller, self.root, container_id)

    def cgroups(self, container_id: str) -> list[v1.Cgroup]:
        """One per hierarchy (controllers mounted together share one cgroup)."""
        seen: dict[str, v1.Cgroup] = {}
        for controller in self.mounts:
            cg = self.cgroup(controller, container_id)
            seen.setdefault(cg.path, cg)
        return list(seen.values())

    def _hierarchies(self) -> Iterable[str]:
        return dict.fromkeys(self.mounts.values())

    # -- the Isolator contract ----------------------------------------------

    async def prepare(self, container: Container) -> None:
        made: list[v1.Cgroup] = []
        try:
            for cg in self.cgroups(container.container_id):
                self.backend.create(cg)
                made.append(cg)
            self.configure(container.container_id, container.resources)
        except BaseException:
            for cg in reversed(made):  # empty: nothing has joined yet
                try:
                    self.backend.remove(cg)
                except self.backend.CgroupError:
                    self.log.exception("cannot remove a cgroup after a failed prepare", cgroup=str(cg))
            raise
        container.launch.preexec.append(self.backend.joiner(made))

    async def update(self, container: Container, resources: Resources) -> None:
        self.configure(container.container_id, resources)

    async def cleanup(self, container: Container) -> None:
        killed = await self.backend.destroy(self.cgroups(container.container_id), self.destroy_timeout)
        if killed:
            self.log.info(
                "killed processes left in the container's cgroups",
                container=container.container_id,
                count=killed,
            )

    async def recover(self, containers: list[Container]) -> None:
        known = {c.container_id for c in containers}
        stale: set[str] = set()
        for mount in self._hierarchies():
            stale.update(name for name in self.backend.children(mount, self.root) if name not in known)
        for name in sorted(stale):
            try:
                killed = await self.backend.destroy(self.cgroups(name), self.destroy_timeout)
            except self.backend.CgroupError as exc:
                self.log.error(
                    "cannot remove the cgroups of a container from an earlier run",
                    container=name,
                    error=str(exc),
                )
                continue
            self.log.info(
                "removed the cgroups of a container from an earlier run", container=name, killed=killed
            )
