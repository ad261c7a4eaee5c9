"""Settings and start-up: bad tables name their dotted key; a machine that cannot run
the isolators fails agent start-up saying why. These run anywhere (no cgroups needed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mezzo.errors import ConfigError
from mezzo.plugins import load_plugins
from mezzo_isolator_cgroups import CgroupsUnavailable, CpuIsolator, MemIsolator, v1

CPU = "agent.isolators.cgroups/cpu"
MEM = "agent.isolators.cgroups/mem"


@pytest.mark.parametrize(
    ("cls", "key", "settings", "bad", "says"),
    [
        (
            CpuIsolator,
            CPU,
            {"shares": 2},
            "shares",
            "unknown setting for isolator 'cgroups/cpu' (known: root, cfs_quota, cfs_period_us)",
        ),
        (CpuIsolator, CPU, {"cfs_quota": "yes"}, "cfs_quota", "expected true or false"),
        (CpuIsolator, CPU, {"cfs_period_us": 999}, "cfs_period_us", "from 1000 to 1000000"),
        (CpuIsolator, CPU, {"cfs_period_us": 100000.0}, "cfs_period_us", "integer"),
        (CpuIsolator, CPU, {"root": "/sys/fs/cgroup/cpu"}, "root", "relative path"),
        (CpuIsolator, CPU, {"root": "mezzo/../x"}, "root", "'..'"),
        (CpuIsolator, CPU, {"root": "mezzo/cpu.shares"}, "root", "control file"),
        (CpuIsolator, CPU, {"root": 7}, "root", "expected a string"),
        (MemIsolator, MEM, {"min_mb": 2}, "min_mb", "at least 4"),
        (MemIsolator, MEM, {"min_mb": True}, "min_mb", "number"),
        (MemIsolator, MEM, {"limit_swap": 1}, "limit_swap", "true or false"),
        (
            MemIsolator,
            MEM,
            {"cfs_quota": True},
            "cfs_quota",
            "unknown setting for isolator 'cgroups/mem' (known: root, min_mb, limit_swap)",
        ),
    ],
)
def test_bad_settings_name_their_key(cls, key, settings, bad, says):
    with pytest.raises(ConfigError) as err:
        cls(settings, key=key)
    assert err.value.key == f"{key}.{bad}"
    assert says in err.value.problem


def test_a_bad_setting_fails_agent_start_up(tmp_path):
    config = tmp_path / "mezzo.toml"
    config.write_text(
        '[agent]\nmaster = "127.0.0.1:1"\nisolation = ["posix", "cgroups/cpu"]\n\n'
        '[agent.isolators."cgroups/cpu"]\ncfs_quota = true\ncfs_period_us = 10\n'
    )
    argv = [
        sys.executable,
        "-m",
        "mezzo",
        "agent",
        "--config",
        str(config),
        "--work-dir",
        str(tmp_path / "work"),
    ]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 2, out
    assert "agent.isolators.cgroups/cpu.cfs_period_us: expected an integer from 1000 to 1000000" in out.stderr


def test_both_components_are_registered_by_the_entry_point():
    registry = load_plugins().registry
    assert registry.get("isolator", "cgroups/cpu", key="k") is CpuIsolator
    assert registry.get("isolator", "cgroups/mem", key="k") is MemIsolator


V2_ONLY = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
V1 = (
    "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
    "40 31 0:37 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
)


def test_mounts_are_read_from_mountinfo(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text(V1)
    controllers, v2 = v1.mounts(str(info))
    assert controllers["cpu"] == controllers["cpuacct"] == "/sys/fs/cgroup/cpu,cpuacct"
    assert controllers["memory"] == "/sys/fs/cgroup/memory"
    assert "name=systemd" not in controllers and "systemd" not in controllers
    assert v2 == ["/sys/fs/cgroup/unified"]


def test_start_up_fails_without_cgroup_v1_saying_so(tmp_path, monkeypatch):
    info = tmp_path / "mountinfo"
    info.write_text(V2_ONLY)
    monkeypatch.setattr(v1, "MOUNTINFO", str(info))
    monkeypatch.setattr(v1.os, "geteuid", lambda: 0)
    with pytest.raises(CgroupsUnavailable) as err:
        MemIsolator({}, key=MEM)
    assert str(err.value) == (
        "isolator 'cgroups/mem' cannot run on this machine: "
        "the cgroup v1 'memory' controller is not mounted: "
        "only cgroup v2 is mounted (/sys/fs/cgroup), and this isolator drives cgroup v1"
    )


def test_start_up_fails_when_not_root(monkeypatch):
    monkeypatch.setattr(v1.os, "geteuid", lambda: 1000)
    with pytest.raises(
        CgroupsUnavailable,
        match=r"'cgroups/cpu' cannot run on this machine: managing "
        r"cgroups needs root, and this process runs as uid 1000",
    ):
        CpuIsolator({}, key=CPU)


def test_a_missing_control_file_is_named(tmp_path, monkeypatch):
    hierarchy = tmp_path / "memory"
    hierarchy.mkdir()
    (hierarchy / "memory.limit_in_bytes").write_text("")
    info = tmp_path / "mountinfo"
    info.write_text(f"35 31 0:32 / {hierarchy} rw - cgroup cgroup rw,memory\n")
    monkeypatch.setattr(v1, "MOUNTINFO", str(info))
    monkeypatch.setattr(v1.os, "geteuid", lambda: 0)
    with pytest.raises(CgroupsUnavailable, match=rf"at {hierarchy} has no memory.max_usage_in_bytes"):
        MemIsolator({}, key=MEM)
