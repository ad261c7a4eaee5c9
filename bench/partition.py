#!/usr/bin/env python3
"""A quarter of the cluster partitioned from the master, on simulated hosts.

A master on a host of its own and ``--agents`` emulated agents spread over ``--hosts``
hosts (``mezzo.testing.netsim``: network namespaces on a bridge; the agents of a host
share its address, as containers behind one would). Three frameworks run in this
process, on the bridge's own address:

- *aware* (``PARTITION_AWARE``) and *lossy* (not) each hold one long task on every
  agent;
- *probe* launches a short task on whatever else is offered, all the time.

Once all holds run, the agents of a quarter of the hosts are partitioned from the
master (nftables drops, both ways), and held there until every one of their tasks has
been reported; then the partition heals. Measured, from the cut:

- *unreachable*: until *aware* gets TASK_UNREACHABLE for the first, the median and the
  last of its tasks on the cut agents; *lost*: the same for *lossy*'s TASK_LOST.
  ``master.agent_ping_timeout`` bounds the first; ``master.agent_removal_fraction``
  (how much of the cluster may be declared lost per ``agent_removal_window``) the spread;
- *offers*: the offers *probe* got per second during the partition, against the same
  measure before it (near 1: the rest of the cluster goes on offering, and the probe's
  launches rather than the number of agents bound the rate), and the longest gap
  between two offers during it;

and from the heal:

- *back*: until *aware* has heard that every one of those tasks runs again (reason
  ``agent_reregistered``), and until every cut agent is registered again.

Usage::

    sudo python bench/partition.py                  # 1,000 agents on 8 hosts, 3 runs
    sudo python bench/partition.py --quick          # 40 agents on 4 hosts, 1 run
    sudo python bench/partition.py --agents 400 --runs 1 --no-write
"""

from __future__ import annotations

import argparse
import functools
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import mezzo
import mezzo.log
from _cluster import machine, terminate
from _report import write_section
from mezzo import Filters, FrameworkInfo, Resources
from mezzo.emulation import emulated_task
from mezzo.state_client import MasterUnreachable, fetch_state
from mezzo.testing import free_port, netsim, to_toml, wait_for
from mezzo.testing.netsim import SimNetwork

HOLD = Resources(cpus=1, mem=64)
PROBE = Resources(cpus=0.5, mem=32)
wait = functools.partial(wait_for, interval=0.05)
"""Polls (the master's state, mostly) every 50 ms: faster would load the master measured."""


