"""bench/fig8.py (paper §6.3, data locality with delay scheduling) still runs, at a toy size.

24 emulated agents, 4 frameworks: a static partition is 6 agents, which hold a
replica of about 60 % of the blocks, so static partitioning cannot reach the
locality that a 1 s delay on the shared cluster does.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def test_fig8_at_a_toy_size_measures_locality_per_configuration():
    done = subprocess.run(
        [sys.executable, str(BENCH / "fig8.py"), "--agents", "24", "--frameworks", "4", "--maps", "16",
         "--jobs", "1", "--warmup-jobs", "0", "--runs", "1", "--task-mean", "0.5", "--task-stddev", "0.1",
         "--delays", "0,1", "--timeout", "40", "--no-write"],
        check=False, capture_output=True, text=True, timeout=90, cwd=BENCH)
    assert done.returncode == 0, f"fig8.py failed:\n{done.stdout}\n{done.stderr}"
    out = done.stdout
    for name in ("static", "no delay", "1 s delay"):
        assert f"{name} run 1: locality" in out and f"{name}: locality median" in out
    results = json.loads(out.strip().splitlines()[-1])
    assert set(results) == {"static", "no delay", "1 s delay"}
    for (run,) in results.values():
        assert run["local"] + run["remote"] == 4 * 16  # every measured map counted once
        assert run["job_seconds"] == 4 and run["lost"] == 0
    assert results["1 s delay"][0]["locality"] >= 0.9
    assert results["static"][0]["locality"] < results["1 s delay"][0]["locality"]
