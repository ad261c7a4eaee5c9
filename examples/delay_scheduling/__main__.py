"""Run the delay-scheduling framework against a mezzo cluster.

    python -m examples.delay_scheduling --master 127.0.0.1:5050 --jobs 2 --maps 20 --delay 1

Blocks are placed at random (``--replicas`` distinct hosts each) over ``--hosts``,
by default the hostnames of the agents connected to the master now. Each map is a
``sleep`` of Normal(``--task-seconds``, ``--stddev``) seconds, ``--remote-factor``
times longer when it runs away from its block. Prints one line per job and the
overall locality; exits 0 once every job has finished.

With ``--mix facebook`` or ``--mix large`` it runs the paper's §6.1 workloads
(:mod:`.mix`) on :class:`~.fair.FairJobsScheduler` instead: many jobs at once,
sharing the slots fairly. ``facebook`` submits ``--mix-jobs`` jobs (default 100) at
the mix's arrival times; ``large`` submits ``--mix-jobs`` large jobs (default 10),
each when the previous one finished. ``--time-scale`` multiplies every time (task
durations, inter-arrivals). Prints one line per job (id, type, seconds); exits 0
once every job has finished, 1 on ``--timeout``.

    python -m examples.delay_scheduling --master 127.0.0.1:5050 --mix facebook --time-scale 0.5
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

import mezzo
import mezzo.log
from mezzo import FrameworkInfo, Resources
from mezzo.state_client import fetch_state

from .fair import FairJob, FairJobsScheduler
from .mix import facebook_mix, large_mix
from .policy import DelayPolicy
from .scheduler import JobStream, LocalityScheduler, TaskDurations


def agent_hostnames(master: str) -> list[str]:
    """Hostnames of the agents connected to ``master`` (a ``host:port``), sorted."""
    state = fetch_state(master, timeout=10)
    return sorted({a["hostname"] for a in state["agents"] if a.get("connected", True)})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m examples.delay_scheduling", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--master", required=True, help="HOST:PORT or zk://... of the master")
    p.add_argument(
        "--hosts", default=None, help="comma-separated hostnames holding blocks (default: the agents')"
    )
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--maps", type=int, default=20, help="maps (blocks) per job")
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--delay", type=float, default=1.0, help="seconds a job waits for a local slot")
    p.add_argument(
        "--refuse-seconds",
        type=float,
        default=None,
        help="refuse filter sent with declines (default: the delay, within 0.5-1 s)",
    )
    p.add_argument("--task-seconds", type=float, default=2.0)
    p.add_argument("--stddev", type=float, default=0.5)
    p.add_argument("--remote-factor", type=float, default=1.5, help="how much longer a non-local map takes")
    p.add_argument("--cpus", type=float, default=1.0)
    p.add_argument("--mem", type=float, default=128.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--name", default="delay-scheduling")
    p.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds")
    mix = p.add_argument_group(
        "§6.1 workloads",
        "many jobs at once, sharing the slots fairly; --jobs, --maps, --task-seconds, "
        "--stddev and --refuse-seconds do not apply (declines refuse for the delay, within 0.5-1 s)",
    )
    mix.add_argument(
        "--mix",
        choices=["facebook", "large"],
        default=None,
        help="run this workload instead of --jobs jobs one at a time",
    )
    mix.add_argument(
        "--mix-jobs", type=int, default=None, help="jobs in the mix (default: facebook 100, large 10)"
    )
    mix.add_argument(
        "--time-scale", type=float, default=1.0, help="multiplies task durations and inter-arrival times"
    )
    mix.add_argument(
        "--mean-interarrival",
        type=float,
        default=3.0,
        help="facebook: mean seconds between submissions (before --time-scale)",
    )
    mix.add_argument(
        "--mix-stddev",
        type=float,
        default=0.1,
        help="standard deviation of task durations, as a fraction of the mean",
    )
    args = p.parse_args(argv)
    mezzo.log.configure("warning")

    hosts = args.hosts.split(",") if args.hosts else agent_hostnames(args.master)
    if args.mix is not None:
        return run_mix(args, hosts)  # blocks get min(--replicas, hosts) replicas there
    if len(hosts) < args.replicas:
        print(
            f"need at least {args.replicas} hosts for {args.replicas} replicas, got {hosts}", file=sys.stderr
        )
        return 2
    scheduler = LocalityScheduler(
        JobStream(args.name, hosts, args.maps, args.replicas, seed=args.seed),
        DelayPolicy(args.delay),
        TaskDurations(args.task_seconds, args.stddev, args.remote_factor, seed=args.seed),
        per_task=Resources(cpus=args.cpus, mem=args.mem),
        jobs=args.jobs,
        refuse_seconds=args.refuse_seconds,
    )
    driver = mezzo.SchedulerDriver(scheduler, FrameworkInfo(name=args.name), args.master)
    driver.start()
    try:
        finished = scheduler.all_done.wait(args.timeout)
    finally:
        driver.stop()
        driver.join()
    for job in scheduler.completed:
        print(
            f"{job.job_id}: {len(job.maps)} maps in {job.seconds:.1f} s, "
            f"{job.local_launches} node-local / {job.remote_launches} remote ({job.locality:.0%})"
        )
    print(
        f"locality {scheduler.locality:.1%} over {scheduler.local_launches + scheduler.remote_launches} launches; "
        f"{scheduler.declined} offers declined; {scheduler.lost} maps re-run"
    )
    return 0 if finished and len(scheduler.completed) == args.jobs else 1


def run_mix(args: argparse.Namespace, hosts: list[str]) -> int:
    """``--mix``: submit the workload to a :class:`FairJobsScheduler`, wait for every job."""
    if args.mix == "facebook":
        arrivals = facebook_mix(
            jobs=100 if args.mix_jobs is None else args.mix_jobs,
            mean_interarrival=args.mean_interarrival,
            time_scale=args.time_scale,
            seed=args.seed,
        )
        specs = [a.spec for a in arrivals]
    else:
        arrivals = []  # submitted one after the other from on_job_done instead
        specs = large_mix(
            jobs=10 if args.mix_jobs is None else args.mix_jobs, map_seconds=4.0 * args.time_scale
        )
    total = len(specs)
    all_done = threading.Event()
    stop = threading.Event()
    following = iter(specs[1:])  # large: each submitted when the previous finished

    def on_job_done(job: FairJob) -> None:
        if args.mix == "large":
            nxt = next(following, None)
            if nxt is not None:
                scheduler.submit(nxt)
        if len(scheduler.completed) >= total:
            all_done.set()

    def submit_on_time() -> None:
        start = time.monotonic()
        for arrival in arrivals:
            if stop.wait(max(0.0, start + arrival.at - time.monotonic())):
                return
            scheduler.submit(arrival.spec)

    scheduler = FairJobsScheduler(
        args.name,
        hosts,
        DelayPolicy(args.delay),
        per_task=Resources(cpus=args.cpus, mem=args.mem),
        replicas=args.replicas,
        stddev=args.mix_stddev,
        remote_factor=args.remote_factor,
        seed=args.seed,
        on_job_done=on_job_done,
    )
    if total == 0:
        all_done.set()
    elif args.mix == "large":
        scheduler.submit(specs[0])
    driver = mezzo.SchedulerDriver(scheduler, FrameworkInfo(name=args.name), args.master)
    driver.start()
    threading.Thread(target=submit_on_time, name="submitter", daemon=True).start()
    deadline = time.monotonic() + args.timeout
    try:
        while not all_done.wait(0.1) and scheduler.failed is None and time.monotonic() < deadline:
            pass
    finally:
        stop.set()
        driver.stop()
        driver.join()
    for job in scheduler.completed:
        print(
            f"{job.job_id}: {job.kind}, {job.spec.maps} maps + {job.spec.reduces} reduces "
            f"in {job.seconds:.1f} s"
        )
    done = len(scheduler.completed)
    print(
        f"{done} of {total} jobs finished; locality {scheduler.locality:.1%} over "
        f"{scheduler.local_launches + scheduler.remote_launches} map launches; "
        f"{scheduler.declined} offers declined; {scheduler.lost} tasks re-run"
    )
    if scheduler.failed is not None:
        print(f"the driver aborted: {scheduler.failed}", file=sys.stderr)
        return 1
    if done < total:
        print(f"timed out after {args.timeout:g} s: {done} of {total} jobs finished", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
