"""cgroup v1: the one module that knows v1's mounts, paths and control files.

Each controller (``cpu``, ``cpuacct``, ``memory``) is its own hierarchy, mounted
at ``/sys/fs/cgroup/<controller>`` on most systems (``cpu`` and ``cpuacct`` are
sometimes mounted together; the mount points are read from
``/proc/self/mountinfo``). A container's cgroup in a hierarchy is
``<mount>/<root>/<container_id>``, ``root`` being ``mezzo`` unless configured::

    mounts = require({"memory": ["memory.limit_in_bytes"]})   # CgroupsUnavailable says why not
    cg = Cgroup.of(mounts["memory"], "memory", "mezzo", container_id)
    create(cg)                                   # CgroupError if it already exists
    launch.preexec.append(joiner([cg]))          # the child joins before it execs
    set_memory_limit(cg, 64 << 20)
    memory_stats(cg)                             # {"mem_bytes": ..., "mem_limit_bytes": ...}
    await destroy([cg])                          # SIGKILL what is left, rmdir once drained

A cgroup v2 backend would offer the same functions over the unified hierarchy;
the isolators use nothing else.

Error handling: control files are opened without ``O_CREAT``, so a directory that
is not (or no longer) in a cgroup hierarchy fails loudly instead of being written
to as a plain directory. Every failure is a :class:`CgroupError` naming the file
and carrying the ``errno`` (``EBUSY`` from lowering a memory limit below usage is
one the caller handles). Reading a cgroup that is gone is not an error where the
caller cannot care (``procs`` is empty, ``exists`` is False).
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from mezzo.errors import MezzoError

MOUNTINFO = "/proc/self/mountinfo"
"""Where the mounts are read from (tests point it elsewhere)."""

CONTROL_PREFIXES = ("cgroup.", "cpu.", "cpuacct.", "memory.", "notify_on_release", "release_agent", "tasks")
"""Names of v1 control files: a cgroup of ours must not be called like one."""

USER_HZ = os.sysconf("SC_CLK_TCK")
"""Unit of ``cpuacct.stat``."""

MAX_SHARES = 262144
"""The kernel clamps ``cpu.shares`` to [2, 262144]."""


class CgroupsUnavailable(MezzoError):
    """This machine cannot run a cgroup v1 isolator; the message says what is missing."""


class CgroupError(MezzoError):
    """A cgroup operation failed; ``errno`` is the system's error number, if any."""

    def __init__(self, message: str, err: int | None = None) -> None:
        super().__init__(message)
        self.errno = err


# ----------------------------------------------------------------- discovery


def mounts(mountinfo: str | None = None) -> tuple[dict[str, str], list[str]]:
    """``({controller: mount point}, [cgroup2 mount points])`` from ``mountinfo``.

    Only v1 (``cgroup``) mounts count as controllers; named hierarchies such as
    ``name=systemd`` are left out."""
    v1: dict[str, str] = {}
    v2: list[str] = []
    with open(mountinfo or MOUNTINFO) as f:
        for line in f:
            fields = line.split()
            try:
                sep = fields.index("-")
            except ValueError:
                continue
            point = fields[4].replace("\\040", " ")
            fstype, options = fields[sep + 1], fields[sep + 3] if len(fields) > sep + 3 else ""
            if fstype == "cgroup2":
                v2.append(point)
            elif fstype == "cgroup":
                for opt in options.split(","):
                    if opt and "=" not in opt and opt not in ("rw", "ro"):
                        v1.setdefault(opt, point)
    return v1, v2


