"""Run the delay-scheduling framework against a mezzo cluster.

    python -m examples.delay_scheduling --master 127.0.0.1:5050 --jobs 2 --maps 20 --delay 1

Blocks are placed at random (``--replicas`` distinct hosts each) over ``--hosts``,
by default the hostnames of the agents connected to the master now. Each map is a
``sleep`` of Normal(``--task-seconds``, ``--stddev``) seconds, ``--remote-factor``
times longer when it runs away from its block. Prints one line per job and the
overall locality; exits 0 once every job has finished.
"""

from __future__ import annotations

import argparse
import sys

import mezzo
import mezzo.log
from mezzo import FrameworkInfo, Resources
from mezzo.state_client import fetch_state

from .policy import DelayPolicy
from .scheduler import JobStream, LocalityScheduler, TaskDurations


def agent_hostnames(master: str) -> list[str]:
    """Hostnames of the agents connected to ``master`` (a ``host:port``), sorted."""
    state = fetch_state(master, timeout=10)
    return sorted({a["hostname"] for a in state["agents"] if a.get("connected", True)})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m examples.delay_scheduling", description=__doc__.split("\n\n")[0])
    p.add_argument("--master", required=True, help="HOST:PORT or zk://... of the master")
    p.add_argument("--hosts", default=None, help="comma-separated hostnames holding blocks (default: the agents')")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--maps", type=int, default=20, help="maps (blocks) per job")
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--delay", type=float, default=1.0, help="seconds a job waits for a local slot")
    p.add_argument("--refuse-seconds", type=float, default=None,
                   help="refuse filter sent with declines (default: the delay, within 0.5-1 s)")
    p.add_argument("--task-seconds", type=float, default=2.0)
    p.add_argument("--stddev", type=float, default=0.5)
    p.add_argument("--remote-factor", type=float, default=1.5, help="how much longer a non-local map takes")
    p.add_argument("--cpus", type=float, default=1.0)
    p.add_argument("--mem", type=float, default=128.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--name", default="delay-scheduling")
    p.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds")
    args = p.parse_args(argv)
    mezzo.log.configure("warning")

    hosts = args.hosts.split(",") if args.hosts else agent_hostnames(args.master)
    if len(hosts) < args.replicas:
        print(f"need at least {args.replicas} hosts for {args.replicas} replicas, got {hosts}", file=sys.stderr)
        return 2
    scheduler = LocalityScheduler(
        JobStream(args.name, hosts, args.maps, args.replicas, seed=args.seed),
        DelayPolicy(args.delay),
        TaskDurations(args.task_seconds, args.stddev, args.remote_factor, seed=args.seed),
        per_task=Resources(cpus=args.cpus, mem=args.mem), jobs=args.jobs, refuse_seconds=args.refuse_seconds)
    driver = mezzo.SchedulerDriver(scheduler, FrameworkInfo(name=args.name), args.master)
    driver.start()
    try:
        finished = scheduler.all_done.wait(args.timeout)
    finally:
        driver.stop()
        driver.join()
    for job in scheduler.completed:
        print(f"{job.job_id}: {len(job.maps)} maps in {job.seconds:.1f} s, "
              f"{job.local_launches} node-local / {job.remote_launches} remote ({job.locality:.0%})")
    print(f"locality {scheduler.locality:.1%} over {scheduler.local_launches + scheduler.remote_launches} launches; "
          f"{scheduler.declined} offers declined; {scheduler.lost} maps re-run")
    return 0 if finished and len(scheduler.completed) == args.jobs else 1


if __name__ == "__main__":
    sys.exit(main())
