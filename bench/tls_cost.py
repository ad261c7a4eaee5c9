#!/usr/bin/env python3
"""What TLS costs: the same workloads with ``[tls]`` on and off, alternating.

Every connection of the cluster (the emulated agents', the emulated frameworks'
drivers', the probe's and this script's own) runs TLS with certificates made for
the run (:mod:`mezzo.certs`), or none of them does. Three measurements:

1. Fig. 10's workload at ``--agents`` (20,000): 200 frameworks keep the cluster busy
   with tasks of Normal(30 s, 10 s); after the fill, a probe framework runs a 10 s
   task ``--probes`` times. Compared: the master's CPU (user + system over the
   probes' window, 100 % = a core) and the probes' extra delay (start to
   TASK_FINISHED, minus 10 s). Target: under 15 % more master CPU with TLS, and the
   extra delay unchanged beyond noise.
2. Task throughput at 5,000 agents (``bench/throughput.py``'s ``one`` mode: every
   task on an offer of its own): tasks RUNNING per second, and the master's CPU.
3. ``mezzo run -- true`` against a warm local cluster, the whole process: one
   cluster with TLS and one without, runs alternating between them.

Runs alternate off, on, off, on, ... on fresh clusters, so that a drift of the
machine falls on both; each figure is the median of its runs, and the ratio the
median of the pairs' ratios.

Usage::

    python bench/tls_cost.py                       # 3 pairs each, writes docs/benchmarks.md
    python bench/tls_cost.py --pairs 1 --agents 2000 --probes 1 --no-write
    python bench/tls_cost.py --event-loop asyncio  # the master on asyncio's own loop
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import throughput

import mezzo.log
from _cluster import EmulatedCluster, machine
from _report import write_section
from mezzo.certs import tls_toml
from mezzo.emulation import run_probe
from mezzo.testing import LocalProcessCluster

CPU_TARGET = 0.15
"""Most extra master CPU TLS may cost (issue 15)."""


def fig10_run(args: argparse.Namespace, tls: bool) -> dict:
    """One Fig. 10 cluster; the master's CPU and the probes' extra delay."""
    with tempfile.TemporaryDirectory(prefix="tls-cost-") as tmp:
        toml = f'[master]\nevent_loop = "{args.event_loop}"\n'
        with EmulatedCluster(Path(tmp), args.agents, tls=tls, master_toml=toml) as cluster:
            cluster.start_frameworks(args.frameworks, duration=30.0, stddev=10.0)
            cluster.start_agents()
            slots = 2 * args.agents
            cluster.wait_allocated(0.95, slots, timeout=300)
            time.sleep(args.settle)
            before = cluster.sample()
            finished0 = cluster.framework_counts().get("finished", 0)
            extra, busy = [], []
            for i in range(args.probes):
                probe = run_probe(
                    cluster.address,
                    "cpus:1;mem:1024",
                    args.probe_seconds,
                    timeout=120,
                    name=f"probe-{i}",
                    tls=cluster.operator_tls,
                )
                if probe.outcome != "TASK_FINISHED":
                    raise RuntimeError(f"probe {i} ended {probe.outcome}")
                extra.append(probe.times["finished"] - probe.times["started"] - args.probe_seconds)
                busy.append(cluster.running / slots)
            after = cluster.sample()
            span = after.at - before.at
            finished = cluster.framework_counts().get("finished", 0) - finished0
            return {
                "master_cpu": (after.cpu_seconds - before.cpu_seconds) / span,
                "tasks_per_s": finished / span,
                "extra": statistics.median(extra),
                "busy_min": min(busy),
            }


def throughput_run(args: argparse.Namespace, tls: bool) -> dict:
    """bench/throughput.py's ``one`` mode at 5,000 agents, with or without TLS."""
    ns = argparse.Namespace(
        agents=5_000,
        cpus=8,
        frameworks=50,
        per_connection=10,
        timeout=300.0,
        tls=tls,
        master_toml=f'[master]\nevent_loop = "{args.event_loop}"\n',
    )
    return throughput.one_run(ns, "one")


def run_latency(pairs: int) -> dict[bool, list[float]]:
    """Seconds for a whole ``mezzo run -- true`` process, against a TLS cluster and a
    plaintext one, alternating."""
    times: dict[bool, list[float]] = {False: [], True: []}
    with (
        tempfile.TemporaryDirectory(prefix="tls-cost-") as tmp,
        LocalProcessCluster(
            agents=1, master={"allocation_interval": 0.01}, directory=f"{tmp}/plain"
        ) as plain,
        LocalProcessCluster(
            agents=1, master={"allocation_interval": 0.01}, tls=True, directory=f"{tmp}/tls"
        ) as secure,
    ):
        client = secure.dir / "operator.toml"
        t = secure.tls
        assert t is not None
        client.write_text(tls_toml(t))
        for _ in range(pairs * 3 + 1):  # the first of each is a warm-up, not counted
            for tls, cluster in ((False, plain), (True, secure)):
                argv = [sys.executable, "-m", "mezzo", "run", "--master", cluster.master]
                if tls:
                    argv += ["--config", str(client)]
                started = time.monotonic()
                done = subprocess.run([*argv, "--", "true"], capture_output=True, text=True, timeout=60)
                elapsed = time.monotonic() - started
                if done.returncode != 0:
                    raise RuntimeError(f"mezzo run failed ({'tls' if tls else 'plain'}): {done.stderr}")
                times[tls].append(elapsed)
    return {k: v[1:] for k, v in times.items()}