def require(needs: Mapping[str, Iterable[str]]) -> dict[str, str]:
    """Check that this process can manage the v1 controllers in ``needs`` (controller →
    control files it must offer) and return their mount points.

    Raises :class:`CgroupsUnavailable` naming the first thing missing: root
    privileges, the controller's v1 mount, or a control file (a kernel built
    without e.g. CFS bandwidth control or swap accounting)."""
    if os.geteuid() != 0:
        raise CgroupsUnavailable(f"managing cgroups needs root, and this process runs as uid {os.geteuid()}")
    try:
        v1, v2 = mounts()
    except OSError as exc:
        raise CgroupsUnavailable(f"cannot read the mounts ({exc.strerror or exc})") from None
    found: dict[str, str] = {}
    for controller, files in needs.items():
        point = v1.get(controller)
        if point is None:
            if v2:
                why = f"only cgroup v2 is mounted ({', '.join(v2)}), and this isolator drives cgroup v1"
            else:
                why = "no cgroup hierarchy is mounted"
            raise CgroupsUnavailable(f"the cgroup v1 {controller!r} controller is not mounted: {why}")
        for name in files:
            if not os.path.exists(os.path.join(point, name)):
                raise CgroupsUnavailable(
                    f"the cgroup v1 {controller!r} hierarchy at {point} has no {name} "
                    "(not supported by this kernel)"
                )
        if not os.access(point, os.W_OK):
            raise CgroupsUnavailable(f"the cgroup v1 {controller!r} hierarchy at {point} is not writable")
        found[controller] = point
    return found


def valid_root(root: str) -> str | None:
    """Why ``root`` cannot name a parent cgroup (relative, ``/``-separated), or None."""
    parts = root.split("/")
    if not root or root.startswith("/"):
        return 'expected a relative path such as "mezzo"'
    for part in parts:
        if part in ("", ".", ".."):
            return f"{root!r} has an empty, '.' or '..' component"
        if part.startswith(CONTROL_PREFIXES):
            return f"{part!r} is the name of a cgroup control file"
        if not all(c.isalnum() or c in "-_." for c in part):
            return f"{part!r}: use letters, digits, '-', '_' and '.'"
    return None


# ------------------------------------------------------------------- cgroups


@dataclass(frozen=True)
class Cgroup:
    """One cgroup directory in one v1 hierarchy."""

    controller: str
    path: str

    @classmethod
    def of(cls, mount: str, controller: str, root: str, name: str) -> Cgroup:
        return cls(controller, os.path.join(mount, root, name))

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def __str__(self) -> str:
        return self.path


def children(mount: str, root: str) -> list[str]:
    """Names of the cgroups directly under ``<mount>/<root>`` (none if it does not exist)."""
    try:
        entries = os.scandir(os.path.join(mount, root))
        return sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
    except FileNotFoundError:
        return []


def exists(cg: Cgroup) -> bool:
    return os.path.isdir(cg.path)


def create(cg: Cgroup) -> None:
    """Make ``cg`` (and its parents). An existing ``cg`` is an error: its processes,
    whoever started them, would share the container's limits and be killed with it."""
    try:
        os.makedirs(os.path.dirname(cg.path), exist_ok=True)
        os.mkdir(cg.path)
    except FileExistsError:
        raise CgroupError(
            f"cgroup {cg} already exists (left by another container?); not sharing it", errno.EEXIST
        ) from None
    except OSError as exc:
        raise CgroupError(f"cannot create cgroup {cg}: {exc.strerror or exc}", exc.errno) from None
    if not os.path.exists(cg.file("cgroup.procs")):
        _rmdir_quietly(cg.path)
        raise CgroupError(
            f"{cg} is not in a cgroup hierarchy (no cgroup.procs after mkdir): "
            f"was the {cg.controller} hierarchy unmounted?"
        )


def joiner(cgroups: Iterable[Cgroup]) -> Callable[[], None]:
    """A ``preexec`` function: the child (between fork and exec) joins every cgroup.

    It only makes system calls: no locks, no logging, no imports. ``0`` written to
    ``cgroup.procs`` means the writing process itself."""
    paths = [os.fsencode(cg.file("cgroup.procs")) for cg in cgroups]

    def join() -> None:
        for path in paths:
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)

    return join


def procs(cg: Cgroup) -> list[int]:
    """Process ids in ``cg`` ([] if it is gone)."""
    try:
        with open(cg.file("cgroup.procs")) as f:
            return [int(line) for line in f if line.strip()]
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return []


def signal_all(cg: Cgroup, sig: int = signal.SIGKILL) -> int:
    """Send ``sig`` to every process in ``cg``; returns how many were signalled."""
    sent = 0
    for pid in procs(cg):
        try:
            os.kill(pid, sig)
            sent += 1
        except (ProcessLookupError, PermissionError):
            pass
    return sent


