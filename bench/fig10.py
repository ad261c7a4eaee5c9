#!/usr/bin/env python3
"""The paper's scalability experiment (§6.5, Fig. 10) on one machine.

For each cluster size N: the real ``mezzo master`` process, N emulated agents
(``cpus:2;mem:2048``, so 2 tasks per agent) and 200 emulated frameworks on the
real scheduler driver that launch one ``cpus:1;mem:1024`` task on every offer, each
task lasting Normal(30 s, 10 s). Once the cluster is full and past its first wave
of task ends, a test framework registers, runs one 10 s task and leaves; its
extra delay over 10 s (start of its driver to the TASK_FINISHED it receives) is
the figure, measured ``--runs`` times one after the other.

Also measured over the probes' window: the master process's CPU (user + system,
from /proc), its resident memory, the messages it received and sent per second
(its own counters, ``mezzo state --metrics``) and the share of task slots busy.

Usage::

    python bench/fig10.py                     # 1k, 5k, 10k, 20k, 50k agents, 5 runs each
    python bench/fig10.py --quick             # 1k and 5k agents, 3 runs: a few minutes
    python bench/fig10.py --agents 50000 --runs 5 --no-write
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
from _report import ROOT, pyplot, require_plotting, save_figure, write_section
from mezzo.emulation import run_probe

FULL = [1_000, 5_000, 10_000, 20_000, 50_000]
QUICK = [1_000, 5_000]
PROBE_SECONDS = 10.0


def measure_point(agents: int, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"fig10-{agents}-") as tmp:
        with EmulatedCluster(
            Path(tmp),
            agents,
            per_connection=args.per_connection,
            master_toml=getattr(args, "master_toml", ""),
        ) as cluster:
            # Frameworks first, so that DRF spreads the agents over all of them as they
            # register (the first framework up would otherwise take a whole idle cluster).
            cluster.start_frameworks(
                args.frameworks,
                duration=args.task_mean,
                stddev=args.task_stddev,
                processes=args.framework_processes,
            )
            register_s = cluster.start_agents()
            slots = 2 * agents
            fill_s = cluster.wait_allocated(0.95, slots, timeout=args.fill_timeout)
            print(
                f"  {agents:>6} agents registered in {register_s:.1f} s; 95 % busy {fill_s:.1f} s later",
                flush=True,
            )
            # Past the fill, let the first wave of task ends arrive: steady churn.
            time.sleep(args.settle)
            before = cluster.sample()
            busy = [cluster.running / slots]
            probes = []
            for i in range(args.runs):
                probe = run_probe(
                    cluster.address, "cpus:1;mem:1024", args.probe_seconds, timeout=120, name=f"probe-{i}"
                )
                t = probe.times
                if probe.outcome != "TASK_FINISHED":
                    raise RuntimeError(f"probe {i} ended {probe.outcome}")
                probes.append(
                    {
                        "extra": t["finished"] - t["started"] - args.probe_seconds,
                        "register": t["registered"] - t["started"],
                        "offer": t["offered"] - t["registered"],
                        "start": t["running"] - t["offered"],
                        "finish": t["finished"] - t["running"] - args.probe_seconds,
                    }
                )
                busy.append(cluster.running / slots)
                print(
                    f"  {agents:>6} agents run {i + 1}: extra {probes[-1]['extra']:.3f} s "
                    f"(register {probes[-1]['register']:.3f}, offer {probes[-1]['offer']:.3f}, "
                    f"start {probes[-1]['start']:.3f}, finish {probes[-1]['finish']:.3f}); "
                    f"{busy[-1]:.1%} busy",
                    flush=True,
                )
            after = cluster.sample()
            span = after.at - before.at
            counts = cluster.framework_counts()
            return {
                "agents": agents,
                "frameworks": args.frameworks,
                "register_seconds": round(register_s, 1),
                "fill_seconds": round(fill_s, 1),
                "probes": probes,
                "extra": [p["extra"] for p in probes],
                "master_cpu": (after.cpu_seconds - before.cpu_seconds) / span,
                "master_rss_mb": after.rss_bytes / 2**20,
                "msgs_in": (after.messages_received - before.messages_received) / span,
                "msgs_out": (after.messages_sent - before.messages_sent) / span,
                "busy_mean": statistics.fmean(busy),
                "busy_min": min(busy),
                "tasks_finished": counts.get("finished", 0),
                "tasks_failed": counts.get("failed", 0),
                "duplicates": counts.get("duplicates", 0),
            }


def summarize(point: dict) -> dict:
    extra = sorted(point["extra"])
    return {"median": statistics.median(extra), "min": extra[0], "max": extra[-1]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="1k and 5k agents, 3 runs, shorter settling")
    p.add_argument(
        "--agents",
        type=lambda s: [int(x) for x in s.split(",")],
        default=None,
        help="comma-separated cluster sizes (default 1000,5000,10000,20000,50000)",
    )
    p.add_argument("--runs", type=int, default=None, help="probe runs per size (default 5; quick 3)")
    p.add_argument("--frameworks", type=int, default=200)
    p.add_argument(
        "--framework-processes", type=int, default=1, help="processes the emulated frameworks are spread over"
    )
    p.add_argument("--per-connection", type=int, default=10, help="emulated agents per connection")
    p.add_argument("--task-mean", type=float, default=30.0)
    p.add_argument("--task-stddev", type=float, default=10.0)
    p.add_argument(
        "--settle",
        type=float,
        default=None,
        help="seconds to wait after the cluster fills (default 30; quick 10)",
    )
    p.add_argument("--fill-timeout", type=float, default=300.0)
    p.add_argument(
        "--probe-seconds",
        type=float,
        default=PROBE_SECONDS,
        help="the test framework's task length (the paper's: 10 s)",
    )
    p.add_argument(
        "--master-toml",
        default="",
        metavar="TOML",
        help='more of the master\'s configuration, e.g. "[master]\\nmax_completed_tasks_per_framework = 0"',
    )
    p.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md and the plot")
    args = p.parse_args(argv)
    require_plotting(p, not args.no_write)
    args.master_toml = args.master_toml.replace("\\n", "\n")
    mezzo.log.configure("warning")
    sizes = args.agents or (QUICK if args.quick else FULL)
    args.runs = args.runs or (3 if args.quick else 5)
    args.settle = args.settle if args.settle is not None else (10.0 if args.quick else 30.0)

    points = []
    for n in sizes:
        print(f"{n} agents, {args.frameworks} frameworks:", flush=True)
        point = measure_point(n, args)
        s = summarize(point)
        print(
            f"  median extra delay {s['median']:.3f} s (min {s['min']:.3f}, max {s['max']:.3f}); "
            f"master {point['master_cpu']:.0%} CPU, {point['master_rss_mb']:.0f} MB, "
            f"{point['msgs_in']:,.0f} msgs/s in, {point['msgs_out']:,.0f} out; "
            f"{point['busy_mean']:.1%} busy (min {point['busy_min']:.1%})",
            flush=True,
        )
        points.append(point)
    if not args.no_write:
        write_results(args, points)
    else:
        print(json.dumps(points, indent=1, default=float))
    return 0


def write_results(args, points: list[dict]) -> None:
    plot = ROOT / "docs" / "fig10.png"
    plotted = draw(points, plot)
    cmd = "python bench/fig10.py" + (" --quick" if args.quick else "")
    if args.agents:
        cmd += " --agents " + ",".join(str(p["agents"]) for p in points)
    lines = [
        f"`{cmd}` ({time.strftime('%Y-%m-%d')}, {machine()}; master, emulated agents, "
        f"emulated frameworks and the test framework all on this one machine). Paper §6.5: "
        f"{args.frameworks} frameworks keep N emulated agents (2 task slots each) busy with tasks "
        f"of Normal({args.task_mean:g} s, {args.task_stddev:g} s); a test framework then registers, runs one "
        f"{args.probe_seconds:g} s task and leaves, {args.runs} times. *Extra delay* is its driver start to its "
        f"TASK_FINISHED, minus {args.probe_seconds:g} s. Master CPU is user + system time of the master process over the probes' window "
        "(100 % = one core); messages are the master's own counters. Target: < 1 s at 50,000 agents "
        "with ≥ 95 % of the cluster allocated (paper: < 1 s on 99 EC2 machines).",
        "",
        "| agents | extra delay median | min | max | register | offer | start | cluster busy (mean / min) "
        "| master CPU | master RSS | msgs/s in | msgs/s out |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for pt in points:
        s = summarize(pt)
        med = {k: statistics.median(p[k] for p in pt["probes"]) for k in ("register", "offer", "start")}
        lines.append(
            f"| {pt['agents']:,} | {s['median']:.3f} s | {s['min']:.3f} s | {s['max']:.3f} s "
            f"| {med['register']:.3f} s | {med['offer']:.3f} s | {med['start']:.3f} s "
            f"| {pt['busy_mean']:.1%} / {pt['busy_min']:.1%} | {pt['master_cpu']:.0%} "
            f"| {pt['master_rss_mb']:.0f} MB | {pt['msgs_in']:,.0f} | {pt['msgs_out']:,.0f} |"
        )
    lines.append("")
    lines.append(
        "Register, offer and start are the medians of the probe's steps: driver start to "
        "registered, registered to the offer its task went on, that offer to TASK_RUNNING."
    )
    if plotted:
        lines += ["", "![Fig. 10: extra delay of a 10 s task vs. cluster size](fig10.png)"]
    write_section("## Scalability: the paper's Fig. 10", lines)


def draw(points: list[dict], path: Path) -> bool:
    """The Fig. 10 plot: median extra delay with min-max bars vs. agents. False without matplotlib."""
    plt = pyplot()
    if plt is None:
        return False
    xs = [p["agents"] for p in points]
    meds = [summarize(p)["median"] for p in points]
    lo = [m - summarize(p)["min"] for m, p in zip(meds, points, strict=True)]
    hi = [summarize(p)["max"] - m for m, p in zip(meds, points, strict=True)]
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=120)
    ax.errorbar(xs, meds, yerr=[lo, hi], marker="o", capsize=4, label="mezzo (this machine, 2 cores)")
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="target / paper: 1 s")
    ax.set_xlabel("emulated agents")
    ax.set_ylabel("extra delay of a 10 s task (s)")
    ax.set_ylim(bottom=0)
    ax.set_xlim(left=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    save_figure(fig, path)
    return True


if __name__ == "__main__":
    sys.exit(main())
