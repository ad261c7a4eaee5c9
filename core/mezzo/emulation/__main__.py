"""``python -m mezzo.emulation agents|frameworks``: one side of an emulated cluster
as a process, printing its counters as a JSON line every ``--report-every`` seconds.

    python -m mezzo.emulation agents --master 127.0.0.1:5050 --count 10000 \\
        --resources 'cpus:2;mem:2048' --per-connection 10
    python -m mezzo.emulation frameworks --master 127.0.0.1:5050 --count 200 \\
        --task 'cpus:1;mem:1024' --duration 30 --stddev 10

The first line is printed once the process is up (agents: all registered), so a
benchmark can wait for it. SIGTERM or SIGINT stops the process cleanly. Both sides
dial with the ``[tls]`` of ``$MEZZO_CONFIG`` when that is set, as drivers do.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import threading
import time
from typing import Any

from .. import log as mezzo_log
from ..heap import tune_gc
from ..rpc.tls import client_tls_for
from .agents import EmulatedAgentPool
from .frameworks import EmulatedFrameworkPool, normal_duration


def _report(fields: dict) -> None:
    print(json.dumps({"t": round(time.time(), 3), **fields}), flush=True)


async def _run_agents(args: argparse.Namespace) -> None:
    pool = EmulatedAgentPool(
        args.master,
        args.count,
        args.resources,
        agents_per_connection=args.per_connection,
        tls=client_tls_for(None),  # the [tls] of $MEZZO_CONFIG, as the frameworks' drivers do
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    started = time.monotonic()
    await pool.start()
    await pool.wait_registered(timeout=args.register_timeout)
    _report({"registered": pool.registered_count, "seconds": round(time.monotonic() - started, 3)})
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), args.report_every)
        except TimeoutError:
            pass
        _report(
            {
                "registered": pool.registered_count,
                "running": pool.running,
                "updates_sent": pool.updates_sent,
                "all_registered_at": pool.all_registered_at,
                "started_over": pool.started_over,
                "not_leader": pool.not_leader,
            }
        )
    await pool.stop()


def _frameworks_line(pool: Any) -> dict[str, Any]:
    """A frameworks process's counters (either API's pool: the same methods)."""
    return {
        "registered": pool.registered_count(),
        **pool.counts(),
        "first_offer_at": pool.first_offer_at(),
        "all_registered_at": pool.all_registered_at(),
        "offered_since_registered_at": pool.offered_since_registered_at(),
    }


def _run_frameworks(args: argparse.Namespace) -> None:
    if args.api == "v1":
        asyncio.run(_run_v1_frameworks(args))
        return
    pool = EmulatedFrameworkPool(
        args.master,
        args.count,
        args.task,
        normal_duration(args.duration, args.stddev, seed=args.seed),
        name_prefix=args.name_prefix,
        tasks_per_offer=args.tasks_per_offer,
        max_tasks=args.max_tasks,
        refuse_seconds=args.refuse_seconds,
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        # Set from another thread: Event.set() inside a handler deadlocks if the signal
        # lands while this (main) thread holds the event's lock in stop.wait().
        signal.signal(sig, lambda *_: threading.Thread(target=stop.set, daemon=True).start())
    pool.start()
    deadline = time.monotonic() + args.register_timeout
    while pool.registered_count() < args.count and time.monotonic() < deadline and not stop.is_set():
        time.sleep(0.05)
    _report({"registered": pool.registered_count()})
    while not stop.wait(args.report_every):
        _report(_frameworks_line(pool))
    pool.stop()


async def _run_v1_frameworks(args: argparse.Namespace) -> None:
    from .v1_frameworks import V1FrameworkPool  # aiohttp's client: only for this API

    if args.tasks_per_offer != 1 or args.max_tasks is not None:
        raise SystemExit("--api v1 runs one task per offer, without --max-tasks")
    pool = V1FrameworkPool(
        args.master,
        args.count,
        args.task,
        normal_duration(args.duration, args.stddev, seed=args.seed),
        name_prefix=args.name_prefix,
        refuse_seconds=args.refuse_seconds,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await pool.start()
    deadline = time.monotonic() + args.register_timeout
    while pool.registered_count() < args.count and time.monotonic() < deadline and not stop.is_set():
        await asyncio.sleep(0.05)
    _report({"registered": pool.registered_count()})
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), args.report_every)
        except TimeoutError:
            pass
        _report(_frameworks_line(pool))
    await pool.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mezzo.emulation", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="side", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--master", required=True, help="the master's HOST:PORT")
    common.add_argument("--count", type=int, required=True, help="how many agents or frameworks")
    common.add_argument("--report-every", type=float, default=1.0, help="seconds between JSON lines")
    common.add_argument(
        "--register-timeout",
        type=float,
        default=300.0,
        help="seconds to wait for every registration before the first line",
    )
    common.add_argument("--log-level", default="warning", help="debug, info, warning or error")
    agents = sub.add_parser("agents", parents=[common], help="emulated agents")
    agents.add_argument("--resources", default="cpus:2;mem:2048", help="each agent's resources")
    agents.add_argument(
        "--per-connection",
        type=int,
        default=10,
        help="agents sharing one connection (a process may hold only so many sockets)",
    )
    frameworks = sub.add_parser("frameworks", parents=[common], help="emulated frameworks")
    frameworks.add_argument(
        "--api",
        choices=("thrift", "v1"),
        default="thrift",
        help="thrift: mezzo's scheduler driver; v1: the Mesos v1 scheduler HTTP API, as pymesos speaks it",
    )
    frameworks.add_argument("--task", default="cpus:1;mem:1024", help="each task's resources")
    frameworks.add_argument("--duration", type=float, default=30.0, help="mean task seconds")
    frameworks.add_argument("--stddev", type=float, default=10.0, help="task seconds' standard deviation")
    frameworks.add_argument("--seed", type=int, default=None, help="seed of the task durations")
    frameworks.add_argument("--name-prefix", default="emulated", help="framework names are PREFIX-N")
    frameworks.add_argument(
        "--tasks-per-offer",
        type=int,
        default=1,
        help="tasks launched on one offer at most (0: as many as fit)",
    )
    frameworks.add_argument(
        "--refuse-seconds",
        type=float,
        default=None,
        help="refuse filter sent with launches and declines (default: the master's)",
    )
    frameworks.add_argument(
        "--max-tasks", type=int, default=None, help="tasks each framework launches in all (default: no limit)"
    )
    args = parser.parse_args(argv)
    mezzo_log.configure(args.log_level, final=True)
    tune_gc()  # tens of thousands of agents or tasks: keep full collections off the hot path
    if args.side == "agents":
        asyncio.run(_run_agents(args))
    else:
        _run_frameworks(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
