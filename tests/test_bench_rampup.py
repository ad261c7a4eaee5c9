"""bench/rampup.py (the paper's §4.2, Table 2) still runs, and its job model is right.

The figures come from the full run in docs/benchmarks.md; the smoke test runs the
script end to end at a toy size (8 agents, k = 4, T = 0.5 s), writing nothing.
"""

from __future__ import annotations

import importlib.util
import math
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture(scope="module")
def rampup():
    """bench/rampup.py as a module (bench/ is a directory of scripts, not a package)."""
    sys.path.insert(0, str(BENCH))  # for its `_cluster` and `_report` imports
    try:
        spec = importlib.util.spec_from_file_location("rampup_bench", BENCH / "rampup.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("rampup_bench", None)
        sys.path.remove(str(BENCH))


def test_fluid_completion_spreads_the_work_over_the_slots_present(rampup):
    # All k slots at once: βkT of work takes βT.
    assert rampup.fluid_completion([0.0] * 4, 8.0) == pytest.approx(2.0)
    # Slots at 0 and 1 with 3 slot-seconds: 2C - 1 = 3, so C = 2.
    assert rampup.fluid_completion([1.0, 0.0], 3.0) == pytest.approx(2.0)
    # A slot arriving after the work is done adds nothing.
    assert rampup.fluid_completion([0.0, 5.0], 1.0) == pytest.approx(1.0)


def test_the_sampled_model_agrees_with_table_2_where_it_is_exact(rampup):
    # Slots arriving uniformly over T: an elastic job of βkT ends at (1/2 + β)T for large k.
    rng = random.Random(7)
    k, beta = 400, 2.0
    elastic = [rampup.model_sample("constant", k, beta, rng)[("completion", "elastic constant")]
               for _ in range(50)]
    assert sum(elastic) / len(elastic) == pytest.approx(0.5 + beta, abs=0.03)
    # Exponential residuals: the last of k arrives after H_k·T on average (the paper: ln k).
    ramps = [rampup.model_sample("exponential", k, beta, rng)[("ramp-up", "exponential")] for _ in range(400)]
    harmonic = sum(1 / i for i in range(1, k + 1))
    assert sum(ramps) / len(ramps) == pytest.approx(harmonic, abs=0.25)
    assert harmonic - math.log(k) == pytest.approx(0.577, abs=0.01)


def test_rampup_at_a_toy_size_reaches_k_slots_and_finishes_every_job():
    done = subprocess.run([sys.executable, str(BENCH / "rampup.py"), "--agents", "8", "--mean", "0.5",
                           "--beta", "1", "--runs", "1", "--exp-runs", "1", "--no-write"],
                          check=False, capture_output=True, text=True, timeout=120, cwd=BENCH)
    assert done.returncode == 0, f"rampup.py failed:\n{done.stdout}\n{done.stderr}"
    out = done.stdout
    for dist in ("constant", "exponential"):
        for mode in ("elastic", "rigid"):
            line = next((ln for ln in out.splitlines() if ln.startswith(f"{dist} {mode} run 1:")), None)
            assert line is not None, out
            assert "DRF guarantee 4 cpus" in line and line.endswith("lost 0"), line
            job = float(re.search(r"job ([0-9.]+) T", line).group(1))
            # A job of βT = 1 T on all k slots cannot end sooner than that.
            assert job >= 1.0, line
        rigid = next(ln for ln in out.splitlines() if ln.startswith(f"{dist} rigid run 1:"))
        # The rigid job waits for all of its k slots, so its ramp-up always completes.
        assert "reached 4/4 slots" in rigid, rigid
        ramp = float(re.search(r"ramp-up ([0-9.]+) T", rigid).group(1))
        job = float(re.search(r"job ([0-9.]+) T", rigid).group(1))
        # ... and then runs βT = 1 T.
        assert ramp > 0 and job == pytest.approx(ramp + 1.0, abs=0.1), rigid
    assert "ramp-up constant: median" in out and "completion rigid exponential: median" in out
