#!/usr/bin/env python3
"""Past capacity: the Fig. 10 workload on more agents than the master can keep busy.

Fig. 10's cluster (the real master, N emulated agents of 2 task slots, 200 emulated
frameworks launching a Normal(30 s, 10 s) task on every slot offered) at growing N.
The work offered grows with N (2N / 30 tasks a second); the work done is the tasks
the frameworks see finish per second over a window once the cluster is past its
first wave. Up to the master's capacity they are equal; past it a master that
degrades gracefully keeps doing about as much as at its peak, while one in a retry
storm or a queue collapse does less the more it is offered.

Issue 14's target, checked and printed: at twice the agents the master can carry
(the largest N still at least 95 % busy at every sample), the throughput it carries
is at least 80 % of its peak. Also printed per size: the status updates the agents
sent per task finished (2 without any resend; more is retry amplification), the
master's CPU and inbound messages.

Usage::

    python bench/capacity.py                              # 25k, 50k, 75k, 100k agents
    python bench/capacity.py --agents 2000,4000 --window 10 --no-write   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import mezzo.log
from _cluster import EmulatedCluster, machine
from _report import write_section

SIZES = [25_000, 50_000, 75_000, 100_000]
TARGET_BUSY = 0.95
TARGET_RATIO = 0.80
METRICS_TIMEOUT = 180.0
"""Seconds the master may take to answer ``mezzo state --metrics``: past capacity its
loop turns last seconds, and a tool's request waits for them (the slower answer is
one of the figures)."""


def measure(agents: int, args: argparse.Namespace) -> dict:
    """One size: fill (or give up filling), settle, then count over ``args.window`` seconds."""
    with tempfile.TemporaryDirectory(prefix=f"capacity-{agents}-") as tmp:
        with EmulatedCluster(Path(tmp), agents, per_connection=args.per_connection) as cluster:
            cluster.start_frameworks(
                args.frameworks, duration=args.task_mean, stddev=args.task_stddev, processes=1
            )
            register_s = cluster.start_agents()
            slots = 2 * agents
            try:
                fill_s: float | None = cluster.wait_allocated(TARGET_BUSY, slots, timeout=args.fill_timeout)
            except TimeoutError:
                fill_s = None  # past capacity it may never fill: measure what it does carry
            time.sleep(args.settle)
            cluster.check_alive()
            asked = time.monotonic()
            before, counts_before = cluster.sample(METRICS_TIMEOUT), cluster.framework_counts()
            answered = time.monotonic() - asked
            sent_before = cluster.agents.latest.get("updates_sent", 0)  # type: ignore[union-attr]
            busy = []
            end = time.monotonic() + args.window
            while time.monotonic() < end:
                time.sleep(1.0)
                busy.append(cluster.running / slots)
            asked = time.monotonic()
            after, counts_after = cluster.sample(METRICS_TIMEOUT), cluster.framework_counts()
            answered = max(answered, time.monotonic() - asked)
            sent_after = cluster.agents.latest.get("updates_sent", 0)  # type: ignore[union-attr]
            span = after.at - before.at
            finished = counts_after.get("finished", 0) - counts_before.get("finished", 0)
            return {
                "agents": agents,
                "register_seconds": round(register_s, 1),
                "fill_seconds": None if fill_s is None else round(fill_s, 1),
                "offered_per_s": slots / args.task_mean,
                "finished_per_s": finished / span,
                "updates_per_task": (sent_after - sent_before) / finished if finished else float("inf"),
                "busy_mean": statistics.fmean(busy),
                "busy_min": min(busy),
                "master_cpu": (after.cpu_seconds - before.cpu_seconds) / span,
                "msgs_in": (after.messages_received - before.messages_received) / span,
                "master_rss_mb": after.rss_bytes / 2**20,
                "metrics_seconds": answered,
            }


def verdict(points: list[dict]) -> tuple[str, bool | None]:
    """Issue 14's check over a sweep: the throughput at twice the capacity against the peak."""
    carried = [p["agents"] for p in points if p["busy_min"] >= TARGET_BUSY]
    if not carried:
        return "no size was carried at 95 % busy: no capacity to double", None
    capacity = max(carried)
    peak = max(p["finished_per_s"] for p in points)
    beyond = [p for p in points if p["agents"] >= 2 * capacity]
    if not beyond:
        return (
            f"capacity {capacity:,} agents; no size of at least twice that was measured "
            f"(largest {points[-1]['agents']:,})",
            None,
        )
    worst = min(beyond, key=lambda p: p["finished_per_s"])
    ratio = worst["finished_per_s"] / peak
    return (
        f"capacity {capacity:,} agents; at {worst['agents']:,} agents the master carries "
        f"{worst['finished_per_s']:,.0f} tasks/s, {ratio:.0%} of its peak {peak:,.0f} (target >= {TARGET_RATIO:.0%})",
        ratio >= TARGET_RATIO,
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--agents",
        type=lambda s: [int(x) for x in s.split(",")],
        default=SIZES,
        help="comma-separated cluster sizes, ascending (default 25000,50000,75000,100000)",
    )
    p.add_argument("--frameworks", type=int, default=200)
    p.add_argument("--per-connection", type=int, default=10)
    p.add_argument("--task-mean", type=float, default=30.0)
    p.add_argument("--task-stddev", type=float, default=10.0)
    p.add_argument("--fill-timeout", type=float, default=60.0, help="seconds to wait for 95 %% busy")
    p.add_argument("--settle", type=float, default=30.0, help="seconds after the fill before counting")
    p.add_argument("--window", type=float, default=60.0, help="seconds counted")
    p.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = p.parse_args(argv)
    if any(n <= 0 for n in args.agents) or args.agents != sorted(args.agents):
        p.error(f"--agents {','.join(map(str, args.agents))}: sizes must be positive and ascending")
    mezzo.log.configure("warning")
    points = []
    for n in args.agents:
        point = measure(n, args)
        points.append(point)
        fill = (
            "never 95 % busy" if point["fill_seconds"] is None else f"95 % busy in {point['fill_seconds']} s"
        )
        print(
            f"{n:>7,} agents: offered {point['offered_per_s']:,.0f} tasks/s, finished {point['finished_per_s']:,.0f}/s; "
            f"busy {point['busy_mean']:.1%} (min {point['busy_min']:.1%}); {point['updates_per_task']:.2f} updates "
            f"per task; master {point['master_cpu']:.0%} CPU, {point['msgs_in']:,.0f} msgs/s in; {fill}; "
            f"metrics answered in {point['metrics_seconds']:.1f} s",
            flush=True,
        )
    text, ok = verdict(points)
    print(f"  {'ok  ' if ok else ('MISS' if ok is False else 'n/a ')} {text}")
    if args.no_write:
        print(json.dumps(points, indent=1, default=float))
    else:
        write_results(args, points, text, ok)
    return 0


