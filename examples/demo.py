#!/usr/bin/env python3
"""The `make run` demo: a local cluster shared by two frameworks under DRF.

Starts ``mezzo local --agents 3`` (a master and three agents on loopback, each
agent with 4 cpus and 4 GB, over TLS with the throw-away certificates it makes),
then two frameworks in this process:

- ``render`` runs cpu-heavy tasks  <1 cpu, 256 MB>,
- ``etl``    runs memory-heavy tasks <0.5 cpu, 1 GB>.

Both want more than the cluster has. Each takes at most ``--per-offer`` tasks
from an offer and hands the rest straight back, so the master's allocator (DRF)
decides who gets the next bite: the two end up with about the same *dominant*
share, render holding most of the cpus and etl most of the memory. A third
framework shares the cluster with them: the batch queue (``mezzo local --queue``),
to which the demo hands an array of ``--jobs`` jobs with ``mezzo submit``, as a
user would. A progress line per second shows what each holds; at the end a
summary says what each got.

    python examples/demo.py [--tasks N] [--task-seconds S]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import mezzo
import mezzo.config
import mezzo.log
from mezzo import CommandInfo, Filters, FrameworkInfo, Resources, TaskInfo
from mezzo.config import TlsConfig
from mezzo.errors import RequestFailed
from mezzo.queue.client import QueueClient
from mezzo.state_client import MasterUnreachable, fetch_state
from mezzo.testing import free_port


class DemoFramework(mezzo.Scheduler):
    """Runs ``total`` copies of one task shape, as many at once as offers allow."""

    def __init__(self, name: str, cpus: float, mem: float, total: int, seconds: float,
                 per_offer: int) -> None:
        self.name = name
        self.per_offer = per_offer
        self.task = Resources(cpus=cpus, mem=mem)
        self.total = total
        self.seconds = seconds
        self.launched = self.running = self.finished = self.failed = 0
        self.cpu_seconds = 0.0
        self.started: dict[str, float] = {}
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.peak_running = 0

    def resource_offers(self, driver, offers):
        for offer in offers:
            left, tasks = offer.resources, []
            while self.launched < self.total and len(tasks) < self.per_offer and self.task.fits_in(left):
                self.launched += 1
                left = left - self.task
                tid = f"{self.name}-{self.launched:03d}"
                tasks.append(TaskInfo(task_id=tid, name=tid, agent_id=offer.agent_id, resources=self.task,
                                      command=CommandInfo(value=f"sleep {self.seconds}")))
            if tasks:
                driver.launch_tasks(offer.offer_id, tasks, Filters(refuse_seconds=0))
            else:
                driver.decline_offer(offer.offer_id, Filters(refuse_seconds=1))
            if self.launched >= self.total:
                driver.set_needs_offers(False)

    def status_update(self, driver, status):
        now = time.monotonic()
        with self.lock:
            if status.state == mezzo.TaskState.TASK_RUNNING:
                self.running += 1
                self.started[status.task_id] = now
                self.peak_running = max(self.peak_running, self.running)
            elif mezzo.is_terminal(status.state):
                if status.task_id in self.started:
                    self.running -= 1
                    self.cpu_seconds += (now - self.started.pop(status.task_id)) * self.task.get("cpus")
                if status.state == mezzo.TaskState.TASK_FINISHED:
                    self.finished += 1
                else:
                    self.failed += 1
                    print(f"  {self.name}: {status.task_id} {mezzo.state_name(status.state)}: {status.message}")
                if self.finished + self.failed >= self.total:
                    self.done.set()


def wait_for_cluster(master: str, agents: int, proc: subprocess.Popen, client_config: str,
                     timeout: float = 30) -> TlsConfig:
    """Wait for ``agents`` agents; returns the [tls] that ``mezzo local`` wrote for clients
    (it runs TLS with throw-away certificates)."""
    deadline = time.monotonic() + timeout
    tls = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"mezzo local exited with status {proc.returncode}")
        if tls is None and os.path.exists(client_config):
            tls = mezzo.config.load(client_config).tls
        try:
            if tls is not None and sum(a["connected"] for a in fetch_state(master, 2, tls)["agents"]) >= agents:
                return tls
        except MasterUnreachable:
            pass
        time.sleep(0.1)
    raise SystemExit("the local cluster did not come up in time")


def queue_registered(queue: QueueClient) -> bool:
    try:
        return bool(queue.get("/health")["queue"]["registered"])
    except RequestFailed:
        return False


def job_counts(queue: QueueClient) -> dict[str, int]:
    """How many of the queue's jobs are in each state."""
    counts: dict[str, int] = {}
    for job in queue.get("/jobs", state="all")["jobs"]:
        counts[job["state"]] = counts.get(job["state"], 0) + 1
    return counts


