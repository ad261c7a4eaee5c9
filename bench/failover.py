#!/usr/bin/env python3
"""The paper's failover experiment (§6.6): time to recover from the leader's death.

For each cluster size N: a ZooKeeper server, three ``mezzo master`` processes
electing a leader through it, 200 emulated frameworks on the real scheduler
driver and N emulated agents (``cpus:2;mem:2048``), all given the ``zk://`` URL.
The frameworks fill every slot with long tasks (one hour: none ends during a run,
so every agent has two tasks to report when it re-registers). Once the cluster is
full the leader gets SIGKILL, and the clock runs from the kill until:

- *election*: ZooKeeper names another master (this script's own watch of the
  election; the dead leader's session must expire first, so this is about the
  masters' ZooKeeper session timeout, ``--session``);
- *agents back*: the last emulated agent has re-registered with the new leader
  (the agents' own clock, when the new leader's answer came);
- *frameworks back*: the last driver has re-registered (same, the frameworks' clock);
- *offers resume*: the new leader has left recovery, so its allocation cycles
  offer again (polled from its metrics every ``--poll`` seconds, so up to that late).

MTTR is max(agents back, frameworks back), the paper's "time for all of the slaves
and frameworks to connect to the new master". Every run then checks that nothing
was lost: the new leader holds every task that ran before the kill, the agents and
frameworks still count them running, no framework saw a task fail or end twice, no
agent was refused and had to start over, no framework got a new id, and no master
but the new leader led after the kill (a leader stepping down fails the run). It
also counts, for diagnosis, the ZooKeeper connections the masters dropped and the
``not_leader`` answers agents and drivers got from a master not yet leading.

The cluster is full, so nothing is offered after recovery: *offers resume* is when
the new leader would offer, not when a framework received an offer.

Each run is a fresh cluster (ZooKeeper, masters, emulators), so every kill hits a
leader that has been up as long and a cluster in the same state.

Usage::

    python bench/failover.py                      # 200, 1,000 and 4,000 agents, 5 runs each
    python bench/failover.py --quick              # 200 and 1,000 agents, 3 runs: a few minutes
    python bench/failover.py --agents 4000 --runs 3 --session 2 --no-write
    python bench/failover.py --agents 1000 --runs 1 --no-write --logs /tmp/failover --py-spy /tmp/spy
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import mezzo.log
from _cluster import EmulatedCluster, machine
from _report import write_section
from mezzo.state_client import MasterUnreachable, fetch_metrics
from mezzo.zk import LeaderDetector

FULL = [200, 1_000, 4_000]
QUICK = [200, 1_000]
HEADING = "## Master failover: the paper's §6.6"


class LeaderWatch:
    """ZooKeeper's answer to "who leads?", with the ``time.time()`` of every change,
    from this process's own session (as agents and drivers see it)."""

    def __init__(self, url: str) -> None:
        self.changes: list[tuple[float, str | None]] = []
        self._lock = threading.Lock()
        self._detector = LeaderDetector(url, on_change=self._changed)

    def _changed(self, leader: str | None) -> None:
        with self._lock:
            self.changes.append((time.time(), leader))

    def start(self) -> None:
        self._detector.start()

    def leaders_after(self, since: float, old: str) -> list[tuple[float, str]]:
        """Every leader other than ``old`` named after ``since``, and when."""
        with self._lock:
            return [(at, leader) for at, leader in self.changes if at >= since and leader and leader != old]

    def stop(self) -> None:
        self._detector.stop()


