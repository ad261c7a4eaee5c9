#!/usr/bin/env python3
"""Run the nemesis test (tests/test_nemesis.py) once per seed and collect the reports
into docs/nemesis.md: one section per seed (its schedule, the faults as played, the
outcomes, the problems found), and a summary table.

    sudo .venv/bin/python tests/nemesis_seeds.py --seeds 1-20
    sudo .venv/bin/python tests/nemesis_seeds.py --seeds 3,7 --seconds 120 --no-write
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "nemesis.md"


def seeds_of(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        seeds += range(int(first), int(last or first) + 1)
    return seeds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="1-20", help="e.g. 1-20 or 3,7,9")
    p.add_argument("--seconds", type=float, default=30.0, help="--nemesis-seconds for each run (default 30)")
    p.add_argument("--tasks", type=int, default=None, help="--nemesis-tasks for each run")
    p.add_argument("--no-write", action="store_true", help=f"do not write {DOC.relative_to(ROOT)}")
    args = p.parse_args(argv)
    try:
        seeds = seeds_of(args.seeds)
    except ValueError:
        p.error(f"--seeds: a list like 1-20 or 3,7,9, not {args.seeds!r}")
    sections, rows, failed = [], [], 0
    for seed in seeds:
        with tempfile.TemporaryDirectory(prefix=f"mezzo-nemesis-{seed}-") as tmp:
            command = [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "tests/test_nemesis.py",
                "--basetemp",
                tmp,
                "--nemesis-seed",
                str(seed),
            ]
            if args.seconds is not None:
                command += ["--nemesis-seconds", str(args.seconds)]
            if args.tasks is not None:
                command += ["--nemesis-tasks", str(args.tasks)]
            started = time.monotonic()
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
            took = time.monotonic() - started
            reports = list(Path(tmp).rglob("nemesis-report.md"))
            report = (
                reports[0].read_text()
                if reports
                else f"# nemesis run, seed {seed}\n\nno report:\n\n```\n{done.stdout[-3000:]}\n```\n"
            )
        ok = done.returncode == 0
        failed += not ok
        outcomes = re.search(r"^outcomes: (.*)$", report, re.M)
        problems = re.search(r"^problems: (.*)$", report, re.M)
        along = re.search(r"^along the way: (\d+) tasks .*?, (\d+) of them", report, re.M)
        faults = report.count(" start ")
        rows.append(
            f"| {seed} | {'pass' if ok else 'FAIL'} | {faults} | {outcomes.group(1) if outcomes else '?'} | "
            f"{'/'.join(along.groups()) if along else '?'} | {problems.group(1) if problems else '?'} | {took:.0f} |"
        )
        sections.append(report.replace("# nemesis run, seed", "## Seed", 1).replace("\n# ", "\n## "))
        print(rows[-1], flush=True)
    text = "\n".join(
        [
            "# Nemesis runs",
            "",
            "tests/test_nemesis.py run once per seed by `tests/nemesis_seeds.py` (3 masters, 1 ZooKeeper, "
            "8 agents, each on a simulated host; 3 frameworks, one partition-aware; see the test's "
            "docstring for what is checked). Written by the script; rerun it to refresh.",
            "",
            "| seed | result | faults played | outcomes | unreachable / back | problems | seconds |",
            "|---|---|---|---|---|---|---|",
            *rows,
            "",
            *sections,
        ]
    )
    if not args.no_write:
        DOC.write_text(text.rstrip("\n") + "\n")
        print(f"wrote {DOC}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
