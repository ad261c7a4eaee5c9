"""The isolation benchmarks still run: each at a toy size, writing nothing (they need
root and the isolator plugins, as CI has; elsewhere they skip saying so)."""

from __future__ import annotations

import os

import pytest

from mezzo.plugins import load_plugins

from .test_bench_scripts import run_bench

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the isolators measured need root")


def test_isolator_cost_at_a_toy_size_measures_every_installed_isolator():
    out = run_bench("isolator_cost.py", "--containers", "3")
    assert "| `posix` |" in out
    installed = set(load_plugins().registry.names("isolator"))
    if os.geteuid() == 0 and {"cgroups/cpu", "cgroups/mem"} <= installed:
        assert "| `posix`, `cgroups/cpu` | " in out and "skipped" not in out.split("`cgroups/cpu` |")[1][:20]


@needs_root
def test_bandwidth_at_a_toy_size_holds_the_limits():
    if "network/bandwidth" not in load_plugins().registry.names("isolator"):
        pytest.skip("network/bandwidth is not installed (make setup installs isolators/netbw)")
    out = run_bench("bandwidth.py", "--runs", "1", "--warmup", "0.3", "--window", "1")
    assert "run 1: limit 10 Mbit/s:" in out and "run 1: limit none Mbit/s:" in out
