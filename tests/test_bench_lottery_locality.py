"""bench/lottery_locality.py (paper §4.3) still runs and still measures what it claims,
at a toy size, writing nothing.

Toy size: 32 preferred agents, tasks of 0.2-0.4 s, a 3 s window: about 300-400
slots of P drawn per run (as many as 16 agents over 6 s, in half the time). For the
lottery, a framework's share is then about a binomial fraction of 300-400 draws,
standard deviation <= 0.03, so the bounds below sit 4-6 sd away from the targets
1/6, 1/3, 1/2. DRF keeps holdings within about a slot (1/32) of weight-proportional.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
LINE = re.compile(r"^(?P<alloc>[\w-]+) run 1 seed \d+: (?P<each>.*); P held (?P<held>[\d.]+)%; "
                  r"max deviation (?P<dev>[\d.]+); (?P<tasks>\d+) tasks in the window, \d+ declined, "
                  r"(?P<failed>\d+) failed$", re.MULTILINE)
SHARE = re.compile(r"(fw\d) (?P<share>[\d.]+) \(target (?P<target>[\d.]+), won (?P<won>\d+)\)")


def run_toy() -> dict[str, dict]:
    """Run the script at the toy size; per allocator, its run's parsed line."""
    done = subprocess.run(
        [sys.executable, str(BENCH / "lottery_locality.py"), "--allocators", "lottery,drf", "--runs", "1",
         "--preferred", "32", "--others", "4", "--duration", "0.2,0.4", "--warmup", "2", "--window", "3",
         "--no-write"],
        check=False, capture_output=True, text=True, timeout=150, cwd=BENCH)
    assert done.returncode == 0, f"lottery_locality.py failed:\n{done.stdout}\n{done.stderr}"
    runs = {}
    for m in LINE.finditer(done.stdout):
        shares = {f: (float(s), float(t), int(w)) for f, s, t, w in SHARE.findall(m["each"])}
        runs[m["alloc"]] = {"shares": shares, "held": float(m["held"]), "dev": float(m["dev"]),
                            "tasks": int(m["tasks"]), "failed": int(m["failed"])}
    assert set(runs) == {"lottery", "drf"}, done.stdout
    return runs


@pytest.mark.slow
def test_preferred_agents_are_split_by_weight_under_lottery_and_drf():
    runs = run_toy()
    for alloc, run in runs.items():
        shares = run["shares"]
        # Every framework was measured, won slots of P, and nothing failed.
        assert set(shares) == {"fw1", "fw2", "fw3"}, (alloc, run)
        assert all(won > 0 for _, _, won in shares.values()), (alloc, run)
        assert run["failed"] == 0 and run["tasks"] > 100, (alloc, run)
        # P is kept full: demand exceeds it, and freed slots are re-offered at once.
        assert run["held"] > 90, (alloc, run)
        # Weights 1 : 2 : 3 show in the shares, in order and near weight / sum.
        assert shares["fw1"][0] < shares["fw2"][0] < shares["fw3"][0], (alloc, run)
        assert run["dev"] <= (0.12 if alloc == "lottery" else 0.08), (alloc, run)