def median_ratio(off: list[float], on: list[float]) -> float:
    """Median of the pairs' on/off ratios; NaN when no pair has a baseline above zero.

    A toy-sized run can measure 0.0 % master CPU with TLS off (the sampling rounds it away); such a
    pair has no ratio, and a report with none says so instead of dividing by zero.
    """
    ratios = [b / a for a, b in zip(off, on, strict=True) if a > 0]
    return statistics.median(ratios) if ratios else math.nan


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agents", type=int, default=20_000, help="Fig. 10 cluster size")
    p.add_argument("--pairs", type=int, default=3, help="off/on pairs of each measurement")
    p.add_argument("--frameworks", type=int, default=200, help="frameworks keeping the Fig. 10 cluster busy")
    p.add_argument("--probes", type=int, default=3, help="probe tasks per Fig. 10 run")
    p.add_argument("--probe-seconds", type=float, default=10.0, help="how long a probe's task runs")
    p.add_argument("--settle", type=float, default=15.0, help="seconds after the fill before measuring")
    p.add_argument("--event-loop", choices=["uvloop", "asyncio"], default="uvloop", help="the master's loop")
    p.add_argument("--skip", default="", help="comma-separated parts to skip: fig10, throughput, run")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    mezzo.log.configure("warning")
    skip = set(filter(None, args.skip.split(",")))
    fig10: dict[bool, list[dict]] = {False: [], True: []}
    tput: dict[bool, list[dict]] = {False: [], True: []}
    for i in range(args.pairs):
        for tls in (False, True):
            label = "TLS " if tls else "plain"
            if "fig10" not in skip:
                r = fig10_run(args, tls)
                fig10[tls].append(r)
                print(
                    f"pair {i + 1} {label} fig10 {args.agents:,}: master {r['master_cpu']:.1%} CPU, "
                    f"{r['tasks_per_s']:,.0f} tasks/s, extra delay {r['extra']:.3f} s, busy >= {r['busy_min']:.1%}",
                    flush=True,
                )
            if "throughput" not in skip:
                r = throughput_run(args, tls)
                tput[tls].append(r)
                print(
                    f"pair {i + 1} {label} throughput 5,000: {r['rate']:,.0f} tasks/s, master {r['master_cpu']:.0%} CPU",
                    flush=True,
                )
    latency = run_latency(args.pairs) if "run" not in skip else {False: [], True: []}
    lines = report(args, fig10, tput, latency)
    print("\n".join(lines))
    if not args.no_write:
        write_section(
            "## What TLS costs (bench/tls_cost.py)",
            [
                f"Machine: {machine()}. Command: `python bench/tls_cost.py` (master event loop: "
                f"{args.event_loop}). Off and on alternate, each run on a fresh cluster; medians of "
                f"{args.pairs} runs, ratios the median of the pairs'.",
                "",
                *lines,
            ],
        )
    return 0


def report(args, fig10, tput, latency) -> list[str]:
    lines = ["| measurement | TLS off | TLS on | on / off (median of pairs) |", "|---|---|---|---|"]
    verdicts = []
    if fig10[False]:
        cpu = {k: [r["master_cpu"] for r in v] for k, v in fig10.items()}
        extra = {k: [r["extra"] for r in v] for k, v in fig10.items()}
        rate = {k: [r["tasks_per_s"] for r in v] for k, v in fig10.items()}
        ratio = median_ratio(cpu[False], cpu[True])
        lines += [
            f"| Fig. 10, {args.agents:,} agents: master CPU | {statistics.median(cpu[False]):.1%} | "
            f"{statistics.median(cpu[True]):.1%} | {ratio:.2f} |",
            f"| Fig. 10: tasks finished per second | {statistics.median(rate[False]):,.0f} | "
            f"{statistics.median(rate[True]):,.0f} | {median_ratio(rate[False], rate[True]):.2f} |",
            f"| Fig. 10: probe extra delay (median) | {statistics.median(extra[False]):.3f} s | "
            f"{statistics.median(extra[True]):.3f} s | runs: "
            f"{', '.join(f'{a:.3f}/{b:.3f}' for a, b in zip(extra[False], extra[True], strict=True))} |",
        ]
        if math.isnan(ratio):
            verdicts.append(
                "- not judged: extra master CPU with TLS (no run measured the master above 0 % with TLS off)"
            )
        else:
            verdicts.append(
                f"- {'met' if ratio - 1 < CPU_TARGET else '**missed**'}: extra master CPU with TLS "
                f"{ratio - 1:+.1%} (target under {CPU_TARGET:.0%})"
            )
    if tput[False]:
        rate = {k: [r["rate"] for r in v] for k, v in tput.items()}
        cpu = {k: [r["master_cpu"] for r in v] for k, v in tput.items()}
        lines += [
            f"| throughput, 5,000 agents: tasks RUNNING per second | {statistics.median(rate[False]):,.0f} | "
            f"{statistics.median(rate[True]):,.0f} | {median_ratio(rate[False], rate[True]):.2f} |",
            f"| throughput: master CPU | {statistics.median(cpu[False]):.0%} | "
            f"{statistics.median(cpu[True]):.0%} | {median_ratio(cpu[False], cpu[True]):.2f} |",
        ]
    if latency[False]:
        lines.append(
            f"| `mezzo run -- true`, whole process | {statistics.median(latency[False]) * 1000:.0f} ms | "
            f"{statistics.median(latency[True]) * 1000:.0f} ms | "
            f"{median_ratio(latency[False], latency[True]):.2f} ({len(latency[True])} runs each) |"
        )
    return lines + [""] + verdicts


if __name__ == "__main__":
    sys.exit(main())
