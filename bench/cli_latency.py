#!/usr/bin/env python3
"""How long the ``mezzo`` command takes, as a user at a shell feels it (issue 17).

On a warm local cluster (a master and one agent of 16 cpus, real processes on
loopback, plaintext), each command is run as a whole process, start to exit, many
times, interleaved with the baselines it cannot beat on this machine: a bare Python
start-up (``python -c pass``) and ``python -c "import asyncio"``. Printed and written
to ``docs/benchmarks.md``: median and p95 of each, and what the import of the CLI
costs (``-X importtime``, the slowest top-level packages).

Targets (issue 17): ``mezzo run --cpus 0.1 --mem 16 -- true`` median at most 40 ms and
p95 at most 80 ms over 100 runs; ``mezzo --version`` and ``mezzo ps`` at most 50 ms median.

Usage::

    python bench/cli_latency.py                # 100 runs of each
    python bench/cli_latency.py --runs 10 --no-write
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time

from _cluster import machine
from _report import write_section
from mezzo.testing import LocalProcessCluster

TARGETS = {"mezzo run -- true": (0.040, 0.080), "mezzo --version": (0.050, None), "mezzo ps": (0.050, None)}
"""Median and p95 (None: none) each command must stay under, in seconds."""


def mezzo_command() -> list[str]:
    """How a user starts ``mezzo``: the console script pip installed beside this Python
    (run by it, so that every command starts the same interpreter as the baselines);
    ``python -m mezzo`` where there is none (a checkout without ``pip install``), which
    costs runpy's imports on top (about 5 ms)."""
    script = os.path.join(os.path.dirname(sys.executable), "mezzo")
    return [sys.executable, script] if os.path.exists(script) else [sys.executable, "-m", "mezzo"]


def commands(master: str) -> dict[str, list[str]]:
    py = sys.executable
    mezzo = mezzo_command()
    return {
        "python -c pass": [py, "-c", "pass"],
        'python -c "import asyncio"': [py, "-c", "import asyncio"],
        "mezzo --version": [*mezzo, "--version"],
        "mezzo ps": [*mezzo, "ps", "--master", master],
        "mezzo run -- true": [
            *mezzo,
            "run",
            "--master",
            master,
            "--cpus",
            "0.1",
            "--mem",
            "16",
            "--",
            "true",
        ],
    }


# As an installed mezzo runs: from cached bytecode (a shell or CI that sets
# PYTHONDONTWRITEBYTECODE would have every run compile mezzo's sources again).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(argv: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, env=ENV)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{argv} exited {done.returncode}: {done.stderr.decode()[-400:]}")
    return took


def import_costs(argv: list[str], top: int = 8) -> list[tuple[str, float]]:
    """The modules (top-level and first-level, cumulative) whose import takes longest in the
    command ``argv`` (a ``[python, SCRIPT or -m mezzo, ...]`` line of :func:`commands`)."""
    done = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], capture_output=True, text=True, env=ENV)
    costs: dict[str, float] = {}
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = (part.strip() for part in line[len("import time:") :].split("|"))
        if cumulative.isdigit() and name.count(".") <= 1:
            costs[name] = max(costs.get(name, 0.0), int(cumulative) / 1e6)
    return sorted(costs.items(), key=lambda item: -item[1])[:top]


