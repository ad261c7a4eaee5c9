"""Emulated agents (for the scale benchmarks) look like real agents to the real master:
they register, take tasks, report RUNNING and FINISHED after the task's duration,
and retry status updates until acknowledged."""

from __future__ import annotations

import asyncio
import threading

import pytest

import mezzo
from mezzo import CommandInfo, Filters, Resources, TaskInfo
from mezzo.emulation import EmulatedAgentPool

from .conftest import wait_for


class Spread(mezzo.Scheduler):
    """One task per agent, each 'sleeping' 0.2 s on the emulated agent."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.launched: set[str] = set()
        self.finished: set[str] = set()
        self.done = threading.Event()

    def resource_offers(self, driver, offers):
        for o in offers:
            if o.agent_id in self.launched:
                driver.decline_offer(o.offer_id, Filters(refuse_seconds=60))
                continue
            self.launched.add(o.agent_id)
            driver.launch_tasks(o.offer_id, [TaskInfo(
                task_id=f"on-{o.hostname}", agent_id=o.agent_id, resources=Resources(cpus=1, mem=64),
                command=CommandInfo(value="sleep 0.2"))], Filters(refuse_seconds=60))

    def status_update(self, driver, status):
        if status.state == mezzo.TaskState.TASK_FINISHED:
            self.finished.add(status.task_id)
            if len(self.finished) == self.n:
                self.done.set()


@pytest.mark.parametrize("per_connection", [1, 10])
def test_emulated_agents_register_and_run_tasks(make_cluster, drivers, per_connection):
    cluster = make_cluster(0, master={"allocation_interval": 0.01})
    n = 50
    pool = EmulatedAgentPool(cluster.master, n, "cpus:2;mem:1024", agents_per_connection=per_connection)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(pool.start(), loop).result(30)
        asyncio.run_coroutine_threadsafe(pool.wait_registered(30), loop).result(35)
        state = cluster.state()
        assert len(state["agents"]) == n
        assert {a["hostname"] for a in state["agents"]} == {f"emulated-{i}" for i in range(n)}
        sched = Spread(n)
        drivers(sched, "spread", cluster.master)
        assert sched.done.wait(30), f"{len(sched.finished)} of {n} finished"
        wait_for(lambda: all(not a.unacked for a in pool.agents), 10, "every update to be acknowledged")
        state = cluster.state()
        assert state["tasks"] == []
        # Each task ran on the agent it was launched on, whichever connection carried it.
        done = {t["id"]: t["agent_id"] for t in state["completed_tasks"]}
        by_host = {a["hostname"]: a["id"] for a in state["agents"]}
        assert all(done[f"on-{host}"] == aid for host, aid in by_host.items())
    finally:
        asyncio.run_coroutine_threadsafe(pool.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
