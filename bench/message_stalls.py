#!/usr/bin/env python3
"""How long one big message holds a real master's event loop, measured from outside.

Issue 14's goal: no single message holds the master's loop for more than 50 ms at
the largest size the frame limit admits. ``tests/test_message_stalls.py`` checks
this pass/fail with a loose bound; this script measures the figures.

A real ``mezzo master`` (``mezzo.testing.LocalProcessCluster``, no agents, a fresh
one for every family, size and run) is sent one big message by a raw connection, while a
*probe*, a separate process, asks the master for its metrics (``request_metrics``,
answered from counters) over and over, 5 ms apart, and keeps the time each answer
took. A request in flight while the loop is held waits until it is free, so the
probe's longest wait while a message is served is how long the loop was held, to
within the probe's pause. Per message:

- *handled after*: from the first byte sent until the sender sees that the master
  handled it (its answer, or the answer to a call sent behind it on the same
  connection: a connection is not read while a big frame of it is decoded and
  handled, so that answer comes after);
- *longest* and *median wait* of the probe's requests in flight from the first byte
  sent until ``--tail`` (0.25 s) after it was handled (what the master does once the handler
  returned, freeing the message, an allocation cycle it asked for, counts too);
- *quiet*: the probe's longest wait in the second before the message was sent, on
  the same master (the machine's own noise at that moment).

The families are those of the test, each filling the frame limit (16 MiB, less a
KiB) unless a documented bound is lower, plus an agent re-registering with N
running tasks (adopted by a master that did not know it, as after a failover; N =
1,000, 5,000, 20,000 and as many as fill the frame) and
``mezzo state`` (``request_state``) of a master holding 20,000 and 100,000 tasks
(re-registered agents of 20 tasks each). A *baseline* row is a probe window of 1 s
with no message at all (no *handled after*). Medians over ``--runs`` runs (the largest longest wait of
the runs in parentheses).

Usage::

    python bench/message_stalls.py                  # 5 runs, writes docs/benchmarks.md
    python bench/message_stalls.py --quick --no-write   # 1 run, small sizes (the smoke test)
    python bench/message_stalls.py --only reregister --runs 3 --no-write
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from _cluster import machine
from _report import write_section
from mezzo.master.service import FILTER_AGENTS_MAX, STATISTICS_MAX_CHARS
from mezzo.resources import AGENT_RANGE_LIMIT
from mezzo.rpc import DEFAULT_MAX_FRAME
from mezzo.services import AGENT, MASTER, SCHEDULER, TOOL
from mezzo.state_client import ANSWER_MAX_BYTES, fetch_metrics
from mezzo.testing import LocalProcessCluster, RawPeer, largest_message
from mezzo.wire.ttypes import (
    AgentInfo,
    CommandInfo,
    FrameworkFilters,
    FrameworkInfo,
    Range,
    Resources,
    RunningTask,
    TaskInfo,
    TaskState,
    TaskStatus,
)

LIMIT = DEFAULT_MAX_FRAME - 1024
"""Bytes: the largest frame a family fills (the master's limit, less a KiB)."""
PEER_TIMEOUT = 300.0
"""Seconds a raw connection waits on a read: the biggest messages take seconds to handle."""
GOAL = 0.050
"""Seconds: issue 14's bound on how long one message may hold the loop."""
PROBE_PAUSE = 0.005
"""Seconds the probe waits between an answer and its next request."""
TAIL = 0.25
"""Seconds after a message was handled during which the probe's waits still count."""
MASTER_SETTINGS = {
    "allocation_interval": 0.05,  # as tests/test_message_stalls.py
    # The raw agent connections answer no pings; they must not be declared lost (and
    # their tasks with them) while they sit idle between the messages.
    "agent_ping_timeout": 0,
}
TASKS_PER_STATE_AGENT = 20


# -- raw connections ---------------------------------------------------------------


def framework(address: str, *, needs_offers: bool = True) -> tuple[RawPeer, str]:
    peer = RawPeer(address, SCHEDULER, timeout=PEER_TIMEOUT)
    peer.send("register_framework", FrameworkInfo(name="big", failover_timeout=3600.0))
    (fid, _) = peer.expect("registered")
    if not needs_offers:
        peer.send("set_needs_offers", fid, False)
    return peer, fid


def behind(peer: RawPeer, fid: str) -> Callable[[], None]:
    """Handled: a call sent behind the message on the same connection is answered."""

    def handled() -> None:
        peer.send("request_guaranteed_share", fid, 7)
        peer.expect("guaranteed_share")

    return handled


def mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


# -- the probe: another process ----------------------------------------------------


def probe_main(address: str) -> None:
    """The probe process: time ``request_metrics`` round trips until stdin closes, then
    print them as JSON ``[[sent, answered], ...]`` (``time.monotonic``: one clock for
    every process of the machine)."""
    peer = RawPeer(address, TOOL, timeout=PEER_TIMEOUT)
    stop = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    samples: list[tuple[float, float]] = []
    request = 0
    while not stop.is_set():
        request += 1
        sent = time.monotonic()
        peer.send("request_metrics", request)
        while peer.expect("metrics")[0] != request:
            pass
        samples.append((sent, time.monotonic()))
        if request == 1:
            print("ready", flush=True)
        time.sleep(PROBE_PAUSE)
    json.dump(samples, sys.stdout)
    sys.stdout.flush()


class Probe:
    """The probe process beside this one (so that decoding the answers to big messages
    here never delays a probe request)."""

    def __init__(self, address: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--probe", address],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            self.proc.kill()
            raise RuntimeError(f"the probe did not start (exit status {self.proc.wait()})")

    def stop(self) -> list[tuple[float, float]]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        out = self.proc.stdout.read()
        self.proc.wait(60)
        return [(a, b) for a, b in json.loads(out)]


# -- the families --------------------------------------------------------------------


@dataclass
class Step:
    """One message: its table row, what it carries, how to send it and how to see it handled."""

    row: str
    size: str
    send: Callable[[], None]
    handled: Callable[[], object]
    timed: bool = True
    """False: there is no message, *handled after* means nothing."""


Family = Callable[..., Iterator[Step]]
"""``family(master, args[, size])``: the steps of one master's session, set up as it goes."""


def baseline(master: str, args: argparse.Namespace) -> Iterator[Step]:
    yield Step(
        "baseline: no message",
        f"{args.quiet:g} s window",
        lambda: None,
        lambda: time.sleep(args.quiet),
        False,
    )


def reconcile(master: str, args: argparse.Namespace) -> Iterator[Step]:
    peer, fid = framework(master)
    n, message = largest_message(
        "reconcile_tasks", lambda n: (fid, [TaskStatus(task_id=f"t{i:09d}") for i in range(n)]), args.fill
    )
    last = f"t{n - 1:09d}"

    def answered() -> None:  # each status is answered, in order
        while peer.expect("status_update")[0].task_id != last:
            pass

    yield Step(
        "reconcile_tasks of unknown tasks",
        f"{n:,} tasks, {mib(len(message))}",
        lambda: peer.send_frame(message),
        answered,
    )


def decline(master: str, args: argparse.Namespace) -> Iterator[Step]:
    peer, fid = framework(master)
    n, message = largest_message(
        "decline_offer", lambda n: (fid, [f"o{i:011d}" for i in range(n)], None), args.fill
    )
    yield Step(
        "decline_offer of unknown offers",
        f"{n:,} offers, {mib(len(message))}",
        lambda: peer.send_frame(message),
        behind(peer, fid),
    )


def filters(master: str, args: argparse.Namespace) -> Iterator[Step]:
    peer, fid = framework(master)
    n, message = largest_message(
        "set_filters", lambda n: (fid, FrameworkFilters(agents=[f"a{i:011d}" for i in range(n)])), args.fill
    )
    assert n > FILTER_AGENTS_MAX, n

    def refused() -> None:
        (error,) = peer.expect("error")
        assert f"at most {FILTER_AGENTS_MAX:,}" in error, error

    yield Step(
        "set_filters over the bound (refused)",
        f"{n:,} agents, {mib(len(message))}",
        lambda: peer.send_frame(message),
        refused,
    )
    peer, fid = framework(master)  # the refusal was an error: the driver would abort
    message = MASTER.encode(
        "set_filters", (fid, FrameworkFilters(agents=[f"a{i:011d}" for i in range(FILTER_AGENTS_MAX)])), {}
    )
    yield Step(
        "set_filters at the bound",
        f"{FILTER_AGENTS_MAX:,} agents, {mib(len(message))}",
        lambda: peer.send_frame(message),
        behind(peer, fid),
    )


def register_agent(address: str, ranges: int = 1) -> tuple[RawPeer, str]:
    peer = RawPeer(address, AGENT, timeout=PEER_TIMEOUT)
    ports = [Range(2 * i, 2 * i) for i in range(ranges)]
    resources = Resources(scalars={"cpus": 8000, "mem": 8_000_000}, ranges={"ports": ports})
    peer.send("register_agent", AgentInfo(hostname="big", port=5051, resources=resources, attributes={}))
    (aid,) = peer.expect("registered")
    return peer, aid


def container_statistics(master: str, args: argparse.Namespace) -> Iterator[Step]:
    peer, aid = register_agent(master)
    length = args.fill - 200
    assert length > STATISTICS_MAX_CHARS
    entries = length // 50 + 1
    report = json.dumps(
        [{"container_id": f"c{i}", "statistics": {"cpus_user_time_secs": i}} for i in range(entries)]
    )[:length]
    message = MASTER.encode("container_statistics", (aid, report), {})

    def handled() -> None:  # a call behind it on the same connection is answered after it
        peer.send("request_metrics", 1)
        peer.expect("metrics")

    yield Step(
        "container_statistics over the bound (refused)",
        f"{len(report):,} characters, {mib(len(message))}",
        lambda: peer.send_frame(message),
        handled,
    )


def ranges(master: str, args: argparse.Namespace) -> Iterator[Step]:
    sched, fid = framework(master)
    peer = RawPeer(master, AGENT, timeout=PEER_TIMEOUT)
    ports = [Range(2 * i, 2 * i) for i in range(AGENT_RANGE_LIMIT)]
    resources = Resources(scalars={"cpus": 8000, "mem": 8_000_000}, ranges={"ports": ports})
    message = MASTER.encode(
        "register_agent", (AgentInfo(hostname="big", port=5051, resources=resources, attributes={}),), {}
    )
    got: list[str] = []
    yield Step(
        "register_agent with the most port ranges",
        f"{AGENT_RANGE_LIMIT:,} ranges, {len(message) / 1024:.0f} KiB",
        lambda: peer.send_frame(message),
        lambda: got.append(peer.expect("registered")[0]),
    )
    (aid,) = got
    offers = sched.expect("resource_offers")[0]
    (offer,) = [o for o in offers if o.agent_id == aid]
    task = TaskInfo(
        task_id="all-ports",
        name="t",
        agent_id=aid,
        command=CommandInfo(value="true"),
        resources=Resources(scalars={"cpus": 1000}, ranges={"ports": ports}),
        labels={},
    )
    launch = MASTER.encode("launch_tasks", (fid, [offer.offer_id], [task], None), {})
    yield Step(
        "launch_tasks: a task asking for all of them",
        f"{AGENT_RANGE_LIMIT:,} ranges, {len(launch) / 1024:.0f} KiB",
        lambda: sched.send_frame(launch),
        lambda: peer.expect("run_task"),
    )


def launch_over(master: str, args: argparse.Namespace) -> Iterator[Step]:
    def make(n: int, offer_id: str = "o" * 40, agent_id: str = "a" * 40) -> tuple:
        ports = [Range(2 * i, 2 * i) for i in range(n)]
        task = TaskInfo(task_id="t", agent_id=agent_id, resources=Resources(ranges={"ports": ports}))
        return (fid, [offer_id], [task], None)

    sched, fid = framework(master)
    n, _ = largest_message("launch_tasks", make, args.fill)  # before the offer: it is not kept waiting
    _, aid = register_agent(master)
    offers = sched.expect("resource_offers")[0]
    (offer,) = [o for o in offers if o.agent_id == aid]
    message = MASTER.encode("launch_tasks", make(n, offer.offer_id, aid), {})

    def refused() -> None:
        status = sched.expect("status_update")[0]
        assert "ranges are more than an agent may have" in status.message, status

    yield Step(
        "launch_tasks: a task asking for more ranges (refused)",
        f"{n:,} ranges, {mib(len(message))}",
        lambda: sched.send_frame(message),
        refused,
    )


def running_tasks(fid: str, aid: str, first: int, n: int) -> list[RunningTask]:
    """``n`` tasks as an agent reports them when re-registering: fixed-width ids."""
    out = []
    for i in range(first, first + n):
        tid = f"task-{i:09d}"
        info = TaskInfo(
            task_id=tid,
            name=f"sleeper {i:09d}",
            agent_id=aid,
            resources=Resources(scalars={"cpus": 100, "mem": 32_000}),
            command=CommandInfo(value="sleep 100000", arguments=[], environment={}),
            labels={},
        )
        latest = TaskStatus(
            task_id=tid,
            state=TaskState.TASK_RUNNING,
            source="executor",
            agent_id=aid,
            framework_id=fid,
            uuid=f"{i:032x}",
            timestamp=1.7e9,
        )
        out.append(RunningTask(framework_id=fid, task=info, latest=latest))
    return out


def reregister_args(fid: str, aid: str, first: int, n: int) -> tuple:
    """An agent unknown to the master (as after a failover) re-registering with ``n``
    running tasks of ``fid`` (0.1 cpus and 32 MB each), with room for them all (its
    total's size does not depend on ``n``: i64s are of fixed width)."""
    resources = Resources(scalars={"cpus": 100 * n + 1000, "mem": 32_000 * n + 1_000_000})
    info = AgentInfo(agent_id=aid, hostname=aid, port=5051, resources=resources, attributes={})
    frameworks = [FrameworkInfo(name="big", framework_id=fid, failover_timeout=3600.0)]
    return (info, running_tasks(fid, aid, first, n), [], frameworks)


def wait_tasks(master: str, n: int, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while (running := fetch_metrics(master, timeout=60)["tasks_running"]) != n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{running} tasks running, not {n}, after {timeout:g} s")
        time.sleep(0.2)


def reregister(master: str, args: argparse.Namespace, n: int) -> Iterator[Step]:
    _, fid = framework(master)
    peer = RawPeer(master, AGENT, timeout=PEER_TIMEOUT)
    aid = "adopted"
    if n == 0:  # as many as the frame limit admits
        n, message = largest_message("reregister_agent", lambda k: reregister_args(fid, aid, 0, k), args.fill)
        row = "reregister_agent filling the frame"
    else:
        message = MASTER.encode("reregister_agent", reregister_args(fid, aid, 0, n), {})
        row = f"reregister_agent with {n:,} tasks"
    yield Step(
        row,
        f"{n:,} running tasks, {mib(len(message))}",
        lambda: peer.send_frame(message),
        lambda: peer.expect("reregistered"),
    )
    wait_tasks(master, n)  # every one adopted


def state(master: str, args: argparse.Namespace, tasks: int) -> Iterator[Step]:
    """``mezzo state`` of a master holding ``tasks`` tasks, on agents of
    :data:`TASKS_PER_STATE_AGENT` re-registered on one connection."""
    _, fid = framework(master, needs_offers=False)
    agents = -(-tasks // TASKS_PER_STATE_AGENT)
    peer = RawPeer(master, AGENT, timeout=PEER_TIMEOUT)
    batch = 200
    for start in range(0, agents, batch):
        count = min(batch, agents - start)
        for a in range(start, start + count):
            first = a * TASKS_PER_STATE_AGENT
            n = min(TASKS_PER_STATE_AGENT, tasks - first)
            peer.send("reregister_agent", *reregister_args(fid, f"agent-{a:06d}", first, n))
        for _ in range(count):
            peer.expect("reregistered")
    wait_tasks(master, tasks)
    tool = RawPeer(master, TOOL, max_frame=ANSWER_MAX_BYTES, timeout=PEER_TIMEOUT)
    step = Step(
        f"request_state at {tasks:,} tasks",
        f"{tasks:,} tasks on {agents:,} agents",
        lambda: tool.send("request_state", 1),
        lambda: None,
    )

    def answered() -> None:
        step.size += f", answer {mib(len(tool.expect('state')[1]))}"

    step.handled = answered
    yield step


FAMILIES: dict[str, tuple[Family, str | None]] = {
    "baseline": (baseline, None),
    "reconcile": (reconcile, None),
    "decline": (decline, None),
    "filters": (filters, None),
    "statistics": (container_statistics, None),
    "ranges": (ranges, None),
    "launch": (launch_over, None),
    "reregister": (reregister, "reregister_tasks"),
    "state": (state, "state_tasks"),
}
"""Name (for ``--only``): the family, and the option listing its sizes (one master each)."""


# -- running ---------------------------------------------------------------------------


@dataclass
class Measured:
    row: str
    size: str
    handled: float
    longest: float
    median: float
    quiet: float
    samples: int


def master_rss(cluster: LocalProcessCluster) -> int:
    with open(f"/proc/{cluster.procs['master'].pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def run_family(family: Family, args: argparse.Namespace, size: int | None, workdir: Path) -> list[Measured]:
    """One fresh master: a probe beside it, then each step of ``family``: a quiet
    window, the message, its handling, ``args.tail`` (:data:`TAIL`)."""
    with LocalProcessCluster(0, master=MASTER_SETTINGS, directory=str(workdir)) as cluster:
        address = cluster.master
        windows: list[tuple[Step, float, float, float, int]] = []
        probe = Probe(address)
        try:
            steps = family(address, args) if size is None else family(address, args, size)
            for step in steps:
                rss = master_rss(cluster)
                quiet_from = time.monotonic()
                time.sleep(args.quiet)
                start = time.monotonic()
                step.send()
                step.handled()
                end = time.monotonic()
                time.sleep(args.tail)
                windows.append((step, quiet_from, start, end, rss))
        finally:
            samples = probe.stop()
    out = []
    for step, quiet_from, start, end, rss in windows:
        during = [b - a for a, b in samples if a <= end + args.tail and b >= start]
        quiet = [b - a for a, b in samples if a >= quiet_from and b <= start]
        size_text = step.size
        if step.row.startswith("request_state"):
            size_text += f"; master RSS {rss / (1 << 20):,.0f} MiB"
        out.append(
            Measured(
                step.row,
                size_text,
                end - start if step.timed else float("nan"),
                max(during),
                statistics.median(during),
                max(quiet, default=float("nan")),
                len(during),
            )
        )
    return out


def ms(seconds: float) -> str:
    if seconds != seconds:  # NaN: nothing to time
        return "-"
    return f"{seconds * 1000:,.0f} ms" if seconds >= 0.01 else f"{seconds * 1000:.1f} ms"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--probe", metavar="MASTER", help=argparse.SUPPRESS)
    p.add_argument("--runs", type=int, default=5, help="runs of every family (default 5)")
    p.add_argument("--quick", action="store_true", help="1 run, small sizes (the smoke test)")
    p.add_argument("--only", nargs="+", choices=list(FAMILIES), help="these families only (default: all)")
    p.add_argument(
        "--reregister-tasks",
        type=int,
        nargs="+",
        default=[1000, 5000, 20000, 0],
        help="tasks of the re-registering agent, 0: as many as the frame holds (default 1000 5000 20000 0)",
    )
    p.add_argument(
        "--state-tasks", type=int, nargs="+", default=[20_000, 100_000], help="(default 20000 100000)"
    )
    p.add_argument("--fill", type=int, default=LIMIT, help=f"bytes the big frames fill (default {LIMIT:,})")
    p.add_argument("--quiet", type=float, default=1.0, help="seconds of quiet before a message (default 1)")
    p.add_argument(
        "--tail",
        type=float,
        default=TAIL,
        help=f"seconds counted after a message was handled (default {TAIL:g})",
    )
    p.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = p.parse_args(argv)
    if args.probe:
        probe_main(args.probe)
        return 0
    if args.quick:
        # The smallest frames every family still fills past its bound: set_filters over
        # FILTER_AGENTS_MAX ids (0.8 MiB), container_statistics over STATISTICS_MAX_CHARS.
        args.runs, args.fill, args.quiet, args.tail = 1, 5 << 18, 0.1, 0.1
        args.reregister_tasks, args.state_tasks = [1000], [2000]
    names = args.only or list(FAMILIES)
    day = time.strftime("%Y-%m-%d")
    load_before = os.getloadavg()
    results: dict[str, list[Measured]] = {}
    with tempfile.TemporaryDirectory(prefix="message-stalls-") as tmp:
        for run in range(1, args.runs + 1):
            for name in names:
                family, sizes = FAMILIES[name]
                for size in getattr(args, sizes) if sizes else [None]:
                    workdir = Path(tmp) / f"run{run}-{name}-{size or 0}"
                    for m in run_family(family, args, size, workdir):
                        results.setdefault(m.row, []).append(m)
                        print(
                            f"run {run}: {m.row} ({m.size}): handled after {ms(m.handled)}, "
                            f"probe longest {ms(m.longest)}, median {ms(m.median)} "
                            f"({m.samples} requests), quiet {ms(m.quiet)}",
                            flush=True,
                        )
    load_after = os.getloadavg()
    given = [a for a in (sys.argv[1:] if argv is None else argv) if a != "--no-write"]
    command = " ".join(["python bench/message_stalls.py", *given])
    n_runs = f"{args.runs} runs" if args.runs != 1 else "1 run"
    lines = [
        f"`{command}` ({day}, {machine()}; master, probe and sender on this one machine, load average "
        f"{load_before[0]:.1f} before and {load_after[0]:.1f} after). A real master (no agents; a fresh "
        "one per family, size and run; `agent_ping_timeout = 0` so that the silent raw agents stay) is "
        "sent one big message on a raw connection while a probe process asks it for its metrics over and "
        f"over, {PROBE_PAUSE * 1000:g} ms apart. The families of `tests/test_message_stalls.py`, each "
        f"filling the frame limit ({mib(args.fill)}) unless a documented bound is lower; an agent the "
        "master does not know (as after a failover) re-registering with N running tasks, adopted; "
        "`mezzo state` of a master holding re-registered agents of "
        f"{TASKS_PER_STATE_AGENT} tasks each (rendered in a forked child, the default; rendered on the "
        "loop it takes seconds, see *Responsiveness while `mezzo state` is polled*). *Handled after*: "
        "first byte sent until the sender sees the master's answer (or the answer to a call sent behind "
        "it on the same connection). *Longest* and *median wait*: the probe's requests in flight from "
        f"the first byte until {args.tail:g} s after it was handled; a request waits while the loop is held, "
        "so the longest wait is how long the message held it. *Quiet*: the probe's longest wait in the "
        f"{args.quiet:g} s before, on the same master. Medians of {n_runs} (the largest of the runs in "
        f"parentheses). Goal (issue 14): no message holds the loop longer than {GOAL * 1000:.0f} ms.",
        "",
        "| message | size | handled after | longest wait | median wait | quiet |",
        "|---|---|---|---|---|---|",
    ]
    for row, runs in results.items():
        longest = [m.longest for m in runs]
        lines.append(
            f"| {row} | {runs[-1].size} | {ms(statistics.median(m.handled for m in runs))} "
            f"| {ms(statistics.median(longest))} ({ms(max(longest))}) "
            f"| {ms(statistics.median(m.median for m in runs))} "
            f"| {ms(statistics.median(m.quiet for m in runs))} |"
        )
    print("\n".join(lines), flush=True)
    if not args.no_write:
        write_section("## Message stalls (bench/message_stalls.py)", lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
