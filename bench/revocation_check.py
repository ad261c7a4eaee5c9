#!/usr/bin/env python3
"""What one revocation check (paper §3.3) costs the master's event loop at scale.

The real :class:`mezzo.master.Master` runs in process with ``revocation_delay`` > 0
and the drf allocator's default guarantees (each framework's weight over the sum
of the weights: an equal share each). Agents of 4 slots are filled with 1-slot
tasks through the real launch path (an offer of the whole agent, then
``launch_tasks``), and the kills the check sends are encoded into Thrift frames
for connections that drop the bytes. Each round times one call of
``RevocationMonitor.check()``, the whole decision the monitor's periodic timer runs.

Cases:

- ``quiet``: every framework holds an equal part of the cluster (its guarantee),
  wants offers and has launched nothing for longer than the delay: nobody is
  starved, but every framework is looked at (the steady state of a full cluster).
- ``recent``: the same cluster, but every framework launched within the delay.
- ``greedy``: one framework holds half the cluster, 199 others (launched recently,
  below their guarantees) the other half, and a late framework holds nothing and is
  starved: a full round, with ``policy.select`` and a kill per victim.
- ``spread``: every framework holds an equal part, a little above its guarantee
  once the late one and a tenth as many reserve frameworks (which want no offers)
  have registered; the late one is starved, and victims come from many holders.

A revocation round leaves the killed tasks running here (no agent answers), so
before each timed round of a starved case the monitor forgets it (its
``revoking`` and ``served``) and the round repeats the same decision.

Usage::

    python bench/revocation_check.py                     # 10,000 and 50,000 agents, writes docs/benchmarks.md
    python bench/revocation_check.py --agents 200 --frameworks 20 --rounds 3 --no-write
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time

from _null_connection import NullConnection
from _report import write_section
from mezzo import AgentInfo, CommandInfo, Filters, FrameworkInfo, Resources, TaskInfo
from mezzo.config import from_dict
from mezzo.hookspecs import RevocationPolicy
from mezzo.master import Master
from mezzo.master.master import tune_gc
from mezzo.master.ports import ManualClock
from mezzo.plugins import load_plugins

SLOTS = 4
AGENT_RESOURCES = Resources(cpus=SLOTS, mem=SLOTS * 2048)
TASK_RESOURCES = Resources(cpus=1, mem=2048)
DELAY = 30.0
CASES = ("quiet", "recent", "greedy", "spread")


class TimedPolicy(RevocationPolicy):
    """Wraps the master's revocation policy, timing ``select``."""

    def __init__(self, inner: RevocationPolicy) -> None:
        super().__init__({}, key="bench")
        self.inner = inner
        self.name = inner.name  # type: ignore[misc]  # a wrapper answers to its policy's name
        self.seconds = 0.0
        self.holders = 0
        self.held_tasks = 0

    def select(self, starved, holders):
        self.holders = len(holders)
        self.held_tasks = sum(len(h.tasks) for h in holders)
        started = time.perf_counter()
        try:
            return self.inner.select(starved, holders)
        finally:
            self.seconds = time.perf_counter() - started


