#!/usr/bin/env python3
"""Task throughput: tasks launched per second, end to end, at 5,000 agents.

The real ``mezzo master`` process, 5,000 emulated agents (``cpus:8;mem:8192``) and
50 emulated frameworks on the real scheduler driver, each wanting 800 long tasks
of ``cpus:1;mem:1024``: 40,000 tasks fill the cluster. The clock starts when the
first framework receives its first offers and stops when the frameworks have
seen every task TASK_RUNNING; the figure is the rate at which tasks reach TASK_RUNNING *as the frameworks see it*: offer sent,
accepted, validated, sent to the agent, started there, TASK_RUNNING back through
the master to the scheduler. Two ways of using offers:

- ``fill``: a framework launches as many tasks as fit on each offer (how Mesos
  frameworks work: an offer of 8 cpus takes 8 one-cpu tasks);
- ``one``: one task per offer, the rest handed back (every task needs its own
  offer, the closest to a scheduler placing pods one at a time).

Frameworks that still want tasks hand back what they do not use without a refuse
filter (``refuse_seconds = 0``), so it is offered again in the next cycle.

kube-scheduler's ``scheduler_perf`` thresholds for 5,000 nodes are 680-810
pods/s (SchedulingBasic and friends); that is the bar.

Usage::

    python bench/throughput.py               # both modes, 3 runs each, writes docs/benchmarks.md
    python bench/throughput.py --runs 1 --no-write
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _cluster import EmulatedCluster, machine
from _report import write_section

KUBE = "680-810 pods/s"


def one_run(args: argparse.Namespace, mode: str) -> dict:
    slots = args.agents * args.cpus
    per_framework = slots // args.frameworks
    with tempfile.TemporaryDirectory(prefix="throughput-") as tmp:
        with EmulatedCluster(
            Path(tmp),
            args.agents,
            agent_resources=f"cpus:{args.cpus};mem:{args.cpus * 1024}",
            per_connection=args.per_connection,
            # bench/tls_cost.py runs this with TLS on and off, and a master loop of its choice.
            tls=getattr(args, "tls", False),
            master_toml=getattr(args, "master_toml", ""),
        ) as cluster:
            cluster.start_agents()
            cpu0, _ = cluster.master_cpu_rss()
            timeline: list[tuple[float, int]] = []
            cluster.start_frameworks(
                args.frameworks,
                duration=3600,
                stddev=0,
                report_every=0.1,
                # A framework that still wants tasks returns the rest of an offer without a
                # refuse filter, so it goes straight back into the next allocation cycle.
                extra=(
                    "--tasks-per-offer",
                    "0" if mode == "fill" else "1",
                    "--max-tasks",
                    str(per_framework),
                    "--refuse-seconds",
                    "0",
                ),
            )
            total = per_framework * args.frameworks
            deadline = time.monotonic() + args.timeout
            while True:
                counts = cluster.framework_counts()
                running = counts.get("running", 0)
                timeline.append((time.time(), running))
                if running >= total:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{mode}: {running} of {total} tasks running after {args.timeout:g} s")
                time.sleep(0.05)
            cpu1, rss = cluster.master_cpu_rss()
            # When the frameworks counted the last task (their report's own stamp, at
            # most one report interval late), not when this loop noticed.
            done = max(em.latest["t"] for em in cluster.frameworks)
            while cluster.first_offer_at() is None:  # its report may lag the running count
                time.sleep(0.05)
            started = cluster.first_offer_at()
            return {
                "mode": mode,
                "tasks": total,
                "seconds": done - started,
                "rate": total / (done - started),
                "master_cpu": (cpu1 - cpu0) / (done - started),
                "master_rss_mb": rss / 2**20,
                "failed": counts.get("failed", 0),
            }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agents", type=int, default=5_000)
    p.add_argument("--cpus", type=int, default=8, help="cpus (task slots) per agent")
    p.add_argument("--frameworks", type=int, default=50)
    p.add_argument("--per-connection", type=int, default=10, help="emulated agents per connection")
    p.add_argument("--modes", default="fill,one", help="comma-separated: fill, one")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    import mezzo.log

    mezzo.log.configure("warning")
    results: dict[str, list[dict]] = {}
    for mode in args.modes.split(","):
        for i in range(args.runs):
            r = one_run(args, mode)
            results.setdefault(mode, []).append(r)
            print(
                f"{mode} run {i + 1}: {r['tasks']:,} tasks RUNNING in {r['seconds']:.2f} s = "
                f"{r['rate']:,.0f} tasks/s; master {r['master_cpu']:.0%} CPU, "
                f"{r['master_rss_mb']:.0f} MB; {r['failed']} failed",
                flush=True,
            )
    if not args.no_write:
        write_results(args, results)
    return 0


def write_results(args, results: dict[str, list[dict]]) -> None:
    lines = [
        f"`python bench/throughput.py` ({time.strftime('%Y-%m-%d')}, {machine()}; master, emulated agents and "
        f"emulated frameworks on this one machine). {args.agents:,} emulated agents with {args.cpus} cpus each, "
        f"{args.frameworks} frameworks on the real scheduler driver launching {args.agents * args.cpus:,} one-cpu "
        "tasks in all; the clock runs from the first offer a framework receives until every task is "
        "TASK_RUNNING as its scheduler sees it (offer → accept → validation → agent → TASK_RUNNING back). "
        f"Medians of {args.runs} runs, each on a fresh cluster. Bar: kube-scheduler's scheduler_perf "
        f"thresholds at 5,000 nodes, {KUBE}.",
        "",
        "| offers used | tasks | seconds to all RUNNING | tasks/s | runs (tasks/s) | master CPU | kube-scheduler bar |",
        "|---|---|---|---|---|---|---|",
    ]
    names = {"fill": "as many tasks as fit per offer", "one": "one task per offer"}
    for mode, runs in results.items():

        def med(key: str, runs: list[dict] = runs) -> float:
            return statistics.median(r[key] for r in runs)

        each = ", ".join(f"{r['rate']:,.0f}" for r in runs)
        lines.append(
            f"| {names.get(mode, mode)} | {runs[0]['tasks']:,} | {med('seconds'):.2f} s | {med('rate'):,.0f} "
            f"| {each} "
            f"| {med('master_cpu'):.0%} | {KUBE} |"
        )
    write_section("## Task throughput at 5,000 agents", lines)


if __name__ == "__main__":
    sys.exit(main())
