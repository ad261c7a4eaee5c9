#!/usr/bin/env python3
"""Data locality through delay scheduling: the paper's §6.3, Fig. 8.

The real ``mezzo master`` (DRF) and 93 emulated agents of 4 slots each
(``cpus:4``; maps take 1 cpu), all on this machine. 16 instances of the
delay-scheduling example framework (``examples/delay_scheduling``), each with its
own driver, run map-only jobs back to back; each job's maps read blocks placed at
random over the *whole* cluster (3 replicas on distinct agents, like a shared
HDFS). A map runs Normal(mean, stddev) seconds when node-local and
``--remote-factor`` times longer when not (it would read its block over the
network). Four configurations, each on a fresh cluster:

- static partitioning: each framework only ever sees its own 1/16 of the agents
  (5-6, through its persistent agent filter, ``set_filters``), no delay;
- Mesos (shared cluster, DRF), no delay scheduling (D = 0);
- Mesos with delay scheduling, D = 1 s and D = 5 s.

Per framework, the first ``--warmup-jobs`` jobs are not measured (all frameworks
start together on an idle cluster) and the next ``--jobs`` are; frameworks keep
submitting jobs until every framework has finished its measured ones, so the load
stays the same throughout. Locality is the share of the measured jobs' maps
launched node-local; job time is submission to the last map's end.

Usage::

    python bench/fig8.py                    # 4 configurations x 2 runs (~10 min), writes docs
    python bench/fig8.py --agents 12 --frameworks 3 --maps 12 --jobs 1 --runs 1 --no-write
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import mezzo
import mezzo.log
from _cluster import EmulatedCluster, machine
from _report import ROOT, pyplot, require_plotting, save_figure, write_section
from mezzo.state_client import fetch_metrics, fetch_state

sys.path.insert(0, str(ROOT))  # the example framework is not installed: import it from the repository
from examples.delay_scheduling import DelayPolicy, JobStream, LocalityScheduler, TaskDurations

PAPER = {
    "static": "18 %",
    "no delay": "between static and 1 s (not given in the text)",
    "1 s delay": "> 90 %",
    "5 s delay": "95 %; jobs 1.7x faster than static",
}


@dataclass(frozen=True)
class Config:
    """One bar of Fig. 8: ``delay`` seconds of delay scheduling, ``static`` partitions or not."""

    name: str
    delay: float
    static: bool = False


def configurations(delays: list[float], static: bool) -> list[Config]:
    out = [Config("static", 0.0, static=True)] if static else []
    for d in delays:
        out.append(Config("no delay" if d == 0 else f"{d:g} s delay", d))
    return out


def partitions(hosts: list[str], n: int) -> list[list[str]]:
    """``hosts`` dealt round-robin into ``n`` static partitions (sizes differ by at most one)."""
    return [hosts[i::n] for i in range(n)]


def make_frameworks(
    config: Config, run: int, hosts: list[str], address: str, args: argparse.Namespace
) -> tuple[list[LocalityScheduler], list[mezzo.SchedulerDriver]]:
    """The 16 (``--frameworks``) schedulers and their drivers, not started yet. Seeds
    differ per framework and run, so runs place different blocks."""
    parts = partitions(hosts, args.frameworks) if config.static else [None] * args.frameworks
    schedulers, drivers = [], []
    for i in range(args.frameworks):
        seed = 1000 * run + i
        s = LocalityScheduler(
            JobStream(f"fw{i}", hosts, args.maps, args.replicas, seed=seed),
            DelayPolicy(config.delay),
            TaskDurations(args.task_mean, args.task_stddev, args.remote_factor, seed=seed),
            per_task=mezzo.Resources(cpus=1, mem=1024),
            refuse_seconds=args.refuse_seconds,
            partition=parts[i],
        )
        schedulers.append(s)
        drivers.append(mezzo.SchedulerDriver(s, mezzo.FrameworkInfo(name=f"fw{i}"), address))
    return schedulers, drivers


def run_until_measured(
    cluster: EmulatedCluster, config: Config, schedulers: list[LocalityScheduler], args: argparse.Namespace
) -> list[float]:
    """Wait until every framework has finished its warm-up and measured jobs; the share
    of slots busy, sampled every half second. Raises TimeoutError after ``--timeout``."""
    wanted = args.warmup_jobs + args.jobs
    started = time.monotonic()
    busy = []
    while min(len(s.completed) for s in schedulers) < wanted:
        if time.monotonic() - started > args.timeout:
            raise TimeoutError(
                f"{config.name}: jobs done per framework "
                f"{[len(s.completed) for s in schedulers]} after {args.timeout:g} s"
            )
        cluster.check_alive()
        busy.append(cluster.running / (args.agents * args.cpus))
        time.sleep(0.5)
    return busy


def one_run(config: Config, run: int, args: argparse.Namespace) -> dict:
    """One configuration on a fresh cluster; the measured jobs' figures."""
    resources = f"cpus:{args.cpus};mem:{args.cpus * 1024}"
    with (
        tempfile.TemporaryDirectory(prefix="fig8-") as tmp,
        EmulatedCluster(
            Path(tmp), args.agents, agent_resources=resources, per_connection=args.per_connection
        ) as cluster,
    ):
        cluster.start_agents()
        hosts = sorted(a["hostname"] for a in fetch_state(cluster.address, timeout=30)["agents"])
        schedulers, drivers = make_frameworks(config, run, hosts, cluster.address, args)
        metrics0 = fetch_metrics(cluster.address, timeout=30)
        started = time.monotonic()
        for d in drivers:
            d.start()
        try:
            busy = run_until_measured(cluster, config, schedulers, args)
            elapsed = time.monotonic() - started
            metrics1 = fetch_metrics(cluster.address, timeout=30)
        finally:
            for d in drivers:
                d.stop()
            for d in drivers:
                d.join()
    measured = [s.completed[args.warmup_jobs : args.warmup_jobs + args.jobs] for s in schedulers]
    jobs = [job for per in measured for job in per]
    local = sum(j.local_launches for j in jobs)
    remote = sum(j.remote_launches for j in jobs)
    return {
        "config": config.name,
        "run": run,
        "locality": local / max(1, local + remote),
        "local": local,
        "remote": remote,
        "framework_locality_min": min(locality_of(per) for per in measured),
        "job_seconds": [j.seconds for j in jobs],
        "seconds": elapsed,
        # The first fifth of the samples is the ramp-up from an idle cluster.
        "busy_mean": statistics.fmean(busy[len(busy) // 5 :]) if busy else 0.0,
        "offers": sum(s.offers for s in schedulers),
        "declined": sum(s.declined for s in schedulers),
        "lost": sum(s.lost for s in schedulers),
        "cycles_per_s": (metrics1["allocation_cycles"] - metrics0["allocation_cycles"]) / elapsed,
        "master_cpu": (metrics1["cpu_seconds"] - metrics0["cpu_seconds"]) / elapsed,
    }


def locality_of(jobs: list) -> float:
    """Share of the maps of ``jobs`` launched node-local."""
    local = sum(j.local_launches for j in jobs)
    return local / max(1, local + sum(j.remote_launches for j in jobs))


def describe(r: dict) -> str:
    jobs = r["job_seconds"]
    return (
        f"{r['config']} run {r['run']}: locality {r['locality']:.1%} ({r['local']} node-local, "
        f"{r['remote']} remote; worst framework {r['framework_locality_min']:.1%}), "
        f"job time median {statistics.median(jobs):.1f} s over {len(jobs)} jobs; "
        f"{r['busy_mean']:.0%} of slots busy; {r['offers']} offers, {r['declined']} declined; "
        f"{r['lost']} maps re-run; {r['cycles_per_s']:.1f} allocation cycles/s, master {r['master_cpu']:.0%} CPU; "
        f"{r['seconds']:.0f} s"
    )


def summarize(runs: list[dict]) -> dict:
    return {
        "locality": statistics.median(r["locality"] for r in runs),
        "job_seconds": statistics.median(s for r in runs for s in r["job_seconds"]),
        "localities": [r["locality"] for r in runs],
        "jobs": sum(len(r["job_seconds"]) for r in runs),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agents", type=int, default=93)
    p.add_argument("--cpus", type=int, default=4, help="slots (cpus) per agent; each map takes 1")
    p.add_argument("--frameworks", type=int, default=16)
    p.add_argument("--maps", type=int, default=100, help="maps (blocks) per job")
    p.add_argument("--replicas", type=int, default=3, help="replicas per block, on distinct agents")
    p.add_argument("--jobs", type=int, default=2, help="measured jobs per framework and run")
    p.add_argument("--warmup-jobs", type=int, default=1, help="jobs per framework run first, not measured")
    p.add_argument("--task-mean", type=float, default=3.0, help="mean seconds of a node-local map")
    p.add_argument("--task-stddev", type=float, default=1.0)
    p.add_argument("--remote-factor", type=float, default=2.0, help="how much longer a non-local map takes")
    p.add_argument(
        "--delays",
        type=lambda s: [float(x) for x in s.split(",")],
        default=[0.0, 1.0, 5.0],
        help="comma-separated delays (seconds) on the shared cluster",
    )
    p.add_argument("--no-static", action="store_true", help="skip the static-partitioning configuration")
    p.add_argument(
        "--refuse-seconds",
        type=float,
        default=None,
        help="refuse filter of declines (default: the framework's, the delay within 0.5-1 s)",
    )
    p.add_argument("--runs", type=int, default=2, help="fresh clusters per configuration")
    p.add_argument("--per-connection", type=int, default=10, help="emulated agents per connection")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds one run may take")
    p.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md and the plot")
    args = p.parse_args(argv)
    require_plotting(p, not args.no_write)
    mezzo.log.configure("warning")

    results: dict[str, list[dict]] = {}
    configs = configurations(args.delays, not args.no_static)
    for run in range(1, args.runs + 1):
        for config in configs:
            r = one_run(config, run, args)
            results.setdefault(config.name, []).append(r)
            print(describe(r), flush=True)
    for name, runs in results.items():
        s = summarize(runs)
        print(
            f"{name}: locality median {s['locality']:.1%} (runs: "
            f"{', '.join(f'{x:.1%}' for x in s['localities'])}), job time median {s['job_seconds']:.1f} s "
            f"over {s['jobs']} jobs",
            flush=True,
        )
    if not args.no_write:
        write_results(args, results)
    else:
        print(
            json.dumps(
                {k: [{**r, "job_seconds": len(r["job_seconds"])} for r in v] for k, v in results.items()},
                default=float,
            )
        )
    return 0


def write_results(args, results: dict[str, list[dict]]) -> None:
    plot = ROOT / "docs" / "fig8.png"
    plotted = draw(results, plot)
    slots = args.agents * args.cpus
    refuse = (
        f"{args.refuse_seconds:g} s"
        if args.refuse_seconds is not None
        else "the delay clamped to 0.5-1 s (the framework's default)"
    )
    intro = (
        f"`python bench/fig8.py` ({time.strftime('%Y-%m-%d')}, {machine()}; master, {args.agents} emulated "
        f"agents and {args.frameworks} frameworks on this one machine). Paper §6.3: {args.frameworks} instances of "
        f"the delay-scheduling example framework (`examples/delay_scheduling`) share {args.agents} agents of "
        f"{args.cpus} slots ({slots} in all) under DRF, each running jobs of {args.maps} maps back to back. "
        f"Each map reads one block with {args.replicas} replicas on agents drawn at random from the whole "
        f"cluster, and takes Normal({args.task_mean:g} s, {args.task_stddev:g} s) node-local, "
        f"{args.remote_factor:g}x that remote (an assumption of the emulation: no data moves). Static "
        f"partitioning gives each framework a fixed 1/{args.frameworks} of the agents (its `set_filters` agent "
        f"list) and no delay. Per framework and run, {args.warmup_jobs} warm-up job(s), then {args.jobs} "
        f"measured ones; {args.runs} runs per configuration, each on a fresh cluster. Locality: share of "
        "the measured maps launched on an agent holding their block (median of the runs); job time: "
        f"submission to the last map's end (median of all measured jobs). Declines refuse the agent for "
        f"{refuse}. Target: ≥ 95 % locality at 1 s."
    )
    lines = [
        intro,
        "",
        "| configuration | locality median | job time median | runs (locality) | jobs measured | paper |",
        "|---|---|---|---|---|---|",
    ]
    for name, runs in results.items():
        s = summarize(runs)
        lines.append(
            f"| {name} | {s['locality']:.1%} | {s['job_seconds']:.1f} s "
            f"| {', '.join(f'{x:.1%}' for x in s['localities'])} | {s['jobs']} | {PAPER.get(name, '')} |"
        )
    if plotted:
        lines += ["", "![Fig. 8: data locality and job running time per configuration](fig8.png)"]
    write_section("## Data locality with delay scheduling: the paper's Fig. 8", lines)


def draw(results: dict[str, list[dict]], path: Path) -> bool:
    """The Fig. 8 bars (locality; job time). False without matplotlib."""
    plt = pyplot()
    if plt is None:
        return False
    names = list(results)
    sums = [summarize(results[n]) for n in names]
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3.4), dpi=120)
    xs = range(len(names))
    left.bar(xs, [100 * s["locality"] for s in sums], color="tab:blue")
    paper = {"static": 18, "5 s delay": 95}
    for x, n in zip(xs, names, strict=True):
        if n in paper:
            left.plot([x - 0.4, x + 0.4], [paper[n]] * 2, color="black", linestyle="--", linewidth=1)
    left.set_ylim(0, 100)
    left.set_ylabel("maps launched node-local (%)")
    left.set_title("Data locality (dashed: paper)", fontsize=9)
    right.bar(xs, [s["job_seconds"] for s in sums], color="tab:orange")
    right.set_ylabel("job running time, median (s)")
    right.set_title("Job running times", fontsize=9)
    for ax in (left, right):
        ax.set_xticks(list(xs), names, fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    save_figure(fig, path)
    return True


if __name__ == "__main__":
    sys.exit(main())
