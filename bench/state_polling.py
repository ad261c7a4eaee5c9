#!/usr/bin/env python3
"""Does a client polling ``mezzo state`` in a loop slow the master down?

Apache Mesos masters froze while state queries of big clusters were rendered.
Here the Fig. 10 workload runs at 50,000 emulated agents (200 frameworks keeping
them full) and a probe framework measures *offer latency* (registered → first
offer) and *start latency* (driver start → TASK_RUNNING) of a short task, first
with nobody polling, then while another process fetches the full state in a
loop, both with the master's default (the state rendered in a forked child) and
with ``render_state_in_child = false`` (rendered on the event loop, the way that
froze Mesos).

Usage::

    python bench/state_polling.py                     # writes docs/benchmarks.md
    python bench/state_polling.py --agents 10000 --probes 3 --no-write
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _cluster import EmulatedCluster, machine
from _report import write_section


def poll_forever(master: str, out: Path) -> None:
    """The poller process: fetch the state until SIGTERM, then write what it saw."""
    from mezzo.state_client import fetch_state

    stop = False

    def _stop(*_):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    seconds: list[float] = []
    agents = tasks = 0
    while not stop:
        t = time.monotonic()
        state = fetch_state(master, timeout=120)
        seconds.append(time.monotonic() - t)
        agents, tasks = len(state["agents"]), len(state["tasks"])
    out.write_text(json.dumps({"seconds": seconds, "agents": agents, "tasks": tasks}))


def probes(cluster: EmulatedCluster, n: int, label: str) -> list[dict]:
    from mezzo.emulation import run_probe

    out = []
    for i in range(n):
        p = run_probe(cluster.address, "cpus:1;mem:1024", 1.0, timeout=120, name=f"{label}-{i}")
        t = p.times
        out.append({"offer": t["offered"] - t["registered"], "start": t["running"] - t["started"]})
        print(
            f"  {label} probe {i + 1}: offer latency {out[-1]['offer']:.3f} s, "
            f"start latency {out[-1]['start']:.3f} s",
            flush=True,
        )
    return out


def measure(args: argparse.Namespace, in_child: bool, quiet_too: bool) -> dict:
    toml = "" if in_child else "[master]\nrender_state_in_child = false\n"
    with tempfile.TemporaryDirectory(prefix="state-polling-") as tmp:
        with EmulatedCluster(Path(tmp), args.agents, master_toml=toml) as cluster:
            cluster.start_frameworks(200)
            cluster.start_agents()
            cluster.wait_allocated(0.95, 2 * args.agents, timeout=300)
            time.sleep(args.settle)
            result: dict = {}
            if quiet_too:
                result["quiet"] = probes(cluster, args.probes, "quiet")
            stats = Path(tmp) / "poller.json"
            poller = subprocess.Popen(
                [sys.executable, __file__, "--poll", cluster.address, "--out", str(stats)]
            )
            time.sleep(3)  # let the first polls land
            label = "polled (child)" if in_child else "polled (inline)"
            cpu0, _ = cluster.master_cpu_rss()
            t0 = time.monotonic()
            result["polled"] = probes(cluster, args.probes, label)
            cpu1, _ = cluster.master_cpu_rss()
            result["master_cpu"] = (cpu1 - cpu0) / (time.monotonic() - t0)
            poller.send_signal(signal.SIGTERM)
            poller.wait(180)
            result["poller"] = json.loads(stats.read_text())
            return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--poll", metavar="MASTER", help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--agents", type=int, default=50_000)
    p.add_argument("--probes", type=int, default=5)
    p.add_argument("--settle", type=float, default=20.0)
    p.add_argument("--no-inline", action="store_true", help="skip the run with rendering on the event loop")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    if args.poll:
        poll_forever(args.poll, args.out)
        return 0
    import mezzo.log

    mezzo.log.configure("warning")
    child = measure(args, in_child=True, quiet_too=True)
    inline = None if args.no_inline else measure(args, in_child=False, quiet_too=False)
    rows = [
        ("nobody polling", child["quiet"], None, None),
        (
            "polling, state rendered in a child (default)",
            child["polled"],
            child["poller"],
            child["master_cpu"],
        ),
    ]
    if inline is not None:
        rows.append(
            (
                "polling, state rendered on the event loop",
                inline["polled"],
                inline["poller"],
                inline["master_cpu"],
            )
        )
    lines = [
        f"`python bench/state_polling.py --agents {args.agents}` ({time.strftime('%Y-%m-%d')}, {machine()}). "
        f"The Fig. 10 workload at {args.agents:,} emulated agents (200 frameworks keeping them full); a probe "
        f"framework runs a 1 s task {args.probes} times, first with nobody polling, then while another process "
        "fetches the whole state (`mezzo state`) in a loop. Offer latency is the probe's registration to its "
        "first offer; start latency is its driver start to TASK_RUNNING. Medians (max).",
        "",
        "| | offer latency | start latency | state fetches | one fetch | state size | master CPU |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, runs, poller, cpu in rows:
        off = [r["offer"] for r in runs]
        start = [r["start"] for r in runs]
        fetches = "-" if poller is None else str(len(poller["seconds"]))
        one = "-" if not poller or not poller["seconds"] else f"{statistics.median(poller['seconds']):.2f} s"
        size = "-" if poller is None else f"{poller['agents']:,} agents, {poller['tasks']:,} tasks"
        cpu_s = "-" if cpu is None else f"{cpu:.0%}"
        lines.append(
            f"| {name} | {statistics.median(off):.3f} s ({max(off):.3f}) "
            f"| {statistics.median(start):.3f} s ({max(start):.3f}) | {fetches} | {one} | {size} | {cpu_s} |"
        )
        print(lines[-1], flush=True)
    if not args.no_write:
        write_section("## Responsiveness while `mezzo state` is polled", lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
