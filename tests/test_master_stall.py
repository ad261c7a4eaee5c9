"""A master frozen for longer than the ping timeout blames nobody for it.

A real master process is stopped with SIGSTOP for three times its
``agent_ping_timeout`` while three real agents run a task; after SIGCONT no agent is
removed, no task is lost, and the master's metrics show the stall it measured on its
own event loop (mezzo.master.loop_watch). Before the listening clock, every agent
was declared lost the moment the master woke, and every task killed.
"""

from __future__ import annotations

import os
import signal
import time

from mezzo.state_client import fetch_metrics

from .conftest import Recorder, one_task, wait_for

HEALTH = {"allocation_interval": 0.01, "agent_ping_interval": 0.2, "agent_ping_timeout": 1.0}


def test_a_master_stopped_past_the_ping_timeout_loses_no_agent_and_no_task(make_cluster, drivers):
    cluster = make_cluster(3, master=HEALTH, agent_resources="cpus:1;mem:256")
    rec = Recorder(one_task("sleep 60"))
    drivers(rec, "steady", cluster.master)
    wait_for(lambda: "TASK_RUNNING" in rec.states_of("t"), 15, "the task to run")
    before = {a["id"] for a in cluster.state()["agents"]}
    assert len(before) == 3

    master = cluster.procs["master"].pid
    os.kill(master, signal.SIGSTOP)
    try:
        time.sleep(3.0)  # three ping timeouts
    finally:
        os.kill(master, signal.SIGCONT)
    time.sleep(2.0)  # two more, with the master listening: pings answered, nobody lost

    state = cluster.state()
    assert {a["id"] for a in state["agents"]} == before
    assert rec.lost_agents == [] and rec.states_of("t") == ["TASK_RUNNING"] or \
        rec.states_of("t") == ["TASK_STARTING", "TASK_RUNNING"]
    assert [t["id"] for t in state["tasks"]] == ["t"]
    metrics = fetch_metrics(cluster.master)
    assert metrics["loop_stalls"] >= 1 and metrics["loop_stalled_seconds"] >= 2.5
    assert metrics["agent_removals_deferred"] == 0  # not even tempted