def wait_until(predicate, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {what}")
        time.sleep(0.1)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", type=int, default=40, help="tasks per framework (default 40)")
    p.add_argument("--task-seconds", type=float, default=1.5, help="how long each task runs (default 1.5)")
    p.add_argument("--per-offer", type=int, default=2, help="most tasks a framework takes from one offer (default 2)")
    p.add_argument("--jobs", type=int, default=20, help="jobs submitted to the batch queue (default 20)")
    args = p.parse_args()
    mezzo.log.configure("warning")

    port = free_port()
    master = f"127.0.0.1:{port}"
    work = tempfile.mkdtemp(prefix="mezzo-demo-")
    log_path = os.path.join(work, "cluster.log")
    queue_socket = os.path.join(work, "queue.sock")
    print(f"starting a local cluster: master {master}, 3 agents x (4 cpus, 4 GB), the batch queue; "
          f"logs in {log_path}")
    with open(log_path, "wb") as logf:
        cluster = subprocess.Popen(
            [sys.executable, "-m", "mezzo", "local", "--agents", "3", "--listen", master,
             "--resources", "cpus:4;mem:4096", "--work-dir", work, "--queue"],
            stdout=logf, stderr=subprocess.STDOUT, start_new_session=True,
            env=dict(os.environ, MEZZO_QUEUE=queue_socket))
    try:
        tls = wait_for_cluster(master, 3, cluster, os.path.join(work, "client.toml"))
        frameworks = [
            DemoFramework("render", 1.0, 256, args.tasks, args.task_seconds, args.per_offer),
            DemoFramework("etl", 0.5, 1024, args.tasks, args.task_seconds, args.per_offer),
        ]
        drivers = []
        for fw in frameworks:
            d = mezzo.SchedulerDriver(fw, FrameworkInfo(name=fw.name), master, tls=tls)
            d.start()
            drivers.append(d)
        queue = QueueClient(queue_socket)
        wait_until(lambda: queue_registered(queue), 20, "the batch queue to register")
        submit = [sys.executable, "-m", "mezzo", "submit", "--queue", queue_socket, "--array", f"1-{args.jobs}",
                  "--cpus", "0.5", "--mem", "512", "--name", "demo", "--", f"sleep {args.task_seconds}"]
        submitted = subprocess.run(submit, capture_output=True, text=True)
        if submitted.returncode != 0:
            raise SystemExit(f"mezzo submit failed: {submitted.stderr.strip()}")
        print(f"$ mezzo submit --array 1-{args.jobs} --cpus 0.5 --mem 512 -- sleep {args.task_seconds:g}\n"
              f"{submitted.stdout.strip()}")
        started = time.monotonic()
        samples: dict[str, list[float]] = {fw.name: [] for fw in frameworks}
        jobs: dict[str, int] = {}
        while not all(fw.done.is_set() for fw in frameworks) or jobs.get("FINISHED", 0) + jobs.get("FAILED", 0) < args.jobs:
            time.sleep(1.0)
            state = fetch_state(master, 5, tls)
            shares = {f["name"]: f for f in state["frameworks"]}
            parts = []
            for fw in frameworks:
                info = shares.get(fw.name, {})
                share = info.get("dominant_share", 0.0)
                used = info.get("used", {})
                if fw.running:
                    samples[fw.name].append(share)
                parts.append(f"{fw.name}: {fw.running:2d} running {fw.finished:3d}/{fw.total} done, "
                             f"{used.get('cpus', 0):4.1f} cpus {used.get('mem', 0) / 1024:4.1f} GB, "
                             f"dominant share {share:4.2f}")
            jobs = job_counts(queue)
            parts.append(f"queue: {jobs.get('RUNNING', 0):2d} running {jobs.get('FINISHED', 0):3d}/{args.jobs} done")
            print(f"[{time.monotonic() - started:5.1f}s] " + " | ".join(parts), flush=True)
            if time.monotonic() - started > 300:
                print("the demo took too long; stopping")
                break
        for d in drivers:
            d.stop()
        elapsed = time.monotonic() - started
        print(f"\nsummary ({elapsed:.1f} s, allocator drf):")
        print(f"  {'framework':<10} {'tasks':>9} {'failed':>7} {'peak running':>13} {'cpu-seconds':>12} "
              f"{'mean dominant share':>20}")
        for fw in frameworks:
            mean = sum(samples[fw.name]) / len(samples[fw.name]) if samples[fw.name] else 0.0
            print(f"  {fw.name:<10} {fw.finished:>4}/{fw.total:<4} {fw.failed:>7} {fw.peak_running:>13} "
                  f"{fw.cpu_seconds:>12.1f} {mean:>20.2f}")
        print(f"  {'queue':<10} {jobs.get('FINISHED', 0):>4}/{args.jobs:<4} {jobs.get('FAILED', 0):>7}   "
              "(jobs of mezzo submit --array)")
        ok = all(fw.finished == fw.total for fw in frameworks) and jobs.get("FINISHED", 0) == args.jobs
        print("\nall tasks finished." if ok else "\nsome tasks did not finish.")
        return 0 if ok else 1
    finally:
        os.killpg(cluster.pid, signal.SIGTERM)
        try:
            cluster.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(cluster.pid, signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main())