def run_steps(master: str, runs: int) -> list[tuple[str, float]]:
    """Where ``mezzo run -- true``'s cluster part goes: the run's own code
    (:func:`mezzo.cli.run_task.run_command`) ``runs`` times in this process, each call to the
    master and each event timed; the median of each step (from one mark to the next, in the
    order they first came) and of the whole, in seconds. No start-up and no imports: what is
    left is round trips, the master's and the agent's work, and the task."""
    from unittest import mock

    from mezzo.cli import run_task
    from mezzo.operator_client import OperatorClient
    from mezzo.v1.scheduler_client import SchedulerClient

    marks: list[tuple[float, str]] = []

    def timed_method(cls: type, name: str, label: object) -> mock._patch:
        real = getattr(cls, name)

        def wrapper(self: object, *args: object, **kwargs: object) -> object:
            what = label(*args) if callable(label) else str(label)
            marks.append((time.perf_counter(), f"{what} sent"))
            try:
                return real(self, *args, **kwargs)
            finally:
                marks.append((time.perf_counter(), f"{what} answered"))

        return mock.patch.object(cls, name, wrapper)

    real_handle = run_task._OneTask.handle

    def handle(self: run_task._OneTask, event: dict) -> None:
        kind = event.get("type", "?")
        if kind == "UPDATE":
            kind = event["update"]["status"].get("state", "?")
        marks.append((time.perf_counter(), f"{kind} came"))
        real_handle(self, event)

    steps: dict[str, list[float]] = {}
    totals: list[float] = []
    with (
        timed_method(OperatorClient, "get", lambda path, **_: f"GET {path}"),
        timed_method(SchedulerClient, "subscribe", "SUBSCRIBE"),
        timed_method(SchedulerClient, "call", lambda kind, *_: kind),
        mock.patch.object(run_task._OneTask, "handle", handle),
        mock.patch.object(run_task, "_say", lambda line: None),
        contextlib.redirect_stdout(io.StringIO()),
    ):
        for _ in range(runs):
            marks.clear()
            started = time.perf_counter()
            status = run_task.run_command(master, ["true"], cpus=0.1, mem=16, name="steps", timeout=30)
            totals.append(time.perf_counter() - started)
            if status != 0:
                raise RuntimeError(f"mezzo run -- true ended {status}")
            for (t0, a), (t1, b) in zip(marks, marks[1:], strict=False):
                steps.setdefault(f"{a} -> {b}", []).append(t1 - t0)
    return [(step, statistics.median(values)) for step, values in steps.items()] + [
        ("the whole run", statistics.median(totals))
    ]


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=100, help="runs of each command (default 100)")
    p.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cli-latency-") as tmp:
        with LocalProcessCluster(
            1, directory=tmp, agent_resources="cpus:16;mem:16384", master={"allocation_interval": 0.01}
        ) as cluster:
            ways = commands(cluster.master)
            for argv_ in ways.values():
                timed(argv_)  # warm: page cache, the master's first framework
            took: dict[str, list[float]] = {name: [] for name in ways}
            for i in range(args.runs):
                for name, argv_ in ways.items():  # interleaved: the machine's drift hits all alike
                    took[name].append(timed(argv_))
                if (i + 1) % 25 == 0:
                    print(f"{i + 1} runs", flush=True)
            imports = {name: import_costs(ways[name]) for name in ("mezzo ps", "mezzo run -- true")}
            steps = run_steps(cluster.master, max(args.runs // 2, 2))
    rows, verdicts = [], []
    for name, values in took.items():
        median, p95 = statistics.median(values), percentile(values, 0.95)
        rows.append(
            f"| `{name}` | {median * 1000:.1f} ms | {p95 * 1000:.1f} ms | {min(values) * 1000:.1f} ms |"
        )
        if name in TARGETS:
            want_median, want_p95 = TARGETS[name]
            ok = median <= want_median and (want_p95 is None or p95 <= want_p95)
            goal = f"median <= {want_median * 1000:g} ms" + (
                f", p95 <= {want_p95 * 1000:g} ms" if want_p95 else ""
            )
            verdicts.append(
                f"- {'met' if ok else '**missed**'}: `{name}` {goal} ({median * 1000:.1f} / {p95 * 1000:.1f} ms)"
            )
    lines = [
        f"Machine: {machine()}. Command: `python bench/cli_latency.py`. A warm local cluster (a master "
        f"and one agent of 16 cpus, plaintext, on loopback); each command run as a whole process, start "
        f"to exit, {args.runs} times, all interleaved; `mezzo` is the console script pip installed, run as "
        f"`{' '.join(os.path.basename(a) for a in mezzo_command())}`.",
        "",
        "| command | median | p95 | least |",
        "|---|---|---|---|",
        *rows,
        "",
        *verdicts,
        "",
        *(
            f"- Imports of `{command}` (`-X importtime`, cumulative, slowest): "
            + ", ".join(f"`{name}` {seconds * 1000:.1f} ms" for name, seconds in costs)
            + "."
            for command, costs in imports.items()
        ),
        "",
        f"`mezzo run -- true`'s cluster part, step by step: its code run {max(args.runs // 2, 2)} times in "
        "the benchmark's process (no start-up, no imports), every call to the master and every event "
        "timed; medians.",
        "",
        "| step | median |",
        "|---|---|",
        *(f"| {step} | {seconds * 1000:.2f} ms |" for step, seconds in steps),
    ]
    print("\n".join(lines))
    if not args.no_write:
        write_section("## How long the command line takes (bench/cli_latency.py)", lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
