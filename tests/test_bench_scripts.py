"""The scale benchmarks still run: each script end to end at a toy size, writing nothing.

The figures themselves come from the full runs in docs/benchmarks.md; these only keep
the scripts (and the emulators they drive) from rotting between those runs.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def run_bench(script: str, *args: str, timeout: float = 120) -> str:
    done = subprocess.run([sys.executable, str(BENCH / script), *args, "--no-write"],
                          check=False, capture_output=True, text=True, timeout=timeout, cwd=BENCH)
    assert done.returncode == 0, f"{script} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_fig10_at_a_toy_size_measures_the_probe():
    out = run_bench("fig10.py", "--agents", "200", "--frameworks", "10", "--runs", "1", "--settle", "0",
                    "--probe-seconds", "0.5", "--task-mean", "2", "--task-stddev", "0.5")
    assert "200 agents run 1: extra" in out
    assert '"duplicates": 0' in out and '"tasks_failed": 0' in out


def test_v1_cost_at_a_toy_size_measures_both_apis_and_compares_them():
    out = run_bench("v1_cost.py", "--agents", "200", "--frameworks", "10", "--rounds", "1", "--runs", "1",
                    "--settle", "0", "--probe-seconds", "0.5", "--task-mean", "2", "--task-stddev", "0.5",
                    timeout=240)
    assert "round 1 thrift:" in out and "round 1     v1:" in out
    assert out.count("failed 0, duplicates 0, call errors 0") == 2, out
    assert re.search(r"v1 / thrift master CPU per task: median \d+\.\d\d", out), out


def test_overload_at_a_toy_size_runs_both_conditions_and_judges_them():
    out = run_bench("overload.py", "--agents", "200", "--frameworks", "10", "--runs", "1", "--settle", "0",
                    "--probe-seconds", "0.5", "--task-mean", "2", "--task-stddev", "0.5", "--no-write")
    assert "200 agents, undisturbed:" in out and "200 agents, CPU hog:" in out
    assert out.count("median extra delay") >= 3  # two conditions, then the verdict
    assert "within 20%" in out


def test_tls_cost_at_a_toy_size_runs_both_ways_and_judges_them():
    out = run_bench("tls_cost.py", "--agents", "200", "--frameworks", "10", "--pairs", "1", "--probes", "1",
                    "--probe-seconds", "0.5", "--settle", "0", "--skip", "throughput")
    assert "pair 1 plain fig10 200:" in out and "pair 1 TLS  fig10 200:" in out
    assert "| Fig. 10, 200 agents: master CPU |" in out
    assert "| `mezzo run -- true`, whole process |" in out
    assert "extra master CPU with TLS" in out  # the verdict


def test_capacity_at_toy_sizes_counts_throughput_and_judges_the_sweep():
    out = run_bench("capacity.py", "--agents", "100,200", "--frameworks", "5", "--task-mean", "1",
                    "--task-stddev", "0.2", "--settle", "0", "--window", "2", "--fill-timeout", "30")
    assert "    100 agents: offered 200 tasks/s" in out and "    200 agents: offered 400 tasks/s" in out
    assert out.count("updates per task") == 2
    assert "capacity " in out or "no size was carried" in out  # the verdict line
    assert '"finished_per_s": 0' not in out  # tasks of 1 s finished in the 2 s window


def test_capacity_verdict_compares_twice_the_capacity_with_the_peak():
    sys.path.insert(0, str(BENCH))
    try:
        from capacity import verdict
    finally:
        sys.path.remove(str(BENCH))

    def point(agents: int, finished: float, busy_min: float) -> dict:
        return {"agents": agents, "finished_per_s": finished, "busy_min": busy_min}

    held = [point(10, 100, 0.99), point(20, 200, 0.97), point(40, 170, 0.80)]
    assert verdict(held) == (
        "capacity 20 agents; at 40 agents the master carries 170 tasks/s, 85% of its peak 200 (target >= 80%)",
        True,
    )
    collapsed = [point(10, 100, 0.99), point(20, 200, 0.97), point(40, 90, 0.40)]
    assert verdict(collapsed)[1] is False
    assert verdict([point(10, 100, 0.99), point(15, 150, 0.99)])[1] is None  # never past twice
    assert verdict([point(10, 100, 0.5)])[1] is None  # nothing carried at all


def test_throughput_at_a_toy_size_launches_every_task():
    out = run_bench("throughput.py", "--agents", "100", "--frameworks", "5", "--runs", "1")
    assert "fill run 1: 800 tasks RUNNING" in out
    assert "one run 1: 800 tasks RUNNING" in out
    assert "0 failed" in out


def test_failover_at_a_toy_size_loses_nothing():
    # Three masters and a ZooKeeper server; 2 s sessions leave kazoo's pings room on a busy machine.
    out = run_bench("failover.py", "--agents", "50", "--frameworks", "5", "--runs", "1", "--settle", "0",
                    "--session", "2")
    assert "50 agents run 1: MTTR" in out
    assert "tasks 100 -> 100, lost 0" in out and "PROBLEMS" not in out


def test_short_tasks_at_a_toy_size_finishes_every_task():
    # 90 tasks: more than the 80 the agent runs at once, so later offers are filled too.
    out = run_bench("short_tasks.py", "--tasks", "90", "--runs", "1")
    assert "run 1: posix: 90 tasks at" in out
    assert "run 1: posix, no checkpoint: 90 tasks at" in out


def test_overhead_at_a_toy_size_runs_both_ways():
    out = run_bench("overhead.py", "--tasks", "4", "--seconds", "0.1", "--runs", "1")
    assert "run 1: direct: 4 tasks in" in out and "run 1: mezzo: 4 tasks in" in out
    assert "Overhead:" in out


def test_cpu_isolation_at_a_toy_size_measures_every_configuration():
    out = run_bench("cpu_isolation.py", "--hog-procs", "8", "--requests", "50", "--runs", "1", "--settle", "0.2")
    assert "run 1: alone: 50 requests" in out and "run 1: hog, posix: 50 requests" in out
    assert "run 1: hog, cgroups/cpu: 50 requests" in out or "hog, cgroups/cpu: skipped" in out
    assert "leftover processes after the kills: 0" in out


def test_allocation_cycle_at_a_toy_size_makes_offers():
    out = run_bench("allocation_cycle.py", "--agents", "200", "--frameworks", "20", "--rounds", "3")
    assert "round    0:" in out and "200 offers" in out


def test_message_stalls_at_a_toy_size_measures_every_family():
    out = run_bench("message_stalls.py", "--quick", timeout=300)
    for row in ("baseline: no message", "reconcile_tasks of unknown tasks", "decline_offer of unknown offers",
                "set_filters over the bound (refused)", "set_filters at the bound",
                "container_statistics over the bound (refused)", "register_agent with the most port ranges",
                "launch_tasks: a task asking for all of them", "launch_tasks: a task asking for more ranges (refused)",
                "reregister_agent with 1,000 tasks", "request_state at 2,000 tasks"):
        assert f"run 1: {row} (" in out, row
    assert "| message | size | handled after | longest wait | median wait | quiet |" in out


def test_task_cost_at_a_toy_size_measures_each_counted_wave():
    out = run_bench("task_cost.py", "--agents", "50", "--frameworks", "5", "--waves", "12", "--runs", "2")
    assert out.count("µs per task (median of 2 waves") == 2  # waves 11 and 12 are counted
    assert "master CPU per task:" in out


def test_tls_cost_ratio_of_a_zero_baseline_is_not_a_number_rather_than_a_crash():
    sys.path.insert(0, str(BENCH))
    try:
        import tls_cost
    finally:
        sys.path.remove(str(BENCH))
    assert math.isnan(tls_cost.median_ratio([0.0], [0.016]))
    assert tls_cost.median_ratio([0.0, 0.5, 0.4], [0.016, 0.6, 0.6]) == pytest.approx(1.35)


def test_http_polling_at_a_toy_size_polls_every_endpoint_and_reads_a_sandbox():
    out = run_bench("http_polling.py", "--agents", "200", "--frameworks", "10", "--pairs", "1", "--runs", "1",
                    "--settle", "0", "--probe-seconds", "0.5", "--task-mean", "2", "--task-stddev", "0.5",
                    "--file-mib", "1", "--passes", "1")
    assert "pair 1 quiet : extra" in out and "pair 1 polled: extra" in out
    assert "| probe extra delay (median of 1) |" in out
    for path in ("/state-summary", "/metrics", "/overview"):
        assert re.search(rf"\| `{path}` \| [1-9][0-9]* \| 0 \| [0-9.]+ ms \|", out), path  # answered, none failed
    for way in ("read, master", "read, agent", "download, master", "download, agent"):
        assert re.search(rf"\| {way} \| [0-9.]+ \|", out), way
    # The three verdicts.
    assert "extra delay polled / quiet" in out and "`/metrics` median" in out
    assert "`/files/read` through the master" in out


def test_cli_latency_at_a_toy_size_times_every_command_and_judges_them():
    out = run_bench("cli_latency.py", "--runs", "2", "--no-write")
    for command in ("python -c pass", "mezzo --version", "mezzo ps", "mezzo run -- true"):
        assert f"| `{command}` |" in out
    assert out.count("`mezzo run -- true` median <= 40 ms") == 1  # judged, met or missed
    for command in ("mezzo ps", "mezzo run -- true"):
        assert f"- Imports of `{command}` (`-X importtime`, cumulative, slowest): `" in out
    # The cluster part, step by step, in the benchmark's own process.
    for step in ("| GET /overview sent -> GET /overview answered |", "| ACCEPT sent -> ACCEPT answered |",
                 "-> TASK_FINISHED came |", "| the whole run |"):
        assert step in out


def test_queue_throughput_at_a_toy_size_runs_every_job_and_judges_the_rate():
    out = run_bench("queue_throughput.py", "--runs", "1", "--jobs", "50", timeout=180)
    assert re.search(r"\| 0\.1 s \| \d+ \| \d+ \|", out), out
    assert re.search(r"\| 0\.01 s \| \d+ \| \d+ \|", out), out
    assert out.count(">= 500 jobs/s") == 2  # judged, met or missed, for each interval
    assert "`mezzo submit --array 1-50` itself:" in out


def test_partition_at_a_toy_size_cuts_a_quarter_and_heals():
    from mezzo.testing import netsim

    if netsim.available():
        pytest.skip(f"{netsim.available()} (CI runs as root)")
    out = run_bench("partition.py", "--quick", "--no-write", timeout=300)
    assert "run 1: 10 of 40 agents cut" in out, out
    assert "TASK_UNREACHABLE (partition-aware)" in out and "lossy tasks left on cut agents: 0" in out, out


@pytest.mark.parametrize(
    "script", ["fig8.py", "fig9.py", "fig10.py", "lottery_locality.py", "macrobenchmark.py", "rampup.py"]
)
def test_a_run_that_would_leave_its_figures_stale_stops_before_it_starts(script, tmp_path):
    # A matplotlib that cannot be imported, whether or not the venv has the real one.
    (tmp_path / "matplotlib").mkdir()
    (tmp_path / "matplotlib" / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    docs = (BENCH.parent / "docs" / "benchmarks.md").read_bytes()
    done = subprocess.run([sys.executable, str(BENCH / script)], check=False, capture_output=True, text=True,
                          timeout=60, cwd=BENCH, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 2, f"{script}:\n{done.stdout}\n{done.stderr}"
    assert "matplotlib is not installed" in done.stderr and "--no-write" in done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"{script}: "), done.stderr
    assert (BENCH.parent / "docs" / "benchmarks.md").read_bytes() == docs