def build(agents: int, frameworks: int, layout: str):
    """A leading master with ``frameworks`` frameworks filling ``agents`` agents
    (``layout``: "equal" parts, or "greedy": the first holds half), and the late
    framework's connection if ``late``."""
    config = from_dict(
        {
            "master": {
                "revocation_delay": DELAY,
                "revocation_grace_period": 5.0,
                "offer_timeout": 0,
                "allocator": {"name": "drf"},
            }
        }
    ).master
    master = Master(config, load_plugins(), clock=ManualClock())
    master.lead()
    fconns = []
    for i in range(frameworks):
        conn = NullConnection(f"framework-{i}")
        master.service.register_framework(conn, FrameworkInfo(name=f"fw-{i}", framework_id=f"fw-{i}"))
        fconns.append(conn)
    aconns = []
    per_conn = 1000  # like the emulated agents, many agents share a connection
    for i in range(agents):
        if i % per_conn == 0:
            aconns.append(NullConnection(f"agents-{i // per_conn}"))
        master.service.register_agent(
            aconns[-1], AgentInfo(hostname=f"host-{i}", port=5051, resources=AGENT_RESOURCES)
        )
    # Who fills which agent.
    agent_ids = list(master.state.agents)
    if layout == "greedy":
        half = agents // 2
        owners = [0] * half + [1 + (j * (frameworks - 1)) // (agents - half) for j in range(agents - half)]
    else:
        owners = [(j * frameworks) // agents for j in range(agents)]
    for n, (aid, owner) in enumerate(zip(agent_ids, owners, strict=True)):
        agent = master.state.agents[aid]
        record = master.state.frameworks[f"fw-{owner}"]
        # What an allocation cycle does for one offer (AllocationCycle.offer).
        resources, agent.free = agent.free, Resources()
        offer = master.state.offer_book.create(record, agent, resources, master.state.now())
        master.state.allocator.allocated(record.id, resources)
        tasks = [
            TaskInfo(
                task_id=f"t-{n}-{k}",
                agent_id=aid,
                resources=TASK_RESOURCES,
                command=CommandInfo(value="sleep 3600"),
            )
            for k in range(SLOTS)
        ]
        master.service.launch_tasks(fconns[owner], record.id, [offer.id], tasks, Filters(refuse_seconds=0))
    return master, fconns, aconns


def add_late(master: Master, reserves: int = 0) -> None:
    """Register the late framework, and ``reserves`` frameworks that want no offers
    (they only lower everyone's guarantee: more of it is then above)."""
    conn = NullConnection("late")
    master.service.register_framework(conn, FrameworkInfo(name="late", framework_id="late"))
    for i in range(reserves):
        conn = NullConnection(f"reserve-{i}")
        fid = f"reserve-{i}"
        master.service.register_framework(conn, FrameworkInfo(name=fid, framework_id=fid))
        master.service.set_needs_offers(conn, fid, False)


def run_case(master: Master, case: str, rounds: int) -> dict:
    monitor = master.term.revocation
    assert monitor is not None, "revocation is on: build() sets master.revocation_delay"
    policy = monitor.policy = TimedPolicy(monitor.policy)
    starved = case in ("greedy", "spread")
    timings, policy_s, victims = [], [], []
    for _ in range(rounds):
        now = master.state.now()
        for fid in master.state.frameworks:
            idle = case == "quiet" or (fid == "late") or (case == "spread")
            monitor.waiting_since[fid] = now - DELAY - 1 if idle else now
        monitor.revoking.clear()
        monitor.served.clear()
        policy.seconds = 0.0
        gc.collect()
        started = time.perf_counter()
        killed = monitor.check()
        elapsed = time.perf_counter() - started
        timings.append(elapsed)
        policy_s.append(policy.seconds)
        victims.append(len(killed))
    if starved and not all(victims):
        raise SystemExit(f"case {case}: a round revoked nothing")
    if not starved and any(victims):
        raise SystemExit(f"case {case}: a round revoked tasks")
    starved_now = [s.framework_id for s in monitor.starved_now]
    return {
        "case": case,
        "median": statistics.median(timings),
        "min": min(timings),
        "max": max(timings),
        "first": timings[0],
        "policy": statistics.median(policy_s),
        "victims": victims[-1],
        "holders": policy.holders if starved else 0,
        "held_tasks": policy.held_tasks if starved else 0,
        "starved": starved_now,
        "rounds": rounds,
    }


def run_size(agents: int, frameworks: int, rounds: int, cases: list[str]) -> list[dict]:
    results = []
    for layout, wanted in (
        ("equal", [c for c in ("quiet", "recent", "spread") if c in cases]),
        ("greedy", [c for c in ("greedy",) if c in cases]),
    ):
        if not wanted:
            continue
        t0 = time.perf_counter()
        master, _, _ = build(agents, frameworks, layout)
        tasks = sum(len(f.tasks) for f in master.state.frameworks.values())
        print(
            f"{agents:,} agents x {frameworks} frameworks, {tasks:,} tasks ({layout}): "
            f"set-up {time.perf_counter() - t0:.1f} s",
            flush=True,
        )
        tune_gc()  # what Master.start does in the daemon
        for case in wanted:
            if case in ("greedy", "spread") and "late" not in master.state.frameworks:
                add_late(master, reserves=frameworks // 10 if case == "spread" else 0)
            res = run_case(master, case, rounds)
            res.update(agents=agents, frameworks=frameworks, tasks=tasks)
            results.append(res)
            print(
                f"  {case:7s} check: median {res['median'] * 1000:8.2f} ms (min {res['min'] * 1000:.2f}, "
                f"max {res['max'] * 1000:.2f}, first {res['first'] * 1000:.2f}); policy.select "
                f"{res['policy'] * 1000:.2f} ms; holders {res['holders']}, tasks offered {res['held_tasks']:,}, "
                f"victims {res['victims']}, starved {res['starved'][:3]}",
                flush=True,
            )
        master.term.close()
        del master
        gc.collect()
    return results


def main(argv=None) -> int:
    from mezzo import log

    log.configure("warning")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--agents", type=int, nargs="+", default=[10_000, 50_000])
    p.add_argument("--frameworks", type=int, default=200)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    p.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = p.parse_args(argv)
    if args.frameworks < 2 or min(args.agents) < 2 * args.frameworks:
        p.error("need at least 2 frameworks and 2 agents per framework")
    print(
        f"revocation check: {SLOTS}-slot agents, 1-slot tasks, drf with weight-proportional guarantees, "
        f"{args.rounds} rounds per case"
    )
    results = []
    for agents in args.agents:
        results += run_size(agents, args.frameworks, args.rounds, args.cases)
    if not args.no_write:
        write_results(args, results)
    return 0


DESCRIBE = {
    "quiet": "nobody starved; all idle past the delay, each at its guarantee",
    "recent": "nobody starved; all launched within the delay",
    "greedy": "1 starved; one framework holds half the cluster",
    "spread": "1 starved; every framework a little above its guarantee",
}


LATE = {"greedy": " + late", "spread": " + late + reserves"}


def write_results(args, results: list[dict]) -> None:
    import os
    import platform

    section = "## Revocation check cost"
    lines = [
        (
            f"`python bench/revocation_check.py --agents {' '.join(str(a) for a in args.agents)} "
            f"--frameworks {args.frameworks} --rounds {args.rounds}` ({time.strftime('%Y-%m-%d')}, "
            f"{os.cpu_count()} cores, Python {platform.python_version()}). One call of "
            "`RevocationMonitor.check()` of the real master (revocation on, drf with its default "
            "weight-proportional guarantees), timed on agents of 4 slots each running 4 one-slot tasks; the kills "
            "of a round are encoded for connections that drop the bytes. Median over the rounds; a starved "
            "case repeats the same decision every round."
        ),
        "",
        (
            "| agents | tasks | frameworks | case | check median | min | max | of which policy.select "
            "| holders offered | tasks offered | victims |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['agents']:,} | {r['tasks']:,} | {r['frameworks']}{LATE.get(r['case'], '')} "
            f"| {r['case']}: {DESCRIBE[r['case']]} | {r['median'] * 1000:.1f} ms | {r['min'] * 1000:.1f} ms "
            f"| {r['max'] * 1000:.1f} ms | {r['policy'] * 1000:.1f} ms | {r['holders']} | {r['held_tasks']:,} "
            f"| {r['victims']} |"
        )
    lines.append("")
    write_section(section, lines)


if __name__ == "__main__":
    sys.exit(main())
