"""Agents and schedulers come back to a restarted master with what they run.

The master keeps soft state only (paper §3.6): after a restart it learns the
running tasks from the re-registering agent and the framework from its
re-registering scheduler, keeps the framework's id, does not offer the resources
the task holds, and can still kill the task.
"""

from __future__ import annotations

import mezzo
from mezzo import CommandInfo, Filters, Resources, TaskInfo

from .conftest import Recorder, wait_for


def test_restarted_master_rebuilds_state_from_agent_and_scheduler(make_cluster, drivers):
    cluster = make_cluster(1, master={"allocation_interval": 0.01}, agent={"reconnect_interval": 0.1},
                           agent_resources="cpus:4;mem:1024")
    launched = []

    def launch_once(driver, offers):
        for o in offers:
            if not launched:
                launched.append(o.agent_id)
                driver.launch_tasks(o.offer_id, [TaskInfo(
                    task_id="long", agent_id=o.agent_id, resources=Resources(cpus=1, mem=256),
                    command=CommandInfo(value="sleep 60"))], Filters(refuse_seconds=0))
            else:
                driver.decline_offer(o.offer_id, Filters(refuse_seconds=0.2))

    rec = Recorder(launch_once)
    driver = drivers(rec, "survivor", cluster.master, failover_timeout=30.0)
    wait_for(lambda: "TASK_RUNNING" in rec.states_of("long"), 15, "the task to run")
    fid = rec.framework_id

    cluster.kill("master")
    cluster.start_master()

    wait_for(rec.reregistered_event.is_set, 20, "the scheduler to re-register")
    assert rec.framework_id == fid and rec.disconnections >= 1
    state = cluster.wait_for_agents(1)
    wait_for(lambda: any(t["id"] == "long" for t in cluster.state()["tasks"]), 10, "the new master to learn the task")
    state = cluster.state()
    (framework,) = state["frameworks"]
    assert framework["id"] == fid and framework["used"] == {"cpus": 1.0, "mem": 256.0}
    (agent,) = state["agents"]
    assert agent["free"].get("cpus", 0) + sum(o["resources"].get("cpus", 0) for o in state["offers"]) == 3.0

    # Offers from the new master leave the running task's resources out.
    n = len(rec.offers)
    wait_for(lambda: len(rec.offers) > n, 10, "an offer from the new master")
    assert rec.offers[-1][1].resources.get("cpus") == 3.0

    driver.kill_task("long")
    wait_for(lambda: rec.final("long") is not None, 15, "the kill")
    assert mezzo.state_name(rec.final("long").state) == "TASK_KILLED"
