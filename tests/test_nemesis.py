"""A Jepsen-style nemesis test: frameworks run 2,000 short tasks on 3 masters, 1
ZooKeeper and 8 agents, each on a simulated host, while a seeded random schedule of
faults (mezzo.testing.nemesis: cuts, partitions, one-way partitions, packet loss,
frozen and killed processes, the leader cut off from ZooKeeper) plays against them.
Once it is healed and every task has ended, the checker (mezzo.testing.checker) holds
the frameworks' histories against what ran and what the master holds.

    pytest tests/test_nemesis.py --nemesis-seed 7 --nemesis-seconds 120 --nemesis-tasks 5000

The report (seed, schedule, faults as played, outcomes, problems) is printed and
written to the test's directory as nemesis-report.md.
"""

from __future__ import annotations

import collections
import time

import pytest

import mezzo
from mezzo.testing import netsim
from mezzo.testing.checker import all_pids, check, task_processes
from mezzo.testing.nemesis import Nemesis
from mezzo.testing.simcluster import SimCluster
from mezzo.testing.workload import HistoryWorkload

pytestmark = pytest.mark.skipif(
    netsim.available() is not None, reason=f"{netsim.available()} (CI runs as root)"
)

MASTER = {
    "allocation_interval": 0.02,
    "agent_ping_interval": 0.5,
    "agent_ping_timeout": 3.0,
    "agent_reregister_timeout": 5.0,
    "zk_session_timeout": 2.0,
}
FRAMEWORKS = 3


def test_every_task_has_one_outcome_through_a_random_schedule_of_faults(request, tmp_path):
    seed = request.config.getoption("--nemesis-seed") or 1
    seconds = request.config.getoption("--nemesis-seconds") or 20.0
    tasks = request.config.getoption("--nemesis-tasks") or 2000
    with SimCluster(
        agents=8,
        masters=3,
        directory=str(tmp_path / "cluster"),
        master=MASTER,
        agent={"reconnect_interval": 0.2},
        agent_resources="cpus:4;mem:4096;disk:10000",
    ) as sim:
        nemesis = Nemesis(sim, seed)
        schedule = nemesis.describe(seconds)
        print(schedule)
        workloads = [
            HistoryWorkload(
                f"w{i}",
                tasks // FRAMEWORKS + (i < tasks % FRAMEWORKS),
                tmp_path / "marks",
                seed=seed,
                partition_aware=i == 0,  # one asks for TASK_UNREACHABLE, two for TASK_LOST
                # Tasks of seconds/40 (0.5 s at the default 20 s of faults, +-50 %), 16 at a
                # time each: the 2,000 take about as long as the faults.
                duration=1.0 * (seconds / 40.0) * (2000 / tasks),
            )
            for i in range(FRAMEWORKS)
        ]
        drivers = [mezzo.SchedulerDriver(w, w.framework_info(), sim.master) for w in workloads]
        for d in drivers:
            d.start()
        started = time.monotonic()
        nemesis.start(seconds)
        try:
            nemesis.join(seconds + 60)  # the whole schedule plays while the tasks run
            nemesis.stop()  # everything healed
            # Healed: whatever is still open ends, or is settled by reconciliation.
            finished = [w.wait(240, d) for w, d in zip(workloads, drivers, strict=True)]
            took = time.monotonic() - started
            # Every agent back (one declared lost re-registers as new once it hears the
            # master again, killing what it was told to): leftovers now are real ones.
            sim.cluster.wait_for_agents(8)
            time.sleep(2.0)  # every task has ended: what still runs is a leftover
            state = sim.cluster.state()
            leftovers = task_processes(all_pids())
            problems = check(workloads, state, leftovers)
        finally:
            nemesis.stop()
            for d in drivers:
                d.stop()
    outcomes = collections.Counter(s for w in workloads for s in w.ended.values())
    # Partition semantics at work: tasks reported unreachable, and those of them reported
    # running again when their agent came back.
    updates = [e for w in workloads for e in w.history if e.kind == "update"]
    unreachable = {e.task for e in updates if e.state == "TASK_UNREACHABLE"}
    came_back = {e.task for e in updates if e.reason == "agent_reregistered" and e.task in unreachable}
    report = "\n".join(
        [
            f"# nemesis run, seed {seed}",
            "",
            f"{tasks} tasks from {FRAMEWORKS} frameworks, 3 masters, 1 ZooKeeper, 8 agents; "
            f"faults for {seconds:g} s; all tasks ended {took:.0f} s after the start.",
            "",
            "```",
            schedule,
            "```",
            "",
            "played: "
            + "; ".join(f"{t:.1f}s {what} {f.kind} {','.join(f.targets)}" for t, what, f in nemesis.log),
            "",
            "outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())),
            "",
            f"along the way: {len(unreachable)} tasks reported TASK_UNREACHABLE, "
            f"{len(came_back)} of them back with reason agent_reregistered",
            "",
            "problems: " + ("none" if not problems else "\n" + "\n".join(problems)),
        ]
    )
    (tmp_path / "nemesis-report.md").write_text(report + "\n")
    print(report)
    assert all(finished), f"not every task ended: {report}"
    assert not problems, report
    names = {w.name for w in workloads}
    outlived = [t for t in task_processes(all_pids()).values() if t.rpartition("-")[0] in names]
    assert not outlived, f"task processes outlived the cluster: {outlived}"
