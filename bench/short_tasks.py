#!/usr/bin/env python3
"""Short command tasks on one real agent, end to end, with and without isolation.

A ``mezzo master`` and one ``mezzo agent`` process (``cpus:8;mem:8192``: room for
80 tasks at once) on loopback, and one framework on the real scheduler driver
that fills every offer with tasks running ``true`` (``cpus:0.1;mem:8``) until it
has launched ``--tasks``. The clock runs from the first offer to the last
TASK_FINISHED as the scheduler sees it: offer, launch, validation, the agent's
container set-up (every isolator's prepare and isolate), fork and exec, exit,
clean-up, the status update back through the master, the acknowledgement.

Each configuration (``agent.isolation`` and ``agent.checkpoint``) is run
``--runs`` times, alternating, so that a busy machine slows them all alike. Slurm's
documentation quotes about 500 simple jobs a second; that is the bar without
isolation. Isolators that are not installed, or cannot run here (not root), are
reported as skipped.

Where the agent's work directory lives matters more than anything mezzo does: each
task creates a sandbox (three directories, stdout, stderr and an exit file). On an
ext4 file system without a journal, as this project's VM has, allocating an inode
scans past every recently deleted one, so the sandboxes earlier runs deleted make
later runs slower and slower (perf: two thirds of the agent's CPU in
``recently_deleted``). The work directory is therefore on tmpfs (``/dev/shm``) by
default; ``--work-dir`` puts it elsewhere.

Usage::

    python bench/short_tasks.py                      # writes docs/benchmarks.md
    python bench/short_tasks.py --tasks 500 --runs 1 --no-write
    python bench/short_tasks.py --work-dir /var/tmp --no-write   # on disk
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time

import mezzo
import mezzo.log
from _cluster import default_work_dir, filesystem_of, isolation_unavailable, machine
from _report import write_section
from mezzo import CommandInfo, Filters, Resources, TaskInfo
from mezzo.testing import ClusterError, LocalProcessCluster

CONFIGS = [
    ("posix, no checkpoint", ["posix"], False),
    ("posix", ["posix"], True),
    ("cgroups/cpu + cgroups/mem", ["posix", "cgroups/cpu", "cgroups/mem"], True),
    ("network/bandwidth", ["posix", "network/bandwidth"], True),
    ("lxc", ["lxc"], True),
]
TASK = Resources(cpus=0.1, mem=8)


class Filler(mezzo.Scheduler):
    """Launches ``total`` ``true`` tasks, as many per offer as fit."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.launched = 0
        self.finished = 0
        self.failed: list[str] = []
        self.first_offer: float | None = None
        self.done_at: float | None = None
        self.done = threading.Event()

    def resource_offers(self, driver, offers):
        if self.first_offer is None:
            self.first_offer = time.perf_counter()
        for offer in offers:
            room = offer.resources
            tasks = []
            while self.launched < self.total and TASK.fits_in(room):
                room = room - TASK
                self.launched += 1
                tasks.append(
                    TaskInfo(
                        task_id=f"t{self.launched}",
                        agent_id=offer.agent_id,
                        resources=TASK,
                        command=CommandInfo(value="true"),
                    )
                )
            driver.launch_tasks(offer.offer_id, tasks, Filters(refuse_seconds=0))

    def status_update(self, driver, status):
        if not mezzo.is_terminal(status.state):
            return
        if status.state == mezzo.TaskState.TASK_FINISHED:
            self.finished += 1
        else:
            self.failed.append(f"{status.task_id}: {mezzo.state_name(status.state)} {status.message}")
        if self.finished + len(self.failed) == self.total:
            self.done_at = time.perf_counter()
            self.done.set()


def one_run(
    isolation: list[str], checkpoint: bool, tasks: int, timeout: float, work_dir: str | None = None
) -> float:
    with tempfile.TemporaryDirectory(prefix="short-tasks-", dir=work_dir) as tmp:
        cluster = LocalProcessCluster(
            1,
            directory=tmp,
            master={"allocation_interval": 0.01},
            agent={"isolation": isolation, "checkpoint": checkpoint},
            agent_resources="cpus:8;mem:8192",
        )
        with cluster:
            sched = Filler(tasks)
            driver = mezzo.SchedulerDriver(sched, mezzo.FrameworkInfo(name="short"), cluster.master)
            driver.start()
            try:
                if not sched.done.wait(timeout):
                    raise ClusterError(f"{sched.finished} of {tasks} tasks finished after {timeout} s")
            finally:
                driver.stop()
            if sched.failed:
                raise ClusterError(f"{len(sched.failed)} tasks failed, e.g. {sched.failed[0]}")
            assert sched.done_at is not None and sched.first_offer is not None  # set once done
            return tasks / (sched.done_at - sched.first_offer)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=2000, help="tasks per run (default 2000)")
    p.add_argument("--runs", type=int, default=3, help="runs per configuration (default 3)")
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument(
        "--work-dir",
        default=default_work_dir(),
        help="where the cluster's directories go (default: /dev/shm if it is a tmpfs)",
    )
    p.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = p.parse_args()
    mezzo.log.configure("warning")

    configs = []
    for label, isolation, checkpoint in CONFIGS:
        why = isolation_unavailable(isolation)
        if why is not None:
            print(f"{label}: skipped ({why})")
        configs.append((label, isolation, checkpoint, why))
    rates: dict[str, list[float]] = {label: [] for label, *_ in configs}
    for run in range(args.runs):
        for label, isolation, checkpoint, why in configs:
            if why is not None:
                continue
            rate = one_run(isolation, checkpoint, args.tasks, args.timeout, args.work_dir)
            rates[label].append(rate)
            print(f"run {run + 1}: {label}: {args.tasks} tasks at {rate:,.0f} tasks/s", flush=True)

    base = statistics.median(rates["posix"]) if rates["posix"] else None
    lines = [
        f"`python bench/short_tasks.py` ({machine()}). One real agent (`cpus:8;mem:8192`) and a master on "
        f"loopback; one framework fills every offer with `true` tasks (`cpus:0.1;mem:8`) until it has "
        f"launched {args.tasks:,}. Work directories on {filesystem_of(args.work_dir)}. Rate = tasks / (first offer → last TASK_FINISHED at the scheduler). "
        f"Median of {args.runs} runs per configuration, configurations alternating. Target: ≥ 500 tasks/s "
        "without isolation (Slurm's documentation: about 500 simple jobs/s).",
        "",
        "| `agent.isolation` | checkpoint | tasks/s (median) | runs | vs. posix |",
        "|---|---|---|---|---|",
    ]
    for label, isolation, checkpoint, why in configs:
        iso = ", ".join(f"`{n}`" for n in isolation)
        if why is not None:
            lines.append(f"| {iso} | {'on' if checkpoint else 'off'} | skipped: {why} | | |")
            continue
        med = statistics.median(rates[label])
        ratio = f"{med / base:.2f}×" if base else ""
        lines.append(
            f"| {iso} | {'on' if checkpoint else 'off'} | {med:,.0f} | "
            f"{' / '.join(f'{r:,.0f}' for r in rates[label])} | {ratio} |"
        )
    print("\n".join(lines))
    if not args.no_write:
        write_section("## Short tasks on one agent", lines)


if __name__ == "__main__":
    main()