def write_results(args: argparse.Namespace, points: list[dict], text: str, ok: bool | None) -> None:
    lines = [
        f"`python bench/capacity.py --agents {','.join(str(p['agents']) for p in points)}` "
        f"({time.strftime('%Y-%m-%d')}, {machine()}; the master, the emulated agents and frameworks share the "
        f"machine). Fig. 10's workload ({args.frameworks} frameworks, tasks of Normal({args.task_mean:g} s, "
        f"{args.task_stddev:g} s), 2 slots per agent) at growing sizes; finished tasks counted over "
        f"{args.window:g} s after the fill and {args.settle:g} s of settling.",
        "",
        "| agents | offered tasks/s | finished tasks/s | busy mean | busy min | updates per task "
        "| master CPU | msgs/s in | master RSS | metrics answer |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for pt in points:
        lines.append(
            f"| {pt['agents']:,} | {pt['offered_per_s']:,.0f} | {pt['finished_per_s']:,.0f} | {pt['busy_mean']:.1%} "
            f"| {pt['busy_min']:.1%} | {pt['updates_per_task']:.2f} | {pt['master_cpu']:.0%} "
            f"| {pt['msgs_in']:,.0f} | {pt['master_rss_mb']:.0f} MB | {pt['metrics_seconds']:.1f} s |"
        )
    status = "met" if ok else ("**missed**" if ok is False else "not decided")
    lines += ["", f"- {status}: {text}"]
    write_section("## Past capacity (bench/capacity.py)", lines)


if __name__ == "__main__":
    sys.exit(main())
