#!/usr/bin/env python3
"""What the Mesos v1 scheduler API costs the master, against mezzo's own Thrift API.

Fig. 10's workload (``bench/fig10.py``) twice on the same machine, alternating: 200
emulated frameworks keep N emulated agents (2 task slots each) busy with tasks of
Normal(30 s, 10 s), once on the Thrift scheduler driver and once through the v1
façade (``POST /api/v1/scheduler``, spoken as pymesos speaks it: a subscription
stream, one ACCEPT or DECLINE per offer, one ACKNOWLEDGE per update, each a
separate HTTP request; :mod:`mezzo.emulation.v1_frameworks`). Once the cluster is
full and past its first wave of task ends, the master's CPU (user + system, from
/proc) is read over a window in which a test framework on the same API runs one
task of ``--probe-seconds``, ``--runs`` times; the window's launched tasks give
the master's CPU per task, the probes the extra delay.

Usage::

    python bench/v1_cost.py                  # 10,000 agents, 3 rounds of each API, alternating
    python bench/v1_cost.py --quick          # 1,000 agents, 2 rounds: a few minutes
    python bench/v1_cost.py --agents 200 --frameworks 20 --rounds 1 --no-write   # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import mezzo.log
from _cluster import EmulatedCluster, machine
from _report import write_section
from mezzo.emulation import run_probe
from mezzo.emulation.v1_frameworks import run_v1_probe

APIS = ("thrift", "v1")


def probe(api: str, address: str, seconds: float, name: str) -> dict[str, float]:
    """One run of the test framework on ``api``: the steps' seconds; raises unless it finished."""
    if api == "thrift":
        thrift = run_probe(address, "cpus:1;mem:1024", seconds, timeout=120, name=name)
        outcome, t = thrift.outcome, thrift.times
    else:
        v1 = asyncio.run(run_v1_probe(address, "cpus:1;mem:1024", seconds, timeout=120, name=name))
        outcome, t = v1.outcome, v1.times
    if outcome != "TASK_FINISHED":
        raise RuntimeError(f"{api} probe {name} ended {outcome}")
    return {"extra": t["finished"] - t["started"] - seconds, "offer": t["offered"] - t["registered"]}