class Holder(mezzo.Scheduler):
    """One long task on every agent; records when each task's updates came."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lock = threading.Lock()
        self.placed: dict[str, str] = {}
        """Agent id -> its task id."""
        self.seen: dict[tuple[str, str], float] = {}
        """(task id, state name or reason) -> when first seen."""
        self.running: set[str] = set()

    def resource_offers(self, driver, offers):
        with self.lock:
            for o in offers:
                if o.agent_id in self.placed or not HOLD.fits_in(Resources.of(o.resources)):
                    driver.decline_offer(o.offer_id, Filters(refuse_seconds=3600))
                    continue
                task_id = f"{self.name}-{len(self.placed)}"
                self.placed[o.agent_id] = task_id
                driver.launch_tasks(
                    o.offer_id,
                    [emulated_task(task_id, o.agent_id, HOLD, 36_000)],
                    Filters(refuse_seconds=3600),
                )

    def status_update(self, driver, status):
        now = time.monotonic()
        with self.lock:
            state = mezzo.state_name(status.state)
            self.seen.setdefault((status.task_id, state), now)
            if status.reason:
                self.seen.setdefault((status.task_id, status.reason), now)
            if state == "TASK_RUNNING":
                self.running.add(status.task_id)
            else:
                self.running.discard(status.task_id)

    def times(self, tasks: list[str], key: str, since: float) -> list[float]:
        with self.lock:
            return sorted(
                self.seen[(t, key)] - since
                for t in tasks
                if (t, key) in self.seen and self.seen[(t, key)] >= since
            )


class Probe(mezzo.Scheduler):
    """A short task on every offer that fits one; counts offers and when they came."""

    def __init__(self) -> None:
        self.offers: list[float] = []
        self.launched = 0
        self.lock = threading.Lock()

    def resource_offers(self, driver, offers):
        now = time.monotonic()
        with self.lock:
            for o in offers:
                self.offers.append(now)
                if PROBE.fits_in(Resources.of(o.resources)):
                    self.launched += 1
                    task = emulated_task(f"probe-{self.launched}", o.agent_id, PROBE, 0.5)
                    driver.launch_tasks(o.offer_id, [task], Filters(refuse_seconds=0))
                else:
                    driver.decline_offer(o.offer_id, Filters(refuse_seconds=1))

    def rate(self, start: float, end: float) -> tuple[float, float]:
        """Offers per second in [start, end) and the longest gap between two of them."""
        with self.lock:
            times = [t for t in self.offers if start <= t < end]
        if len(times) < 2:
            return 0.0, end - start
        gaps = [b - a for a, b in zip([start, *times], [*times, end], strict=True)]
        return len(times) / (end - start), max(gaps)


def say(t0: float, what: str) -> None:
    """A progress line (on stderr): a run takes minutes, none of them silent."""
    print(f"  [{time.monotonic() - t0:6.1f} s] {what}", file=sys.stderr, flush=True)


def one_run(args: argparse.Namespace, workdir: Path) -> dict:
    t0 = time.monotonic()
    with SimNetwork() as net:
        master_host = net.add_host("master")
        hosts = [net.add_host(f"h{i}") for i in range(1, args.hosts + 1)]
        port = free_port()
        address = f"{master_host.address}:{port}"
        config = workdir / "master.toml"
        config.write_text(
            to_toml(
                {
                    "master": {
                        "listen": address,
                        "allocation_interval": 0.05,
                        "agent_ping_interval": args.ping_interval,
                        "agent_ping_timeout": args.ping_timeout,
                        "agent_removal_fraction": args.removal_fraction,
                    },
                    "log": {"level": "warning", "format": "console"},
                }
            )
        )
        procs: list[subprocess.Popen] = []
        drivers: list[mezzo.SchedulerDriver] = []
        try:
            log = open(workdir / "master.log", "ab")
            procs.append(
                subprocess.Popen(
                    master_host.command([sys.executable, "-m", "mezzo", "master", "--config", str(config)]),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
            wait(lambda: _state(address), 30, "the master")
            per_host = args.agents // args.hosts
            for i, host in enumerate(hosts):
                agent_log = open(workdir / f"agents-{i}.log", "ab")
                procs.append(
                    subprocess.Popen(
                        host.command(
                            [
                                sys.executable,
                                "-m",
                                "mezzo.emulation",
                                "agents",
                                "--master",
                                address,
                                "--count",
                                str(per_host),
                                "--resources",
                                "cpus:3;mem:1024",
                                "--per-connection",
                                "1",
                                "--log-level",
                                "warning",
                                "--report-every",
                                "5",
                            ]
                        ),
                        stdout=agent_log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
            agents = per_host * args.hosts
            wait(lambda: (s := _state(address)) and len(s["agents"]) >= agents, 300, f"{agents} agents")
            say(t0, f"{agents} agents registered")
            aware, lossy, probe = Holder("aware"), Holder("lossy"), Probe()

            def start(scheduler: mezzo.Scheduler, info: FrameworkInfo) -> None:
                driver = mezzo.SchedulerDriver(scheduler, info, address)
                driver.start()
                drivers.append(driver)

            start(aware, FrameworkInfo(name="aware", capabilities=["PARTITION_AWARE"], failover_timeout=600))
            start(lossy, FrameworkInfo(name="lossy", failover_timeout=600))
            wait(
                lambda: len(aware.running) == agents and len(lossy.running) == agents,
                300,
                "every hold to run",
            )
            say(t0, f"{2 * agents} held tasks running")
            start(probe, FrameworkInfo(name="probe", failover_timeout=600))  # after: it would crowd them
            state = _state(address)
            assert state is not None
            by_host: dict[str, str] = {}
            for a in state["agents"]:
                by_host[a["id"]] = a["address"].rpartition(":")[0]
            cut_hosts = hosts[: max(1, args.hosts // 4)]
            cut_addresses = {h.address for h in cut_hosts}
            cut_agents = [aid for aid, host in by_host.items() if host in cut_addresses]
            aware_cut = [aware.placed[a] for a in cut_agents]
            lossy_cut = [lossy.placed[a] for a in cut_agents]

            time.sleep(args.baseline)
            before_end = time.monotonic()
            before_rate, _ = probe.rate(before_end - args.baseline, before_end)

            net.partition(cut_hosts, [master_host])
            cut = time.monotonic()
            wait(
                lambda: (
                    len(aware.times(aware_cut, "TASK_UNREACHABLE", cut)) == len(aware_cut)
                    and len(lossy.times(lossy_cut, "TASK_LOST", cut)) == len(lossy_cut)
                ),
                args.timeout,
                "every cut task to be reported",
            )
            reported = time.monotonic()
            say(t0, f"cut; every task on the {len(cut_agents)} cut agents reported")
            during_rate, longest_gap = probe.rate(cut, reported)
            unreachable = aware.times(aware_cut, "TASK_UNREACHABLE", cut)
            lost = lossy.times(lossy_cut, "TASK_LOST", cut)

            net.heal()
            healed = time.monotonic()
            wait(
                lambda: len(aware.times(aware_cut, "agent_reregistered", healed)) == len(aware_cut),
                args.timeout,
                "every unreachable task to be back",
            )
            back = aware.times(aware_cut, "agent_reregistered", healed)
            say(t0, "healed; every unreachable task back")
            wait(
                lambda: (s := _state(address)) and sum(a["connected"] for a in s["agents"]) == agents,
                args.timeout,
                "every agent to be registered again",
            )
            agents_back = time.monotonic() - healed
            say(t0, "every agent registered again")
            state = _state(address)
            assert state is not None
            lossy_left = sum(
                1 for t in state["tasks"] if t["id"].startswith("lossy-") and t["agent_id"] in cut_agents
            )
            return {
                "agents": agents,
                "cut": len(cut_agents),
                "unreachable": (unreachable[0], statistics.median(unreachable), unreachable[-1]),
                "lost": (lost[0], statistics.median(lost), lost[-1]),
                "offer_ratio": during_rate / before_rate if before_rate else 0.0,
                "offers_before": before_rate,
                "offers_during": during_rate,
                "longest_gap": longest_gap,
                "back": (back[0], statistics.median(back), back[-1]),
                "agents_back": agents_back,
                "lossy_left": lossy_left,
            }
        finally:
            for driver in drivers:
                driver.stop()
            for proc in reversed(procs):
                terminate(proc, grace=10)
            say(t0, "stopped")


def _state(address: str) -> dict | None:
    try:
        return fetch_state(address, timeout=10.0)
    except MasterUnreachable:
        return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agents", type=int, default=1000)
    p.add_argument(
        "--hosts", type=int, default=8, help="hosts the agents are spread over (a quarter are cut)"
    )
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--ping-interval", type=float, default=1.0, help="master.agent_ping_interval (s)")
    p.add_argument("--ping-timeout", type=float, default=5.0, help="master.agent_ping_timeout (s)")
    p.add_argument(
        "--removal-fraction",
        type=float,
        default=0.3,
        help="master.agent_removal_fraction: at the default 0.1 a quarter of the cluster takes 3 windows",
    )
    p.add_argument("--baseline", type=float, default=5.0, help="seconds of offers measured before the cut")
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--quick", action="store_true", help="40 agents on 4 hosts, 1 run, a 2 s ping timeout")
    p.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = p.parse_args(argv)
    if args.quick:
        args.agents, args.hosts, args.runs, args.baseline = 40, 4, 1, 2.0
        args.ping_interval, args.ping_timeout = 0.5, 2.0
    problem = netsim.available()
    if problem:
        print(f"partition: {problem}", file=sys.stderr)
        return 2
    if args.hosts < 4 or args.agents < args.hosts:
        p.error("--hosts: at least 4 (a quarter are cut), and at most --agents")
    mezzo.log.configure(level="warning")
    results = []
    for run in range(1, args.runs + 1):
        with tempfile.TemporaryDirectory(prefix="mezzo-partition-") as tmp:
            r = one_run(args, Path(tmp))
        results.append(r)
        print(
            f"run {run}: {r['cut']} of {r['agents']} agents cut; TASK_UNREACHABLE after "
            f"{r['unreachable'][0]:.2f}/{r['unreachable'][1]:.2f}/{r['unreachable'][2]:.2f} s "
            f"(first/median/last), TASK_LOST after {r['lost'][0]:.2f}/{r['lost'][1]:.2f}/{r['lost'][2]:.2f} s; "
            f"offers during {r['offers_during']:.1f}/s vs {r['offers_before']:.1f}/s before "
            f"({r['offer_ratio']:.2f}), longest gap {r['longest_gap']:.2f} s; after the heal, tasks back "
            f"{r['back'][0]:.2f}/{r['back'][1]:.2f}/{r['back'][2]:.2f} s, agents back {r['agents_back']:.2f} s; "
            f"lossy tasks left on cut agents: {r['lossy_left']}",
            flush=True,
        )

    def med(key: str, i: int | None = None) -> float:
        values = [r[key][i] if i is not None else r[key] for r in results]
        return statistics.median(values)

    lines = [
        f"Machine: {machine()}. Command: `python bench/partition.py {' '.join(argv or sys.argv[1:])}`. "
        f"{results[0]['agents']} emulated agents on {args.hosts} simulated hosts (network namespaces on a bridge), "
        f"{results[0]['cut']} of them (a quarter of the hosts) partitioned from the master. "
        f"`agent_ping_interval` {args.ping_interval:g} s, `agent_ping_timeout` {args.ping_timeout:g} s, "
        f"`agent_removal_fraction` {args.removal_fraction:g}. Medians of {len(results)} run(s); seconds.",
        "",
        "| from | to | first | median | last |",
        "|---|---|---|---|---|",
        f"| cut | TASK_UNREACHABLE (partition-aware) | {med('unreachable', 0):.2f} | {med('unreachable', 1):.2f} | {med('unreachable', 2):.2f} |",
        f"| cut | TASK_LOST (the others) | {med('lost', 0):.2f} | {med('lost', 1):.2f} | {med('lost', 2):.2f} |",
        f"| heal | task reported running again (`agent_reregistered`) | {med('back', 0):.2f} | {med('back', 1):.2f} | {med('back', 2):.2f} |",
        f"| heal | every cut agent registered again | | | {med('agents_back'):.2f} |",
        "",
        f"Offers during the partition: {med('offers_during'):.1f}/s against {med('offers_before'):.1f}/s before it "
        f"(ratio {med('offer_ratio'):.2f}: the rest of the cluster goes on offering; the probe's launches, not the number of agents, bound the rate), longest gap between two offers "
        f"{med('longest_gap'):.2f} s. Tasks of the framework that was told TASK_LOST still held on the cut agents "
        f"once they were back: {max(r['lossy_left'] for r in results)} (killed on their return).",
    ]
    print("\n".join(lines))
    if not args.no_write:
        write_section("## Partitions: a quarter of the cluster cut off (bench/partition.py)", lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
