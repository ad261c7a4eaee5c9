"""Run one MPI job on a mezzo cluster, gang-scheduled.

    python -m examples.mpi --master 127.0.0.1:5050 --ranks 4 -- ./pi 100000000

The ranks' output is printed as it comes (through mpiexec). Exit status: 0 when every
rank finished and mpiexec exited 0; 1 when the job failed or did not start within
``--timeout``; 2 for a mistake on the command line.
"""

from __future__ import annotations

import argparse
import getpass
import shutil
import socket
import sys

import mezzo
import mezzo.log
from mezzo import FrameworkInfo, Resources

from .scheduler import MpiScheduler

OFFER_TIMEOUT = 30.0
"""The master's default ``offer_timeout``: a gang must give up before its offers are rescinded."""


def local_address(master: str) -> str:
    """The address of this machine that the master's host reaches it at: the source
    address of a route to the master (no packet is sent). The agents are taken to
    reach it there too (for a ``zk://`` master: the loopback address; pass
    ``--localhost``)."""
    if master.startswith("zk://"):
        return "127.0.0.1"
    host, _, port = master.rpartition(":")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((host.strip("[]"), int(port)))
            return probe.getsockname()[0]
    except (OSError, ValueError):
        return "127.0.0.1"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m examples.mpi", description=__doc__.split("\n\n")[0])
    p.add_argument("--master", required=True, help="HOST:PORT or zk://... of the master")
    p.add_argument("--ranks", type=int, required=True, help="MPI ranks (processes) of the job")
    p.add_argument("--cpus", type=float, default=1.0, help="cpus per rank (default 1)")
    p.add_argument("--mem", type=float, default=128.0, help="MB of memory per rank (default 128)")
    p.add_argument(
        "--hold-timeout",
        type=float,
        default=5.0,
        help="seconds a gang that does not yet fit every rank may gain no slot before it gives back "
        "what it holds (default 5)",
    )
    p.add_argument(
        "--localhost", default=None, help="the address agents reach this machine at (default: found)"
    )
    p.add_argument("--user", default=getpass.getuser(), help="unix user the ranks run as (default: yours)")
    p.add_argument("--name", default="mpi", help="framework name and task id prefix (default mpi)")
    p.add_argument(
        "--timeout", type=float, default=600.0, help="give up after this many seconds (default 600)"
    )
    p.add_argument("program", nargs=argparse.REMAINDER, help="-- PROGRAM [ARGS...]: what every rank runs")
    args = p.parse_args(argv)
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        p.error("give the MPI program after --")
    if args.ranks < 1:
        p.error(f"--ranks: at least 1, not {args.ranks}")
    if not args.cpus > 0 or not args.mem >= 0:
        p.error("--cpus must be > 0 and --mem >= 0")
    if not 0 < args.hold_timeout < OFFER_TIMEOUT:
        p.error(
            f"--hold-timeout: between 0 and {OFFER_TIMEOUT:g} s, the master's default offer_timeout "
            f"(held offers are rescinded then), not {args.hold_timeout:g}"
        )
    if shutil.which("mpiexec") is None:
        print("mpiexec not found: install MPICH (Debian: apt-get install mpich)", file=sys.stderr)
        return 2
    mezzo.log.configure("warning")

    scheduler = MpiScheduler(
        args.name,
        program,
        args.ranks,
        Resources(cpus=args.cpus, mem=args.mem),
        localhost=args.localhost or local_address(args.master),
        hold_timeout=args.hold_timeout,
    )
    driver = mezzo.SchedulerDriver(scheduler, FrameworkInfo(name=args.name, user=args.user), args.master)
    driver.start()
    try:
        ended = scheduler.done.wait(args.timeout)
    except KeyboardInterrupt:
        ended = False
    driver.stop()  # unregisters: the master kills any rank still running
    driver.join()
    if scheduler.stopper is not None:
        scheduler.stopper.join()
    outcome = scheduler.outcome
    if not ended or outcome is None:
        if scheduler.launcher is not None:
            scheduler.launcher.stop()
        print(
            f"{args.name}: gave up after {args.timeout:g} s; the offers held fit at most "
            f"{scheduler.most_slots} of {args.ranks} ranks",
            file=sys.stderr,
        )
        return 1
    gathered = f" after gathering for {outcome.gathered_in:.1f} s" if outcome.gathered_in is not None else ""
    print(
        f"{args.name}: {'succeeded' if outcome.ok else 'failed'}{gathered}: {outcome.message}",
        file=sys.stderr,
    )
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())
