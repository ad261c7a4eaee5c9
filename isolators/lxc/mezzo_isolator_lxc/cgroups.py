"""The cgroups lxc makes for one container, read and removed from the host's side.

Run as root, lxc puts a container at the root of every cgroup v1 hierarchy, whatever
cgroup lxc-execute started in:

    /sys/fs/cgroup/<hierarchy>/lxc.monitor.NAME   lxc-execute itself (the monitor)
    /sys/fs/cgroup/<hierarchy>/lxc.payload.NAME   init and the task's processes
    /sys/fs/cgroup/<hierarchy>/lxc.pivot          where a monitor moves to remove its own

A clean exit removes the first two and leaves ``lxc.pivot`` (empty); a monitor killed
with SIGKILL leaves all three. :meth:`LxcCgroups.remove` deals with both.

Error handling: everything tolerates a cgroup vanishing while we look at it; only a
cgroup that still holds processes after :meth:`LxcCgroups.kill` makes ``remove``
report it.
"""

from __future__ import annotations

import errno
import os
import signal

CGROUP_ROOT = "/sys/fs/cgroup"
PAYLOAD = "lxc.payload."
MONITOR = "lxc.monitor."
PIVOT = "lxc.pivot"
REQUIRED_CONTROLLERS = ("memory", "cpu", "cpuacct")


def hierarchies(root: str = CGROUP_ROOT) -> list[str]:
    """The mounted hierarchies under ``root``, each once (``cpuacct`` is often a symlink
    to ``cpu,cpuacct``)."""
    seen: set[str] = set()
    out: list[str] = []
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return out
    for name in names:
        path = os.path.join(root, name)
        real = os.path.realpath(path)
        if real not in seen and os.path.isdir(real) and os.path.exists(os.path.join(real, "cgroup.procs")):
            seen.add(real)
            out.append(real)
    return out


def missing_controllers(root: str = CGROUP_ROOT) -> list[str]:
    """Which of :data:`REQUIRED_CONTROLLERS` have no cgroup v1 hierarchy at ``root/<name>``."""
    return [c for c in REQUIRED_CONTROLLERS if not os.path.exists(os.path.join(root, c, "cgroup.procs"))]


def swap_accounted(root: str = CGROUP_ROOT) -> bool:
    return os.path.exists(os.path.join(root, "memory", "memory.memsw.limit_in_bytes"))


class LxcCgroups:
    """The cgroups of container ``name`` (see the module docstring)."""

    def __init__(self, name: str, root: str = CGROUP_ROOT) -> None:
        self.name = name
        self.root = root

    def payload(self, controller: str) -> str:
        return os.path.join(self.root, controller, PAYLOAD + self.name)

    def exists(self) -> bool:
        """True while the payload's memory cgroup exists (the container runs, or its
        monitor was killed before it could remove it)."""
        return os.path.isdir(self.payload("memory"))

    def read(self, controller: str, file: str) -> str | None:
        try:
            with open(os.path.join(self.payload(controller), file)) as f:
                return f.read()
        except OSError:
            return None

    def read_int(self, controller: str, file: str) -> int | None:
        text = self.read(controller, file)
        try:
            return int(text) if text is not None else None
        except ValueError:
            return None

    def write(self, controller: str, file: str, value: int) -> None:
        with open(os.path.join(self.payload(controller), file), "w") as f:
            f.write(str(value))

    def stats(self) -> dict[str, int] | None:
        """The payload's accounting now, with the keys the stop hook writes; None if gone."""
        from .lxc_config import parse_key_values

        oom = self.read("memory", "memory.oom_control")
        if oom is None:
            return None
        out = parse_key_values(oom)
        for key, controller, file in (
            ("failcnt", "memory", "memory.failcnt"),
            ("usage_in_bytes", "memory", "memory.usage_in_bytes"),
            ("max_usage_in_bytes", "memory", "memory.max_usage_in_bytes"),
            ("limit_in_bytes", "memory", "memory.limit_in_bytes"),
            ("cpuacct_usage", "cpuacct", "cpuacct.usage"),
        ):
            value = self.read_int(controller, file)
            if value is not None:
                out[key] = value
        return out

    def _dirs(self) -> list[str]:
        """Every cgroup of this container that exists, payloads first."""
        found = []
        for prefix in (PAYLOAD, MONITOR):
            for hierarchy in hierarchies(self.root):
                path = os.path.join(hierarchy, prefix + self.name)
                if os.path.isdir(path):
                    found.append(path)
        return found

    def pids(self) -> set[int]:
        out: set[int] = set()
        for path in self._dirs():
            out |= _procs(path)
        return out

    def kill(self) -> int:
        """SIGKILL every process in the container's cgroups (its monitor included);
        returns how many were signalled."""
        pids = self.pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        return len(pids)

    def remove(self) -> list[str]:
        """``rmdir`` the container's cgroups and an empty ``lxc.pivot``; returns the paths
        that could not be removed (still busy) with why."""
        busy = []
        for path in self._dirs():
            try:
                os.rmdir(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                busy.append(f"{path}: {exc.strerror}")
        remove_empty_pivots(self.root)
        return busy


def remove_empty_pivots(root: str = CGROUP_ROOT) -> None:
    """Remove ``lxc.pivot`` where it is empty, unless some lxc-execute runs (has a
    monitor cgroup): a stopping monitor makes the pivot and then moves into it, and
    removing it in between makes that lxc-execute fail. lxc makes it again when it
    needs it."""
    found = hierarchies(root)
    for hierarchy in found:
        try:
            if any(entry.startswith(MONITOR) for entry in os.listdir(hierarchy)):
                return
        except OSError:
            pass
    for hierarchy in found:
        try:
            os.rmdir(os.path.join(hierarchy, PIVOT))
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.EBUSY, errno.ENOTEMPTY):
                raise


def container_names(root: str = CGROUP_ROOT, prefix: str = "mezzo-") -> set[str]:
    """Names of the containers (``prefix``\\*) that have a payload or monitor cgroup anywhere."""
    names = set()
    for hierarchy in hierarchies(root):
        try:
            entries = os.listdir(hierarchy)
        except OSError:
            continue
        for entry in entries:
            for kind in (PAYLOAD, MONITOR):
                if entry.startswith(kind + prefix):
                    names.add(entry[len(kind) :])
    return names


def _procs(path: str) -> set[int]:
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            return {int(line) for line in f if line.strip()}
    except (OSError, ValueError):
        return set()