def measure(api: str, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"v1cost-{api}-") as tmp:
        with EmulatedCluster(Path(tmp), args.agents, per_connection=args.per_connection) as cluster:
            cluster.start_frameworks(
                args.frameworks,
                duration=args.task_mean,
                stddev=args.task_stddev,
                processes=args.framework_processes,
                extra=("--api", api),
            )
            cluster.start_agents()
            slots = 2 * args.agents
            cluster.wait_allocated(0.95, slots, timeout=args.fill_timeout)
            time.sleep(args.settle)
            launched_before = cluster.framework_counts().get("launched", 0)
            before = cluster.sample()
            busy = [cluster.running / slots]
            probes = []
            for i in range(args.runs):
                probes.append(probe(api, cluster.address, args.probe_seconds, f"probe-{i}"))
                busy.append(cluster.running / slots)
            after = cluster.sample()
            counts = cluster.framework_counts()
            launched = counts.get("launched", 0) - launched_before
            span = after.at - before.at
            cpu = after.cpu_seconds - before.cpu_seconds
            return {
                "api": api,
                "tasks_per_second": launched / span,
                "master_cpu": cpu / span,
                "cpu_ms_per_task": 1000 * cpu / max(launched, 1),
                "master_rss_mb": after.rss_bytes / 2**20,
                "extra": statistics.median(p["extra"] for p in probes),
                "offer": statistics.median(p["offer"] for p in probes),
                "busy": statistics.fmean(busy),
                "failed": counts.get("failed", 0),
                "duplicates": counts.get("duplicates", 0),
                "call_errors": counts.get("call_errors", 0),
            }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="1,000 agents, 2 rounds, shorter settling")
    p.add_argument("--agents", type=int, default=None, help="emulated agents (default 10,000; quick 1,000)")
    p.add_argument(
        "--rounds", type=int, default=None, help="runs of each API, alternating (default 3; quick 2)"
    )
    p.add_argument("--runs", type=int, default=3, help="test-framework runs per measurement window")
    p.add_argument("--frameworks", type=int, default=200)
    p.add_argument("--framework-processes", type=int, default=1)
    p.add_argument("--per-connection", type=int, default=10, help="emulated agents per connection")
    p.add_argument("--task-mean", type=float, default=30.0)
    p.add_argument("--task-stddev", type=float, default=10.0)
    p.add_argument("--settle", type=float, default=None, help="seconds after the fill (default 30; quick 10)")
    p.add_argument("--fill-timeout", type=float, default=300.0)
    p.add_argument("--probe-seconds", type=float, default=10.0)
    p.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = p.parse_args(argv)
    mezzo.log.configure("warning")
    args.agents = args.agents or (1_000 if args.quick else 10_000)
    args.rounds = args.rounds or (2 if args.quick else 3)
    args.settle = args.settle if args.settle is not None else (10.0 if args.quick else 30.0)

    points: dict[str, list[dict]] = {api: [] for api in APIS}
    for r in range(args.rounds):
        # Alternate which API goes first, so that a drift of the machine falls on both.
        for api in APIS if r % 2 == 0 else reversed(APIS):
            pt = measure(api, args)
            points[api].append(pt)
            print(
                f"round {r + 1} {api:>6}: master {pt['cpu_ms_per_task']:.3f} ms CPU per task "
                f"({pt['master_cpu']:.0%} CPU, {pt['tasks_per_second']:,.0f} tasks/s, "
                f"{pt['master_rss_mb']:.0f} MB); extra delay {pt['extra']:.3f} s "
                f"(offer {pt['offer']:.3f} s); {pt['busy']:.1%} busy; "
                f"failed {pt['failed']}, duplicates {pt['duplicates']}, call errors {pt['call_errors']}",
                flush=True,
            )
    ratios = [
        v1["cpu_ms_per_task"] / th["cpu_ms_per_task"]
        for th, v1 in zip(points["thrift"], points["v1"], strict=True)
    ]
    print(
        f"v1 / thrift master CPU per task: median {statistics.median(ratios):.2f} ({', '.join(f'{x:.2f}' for x in ratios)})"
    )
    if not args.no_write:
        write_results(args, points, ratios)
    return 0


def write_results(args, points: dict[str, list[dict]], ratios: list[float]) -> None:
    cmd = "python bench/v1_cost.py" + (" --quick" if args.quick else "")
    lines = [
        f"`{cmd}` ({time.strftime('%Y-%m-%d')}, {machine()}; master, {args.agents:,} emulated agents, "
        f"{args.frameworks} emulated frameworks and the test framework on this one machine). Fig. 10's workload "
        f"(tasks of Normal({args.task_mean:g} s, {args.task_stddev:g} s), 2 slots per agent) on each API, "
        f"{args.rounds} rounds alternating which goes first; every figure is the median of the rounds. "
        "*v1* frameworks speak the Mesos v1 scheduler HTTP API as pymesos does (a stream, then one HTTP "
        "request per ACCEPT, DECLINE and ACKNOWLEDGE); *thrift* ones use mezzo's driver. Master CPU per task "
        "is the master process's user + system CPU over the window divided by the tasks launched in it. "
        "Target: the façade adds under 25 % master CPU per task.",
        "",
        "| API | master CPU per task | master CPU | tasks/s | master RSS | extra delay (10 s task) | probe's wait for an offer | busy |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for api in APIS:
        pts = points[api]

        def med(key: str, pts=pts) -> float:
            return statistics.median(p[key] for p in pts)

        lines.append(
            f"| {api} | {med('cpu_ms_per_task'):.3f} ms | {med('master_cpu'):.0%} | {med('tasks_per_second'):,.0f} "
            f"| {med('master_rss_mb'):.0f} MB | {med('extra'):.3f} s | {med('offer'):.3f} s | {med('busy'):.1%} |"
        )
    lines += [
        "",
        f"v1 / thrift master CPU per task, per round: {', '.join(f'{x:.2f}' for x in ratios)}; "
        f"median **{statistics.median(ratios):.2f}**.",
    ]
    write_section("## Mesos v1 scheduler API: what the façade costs the master", lines)


if __name__ == "__main__":
    sys.exit(main())
