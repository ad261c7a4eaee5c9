#!/usr/bin/env python3
"""The master's CPU per task, in process: the whole life of a task through the real
master, without sockets.

Fig. 10 at 50,000 agents needs the master to start and end 3,333 tasks a second, and
on this machine it spends a whole core doing so (``docs/benchmarks.md``, *The master
under CPU contention*). The scale benchmarks measure that through sockets, with the
emulators beside the master on the same cores, and take minutes a run. This one
drives the real :class:`mezzo.master.Master` through every step of a task in one
process, so that a change to a hot path is measured in a minute:

1. an allocation cycle offers every agent's free slot (each ``resource_offers``
   encoded into Thrift frames, as for a socket);
2. each framework launches one task of Fig. 10's shape on each offer it got;
3. each task's agent reports TASK_RUNNING, its framework acknowledges it;
4. the tasks of the wave before report TASK_FINISHED, acknowledged likewise.

Every call into the master is encoded and decoded as it would be on a connection,
and everything the master sends is encoded (then dropped). What is left out: the
event loop, sockets, framing, the connection limits. A wave's CPU time (its
``process_time``) divided by the tasks it ended is that wave's cost per task; the
first waves (the cluster filling, the heap growing) are not counted.

Usage::

    python bench/task_cost.py                 # 5,000 agents, 200 frameworks, 40 waves, 3 runs
    python bench/task_cost.py --runs 1 --waves 20 --no-write
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import mezzo.log
from _cluster import machine
from _null_connection import NullConnection
from _report import write_section
from mezzo import AgentInfo, Filters, FrameworkInfo, Resources
from mezzo.config import MasterConfig
from mezzo.master import Master
from mezzo.master.master import tune_gc
from mezzo.master.ports import ManualClock
from mezzo.plugins import load_plugins
from mezzo.services import MASTER
from mezzo.wire.ttypes import CommandInfo, TaskInfo, TaskState, TaskStatus

WARM_UP = 10
"""Waves not counted: the cluster fills and the heap grows."""
AGENT = "cpus:2;mem:2048"
TASK = "cpus:1;mem:1024"
TASK_SECONDS = 30.0


class _Cluster:
    """A master with ``agents`` agents and ``frameworks`` frameworks on null connections."""

    def __init__(self, agents: int, frameworks: int) -> None:
        self.clock = ManualClock()
        self.master = Master(MasterConfig(offer_timeout=0), load_plugins(), clock=self.clock)
        self.master.lead()
        service = self.master.service
        for i in range(frameworks):
            service.register_framework(NullConnection(f"framework-{i}"), FrameworkInfo(name=f"fw-{i}"))
        for i in range(agents):
            service.register_agent(
                NullConnection(f"agent-{i}"),
                AgentInfo(hostname=f"host-{i}", port=5051, resources=Resources.parse(AGENT)),
            )
        self.frameworks = {fid: r.conn for fid, r in self.master.state.frameworks.items()}
        self.agents = {aid: r.conn for aid, r in self.master.state.agents.items()}
        self.task = Resources.parse(TASK)
        self.filters = Filters(refuse_seconds=1.0)
        self._ids = 0
        tune_gc()  # what Master.start does in the daemon

    def call(self, conn: NullConnection, method: str, *args: object) -> None:
        """``method`` as the master gets it from a connection: encoded, then decoded."""
        name, decoded = MASTER.decode(MASTER.encode(method, args, {})[4:])
        getattr(self.master.service, name)(conn, *decoded)

    def update(self, agent_id: str, framework_id: str, task_id: str, state: int) -> None:
        """The agent reports ``state``; the framework acknowledges it."""
        status = TaskStatus(
            task_id=task_id,
            state=state,
            source="agent",
            agent_id=agent_id,
            framework_id=framework_id,
            uuid=os.urandom(16).hex(),
            timestamp=time.time(),
        )
        self.call(self.agents[agent_id], "status_update", status)
        self.call(
            self.frameworks[framework_id],
            "acknowledge_status_update",
            framework_id,
            agent_id,
            task_id,
            status.uuid,
        )

    def launch_on_offers(self) -> list[tuple[str, str, str]]:
        """Each framework launches one task on each offer it holds: (agent, framework, task)."""
        launched = []
        for fid, record in self.master.state.frameworks.items():
            for offer_id, offer in list(record.offers.items()):
                self._ids += 1
                tid = f"task-{self._ids}"
                task = TaskInfo(
                    task_id=tid,
                    name=tid,
                    agent_id=offer.agent_id,
                    resources=self.task,
                    command=CommandInfo(value=f"sleep {TASK_SECONDS:.3f}", shell=True),
                    labels={"duration": f"{TASK_SECONDS:.3f}"},
                )
                self.call(self.frameworks[fid], "launch_tasks", fid, [offer_id], [task], self.filters)
                launched.append((offer.agent_id, fid, tid))
        return launched


def run(agents: int, frameworks: int, waves: int) -> list[float]:
    """Microseconds of CPU per task ended, one figure per counted wave."""
    cluster = _Cluster(agents, frameworks)
    running: list[tuple[str, str, str]] = []
    costs = []
    for wave in range(waves):
        started = time.process_time()
        cluster.clock.advance(0.05)  # timers due (refuse filters lapse, pings) fire as in a loop
        cluster.master.term.allocation.run()
        launched = cluster.launch_on_offers()
        for agent_id, fid, tid in launched:
            cluster.update(agent_id, fid, tid, TaskState.TASK_RUNNING)
        for agent_id, fid, tid in running:
            cluster.update(agent_id, fid, tid, TaskState.TASK_FINISHED)
        elapsed = time.process_time() - started
        if wave >= WARM_UP and running:
            costs.append(elapsed / len(running) * 1e6)
        running = launched
    return costs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agents", type=int, default=5_000)
    p.add_argument("--frameworks", type=int, default=200)
    p.add_argument("--waves", type=int, default=40, help=f"waves per run, the first {WARM_UP} not counted")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = p.parse_args(argv)
    if args.waves <= WARM_UP:
        p.error(f"--waves {args.waves}: must be more than the {WARM_UP} warm-up waves")
    if args.agents < 1 or args.frameworks < 1 or args.runs < 1:
        p.error("--agents, --frameworks and --runs must be at least 1")
    mezzo.log.configure("warning", final=True)  # as the daemon: loggers bound once
    medians, lows = [], []
    for i in range(args.runs):
        costs = run(args.agents, args.frameworks, args.waves)
        medians.append(statistics.median(costs))
        lows.append(min(costs))
        print(
            f"  run {i + 1}: {medians[-1]:.1f} µs per task (median of {len(costs)} waves; "
            f"least {lows[-1]:.1f} µs)",
            flush=True,
        )
    median, low = statistics.median(medians), min(lows)
    print(f"master CPU per task: {median:.1f} µs (median of {args.runs} runs); least wave {low:.1f} µs")
    if not args.no_write:
        write_section(
            "## The master's CPU per task, in process (bench/task_cost.py)",
            [
                f"Machine: {machine()}. Command: `python bench/task_cost.py`. {args.agents:,} agents "
                f"({AGENT}), {args.frameworks} frameworks, one task of {TASK} per offer; "
                f"{args.waves} waves per run, the first {WARM_UP} not counted. Every call into the "
                "master is encoded and decoded as on a connection; the event loop and sockets are "
                "left out.",
                "",
                "| runs | µs per task (median of runs' medians) | each run | least wave |",
                "|---|---|---|---|",
                f"| {args.runs} | {median:.1f} | {', '.join(f'{m:.1f}' for m in medians)} | {low:.1f} |",
            ],
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
