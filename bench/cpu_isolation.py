#!/usr/bin/env python3
"""Request latency of a small server beside a CPU hog, with and without ``cgroups/cpu`` (paper §6.7).

A ``mezzo master`` and one ``mezzo agent`` (``cpus:2;mem:4096``) on loopback, and
one framework on the real scheduler driver that launches two command tasks of
``cpus:1`` each:

- *server*: a TCP echo server on 127.0.0.1 (a fixed-size message in, the same
  message back after ``--work-ms`` of CPU, as a web server renders a page);
- *hog*: a process that forks ``--hog-procs`` CPU spinners (default 256).

This benchmark is the client. It sends ``--requests`` round trips (64 bytes
each way, one at a time, over one connection) and times each one. Three
configurations, each on a fresh cluster:

- *alone*: the server only (``agent.isolation = ["posix"]``): the baseline;
- *hog, posix*: server and hog, no CPU isolation: 1 server process against
  ``--hog-procs`` spinners;
- *hog, cgroups/cpu*: server and hog with ``["posix", "cgroups/cpu"]``: two
  cgroups of 1024 shares each.

``--runs`` runs per configuration, alternating. Figures: the median over runs of
each run's median, p90 and p99 latency, and the increase of the median against
the baseline's. The paper: +550 % without isolation, +30 % with it; the target
here is at most +30 % with ``cgroups/cpu``. Skipped, with the reason printed, when
``cgroups/cpu`` is not installed or this is not root.

The kernel's session autogroups (``/proc/sys/kernel/sched_autogroup_enabled``)
are switched off for the run and restored after (``--keep-autogroup`` leaves
them): each container leads its own session, so with autogroups on the kernel
already shares the CPU between containers, and "no isolation" would not be.

Usage::

    python bench/cpu_isolation.py                   # writes docs/benchmarks.md
    python bench/cpu_isolation.py --hog-procs 8 --requests 100 --runs 1 --no-write
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import mezzo
import mezzo.log
from _cluster import isolation_unavailable, machine
from _report import write_section
from mezzo import CommandInfo, Filters, Resources, TaskInfo
from mezzo.testing import ClusterError, LocalProcessCluster, free_port

MESSAGE = 64
HOG_MARK = "mezzo-bench-hog"

SERVER = f"""
import socket, sys, time
work = float(sys.argv[2])  # CPU seconds per request: a page to render, as MediaWiki's were
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(8)
while True:
    c, _ = s.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b""
    while True:
        data = c.recv({MESSAGE} - len(buf))
        if not data:
            break
        buf += data
        if len(buf) == {MESSAGE}:
            until = time.process_time() + work
            while time.process_time() < until:
                pass
            c.sendall(buf)
            buf = b""
    c.close()
"""

# Each spinner stops by itself once its parent is gone, so that a lost kill cannot leave it spinning.
HOG = """
import os, sys
n = int(sys.argv[2])
parent = os.getpid()
for _ in range(n):
    if os.fork() == 0:
        while os.getppid() == parent:
            for _ in range(200000):
                pass
        os._exit(0)
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
"""

CONFIGS = [
    ("alone", ["posix"], False),
    ("hog, posix", ["posix"], True),
    ("hog, cgroups/cpu", ["posix", "cgroups/cpu"], True),
]
ONE_CPU = Resources(cpus=1, mem=256)


class Pair(mezzo.Scheduler):
    """Launches the server (and the hog) on the first offer that fits them; declines the rest."""

    def __init__(self, port: int, hog_procs: int | None, work: float) -> None:
        self.port = port
        self.work = work
        self.hog_procs = hog_procs
        self.launched: list[str] = []
        self.states: dict[str, int] = {}
        self.messages: dict[str, str] = {}
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)

    def resource_offers(self, driver, offers):
        for offer in offers:
            tasks = []
            if not self.launched:
                tasks.append(
                    TaskInfo(
                        task_id="server",
                        agent_id=offer.agent_id,
                        resources=ONE_CPU,
                        command=CommandInfo(
                            value=sys.executable,
                            shell=False,
                            arguments=["-c", SERVER, str(self.port), str(self.work)],
                        ),
                    )
                )
                if self.hog_procs is not None:
                    tasks.append(
                        TaskInfo(
                            task_id="hog",
                            agent_id=offer.agent_id,
                            resources=ONE_CPU,
                            command=CommandInfo(
                                value=sys.executable,
                                shell=False,
                                arguments=["-c", HOG, HOG_MARK, str(self.hog_procs)],
                            ),
                        )
                    )
                if not Resources(cpus=len(tasks), mem=256 * len(tasks)).fits_in(offer.resources):
                    tasks = []
                self.launched = [t.task_id for t in tasks]
            driver.launch_tasks(offer.offer_id, tasks, Filters(refuse_seconds=3600))
        if self.launched:
            driver.set_needs_offers(False)

    def status_update(self, driver, status):
        with self.changed:
            self.states[status.task_id] = status.state
            self.messages[status.task_id] = status.message or ""
            self.changed.notify_all()

    def wait(self, predicate, timeout: float, what: str) -> None:
        with self.changed:
            if not self.changed.wait_for(lambda: predicate(self.states), timeout):
                raise ClusterError(
                    f"timed out waiting for {what}: "
                    f"{ {t: mezzo.state_name(s) for t, s in self.states.items()} }"
                )

    def failed(self) -> list[str]:
        with self.lock:
            return [
                f"{t}: {mezzo.state_name(s)} {self.messages[t]}"
                for t, s in self.states.items()
                if mezzo.is_terminal(s)
            ]


def processes_under(root: Path) -> dict[int, str]:
    """Processes working in ``root`` (a sandbox is under the cluster's directory), with their argv."""
    root_s = str(root.resolve())
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cwd == root_s or cwd.startswith(root_s + os.sep):
            found[int(entry)] = argv
    return found


def hog_count(root: Path) -> int:
    return sum(HOG_MARK in argv for argv in processes_under(root).values())


def connect(port: int, timeout: float) -> socket.socket:
    deadline = time.monotonic() + timeout
    while True:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return s
        except OSError as exc:
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"the server did not listen on 127.0.0.1:{port} within {timeout:g} s"
                ) from exc
            time.sleep(0.05)


