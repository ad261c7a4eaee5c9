#!/usr/bin/env python3
"""What the master's HTTP surface costs (issue 16): pollers at Fig. 10's scale, and sandbox reads.

1. **Pollers at Fig. 10.** The workload of ``bench/fig10.py`` at ``--agents`` (50,000):
   the real master, emulated agents of 2 task slots, 200 emulated frameworks keeping them
   busy with tasks of Normal(30 s, 10 s), and a probe framework whose 10 s task's *extra
   delay* (driver start to TASK_FINISHED, minus 10 s) is the figure. On one cluster, after
   the fill and ``--settle``, phases alternate: quiet (nobody polling) and polled, ``--pairs``
   times, ``--runs`` probes each. In a polled phase another process (this script with
   ``--poll``: a thread per endpoint, each on its own keep-alive ``http.client``
   connection) asks the master for ``/state-summary`` and ``/metrics`` once a second and
   ``/overview`` (the web UI's front page) every 2 s, and records each answer's latency
   (bodies are read, not parsed). Targets: the polled phases' median extra delay within
   10 % of the quiet ones'; ``/metrics`` answered in under 50 ms (median).
2. **Sandbox reads.** A real local cluster (``LocalProcessCluster``: a master and one
   agent) and a task writing a ``--file-mib`` (64) MiB text file in its sandbox. The file is
   read from start to end in 64 KiB pages (``/files/read``'s cap), each page parsed as a
   client must, through the master's proxy and straight from the agent's own port, and
   downloaded whole (``/files/download``) both ways; ``--passes`` passes of each, the
   four kinds alternating. Target: ``/files/read`` through the master at 50 MB/s or more
   (MB = 10^6 bytes).

Usage::

    python bench/http_polling.py                          # 50,000 agents, writes docs/benchmarks.md
    python bench/http_polling.py --agents 20000 --no-write
    python bench/http_polling.py --skip fig10 --no-write  # sandbox reads only: a minute
    python bench/http_polling.py --agents 20000 --skip files --endpoints /metrics:1,/overview:2 --no-write
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

import mezzo
import mezzo.log
from _cluster import CLK_TCK, EmulatedCluster, machine, terminate
from _report import write_section
from mezzo import CommandInfo, Filters, FrameworkInfo, Resources, TaskInfo
from mezzo.emulation import run_probe
from mezzo.testing import LocalProcessCluster

ENDPOINTS = "/state-summary:1,/metrics:1,/overview:2"
"""What the pollers ask for, and every how many seconds (issue 16's schedule; ``--endpoints``)."""
TARGET_RATIO = 1.10
"""Most the polled phases' median extra delay may be, over the quiet phases'."""
TARGET_METRICS_S = 0.050
"""Median latency of ``/metrics`` under the pollers' load."""
TARGET_READ_MBPS = 50.0
"""``/files/read`` through the master, sequential pages."""
PAGE = 64 * 1024
"""A ``/files/read`` page: the endpoint's cap."""


# -- the poller process ---------------------------------------------------------------------


def schedule(text: str) -> list[tuple[str, float]]:
    """``/a:1,/b:2`` as ``[("/a", 1.0), ("/b", 2.0)]``: paths and their polling intervals."""
    out = []
    for item in filter(None, text.split(",")):
        path, _, every = item.rpartition(":")
        out.append((path, float(every)))
    return out


def poll(master: str, out: Path, timeout: float, endpoints: list[tuple[str, float]]) -> None:
    """Poll ``master``'s ``endpoints`` until SIGTERM, then write each request's
    ``[start, seconds, status, bytes]`` (start: seconds since the poller began) to ``out``.
    Prints ``ready`` once each endpoint has answered (or 60 s have passed)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    host, port = master.rsplit(":", 1)
    began = time.monotonic()
    results: dict[str, list[list[float]]] = {path: [] for path, _ in endpoints}
    answered = {path: threading.Event() for path, _ in endpoints}

    def loop(path: str, every: float) -> None:
        conn: http.client.HTTPConnection | None = None
        next_at = time.monotonic()
        while not stop.is_set():
            if conn is None:
                conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
            t = time.monotonic()
            try:
                conn.request("GET", path)
                answer = conn.getresponse()
                status, size = answer.status, len(answer.read())
            except (OSError, http.client.HTTPException):
                status, size = 0, 0
                conn.close()
                conn = None
            results[path].append([round(t - began, 3), time.monotonic() - t, status, size])
            answered[path].set()
            # A fixed schedule, as a UI's timer; a late answer is not made up for with a burst.
            now = time.monotonic()
            next_at = max(next_at + every, now)
            stop.wait(next_at - now)

    threads = [threading.Thread(target=loop, args=spec, daemon=True) for spec in endpoints]
    for th in threads:
        th.start()
    deadline = time.monotonic() + 60
    for event in answered.values():
        event.wait(max(0.0, deadline - time.monotonic()))
    print("ready", flush=True)
    stop.wait()
    for th in threads:
        th.join(timeout)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    seconds = time.monotonic() - began
    out.write_text(
        json.dumps(
            {
                "requests": {path: list(rows) for path, rows in results.items()},
                "seconds": seconds,
                "cpu": (usage.ru_utime + usage.ru_stime) / seconds,
            }
        )
    )


class Poller:
    """The poller process (this script with ``--poll``), started and waited for until it
    has an answer from each endpoint; :meth:`stop` returns what it recorded."""

    def __init__(self, master: str, out: Path, timeout: float, endpoints: str) -> None:
        self.out = out
        argv = [sys.executable, __file__, "--poll", master, "--out", str(out), "--timeout", str(timeout)]
        argv += ["--endpoints", endpoints]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the poller did not start (exit status {self.proc.wait()})")

    def stop(self, timeout: float) -> dict:
        # It writes what it saw once its requests in flight are answered (or time out).
        terminate(self.proc, grace=timeout + 30)
        return json.loads(self.out.read_text())


# -- part 1: pollers at Fig. 10 ---------------------------------------------------------------


def master_cpu(cluster: EmulatedCluster) -> float:
    """CPU seconds of the master process and its reaped children (the documents' renderers)."""
    pid = cluster.master.pid  # type: ignore[union-attr]
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / CLK_TCK


def fig10_part(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"http-polling-{args.agents}-") as tmp:
        with EmulatedCluster(Path(tmp), args.agents, per_connection=args.per_connection) as cluster:
            cluster.start_frameworks(
                args.frameworks,
                duration=args.task_mean,
                stddev=args.task_stddev,
                processes=args.framework_processes,
            )
            register_s = cluster.start_agents()
            slots = 2 * args.agents
            fill_s = cluster.wait_allocated(0.95, slots, timeout=args.fill_timeout)
            print(
                f"{args.agents} agents registered in {register_s:.1f} s; 95 % busy {fill_s:.1f} s later",
                flush=True,
            )
            time.sleep(args.settle)
            phases = []
            for i in range(args.pairs):
                for polled in (False, True):
                    phases.append(run_phase(cluster, args, i, polled, Path(tmp) / f"poller-{i}.json"))
            return {"register_seconds": register_s, "fill_seconds": fill_s, "phases": phases}


def run_phase(cluster: EmulatedCluster, args: argparse.Namespace, pair: int, polled: bool, out: Path) -> dict:
    """One phase: ``args.runs`` probes, with the pollers running or not."""
    label = "polled" if polled else "quiet "
    poller = Poller(cluster.address, out, args.timeout, args.endpoints) if polled else None
    slots = 2 * cluster.agent_count
    try:
        cpu0, t0 = master_cpu(cluster), time.monotonic()
        extra, busy = [], [cluster.running / slots]
        for j in range(args.runs):
            probe = run_probe(
                cluster.address,
                "cpus:1;mem:1024",
                args.probe_seconds,
                timeout=120,
                name=f"probe-{pair}-{int(polled)}-{j}",
            )
            if probe.outcome != "TASK_FINISHED":
                raise RuntimeError(f"probe ended {probe.outcome}")
            extra.append(probe.times["finished"] - probe.times["started"] - args.probe_seconds)
            busy.append(cluster.running / slots)
        cpu = (master_cpu(cluster) - cpu0) / (time.monotonic() - t0)
    finally:
        polls = poller.stop(args.timeout) if poller is not None else None
    cluster.check_alive()
    phase = {"pair": pair, "polled": polled, "extra": extra, "busy_min": min(busy), "master_cpu": cpu}
    line = (
        f"pair {pair + 1} {label}: extra {', '.join(f'{e:.3f}' for e in extra)} s; "
        f"master {cpu:.0%} CPU (renderers included); busy >= {min(busy):.1%}"
    )
    if polls is not None:
        phase["polls"] = polls
        line += f"; poller {polls['cpu']:.0%} CPU; " + "; ".join(
            f"{path} {summary['count']}x median {summary['median'] * 1000:.0f} ms"
            for path, summary in latencies([polls]).items()
        )
    print(line, flush=True)
    return phase


def percentile(values: list[float], q: int) -> float:
    """The ``q``-th percentile (1-99) of ``values`` (inclusive method; one value: itself)."""
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def latencies(polls: list[dict]) -> dict[str, dict]:
    """Per endpoint over the phases ``polls``: count, failures, median, p95, max, body size."""
    out = {}
    for path in polls[0]["requests"] if polls else ():
        rows = [r for p in polls for r in p["requests"][path]]
        ok = [r[1] for r in rows if r[2] == 200]
        failed: dict[str, int] = {}
        for r in rows:
            if r[2] != 200:
                why = "no answer" if r[2] == 0 else str(int(r[2]))
                failed[why] = failed.get(why, 0) + 1
        out[path] = {
            "count": len(rows),
            "failed": len(rows) - len(ok),
            "failures": failed,
            "median": statistics.median(ok) if ok else float("nan"),
            "p95": percentile(ok, 95) if ok else float("nan"),
            "max": max(ok) if ok else float("nan"),
            "bytes": statistics.median(r[3] for r in rows if r[2] == 200) if ok else 0,
        }
    return out


def failures(lat: dict) -> str:
    """``0``, or how many requests failed and how (``3 (no answer: 2, 503: 1)``)."""
    if not lat["failed"]:
        return "0"
    return f"{lat['failed']} ({', '.join(f'{why}: {n}' for why, n in sorted(lat['failures'].items()))})"


def fig10_summary(result: dict) -> dict:
    quiet = [p for p in result["phases"] if not p["polled"]]
    polled = [p for p in result["phases"] if p["polled"]]
    q = statistics.median(e for p in quiet for e in p["extra"])
    b = statistics.median(e for p in polled for e in p["extra"])
    pair_ratios = [
        statistics.median(pb["extra"]) / statistics.median(pq["extra"])
        for pq, pb in zip(quiet, polled, strict=True)
        if statistics.median(pq["extra"]) > 0
    ]
    return {
        "quiet": q,
        "polled": b,
        "ratio": b / q if q > 0 else float("nan"),
        "pair_ratios": pair_ratios,
        "cpu_quiet": statistics.median(p["master_cpu"] for p in quiet),
        "cpu_polled": statistics.median(p["master_cpu"] for p in polled),
        "busy_min": min(p["busy_min"] for p in result["phases"]),
        "latency": latencies([p["polls"] for p in polled]),
        "poller_cpu": statistics.median(p["polls"]["cpu"] for p in polled),
    }


# -- part 2: sandbox reads ------------------------------------------------------------------


class Writer(mezzo.Scheduler):
    """Launches one task running ``command`` on the first offer, declines the rest."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.launched = False
        self.states: list[str] = []
        self.running = threading.Event()

    def resource_offers(self, driver, offers):
        for offer in offers:
            if self.launched:
                driver.decline_offer(offer.offer_id, Filters(refuse_seconds=600))
                continue
            self.launched = True
            task = TaskInfo(
                task_id="writer",
                agent_id=offer.agent_id,
                resources=Resources(cpus=0.5, mem=256),
                command=CommandInfo(value=self.command),
            )
            driver.launch_tasks(offer.offer_id, [task], Filters(refuse_seconds=600))

    def status_update(self, driver, status):
        self.states.append(mezzo.state_name(status.state))
        if status.state == mezzo.TaskState.TASK_RUNNING:
            self.running.set()


def connect(address: str, timeout: float) -> http.client.HTTPConnection:
    host, port = address.rsplit(":", 1)
    return http.client.HTTPConnection(host, int(port), timeout=timeout)


def file_size(address: str, query: str) -> int | None:
    conn = connect(address, 10)
    try:
        conn.request("GET", f"/files/read?{query}&offset=-1")
        answer = conn.getresponse()
        body = answer.read()
        return json.loads(body)["offset"] if answer.status == 200 else None
    finally:
        conn.close()


def read_pass(address: str, query: str, size: int, page: int) -> float:
    """Read the file page by page over one keep-alive connection; MB/s."""
    conn = connect(address, 60)
    offset = 0
    started = time.perf_counter()
    try:
        while offset < size:
            conn.request("GET", f"/files/read?{query}&offset={offset}&length={page}")
            answer = conn.getresponse()
            body = answer.read()
            if answer.status != 200:
                raise RuntimeError(f"read at {offset} from {address}: {answer.status} {body[:200]!r}")
            data = json.loads(body)["data"]
            if not data:
                raise RuntimeError(f"read at {offset} from {address}: nothing, {size - offset} bytes short")
            offset += len(data)  # ASCII: a character a byte
        return size / (time.perf_counter() - started) / 1e6
    finally:
        conn.close()


def download_pass(address: str, query: str, size: int) -> float:
    """Download the file whole; MB/s."""
    conn = connect(address, 60)
    got = 0
    started = time.perf_counter()
    try:
        conn.request("GET", f"/files/download?{query}")
        answer = conn.getresponse()
        if answer.status != 200:
            raise RuntimeError(f"download from {address}: {answer.status} {answer.read()[:200]!r}")
        while piece := answer.read(1 << 20):
            got += len(piece)
        if got != size:
            raise RuntimeError(f"download from {address}: {got} of {size} bytes")
        return size / (time.perf_counter() - started) / 1e6
    finally:
        conn.close()


def files_part(args: argparse.Namespace) -> dict[str, list[float]]:
    size = int(args.file_mib * 2**20)
    # Random bytes in base64: text (as /files/read's JSON carries it), which no layer compresses.
    command = (
        f"head -c {size * 3 // 4 + 3} /dev/urandom | base64 | head -c {size} > big.tmp && mv big.tmp big; "
        "sleep 3600"
    )
    with tempfile.TemporaryDirectory(prefix="http-polling-files-") as tmp:
        with LocalProcessCluster(1, directory=tmp, master={"allocation_interval": 0.01}) as cluster:
            sched = Writer(command)
            driver = mezzo.SchedulerDriver(sched, FrameworkInfo(name="files"), cluster.master)
            driver.start()
            try:
                if not sched.running.wait(30):
                    raise RuntimeError(f"the writer task did not run: {sched.states}")
                (agent,) = cluster.state()["agents"]
                agent_address = f"127.0.0.1:{agent['port']}"
                path = f"/frameworks/{driver.framework_id}/executors/writer/runs/latest/big"
                direct = urllib.parse.urlencode({"path": path})
                proxied = urllib.parse.urlencode({"agent_id": agent["id"], "path": path})
                deadline = time.monotonic() + 120
                while file_size(agent_address, direct) != size:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{path} not written within 120 s: {sched.states}")
                    time.sleep(0.2)
                ways = {
                    "read, master": lambda: read_pass(cluster.master, proxied, size, args.page),
                    "read, agent": lambda: read_pass(agent_address, direct, size, args.page),
                    "download, master": lambda: download_pass(cluster.master, proxied, size),
                    "download, agent": lambda: download_pass(agent_address, direct, size),
                }
                rates: dict[str, list[float]] = {name: [] for name in ways}
                for i in range(args.passes):
                    for name, one_pass in ways.items():
                        rates[name].append(one_pass())
                    print(
                        f"files pass {i + 1}: "
                        + ", ".join(f"{name} {r[-1]:.1f} MB/s" for name, r in rates.items()),
                        flush=True,
                    )
                return rates
            finally:
                driver.stop()


# -- main -----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--poll", metavar="MASTER", help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--agents", type=int, default=50_000, help="Fig. 10 cluster size")
    p.add_argument("--pairs", type=int, default=5, help="quiet/polled pairs of phases")
    p.add_argument("--runs", type=int, default=2, help="probes per phase")
    p.add_argument("--frameworks", type=int, default=200)
    p.add_argument("--framework-processes", type=int, default=1)
    p.add_argument("--per-connection", type=int, default=10)
    p.add_argument("--task-mean", type=float, default=30.0)
    p.add_argument("--task-stddev", type=float, default=10.0)
    p.add_argument("--settle", type=float, default=30.0, help="seconds after the fill before measuring")
    p.add_argument("--fill-timeout", type=float, default=300.0)
    p.add_argument("--probe-seconds", type=float, default=10.0, help="the probe's task length")
    p.add_argument("--timeout", type=float, default=60.0, help="the pollers' timeout for one answer")
    p.add_argument(
        "--endpoints",
        default=ENDPOINTS,
        help=f"what the pollers ask for, PATH:SECONDS,... (default {ENDPOINTS})",
    )
    p.add_argument("--file-mib", type=float, default=64.0, help="size of the sandbox file read (MiB)")
    p.add_argument("--page", type=int, default=PAGE, help="bytes asked for per /files/read")
    p.add_argument("--passes", type=int, default=5, help="passes of each way of reading the file")
    p.add_argument("--skip", default="", help="comma-separated parts to skip: fig10, files")
    p.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = p.parse_args(argv)
    if args.poll:
        poll(args.poll, args.out, args.timeout, schedule(args.endpoints))
        return 0
    mezzo.log.configure("warning")
    skip = set(filter(None, args.skip.split(",")))
    load_before = os.getloadavg()
    print(f"load average before: {load_before[0]:.2f}", flush=True)
    fig10 = None if "fig10" in skip else fig10_part(args)
    files = None if "files" in skip else files_part(args)
    load_after = os.getloadavg()
    print(f"load average after: {load_after[0]:.2f}", flush=True)
    lines, checks = report(args, fig10, files)
    print("\n".join(lines))
    for text, ok in checks:
        print(f"{'ok  ' if ok else 'MISS'} {text}")
    if args.no_write:
        print(json.dumps({"fig10": fig10, "files": files}, default=float))
    else:
        command = shlex.join(
            ["python", "bench/http_polling.py", *(argv if argv is not None else sys.argv[1:])]
        )
        write_section(
            "## What the master's HTTP surface costs (bench/http_polling.py)",
            [
                f"`{command}` ({time.strftime('%Y-%m-%d')}, {machine()}; everything on this one machine, "
                f"load average {load_before[0]:.1f} before and {load_after[0]:.1f} after). "
                + (
                    f"Fig. 10's workload at {args.agents:,} emulated agents ({args.frameworks} frameworks, "
                    f"tasks of Normal({args.task_mean:g} s, {args.task_stddev:g} s)); on one cluster, "
                    f"after the fill and {args.settle:g} s, phases alternate quiet / polled, "
                    f"{args.pairs} pairs of {args.runs} probes ({args.probe_seconds:g} s tasks). Polled: "
                    "another process asks for "
                    + ", ".join(f"`{path}` every {every:g} s" for path, every in schedule(args.endpoints))
                    + ", a keep-alive connection per endpoint; latency is request "
                    f"sent to body read; *no answer*: none within {args.timeout:g} s. Master CPU includes the "
                    "children that render documents. "
                    if fig10 is not None
                    else ""
                )
                + (
                    f"Sandbox reads: a {args.file_mib:g} MiB text file a task wrote, on a local master "
                    f"and one agent; `/files/read` in {args.page // 1024} KiB pages (each parsed), "
                    f"sequentially, through the master and from the agent's port, and `/files/download`; "
                    f"median of {args.passes} passes, kinds alternating; MB = 10^6 bytes."
                    if files is not None
                    else ""
                ),
                "",
                *lines,
                "",
                *(f"- {'met' if ok else '**missed**'}: {text}" for text, ok in checks),
            ],
        )
    return 0


def report(
    args: argparse.Namespace, fig10: dict | None, files: dict[str, list[float]] | None
) -> tuple[list[str], list[tuple[str, bool]]]:
    lines: list[str] = []
    checks: list[tuple[str, bool]] = []
    if fig10 is not None:
        s = fig10_summary(fig10)
        ratios = ", ".join(f"{r:.2f}" for r in s["pair_ratios"])
        lines += [
            "| Fig. 10 | quiet | polled | polled / quiet |",
            "|---|---|---|---|",
            f"| probe extra delay (median of {args.pairs * args.runs}) | {s['quiet']:.3f} s | {s['polled']:.3f} s "
            f"| {s['ratio']:.2f} (pairs: {ratios}) |",
            f"| master CPU (median of phases) | {s['cpu_quiet']:.0%} | {s['cpu_polled']:.0%} | "
            f"{s['cpu_polled'] / s['cpu_quiet'] if s['cpu_quiet'] else float('nan'):.2f} |",
            "",
            f"Cluster busy at least {s['busy_min']:.1%} at every probe; the poller process used "
            f"{s['poller_cpu']:.0%} of a core.",
            "",
            "| endpoint (polled phases) | requests | failed | median | p95 | max | body |",
            "|---|---|---|---|---|---|---|",
        ]
        for path, lat in s["latency"].items():
            lines.append(
                f"| `{path}` | {lat['count']} | {failures(lat)} | {lat['median'] * 1000:.1f} ms "
                f"| {lat['p95'] * 1000:.1f} ms | {lat['max'] * 1000:.1f} ms | {lat['bytes'] / 1024:,.0f} KiB |"
            )
        checks.append(
            (
                f"extra delay polled / quiet {s['ratio']:.2f} ({s['polled']:.3f} / {s['quiet']:.3f} s) "
                f"under {TARGET_RATIO:.2f}",
                s["ratio"] < TARGET_RATIO,
            )
        )
        if "/metrics" in s["latency"]:
            m = s["latency"]["/metrics"]["median"]
            checks.append(
                (
                    f"`/metrics` median {m * 1000:.1f} ms under {TARGET_METRICS_S * 1000:.0f} ms",
                    m < TARGET_METRICS_S,
                )
            )
    if files is not None:
        if lines:
            lines.append("")
        lines += ["| sandbox file | MB/s (median) | passes |", "|---|---|---|"]
        for name, rates in files.items():
            lines.append(
                f"| {name} | {statistics.median(rates):.1f} | {', '.join(f'{r:.1f}' for r in rates)} |"
            )
        read = statistics.median(files["read, master"])
        checks.append(
            (
                f"`/files/read` through the master {read:.1f} MB/s, at least {TARGET_READ_MBPS:g}",
                read >= TARGET_READ_MBPS,
            )
        )
    return lines, checks


if __name__ == "__main__":
    sys.exit(main())