def remove(cg: Cgroup) -> bool:
    """rmdir ``cg``: True when it is gone (also if it was already), False while
    processes are still in it (``EBUSY``)."""
    try:
        os.rmdir(cg.path)
    except FileNotFoundError:
        return True
    except OSError as exc:
        if exc.errno == errno.EBUSY:
            return False
        raise CgroupError(f"cannot remove cgroup {cg}: {exc.strerror or exc}", exc.errno) from None
    return True


DRAIN_POLL = 0.01
"""Seconds between rmdir attempts while killed processes exit."""


async def destroy(cgroups: Iterable[Cgroup], timeout: float = 5.0) -> int:
    """SIGKILL every process left in ``cgroups`` and remove them, retrying while the
    killed processes drain; returns how many processes were killed. Idempotent.

    Raises :class:`CgroupError` naming the cgroups still busy after ``timeout``."""
    pending = [cg for cg in cgroups if exists(cg)]
    killed = 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while pending:
        for cg in pending:
            killed += signal_all(cg)
        pending = [cg for cg in pending if not remove(cg)]
        if not pending:
            break
        if loop.time() > deadline:
            stuck = ", ".join(f"{cg} (processes {procs(cg)})" for cg in pending)
            raise CgroupError(f"cgroups still busy after {timeout:g} s: {stuck}", errno.EBUSY)
        await asyncio.sleep(DRAIN_POLL)
    return killed


def remove_if_empty(mount: str, root: str) -> None:
    """rmdir ``<mount>/<root>`` and its parents up to the mount, while they are empty."""
    path = os.path.join(mount, root)
    while path.startswith(mount + os.sep):
        try:
            os.rmdir(path)
        except OSError:
            return
        path = os.path.dirname(path)


def _rmdir_quietly(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass


# -------------------------------------------------------------- control files


def _write(cg: Cgroup, name: str, value: int | str) -> None:
    path = cg.file(name)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)  # never O_CREAT: see the module docstring
        try:
            os.write(fd, str(value).encode())
        finally:
            os.close(fd)
    except OSError as exc:
        raise CgroupError(f"cannot write {value} to {path}: {exc.strerror or exc}", exc.errno) from None


def _read(cg: Cgroup, name: str) -> str:
    path = cg.file(name)
    try:
        with open(path) as f:
            return f.read()
    except OSError as exc:
        raise CgroupError(f"cannot read {path}: {exc.strerror or exc}", exc.errno) from None


def _read_int(cg: Cgroup, name: str) -> int:
    return int(_read(cg, name).strip())


def _read_keyed(cg: Cgroup, name: str) -> dict[str, int]:
    """A ``key value`` per line file (``cpu.stat``, ``memory.stat``, ``memory.oom_control``)."""
    out = {}
    for line in _read(cg, name).splitlines():
        key, _, value = line.partition(" ")
        try:
            out[key] = int(value)
        except ValueError:
            pass
    return out


# ----------------------------------------------------------------------- cpu


def set_cpu_shares(cg: Cgroup, shares: int) -> None:
    _write(cg, "cpu.shares", max(2, min(MAX_SHARES, shares)))


def set_cpu_quota(cg: Cgroup, period_us: int, quota_us: int | None) -> None:
    """CFS bandwidth: at most ``quota_us`` of CPU time per ``period_us``; None lifts the cap."""
    _write(cg, "cpu.cfs_period_us", period_us)
    _write(cg, "cpu.cfs_quota_us", -1 if quota_us is None else quota_us)


def cpu_limits(cg: Cgroup) -> dict[str, float]:
    """``cpu_shares`` and, under a CFS quota, ``cpus_limit`` (quota / period)."""
    out: dict[str, float] = {"cpu_shares": float(_read_int(cg, "cpu.shares"))}
    quota = _read_int(cg, "cpu.cfs_quota_us")
    if quota > 0:
        out["cpus_limit"] = quota / _read_int(cg, "cpu.cfs_period_us")
    return out