def measure(sock: socket.socket, requests: int) -> list[float]:
    """Seconds per round trip, ``requests`` of them, one at a time."""
    payload = b"x" * MESSAGE
    took = []
    for _ in range(requests):
        started = time.perf_counter()
        sock.sendall(payload)
        got = 0
        while got < MESSAGE:
            data = sock.recv(MESSAGE - got)
            if not data:
                raise ClusterError("the server closed the connection")
            got += len(data)
        took.append(time.perf_counter() - started)
    return took


def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def one_run(
    isolation: list[str], hog_procs: int | None, requests: int, settle: float, work: float
) -> tuple[dict, int]:
    """Latency figures of one run (seconds), and how many leftover processes had to be killed."""
    with tempfile.TemporaryDirectory(prefix="cpu-isolation-") as tmp:
        cluster = LocalProcessCluster(
            1,
            directory=tmp,
            master={"allocation_interval": 0.05},
            agent={"isolation": isolation},
            agent_resources="cpus:2;mem:4096",
        )
        with cluster:
            port = free_port()
            sched = Pair(port, hog_procs, work)
            tasks = ["server"] if hog_procs is None else ["server", "hog"]
            driver = mezzo.SchedulerDriver(sched, mezzo.FrameworkInfo(name="cpu-isolation"), cluster.master)
            driver.start()
            leftovers = 0
            try:
                sched.wait(
                    lambda st: all(t in st and st[t] != mezzo.TaskState.TASK_STARTING for t in tasks),
                    60,
                    "the tasks to run",
                )
                if sched.failed():
                    raise ClusterError(f"a task ended early: {sched.failed()}")
                sock = connect(port, 30)
                if hog_procs is not None:
                    deadline = time.monotonic() + 60
                    while hog_count(cluster.dir) < hog_procs + 1:
                        if time.monotonic() > deadline:
                            raise ClusterError(f"only {hog_count(cluster.dir)} hog processes after 60 s")
                        time.sleep(0.05)
                time.sleep(settle)
                try:
                    measure(sock, min(50, requests))  # warm-up
                    took = measure(sock, requests)
                finally:
                    sock.close()
                if sched.failed():
                    raise ClusterError(f"a task ended during the measurement: {sched.failed()}")
                for t in tasks:
                    driver.kill_task(t)
                sched.wait(
                    lambda st: all(mezzo.is_terminal(st[t]) for t in tasks), 60, "the tasks to be killed"
                )
                # The agent kills each task's tree; anything still working in a sandbox a few seconds
                # later (SIGKILLed spinners take a moment to be scheduled and die) is a leak.
                deadline = time.monotonic() + 5
                while (left := processes_under(cluster.dir)) and time.monotonic() < deadline:
                    time.sleep(0.05)
                leftovers = len(left)
                for pid in left:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            finally:
                driver.stop()
    return {
        "median": statistics.median(took),
        "p90": percentile(took, 0.90),
        "p99": percentile(took, 0.99),
    }, leftovers