def zk_tick_ms(session: float) -> int:
    """A ZooKeeper tick that allows a ``session``-second session (2-20 ticks), 100 ms if it can."""
    ms = session * 1000
    return int(min(max(100, math.ceil(ms / 20)), ms // 2))


def fmt_s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f} s"


def run_dir(n: int, args: argparse.Namespace):
    """A directory for one run's logs: kept under ``--logs``, else temporary."""
    if args.logs:
        Path(args.logs).mkdir(parents=True, exist_ok=True)
        return contextlib.nullcontext(tempfile.mkdtemp(prefix=f"failover-{n}-", dir=args.logs))
    return tempfile.TemporaryDirectory(prefix=f"failover-{n}-")


def one_run(n: int, args: argparse.Namespace) -> dict:
    with (
        run_dir(n, args) as tmp,
        EmulatedCluster(
            Path(tmp),
            n,
            per_connection=args.per_connection,
            masters=args.masters,
            zk_session=args.session,
            zk_tick_ms=zk_tick_ms(args.session),
        ) as cluster,
    ):
        slots = 2 * n
        # Frameworks first, so that DRF spreads the agents over all of them (fig10.py).
        cluster.start_frameworks(
            args.frameworks,
            duration=args.task_seconds,
            stddev=0.0,
            processes=args.framework_processes,
            report_every=args.report_every,
        )
        cluster.start_agents(report_every=args.report_every)
        cluster.wait_allocated(1.0, slots, timeout=args.fill_timeout)
        old_name = cluster.leader()
        old_address = cluster.leader_address
        before = settle(cluster, slots, args)
        watch = LeaderWatch(cluster.address)
        watch.start()
        spies = profile(cluster, old_name, args.py_spy) if args.py_spy else []
        try:
            _, killed_at = cluster.kill_leader()
            times = recover(cluster, watch, old_address, killed_at, args)
        except BaseException:
            kept = f"logs in {tmp}" if args.logs else "--logs DIR keeps the logs"
            print(f"  failover did not complete ({kept}):\n{tails(cluster)}", file=sys.stderr, flush=True)
            raise
        finally:
            watch.stop()
            for spy in spies:
                spy.wait()
        after = settle(cluster, before["master_tasks"], args, leader=times["leader"])
        stepped_down, zk_drops, drivers_refused = log_events(cluster)
        trouble = problems(before, after, args.frameworks) + [
            f"leader stepped down: {s}" for s in stepped_down
        ]
        if len(times["leaders"]) > 1:
            trouble.append(f"leadership moved {len(times['leaders'])} times: {' -> '.join(times['leaders'])}")
        return {
            "agents": n,
            "frameworks": args.frameworks,
            "killed": old_name,
            **{k: v for k, v in times.items() if k != "leader"},
            "mttr": max(times["agents_back"], times["frameworks_back"]),
            "before": before,
            "after": after,
            "lost": before["master_tasks"] - after["master_tasks"],
            "zk_connections_dropped": zk_drops,
            "not_leader": {
                "agent_connections": after["not_leader"] - before["not_leader"],
                "drivers": drivers_refused,
            },
            "problems": trouble,
        }


def profile(cluster: EmulatedCluster, leader: str, out: str, seconds: int = 6) -> list[subprocess.Popen]:
    """py-spy the standby masters and the emulators through the failover (speedscope files in ``out``)."""
    Path(out).mkdir(parents=True, exist_ok=True)
    targets = {name: p for name, p in cluster.masters.items() if name != leader}
    assert cluster.agents is not None, "the cluster is not started"
    targets["agents"] = cluster.agents.proc
    targets.update({f"frameworks-{i}": em.proc for i, em in enumerate(cluster.frameworks)})
    stamp = time.strftime("%H%M%S")
    spies = [
        subprocess.Popen(
            [
                "py-spy",
                "record",
                "-p",
                str(p.pid),
                "-d",
                str(seconds),
                "-r",
                "250",
                "-f",
                "speedscope",
                "-o",
                f"{out}/{cluster.agent_count}-{stamp}-{name}.json",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name, p in targets.items()
    ]
    time.sleep(1.0)  # py-spy attaches
    return spies


def counts(cluster: EmulatedCluster, address: str) -> dict:
    """Tasks running as the leader, the agents and the frameworks count them, and more."""
    m = fetch_metrics(address, timeout=30)
    fw = cluster.framework_counts()
    agents = cluster.agents.latest if cluster.agents is not None else {}
    return {
        "master_tasks": m["tasks_running"],
        "master_agents": m["agents_connected"],
        "master_frameworks": m["frameworks_connected"],
        "agent_tasks": int(agents.get("running", 0)),
        "framework_tasks": fw.get("running", 0),
        "failed": fw.get("failed", 0),
        "duplicates": fw.get("duplicates", 0),
        "registrations": fw.get("registrations", 0),
        "started_over": int(agents.get("started_over", 0)),
        "not_leader": int(agents.get("not_leader", 0)),
    }


def settle(cluster: EmulatedCluster, tasks: int, args: argparse.Namespace, leader: str | None = None) -> dict:
    """Wait until the leader, the agents and the frameworks all count ``tasks`` running
    (at most ``args.settle_timeout``), at least ``args.settle`` seconds when not ``leader``;
    returns the counts."""
    address = leader or cluster.leader_address
    started = time.monotonic()
    while True:
        c = counts(cluster, address)
        agreed = c["master_tasks"] == c["agent_tasks"] == c["framework_tasks"] == tasks
        waited = time.monotonic() - started
        if agreed and (leader is not None or waited >= args.settle):
            return c
        if waited > args.settle_timeout:
            return c  # the comparison reports the difference
        cluster.check_alive()
        time.sleep(args.poll)


def recover(
    cluster: EmulatedCluster, watch: LeaderWatch, old: str, killed_at: float, args: argparse.Namespace
) -> dict:
    """Poll until the master ZooKeeper names has every agent and framework back and
    offers again; seconds since the kill of each step.

    Should leadership move again meanwhile (it must not), the steps are those of the
    last leader, and ``leaders`` lists every master named since the kill.
    """
    n, frameworks = cluster.agent_count, args.frameworks
    deadline = time.monotonic() + args.timeout
    marks: dict[str, dict[str, float]] = {}  # per leader: when first seen leading, out of recovery, whole
    named: list[tuple[float, str]] = []
    while True:
        named = watch.leaders_after(killed_at, old)
        leader = named[-1][1] if named else None
        if leader is not None:
            try:
                m = fetch_metrics(leader, timeout=2)
            except MasterUnreachable:
                m = {}
            now = time.time()  # when the answer came: at most one poll late
            seen = marks.setdefault(leader, {})
            if m.get("leading"):
                seen.setdefault("leading", now)
                if not m.get("recovering"):
                    seen.setdefault("resumed", now)
                if m.get("agents_connected") == n and m.get("frameworks_connected") == frameworks:
                    seen.setdefault("whole", now)
        assert cluster.agents is not None, "the cluster is not started"
        agents = cluster.agents.latest
        agents_at = agents.get("all_registered_at")
        agents_ok = agents.get("registered") == n and agents_at is not None and agents_at > killed_at
        framework_ats = [
            at for em in cluster.frameworks if (at := em.latest.get("all_registered_at")) is not None
        ]
        frameworks_ok = len(framework_ats) == len(cluster.frameworks) and all(
            at > killed_at for at in framework_ats
        )
        seen = marks.get(leader or "", {})
        # (agents_at is not None is part of agents_ok; repeated for the type checker)
        if (
            agents_ok
            and agents_at is not None
            and frameworks_ok
            and {"leading", "resumed", "whole"} <= seen.keys()
        ):
            leaders = [name for i, (_, name) in enumerate(named) if i == 0 or named[i - 1][1] != name]
            return {
                "leader": leader,
                "leaders": leaders,
                "election": named[0][0] - killed_at,
                "leading": seen["leading"] - killed_at,
                "offers_resume": seen["resumed"] - killed_at,
                "master_whole": seen["whole"] - killed_at,
                "agents_back": agents_at - killed_at,
                "frameworks_back": max(framework_ats) - killed_at,
            }
        if time.monotonic() > deadline:

            def at(key: str, seen: dict = seen) -> str:
                return fmt_s(seen[key] - killed_at) if key in seen else "-"

            raise TimeoutError(
                f"{args.timeout:g} s after the kill: leaders named {[name for _, name in named]}; the last "
                f"leading {at('leading')}, out of recovery {at('resumed')}, with everyone {at('whole')}; "
                f"agents registered {agents.get('registered')} of {n}, frameworks "
                f"{sum(em.latest.get('registered', 0) for em in cluster.frameworks)} of {frameworks}"
            )
        cluster.check_alive()
        time.sleep(args.poll)


def log_events(cluster: EmulatedCluster) -> tuple[list[str], int, int]:
    """From the logs: leaders that stepped down (other than when stopped), ZooKeeper
    connections the masters lost, and drivers a master answered ``not_leader``."""
    stepped, dropped = [], 0
    for name in cluster.masters:
        path = cluster.workdir / f"{name}.log"
        for line in path.read_text(errors="replace").splitlines() if path.exists() else ():
            if "no longer leader" in line and "reason=stopping" not in line:
                stepped.append(f"{name}: {line.split('] ', 1)[-1].strip()}")
            elif "Connection dropped" in line:
                dropped += 1
    refused = sum(
        path.read_text(errors="replace").count("does not lead")
        for path in cluster.workdir.glob("frameworks-*.log")
    )
    return stepped, dropped, refused


def problems(before: dict, after: dict, frameworks: int) -> list[str]:
    """What the failover lost or broke (empty: nothing)."""
    out = []
    for key, who in (
        ("master_tasks", "the new leader"),
        ("agent_tasks", "the agents"),
        ("framework_tasks", "the frameworks"),
    ):
        if after[key] != before["master_tasks"]:
            out.append(f"{who} count {after[key]} tasks running, {before['master_tasks']} before")
    if after["failed"] != before["failed"]:
        out.append(f"{after['failed'] - before['failed']} tasks failed or were lost")
    if after["duplicates"]:
        out.append(f"{after['duplicates']} terminal updates delivered twice")
    if after["started_over"] != before["started_over"]:
        out.append(f"{after['started_over'] - before['started_over']} agents refused and started over")
    if after["registrations"] != before["registrations"]:
        out.append(f"{after['registrations'] - before['registrations']} frameworks got a new id")
    if after["master_frameworks"] != frameworks:
        out.append(f"{after['master_frameworks']} of {frameworks} frameworks connected to the new leader")
    return out


def tails(cluster: EmulatedCluster, lines: int = 15) -> str:
    out = []
    for path in sorted(cluster.workdir.glob("*.log")):
        text = path.read_text(errors="replace").splitlines()[-lines:]
        if text:
            out.append(f"--- {path.name}\n" + "\n".join(text))
    return "\n".join(out)


STEPS = ("election", "agents_back", "frameworks_back", "offers_resume", "mttr")


def summarize(runs: list[dict]) -> dict:
    out = {}
    for key in STEPS:
        values = sorted(r[key] for r in runs)
        out[key] = {"median": statistics.median(values), "min": values[0], "max": values[-1]}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="200 and 1,000 agents, 3 runs")
    p.add_argument(
        "--agents",
        type=lambda s: [int(x) for x in s.split(",")],
        default=None,
        help="comma-separated cluster sizes (default 200,1000,4000)",
    )
    p.add_argument(
        "--runs",
        type=int,
        default=None,
        help="failovers per size, each on a fresh cluster (default 5; quick 3)",
    )
    p.add_argument("--frameworks", type=int, default=200)
    p.add_argument("--masters", type=int, default=3)
    p.add_argument(
        "--session",
        type=float,
        default=1.0,
        help="the masters' ZooKeeper session timeout, seconds (bounds how soon a dead leader is noticed)",
    )
    p.add_argument(
        "--framework-processes", type=int, default=1, help="processes the emulated frameworks are spread over"
    )
    p.add_argument("--per-connection", type=int, default=10, help="emulated agents per connection")
    p.add_argument(
        "--task-seconds",
        type=float,
        default=3600.0,
        help="task length; longer than a run, so no task ends during one",
    )
    p.add_argument(
        "--settle",
        type=float,
        default=None,
        help="seconds the full cluster runs before the kill (default 5; quick 2)",
    )
    p.add_argument(
        "--settle-timeout",
        type=float,
        default=30.0,
        help="seconds to wait for the task counts to agree before and after",
    )
    p.add_argument("--fill-timeout", type=float, default=300.0)
    p.add_argument(
        "--timeout", type=float, default=120.0, help="seconds a failover may take before the run fails"
    )
    p.add_argument("--poll", type=float, default=0.05, help="seconds between polls of the new leader")
    p.add_argument("--report-every", type=float, default=0.1, help="seconds between the emulators' reports")
    p.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    p.add_argument(
        "--py-spy",
        metavar="DIR",
        default=None,
        help="profile the standby masters and the emulators through each failover with py-spy "
        "(speedscope files in DIR)",
    )
    p.add_argument(
        "--logs",
        default=None,
        help="directory for the runs' logs (default: a temporary one); "
        "a failed run prints the tails of its logs either way",
    )
    args = p.parse_args(argv)
    mezzo.log.configure("warning")
    sizes = args.agents or (QUICK if args.quick else FULL)
    args.runs = args.runs or (3 if args.quick else 5)
    args.settle = args.settle if args.settle is not None else (2.0 if args.quick else 5.0)

    results: dict[int, list[dict]] = {}
    for n in sizes:
        print(
            f"{n} agents, {args.frameworks} frameworks, {args.masters} masters, "
            f"ZooKeeper session {args.session:g} s:",
            flush=True,
        )
        for i in range(args.runs):
            r = one_run(n, args)
            results.setdefault(n, []).append(r)
            print(
                f"  {n} agents run {i + 1}: MTTR {r['mttr']:.2f} s (election {r['election']:.2f}, "
                f"agents back {r['agents_back']:.2f}, frameworks back {r['frameworks_back']:.2f}, "
                f"offers resume {r['offers_resume']:.2f}); tasks {r['before']['master_tasks']} -> "
                f"{r['after']['master_tasks']}, lost {r['lost']}"
                + (
                    f"; {r['zk_connections_dropped']} ZooKeeper connections of masters dropped"
                    if r["zk_connections_dropped"]
                    else ""
                )
                + (
                    f"; not_leader answered to {r['not_leader']['agent_connections']} agent connections "
                    f"and {r['not_leader']['drivers']} drivers"
                    if any(r["not_leader"].values())
                    else ""
                )
                + ("; PROBLEMS: " + "; ".join(r["problems"]) if r["problems"] else ""),
                flush=True,
            )
        s = summarize(results[n])
        print(
            f"  median MTTR {s['mttr']['median']:.2f} s (min {s['mttr']['min']:.2f}, "
            f"max {s['mttr']['max']:.2f}); election {s['election']['median']:.2f} s, agents back "
            f"{s['agents_back']['median']:.2f} s, frameworks back {s['frameworks_back']['median']:.2f} s, "
            f"offers resume {s['offers_resume']['median']:.2f} s",
            flush=True,
        )
    if not args.no_write:
        write_results(args, results)
    else:
        print(json.dumps(results, indent=1, default=float))
    return 1 if any(r["problems"] for runs in results.values() for r in runs) else 0


def write_results(args: argparse.Namespace, results: dict[int, list[dict]]) -> None:
    cmd = "python bench/failover.py" + (" --quick" if args.quick else "")
    if args.agents:
        cmd += " --agents " + ",".join(str(n) for n in results)
    if args.session != 1.0:
        cmd += f" --session {args.session:g}"
    lines = [
        (
            f"`{cmd}` ({time.strftime('%Y-%m-%d')}, {machine()}; ZooKeeper, {args.masters} masters, emulated "
            "agents and emulated frameworks all on this one machine). Paper §6.6: the leading master is "
            f"killed (SIGKILL) while {args.frameworks} frameworks keep N emulated agents (2 task slots each) "
            f"full of long tasks; each run is a fresh cluster, {args.runs} runs per size. Times are from the "
            "kill: *election* until ZooKeeper names another master (the dead leader's session must expire "
            f"first; the masters' ZooKeeper session timeout is {args.session:g} s, the server's tick "
            f"{zk_tick_ms(args.session)} ms), *agents back* and "
            "*frameworks back* until the last agent and the last scheduler driver have re-registered with the "
            "new leader (their own clocks), *offers resume* until the new leader leaves recovery (polled every "
            f"{args.poll:g} s). MTTR is the later of agents and frameworks back. Medians over the runs, and "
            "MTTR's range. *Tasks lost* compares the tasks the leader held before the kill with those the new "
            "one holds once everyone is back, summed over the runs; a run also fails if an agent had to start "
            "over, a framework got a new id or saw a task fail, or leadership moved more than once. Target: "
            "MTTR < 2 s at 4,000 agents (paper: 4–8 s with 200–4,000 agents and 200 frameworks)."
        ),
        "",
        (
            "| agents | frameworks | tasks | ZooKeeper session | election | agents back | frameworks back "
            "| offers resume | MTTR median | MTTR min–max | tasks lost |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n, runs in results.items():
        s = summarize(runs)

        def med(key: str, s: dict = s) -> str:
            return f"{s[key]['median']:.2f} s"

        lost = sum(r["lost"] for r in runs)
        issues = sum(len(r["problems"]) for r in runs)
        lines.append(
            f"| {n:,} | {args.frameworks} | {runs[0]['before']['master_tasks']:,} | {args.session:g} s "
            f"| {med('election')} | {med('agents_back')} | {med('frameworks_back')} | {med('offers_resume')} "
            f"| {med('mttr')} | {s['mttr']['min']:.2f}–{s['mttr']['max']:.2f} s "
            f"| {lost}{'' if not issues else f' ({issues} problems, see the run log)'} |"
        )
    write_section(HEADING, lines)


if __name__ == "__main__":
    sys.exit(main())