def cpu_stats(cpu: Cgroup, cpuacct: Cgroup) -> dict[str, float]:
    """CPU time used (``cpuacct``) and CFS throttling (``cpu.stat``)."""
    acct = _read_keyed(cpuacct, "cpuacct.stat")
    stat = _read_keyed(cpu, "cpu.stat")
    return {
        "cpu_seconds": _read_int(cpuacct, "cpuacct.usage") / 1e9,
        "cpu_user_seconds": acct.get("user", 0) / USER_HZ,
        "cpu_system_seconds": acct.get("system", 0) / USER_HZ,
        "cpu_periods": float(stat.get("nr_periods", 0)),
        "cpu_throttled_periods": float(stat.get("nr_throttled", 0)),
        "cpu_throttled_seconds": stat.get("throttled_time", 0) / 1e9,
        **cpu_limits(cpu),
    }


def cpu_seconds(cpuacct: Cgroup) -> float:
    """CPU time the cgroup's processes used, all CPUs together."""
    return _read_int(cpuacct, "cpuacct.usage") / 1e9


# -------------------------------------------------------------------- memory


def has_swap_accounting(mount: str) -> bool:
    return os.path.exists(os.path.join(mount, "memory.memsw.limit_in_bytes"))


def memory_limit(cg: Cgroup) -> int:
    return _read_int(cg, "memory.limit_in_bytes")


def set_memory_limit(cg: Cgroup, limit: int, *, with_swap: bool = False) -> None:
    """Set the hard limit; ``with_swap`` also caps memory + swap at ``limit``.

    The kernel wants memory ≤ memory + swap at every step, so the order depends on
    the direction. Lowering below what the processes use fails with ``EBUSY``
    (a :class:`CgroupError`) once the kernel cannot reclaim enough."""
    if not with_swap:
        _write(cg, "memory.limit_in_bytes", limit)
        return
    if limit >= memory_limit(cg):
        _write(cg, "memory.memsw.limit_in_bytes", limit)
        _write(cg, "memory.limit_in_bytes", limit)
    else:
        _write(cg, "memory.limit_in_bytes", limit)
        _write(cg, "memory.memsw.limit_in_bytes", limit)


def oom_kills(cg: Cgroup) -> int | None:
    """Processes the OOM killer ended in ``cg`` (None: the kernel does not count them)."""
    return _read_keyed(cg, "memory.oom_control").get("oom_kill")


def memory_peak(cg: Cgroup) -> int:
    return _read_int(cg, "memory.max_usage_in_bytes")


def memory_stats(cg: Cgroup) -> dict[str, float]:
    stat = _read_keyed(cg, "memory.stat")
    out = {
        "mem_bytes": float(_read_int(cg, "memory.usage_in_bytes")),
        "mem_peak_bytes": float(memory_peak(cg)),
        "mem_limit_bytes": float(memory_limit(cg)),
        "mem_rss_bytes": float(stat.get("total_rss", stat.get("rss", 0))),
        "mem_cache_bytes": float(stat.get("total_cache", stat.get("cache", 0))),
        "mem_limit_hits": float(_read_int(cg, "memory.failcnt")),
    }
    kills = oom_kills(cg)
    if kills is not None:
        out["mem_oom_kills"] = float(kills)
    return out


class OomListener:
    """Calls ``callback()`` on the event loop when ``cg`` runs out of memory.

    v1 notifies through an eventfd registered in ``cgroup.event_control`` against
    ``memory.oom_control``. The notice comes as the OOM killer starts, before it
    has picked a victim (``oom_kill`` may not have counted it yet). Removing the
    cgroup also signals the eventfd; the listener then closes itself without
    calling back. :meth:`close` is idempotent."""

    def __init__(self, cg: Cgroup, callback: Callable[[], None]) -> None:
        self.cg = cg
        self._callback = callback
        self._loop = asyncio.get_running_loop()
        self._efd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        try:
            self._ofd = os.open(cg.file("memory.oom_control"), os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            os.close(self._efd)
            raise CgroupError(
                f"cannot open {cg.file('memory.oom_control')}: {exc.strerror or exc}", exc.errno
            ) from None
        try:
            _write(cg, "cgroup.event_control", f"{self._efd} {self._ofd}")
        except CgroupError:
            os.close(self._efd)
            os.close(self._ofd)
            raise
        self._loop.add_reader(self._efd, self._ready)
        self.closed = False

    def _ready(self) -> None:
        try:
            os.eventfd_read(self._efd)
        except BlockingIOError:
            return
        if not exists(self.cg):
            self.close()
            return
        self._callback()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._loop.remove_reader(self._efd)
        os.close(self._efd)
        os.close(self._ofd)
