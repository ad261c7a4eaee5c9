#!/usr/bin/env python3
"""How fast the batch queue runs an array of short jobs, end to end (issue 17).

A warm local cluster (a master and one agent of 16 cpus, real processes on loopback,
plaintext) and a ``mezzo queue`` process. Each run starts ``mezzo submit --array 1-1000
-- true`` as a whole process (its defaults: 1 cpu and 128 MB a job, so 16 run at once)
and ends when the queue says the last job finished. Rate = jobs / (submit process
started -> last job's end). Runs alternate between the master's default
``allocation_interval`` (0.1 s, what ``mezzo local`` runs) and 0.01 s, each on a
cluster of its own started once; medians of the runs.

The clusters' directories (the agent's work directory with every job's sandbox, the
queue's state) are on tmpfs (``/dev/shm``) by default, as in ``bench/short_tasks.py``
and for the same reason: on this VM's journal-less ext4, creating a sandbox costs
whatever the files deleted in the last minutes left the inode allocator to skip
(:func:`_cluster.default_work_dir`), so on the disk the figures measure what ran
before. ``--work-dir`` puts them elsewhere.

Target (issue 17): 500 jobs/s or more.

Usage::

    python bench/queue_throughput.py               # 5 runs of each
    python bench/queue_throughput.py --runs 2 --jobs 200 --no-write
    python bench/queue_throughput.py --work-dir /var/tmp --no-write   # on disk
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _cluster import default_work_dir, filesystem_of, machine
from _report import write_section
from mezzo.queue.client import QueueClient
from mezzo.testing import LocalProcessCluster, wait_for

TARGET_JOBS_PER_SECOND = 500.0
# `mezzo submit` as an installed mezzo runs: from cached bytecode.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
INTERVALS = (0.1, 0.01)


class QueueProcess:
    def __init__(self, master: str, directory: Path) -> None:
        self.socket = str(directory / "queue.sock")
        log = open(directory / "queue.log", "ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mezzo",
                "queue",
                "--master",
                master,
                "--socket",
                self.socket,
                "--state-dir",
                str(directory / "queue-state"),
                "--log-level",
                "warning",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.client = QueueClient(self.socket)
        wait_for(self._registered, 30, "the queue to register")

    def _registered(self) -> bool:
        with contextlib.suppress(Exception):
            return bool(self.client.get("/health")["queue"]["registered"])
        return False

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)


def one_run(queue: QueueProcess, jobs: int) -> tuple[float, float]:
    """(jobs per second end to end, seconds the submit command took)."""
    started = time.time()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mezzo",
            "submit",
            "--queue",
            queue.socket,
            "--array",
            f"1-{jobs}",
            "--",
            "true",
        ],
        capture_output=True,
        text=True,
        env=ENV,
    )
    submitted = time.time()
    if done.returncode != 0:
        raise RuntimeError(f"mezzo submit exited {done.returncode}: {done.stderr}")
    submission = done.stdout.split()[-1].split("_")[0]
    while queue.client.get("/jobs", state="waiting", limit=1)["total"]:
        time.sleep(0.02)
    ended = [j for j in queue.client.get("/jobs", state="all")["jobs"] if str(j["submission"]) == submission]
    if len(ended) != jobs or any(j["state"] != "FINISHED" for j in ended):
        raise RuntimeError(f"not every job finished: {len(ended)} listed")
    last = max(j["ended"] for j in ended)
    return jobs / (last - started), submitted - started


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5, help="runs per allocation interval (default 5)")
    p.add_argument("--jobs", type=int, default=1000, help="jobs in the array (default 1000)")
    p.add_argument(
        "--work-dir",
        default=default_work_dir(),
        help="where the clusters' directories go (default: /dev/shm if it is a tmpfs)",
    )
    p.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = p.parse_args(argv)
    rates: dict[float, list[float]] = {i: [] for i in INTERVALS}
    submit_seconds: list[float] = []
    with contextlib.ExitStack() as stack:
        queues = {}
        for interval in INTERVALS:
            tmp = Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="queue-bench-", dir=args.work_dir))
            )
            cluster = stack.enter_context(
                LocalProcessCluster(
                    1,
                    directory=str(tmp),
                    agent_resources="cpus:16;mem:16384",
                    master={"allocation_interval": interval},
                )
            )
            cluster.wait_for_agents(1)
            queues[interval] = QueueProcess(cluster.master, tmp)
            stack.callback(queues[interval].stop)
            one_run(queues[interval], 100)  # warm: page cache, the first offers
        for run in range(args.runs):
            for interval in INTERVALS:  # alternated: the machine's drift hits both alike
                rate, submit = one_run(queues[interval], args.jobs)
                rates[interval].append(rate)
                submit_seconds.append(submit)
                print(f"run {run + 1}, allocation_interval {interval:g} s: {rate:.0f} jobs/s", flush=True)
    rows, verdicts = [], []
    for interval, values in rates.items():
        median = statistics.median(values)
        rows.append(f"| {interval:g} s | {median:.0f} | {', '.join(f'{v:.0f}' for v in values)} |")
        verdicts.append(
            f"- {'met' if median >= TARGET_JOBS_PER_SECOND else '**missed**'} with allocation_interval "
            f"{interval:g} s: >= {TARGET_JOBS_PER_SECOND:.0f} jobs/s ({median:.0f})"
        )
    lines = [
        f"Machine: {machine()}. Command: `python bench/queue_throughput.py`. A warm local cluster (a "
        f"master and one agent of 16 cpus, plaintext, on loopback) and a `mezzo queue` process, their "
        f"directories on {filesystem_of(args.work_dir)}; each "
        f"run is `mezzo submit --array 1-{args.jobs} -- true` as a whole process (1 cpu and 128 MB a "
        f"job: 16 at once), timed from its start to the last job's end. {args.runs} runs per "
        "allocation interval, alternated.",
        "",
        "| master.allocation_interval | jobs/s (median) | runs |",
        "|---|---|---|",
        *rows,
        "",
        *verdicts,
        f"- `mezzo submit --array 1-{args.jobs}` itself: {statistics.median(submit_seconds) * 1000:.0f} ms "
        "median (start to exit).",
    ]
    print("\n".join(lines))
    if not args.no_write:
        write_section("## The batch queue's throughput (bench/queue_throughput.py)", lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
