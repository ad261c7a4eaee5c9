"""The cgroup v1 module against the real hierarchies: create, join, set, read, remove."""

from __future__ import annotations

import asyncio
import errno
import subprocess
import time

import pytest

from mezzo_isolator_cgroups import v1


def test_create_join_set_read_and_destroy(cgroot, harness):
    cgs = {c: harness.cgroup(c, cgroot, "unit") for c in ("cpu", "cpuacct", "memory")}
    for cg in cgs.values():
        v1.create(cg)
    v1.set_cpu_shares(cgs["cpu"], 512)
    v1.set_cpu_quota(cgs["cpu"], 100_000, 25_000)
    v1.set_memory_limit(cgs["memory"], 48 << 20)
    # A child that leaves the session at once: only its cgroups still tie it to the container.
    # preexec_fn only joins cgroups (system calls), which is safe in a threaded parent.
    proc = subprocess.Popen(
        ["/bin/sh", "-c", "setsid sleep 30 & echo $!; sleep 30"],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=v1.joiner(cgs.values()),  # noqa: PLW1509
        start_new_session=True,
    )
    assert proc.stdout is not None
    escaped = int(proc.stdout.readline())
    try:
        for cg in cgs.values():
            assert {proc.pid, escaped} <= set(v1.procs(cg)), cg
        assert v1.cpu_limits(cgs["cpu"]) == {"cpu_shares": 512.0, "cpus_limit": 0.25}
        mem = v1.memory_stats(cgs["memory"])
        assert mem["mem_limit_bytes"] == 48 << 20
        assert 0 < mem["mem_bytes"] <= mem["mem_peak_bytes"]
        assert mem["mem_oom_kills"] == 0
        assert v1.cpu_stats(cgs["cpu"], cgs["cpuacct"])["cpu_seconds"] > 0

        killed = asyncio.run(v1.destroy(cgs.values()))
        assert killed >= 2
        assert proc.wait(5) == -9
        assert not harness.alive(escaped)
        assert not any(v1.exists(cg) for cg in cgs.values())
        assert asyncio.run(v1.destroy(cgs.values())) == 0  # idempotent
    finally:
        harness.kill(escaped)
        proc.kill()
        proc.wait()


def test_an_existing_cgroup_is_not_taken_over(cgroot, harness):
    cg = harness.cgroup("memory", cgroot, "twice")
    v1.create(cg)
    with pytest.raises(v1.CgroupError, match="already exists") as err:
        v1.create(cg)
    assert err.value.errno == errno.EEXIST
    assert v1.remove(cg) and not v1.exists(cg)


def test_lowering_a_limit_below_usage_is_ebusy(cgroot, harness):
    cg = harness.cgroup("memory", cgroot, "busy")
    v1.create(cg)
    v1.set_memory_limit(cg, 128 << 20)
    code = "import sys\nb = b'x' * (64 << 20)\nprint('ready', flush=True)\nsys.stdin.read()"
    proc = subprocess.Popen(
        harness.python(code),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=v1.joiner([cg]),  # noqa: PLW1509
    )
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline() == "ready\n"
        with pytest.raises(v1.CgroupError) as err:
            v1.set_memory_limit(cg, 16 << 20)
        assert err.value.errno == errno.EBUSY
        assert v1.memory_limit(cg) == 128 << 20
    finally:
        proc.kill()
        proc.wait()
    asyncio.run(v1.destroy([cg]))


def test_a_directory_outside_cgroupfs_is_never_written(tmp_path):
    """Control files are opened without O_CREAT: a plain directory (an unmounted
    hierarchy) makes the write fail instead of silently enforcing nothing."""
    cg = v1.Cgroup("memory", str(tmp_path))
    with pytest.raises(v1.CgroupError, match="memory.limit_in_bytes"):
        v1.set_memory_limit(cg, 1 << 20)
    assert list(tmp_path.iterdir()) == []


def test_destroy_gives_up_with_the_pids_of_what_will_not_leave(cgroot, harness, monkeypatch):
    cg = harness.cgroup("cpu", cgroot, "stuck")
    v1.create(cg)
    proc = subprocess.Popen(["sleep", "30"], preexec_fn=v1.joiner([cg]))  # noqa: PLW1509
    try:
        monkeypatch.setattr(v1, "signal_all", lambda cg, sig=9: 0)  # as if the kill could not land
        started = time.monotonic()
        with pytest.raises(v1.CgroupError, match=rf"still busy.*{proc.pid}"):
            asyncio.run(v1.destroy([cg], timeout=0.2))
        assert time.monotonic() - started < 2
    finally:
        proc.kill()
        proc.wait()
    monkeypatch.undo()
    asyncio.run(v1.destroy([cg]))
