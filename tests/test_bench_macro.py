"""bench/macrobenchmark.py (paper §6.1) still runs end to end at a toy size: both
scenarios on real daemons, every job of the four frameworks finishing, the tables and
verdicts printed. What its figures say is for the full run (docs/benchmarks.md)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.mark.skipif(
    shutil.which("mpiexec") is None or shutil.which("mpicc") is None,
    reason="MPICH (mpiexec, mpicc) is installed by make setup (apt-get install mpich libmpich-dev)",
)
def test_macrobenchmark_at_a_toy_size_plays_all_four_workloads_both_ways():
    done = subprocess.run(
        [sys.executable, str(BENCH / "macrobenchmark.py"), "--quick", "--no-write"],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=BENCH,
    )
    out = done.stdout
    assert done.returncode == 0, f"macrobenchmark.py failed:\n{out}\n{done.stderr}"
    for scenario in ("shared", "static"):
        line = next(x for x in out.splitlines() if x.startswith(f"  {scenario}: "))
        # Every workload played all its jobs: 8 Facebook, 2 large, 2 Spark, 2 MPI.
        for part in ("facebook 8 jobs", "large 2 jobs", "spark 2 jobs", "torque 2 jobs"):
            assert part in line, line
        assert "errors" not in line, line
    assert "**Table 4**" in out and "**Table 5**" in out
    for title in ("Facebook Hadoop mix", "Large Hadoop mix", "Spark (iterative)", "Torque / MPI"):
        assert f"| {title} |" in out
    assert "selection (1)" in out and "small MPI" in out and "large MPI" in out
    assert "- jobs failed: 0" in out
    assert re.search(r"cpus \d+% shared vs \d+% static, memory \d+% vs \d+%", out), out
