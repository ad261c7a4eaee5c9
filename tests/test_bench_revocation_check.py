"""Smoke test of bench/revocation_check.py at toy size: it runs, prints a figure per
case, the starved cases revoke tasks (only of holders above their guarantees) and the
quiet ones revoke nothing, and ``--no-write`` leaves docs/benchmarks.md alone."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_revocation_check_bench_at_toy_size():
    doc = ROOT / "docs" / "benchmarks.md"
    before = doc.read_text() if doc.exists() else None
    out = subprocess.run(
        [sys.executable, "bench/revocation_check.py", "--agents", "200", "--frameworks", "20", "--rounds", "2",
         "--no-write"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert out.returncode == 0, out.stderr
    lines = {m.group(1): m.group(0) for m in re.finditer(r"^\s+(quiet|recent|greedy|spread)\s+check: .*$",
                                                         out.stdout, re.MULTILINE)}
    assert set(lines) == {"quiet", "recent", "greedy", "spread"}, out.stdout
    assert "800 tasks" in out.stdout

    def field(case: str, name: str) -> int:
        return int(re.search(rf"{name} ([\d,]+)", lines[case]).group(1).replace(",", ""))

    for case in ("quiet", "recent"):
        assert field(case, "victims") == 0 and "starved []" in lines[case]
    for case in ("greedy", "spread"):
        assert field(case, "victims") > 0 and "starved ['late']" in lines[case]
    # Greedy: only the greedy framework is above its guarantee, so only its 400 tasks are offered.
    assert field("greedy", "tasks offered") == 400
    assert field("spread", "tasks offered") == 800
    assert float(re.search(r"median\s+([\d.]+) ms", lines["quiet"]).group(1)) < 1000
    assert (doc.read_text() if doc.exists() else None) == before
