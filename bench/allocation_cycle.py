#!/usr/bin/env python3
"""Allocation-cycle benchmark in the shape of Apache Mesos' ``DeclineOffers``.

Mesos' ``HierarchicalAllocator_BENCHMARK_Test.DeclineOffers`` adds agents with
some resources already used by each framework, then runs rounds: every offer of
the previous round is declined with an unlimited refuse filter, and one
allocation cycle is timed. Apache Mesos 1.7.1 took 1.06 s per cycle at 10,000
agents x 1,000 frameworks (the anchor of ``docs/benchmarks.md``).

Here the real :class:`mezzo.master.Master` runs the cycle with the selected
allocator plugin: refuse-filter checks, offer records, allocator bookkeeping and
the encoding of every ``resource_offers`` message into Thrift frames (sent to
connections that drop the bytes, so sockets are the only thing left out).

Usage::

    python bench/allocation_cycle.py                  # 10,000 x 1,000, writes docs/benchmarks.md
    python bench/allocation_cycle.py --agents 2000 --frameworks 200 --rounds 20 --no-write
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from _null_connection import NullConnection
from _report import write_section
from mezzo import AgentInfo, Filters, FrameworkInfo, Resources
from mezzo.config import MasterConfig
from mezzo.master import Master
from mezzo.master.master import tune_gc
from mezzo.master.ports import ManualClock
from mezzo.master.records import TaskRecord
from mezzo.plugins import load_plugins
from mezzo.wire.ttypes import CommandInfo, TaskInfo

ROOT = Path(__file__).resolve().parents[1]
AGENT_RESOURCES = "cpus:24;mem:4096;disk:4096;ports:[31000-32000]"
USED_PER_AGENT = Resources.parse("cpus:16;mem:2014;disk:1024")


def build(agents: int, frameworks: int, allocator: str):

    master = Master(
        MasterConfig(offer_timeout=0, allocator=_alloc_config(allocator)), load_plugins(), clock=ManualClock()
    )
    master.lead()  # a lone master leads from start(); without it no cycle runs
    fconns = []
    for i in range(frameworks):
        conn = NullConnection(f"framework-{i}")
        master.service.register_framework(conn, FrameworkInfo(name=f"fw-{i}"))
        fconns.append(conn)
    fids = list(master.state.frameworks)
    for i in range(agents):
        conn = NullConnection(f"agent-{i}")
        master.service.register_agent(
            conn, AgentInfo(hostname=f"host-{i}", port=5051, resources=Resources.parse(AGENT_RESOURCES))
        )
    # Like the Mesos benchmark, each agent already runs 16 cpus of one framework's tasks.
    for i, agent in enumerate(master.state.agents.values()):
        fid = fids[i % frameworks]
        task = TaskInfo(
            task_id=f"used-{i}",
            agent_id=agent.id,
            resources=USED_PER_AGENT,
            command=CommandInfo(value="true"),
        )
        tr = TaskRecord(framework_id=fid, agent_id=agent.id, info=task, resources=USED_PER_AGENT)
        master.state.frameworks[fid].tasks[task.task_id] = tr
        agent.tasks[(fid, task.task_id)] = tr
        agent.free = agent.free - USED_PER_AGENT
        master.state.allocator.allocated(fid, USED_PER_AGENT)
    return master, fconns


def _alloc_config(name: str):
    from mezzo.config import AllocatorConfig

    return AllocatorConfig(name=name)


def decline_everything(master: Master, fconns) -> int:
    """Every framework declines all its outstanding offers with an unlimited filter."""
    by_id = {c.tag.framework_id: c for c in fconns}
    n = 0
    forever = Filters(refuse_seconds=float(2**31 - 1))
    for fid, record in list(master.state.frameworks.items()):
        if record.offers:
            ids = list(record.offers)
            n += len(ids)
            master.service.decline_offer(by_id[fid], fid, ids, forever)
    return n


def summarize(res: dict) -> dict:
    t = res["timings"]
    offering = [x for x, n in zip(t, res["offers"], strict=True) if n > 0] or [0.0]
    q = lambda xs: statistics.quantiles(xs, n=10)[-1] if len(xs) >= 2 else xs[0]  # noqa: E731
    return {
        "median": statistics.median(t),
        "p90": q(t),
        "max": max(t),
        "min": min(t),
        "offering": len([n for n in res["offers"] if n > 0]),
        "offering_median": statistics.median(offering),
        "offering_p90": q(offering),
    }


def run(agents: int, frameworks: int, rounds: int, allocator: str, profile_round: int | None = None) -> dict:
    t0 = time.perf_counter()
    master, fconns = build(agents, frameworks, allocator)
    setup = time.perf_counter() - t0
    timings, offers = [], []
    tune_gc()  # what Master.start does in the daemon
    for r in range(rounds):
        decline_everything(master, fconns)
        profiler = None
        if r == profile_round:
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        started = time.perf_counter()
        master.term.allocation.run()
        elapsed = time.perf_counter() - started
        if profiler is not None:
            import pstats

            profiler.disable()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(12)
        timings.append(elapsed)
        offers.append(master.term.allocation.last_cycle["offers"])
        if r % 50 == 0 or r == rounds - 1 or elapsed > 1.0:
            print(f"  round {r:4d}: {elapsed * 1000:8.1f} ms, {offers[-1]:6d} offers", flush=True)
    return {"setup": setup, "timings": timings, "offers": offers}


def main(argv=None) -> int:
    from mezzo import log

    log.configure("warning")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--agents", type=int, default=10_000)
    p.add_argument("--frameworks", type=int, default=1_000)
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="allocation cycles to time (default: 2 x frameworks, as in Mesos' benchmark)",
    )
    p.add_argument(
        "--profile-round",
        type=int,
        default=None,
        metavar="N",
        help="profile round N with cProfile and print where its time goes",
    )
    p.add_argument("--allocator", default="drf")
    p.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = p.parse_args(argv)
    if args.rounds is None:
        args.rounds = 2 * args.frameworks
    print(
        f"allocation cycle: {args.agents} agents x {args.frameworks} frameworks, "
        f"allocator {args.allocator}, {args.rounds} rounds"
    )
    res = run(args.agents, args.frameworks, args.rounds, args.allocator, args.profile_round)
    s = summarize(res)
    print(
        f"set-up {res['setup']:.1f} s; all {len(res['timings'])} cycles: median {s['median']:.3f} s, "
        f"p90 {s['p90']:.3f} s, max {s['max']:.3f} s; the {s['offering']} cycles that made offers: "
        f"median {s['offering_median']:.3f} s, p90 {s['offering_p90']:.3f} s"
    )
    if not args.no_write:
        write_results(args, res)
    return 0


def write_results(args, res) -> None:
    import os
    import platform

    s = summarize(res)
    section = "## Allocation cycle (Mesos DeclineOffers shape)"
    lines = [
        section,
        "",
        f"`python bench/allocation_cycle.py --agents {args.agents} --frameworks {args.frameworks} "
        f"--rounds {args.rounds}` ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, allocator `{args.allocator}`). Every round, each framework "
        "declines all its offers with an unlimited refuse filter, then one allocation cycle of the real "
        "master is timed (allocator, refuse filters, offer records and the Thrift encoding of every "
        "`resource_offers` message; no sockets). As in Mesos' benchmark the rounds run until every "
        "framework has refused every agent, so later cycles make no offers.",
        "",
        "| agents | frameworks | cycles | median (all) | p90 (all) | max | cycles making offers | their median | their p90 | Mesos 1.7.1 | target |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        f"| {args.agents:,} | {args.frameworks:,} | {len(res['timings'])} | {s['median']:.3f} s | {s['p90']:.3f} s "
        f"| {s['max']:.3f} s | {s['offering']} | {s['offering_median']:.3f} s | {s['offering_p90']:.3f} s "
        f"| 1.06 s | ≤ 0.5 s |",
        "",
    ]
    write_section(section, lines[2:])


if __name__ == "__main__":
    sys.exit(main())
