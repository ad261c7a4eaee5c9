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
import socket
import time

from mezzo.services import MASTER
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


def test_a_tool_that_connected_just_before_the_master_froze_is_not_closed_as_silent(make_cluster):
    # first_frame_timeout is 1 s and the master is stopped for 3: by the wall clock the
    # connection made just before is long silent when the master wakes; by the time
    # the master could listen, it is not. Its request, sent after the master's
    # connection sweep has run again, is answered.
    cluster = make_cluster(0, master=HEALTH, tables={"master.connections": {"first_frame_timeout": 1.0}})
    host, port = cluster.master.rsplit(":", 1)
    master = cluster.procs["master"].pid
    with socket.create_connection((host, int(port)), timeout=10) as tool:
        time.sleep(0.2)
        os.kill(master, signal.SIGSTOP)
        try:
            time.sleep(3.0)
        finally:
            os.kill(master, signal.SIGCONT)
        time.sleep(0.5)  # sweeps run every quarter of first_frame_timeout
        tool.sendall(MASTER.encode("request_metrics", (7,), {}))  # framed already
        answer = tool.recv(65536)
    assert answer, "the master closed the connection as silent"
    assert fetch_metrics(cluster.master)["connections"]["closed"]["first_frame_timeout"] == 0

