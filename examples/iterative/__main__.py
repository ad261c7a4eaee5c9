"""Make the data set, or run the regression on a mezzo cluster (``--help`` of each).

Exit status: 0 when every iteration ran; 1 when the job failed or timed out; 2 for a
mistake on the command line.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

import mezzo
import mezzo.log
from mezzo import FrameworkInfo, Resources

from .data import Partition, make_partitions
from .scheduler import CachedScheduler, IterativeScheduler, MapReduceScheduler

MANIFEST = "partitions.json"


def prepare(args: argparse.Namespace) -> int:
    parts = make_partitions(args.data, args.partitions, args.rows, args.dims, args.seed)
    Path(args.data, MANIFEST).write_text(json.dumps([asdict(p) for p in parts]))
    size = sum(Path(p.path).stat().st_size for p in parts)
    print(
        f"{len(parts)} partitions, {args.partitions * args.rows} points, {size / 1e6:.1f} MB in {args.data}"
    )
    return 0


def load_manifest(directory: str) -> list[Partition]:
    path = Path(directory, MANIFEST)
    try:
        return [Partition(**p) for p in json.loads(path.read_text())]
    except FileNotFoundError:
        raise SystemExit(
            f"--data: {path} not found: run `python -m examples.iterative prepare` first"
        ) from None


def run(args: argparse.Namespace) -> int:
    partitions = load_manifest(args.data)
    per_task = Resources(cpus=args.cpus, mem=args.mem)
    scheduler: IterativeScheduler
    if args.mode == "cached":
        scheduler = CachedScheduler(
            partitions,
            args.iterations,
            per_task,
            executor_resources=Resources(cpus=0.1, mem=args.executor_mem),
            delay=args.delay,
            task_seconds=args.task_seconds,
            hold=args.hold,
        )
    else:
        scheduler = MapReduceScheduler(partitions, args.iterations, per_task, task_seconds=args.task_seconds)
    mezzo.log.configure("warning")
    driver = mezzo.SchedulerDriver(scheduler, FrameworkInfo(name=f"lr-{args.mode}"), args.master)
    driver.start()
    try:
        finished = scheduler.done.wait(args.timeout)
    finally:
        driver.stop()
        driver.join()
    result = scheduler.result
    print(json.dumps(asdict(result)))
    if not finished:
        print(f"gave up after {args.timeout:g} s, in iteration {scheduler.iteration}", file=sys.stderr)
        return 1
    return 0 if result.ok else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m examples.iterative", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    pre = sub.add_parser("prepare", help="make the data set")
    pre.add_argument("--data", required=True, help="directory for the partitions")
    pre.add_argument("--partitions", type=int, default=8)
    pre.add_argument("--rows", type=int, default=100_000, help="points per partition")
    pre.add_argument("--dims", type=int, default=10)
    pre.add_argument("--seed", type=int, default=1)
    go = sub.add_parser("run", help="run the regression")
    go.add_argument("--master", required=True, help="HOST:PORT or zk://... of the master")
    go.add_argument("--data", required=True, help="the directory `prepare` made")
    go.add_argument("--mode", choices=("cached", "mapreduce"), required=True)
    go.add_argument("--iterations", type=int, default=10)
    go.add_argument("--cpus", type=float, default=1.0, help="cpus per task")
    go.add_argument("--mem", type=float, default=64.0, help="MB per task")
    go.add_argument(
        "--executor-mem", type=float, default=512.0, help="MB of a caching executor (holds its partitions)"
    )
    go.add_argument(
        "--delay", type=float, default=1.0, help="seconds a task waits for its partition's executor"
    )
    go.add_argument(
        "--task-seconds",
        type=float,
        default=0.0,
        help="each task takes at least this long, standing for a heavier model (default 0)",
    )
    go.add_argument(
        "--hold",
        type=float,
        default=0.0,
        help="cached mode: keep offers that come during an iteration's last tasks for up to this "
        "many seconds, to start the next iteration on them (default 0: never)",
    )
    go.add_argument("--timeout", type=float, default=3600.0)
    args = p.parse_args(argv)
    if args.command == "prepare":
        if min(args.partitions, args.rows, args.dims) < 1:
            p.error("--partitions, --rows and --dims must be at least 1")
        return prepare(args)
    if args.iterations < 1:
        p.error("--iterations: at least 1")
    if not args.task_seconds >= 0:
        p.error(f"--task-seconds: at least 0, not {args.task_seconds:g}")
    if not args.hold >= 0:
        p.error(f"--hold: at least 0, not {args.hold:g}")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