def ms(x: float) -> str:
    return f"{x * 1000:.3f} ms"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hog-procs", type=int, default=256, help="CPU spinners the hog forks (default 256)")
    p.add_argument("--requests", type=int, default=100, help="round trips per run (default 100)")
    p.add_argument(
        "--work-ms",
        type=float,
        default=2.0,
        help="CPU milliseconds the server spends on each request (default 2)",
    )
    p.add_argument("--runs", type=int, default=3, help="runs per configuration (default 3)")
    p.add_argument("--settle", type=float, default=1.0, help="seconds between the hog starting and measuring")
    p.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    p.add_argument(
        "--keep-autogroup",
        action="store_true",
        help="leave the kernel's session autogroups as they are (they isolate each container's "
        "session already, hiding what 'no isolation' costs)",
    )
    args = p.parse_args()
    mezzo.log.configure("warning")
    autogroup = _autogroup(None if args.keep_autogroup else "0")
    try:
        _main(args, autogroup)
    finally:
        if autogroup is not None and not args.keep_autogroup:
            _autogroup(autogroup)


AUTOGROUP = "/proc/sys/kernel/sched_autogroup_enabled"


def _autogroup(value: str | None) -> str | None:
    """Set the kernel's session autogroup switch (None: leave it); returns what it was.

    With autogroups on, the scheduler shares the CPU between sessions first, and each
    container leads its own session: the kernel then isolates containers by itself,
    and the hog's 256 processes weigh no more than the server's one."""
    try:
        with open(AUTOGROUP) as f:
            before = f.read().strip()
        if value is not None and value != before:
            with open(AUTOGROUP, "w") as f:
                f.write(value)
        return before
    except OSError:
        return None


def _main(args: argparse.Namespace, autogroup: str | None) -> None:
    configs = []
    for label, isolation, hog in CONFIGS:
        why = isolation_unavailable(isolation)
        if why is not None:
            print(f"{label}: skipped ({why})")
        configs.append((label, isolation, hog, why))
    results: dict[str, list[dict]] = {label: [] for label, *_ in configs}
    leaks = 0
    for run in range(args.runs):
        for label, isolation, hog, why in configs:
            if why is not None:
                continue
            figures, left = one_run(
                isolation, args.hog_procs if hog else None, args.requests, args.settle, args.work_ms / 1000
            )
            results[label].append(figures)
            leaks += left
            print(
                f"run {run + 1}: {label}: {args.requests} requests, median {ms(figures['median'])}, "
                f"p90 {ms(figures['p90'])}, p99 {ms(figures['p99'])}"
                + (f"; killed {left} leftover processes" if left else ""),
                flush=True,
            )
    print(f"leftover processes after the kills: {leaks}")

    def med(label: str, key: str) -> float:
        return statistics.median(r[key] for r in results[label])

    base = med("alone", "median")
    lines = [
        f"`python bench/cpu_isolation.py` ({machine()}). One real agent (`cpus:2;mem:4096`) and a master on "
        "loopback; one framework launches a TCP echo server on 127.0.0.1 (`cpus:1`) and, except in the "
        f"baseline, a hog (`cpus:1`) that forks {args.hog_procs} CPU spinners. The benchmark is the client: "
        f"{args.requests:,} round trips of {MESSAGE} bytes, one at a time, over one connection, after "
        f"{args.settle:g} s with the hog running; the server spends {args.work_ms:g} ms of CPU on each. "
        f"Kernel session autogroups were {'on' if args.keep_autogroup and autogroup == '1' else 'off'} "
        "(on, they isolate each container's session by themselves). "
        "Fresh cluster per run; configurations alternate; each "
        f"figure is the median over {args.runs} runs of that run's statistic. Paper: +550 % without "
        "isolation, +30 % with it; target: ≤ +30 % with `cgroups/cpu`.",
        "",
        "| configuration | `agent.isolation` | median | p90 | p99 | median vs. alone | run medians |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, isolation, _hog, why in configs:
        iso = ", ".join(f"`{n}`" for n in isolation)
        if why is not None:
            lines.append(f"| {label} | {iso} | skipped: {why} | | | | |")
            continue
        m = med(label, "median")
        runs = [r["median"] for r in results[label]]
        lines.append(
            f"| {label} | {iso} | {ms(m)} | {ms(med(label, 'p90'))} | {ms(med(label, 'p99'))} | "
            f"{(m / base - 1) * 100:+.0f} % | "
            f"{' / '.join(f'{x * 1000:.3f}' for x in runs)} |"
        )
    print("\n".join(lines))
    if not args.no_write:
        write_section("## CPU isolation: the paper's §6.7", lines)


if __name__ == "__main__":
    main()
