"""A framework's own executor through the real master and agent: one long-lived
executor process runs many tasks, and framework messages travel both ways."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import mezzo
from mezzo import CommandInfo, ExecutorInfo, Filters, Resources, TaskInfo

from .conftest import wait_for

EXECUTOR = Path(__file__).parent / "executors" / "echo_executor.py"


class UsesExecutor(mezzo.Scheduler):
    def __init__(self, n: int, data: bytes | None = None) -> None:
        self.n = n
        self.data = data
        self.statuses: list = []
        self.launched = 0
        self.finished: dict[str, bytes] = {}
        self.messages: list[tuple[str, str, bytes]] = []
        self.lost_executors: list[str] = []
        self.done = threading.Event()
        self.executor = ExecutorInfo(
            executor_id="echo", name="echo executor",
            command=CommandInfo(value=f"{sys.executable} {EXECUTOR}"),
            resources=Resources(cpus=0.1, mem=64))

    def resource_offers(self, driver, offers):
        for offer in offers:
            if self.launched >= self.n:
                driver.decline_offer(offer.offer_id, Filters(refuse_seconds=60))
                continue
            tasks = []
            while self.launched < self.n:
                self.launched += 1
                tasks.append(TaskInfo(task_id=f"e{self.launched}", agent_id=offer.agent_id,
                                      resources=Resources(cpus=0.2, mem=16), executor=self.executor,
                                      data=self.data))
            driver.launch_tasks(offer.offer_id, tasks, Filters(refuse_seconds=0))

    def status_update(self, driver, status):
        self.statuses.append(status)
        if status.state == mezzo.TaskState.TASK_FINISHED:
            self.finished[status.task_id] = status.data
            if len(self.finished) == self.n:
                self.done.set()

    def framework_message(self, driver, agent_id, executor_id, data):
        self.messages.append((agent_id, executor_id, data))

    def executor_lost(self, driver, agent_id, executor_id, status):
        self.lost_executors.append(executor_id)


def test_one_executor_process_runs_many_tasks(make_cluster, drivers):
    cluster = make_cluster(1, master={"allocation_interval": 0.01})
    sched = UsesExecutor(5)
    driver = drivers(sched, "executor-user", cluster.master)
    assert sched.done.wait(30), f"finished: {sorted(sched.finished)}"
    pids = set(sched.finished.values())
    assert len(pids) == 1, f"tasks ran in several executor processes: {pids}"
    state = cluster.state()
    (agent,) = state["agents"]
    assert [e["executor_id"] for e in agent["executors"]] == ["echo"]

    driver.send_framework_message("echo", agent["id"], b"ping")
    wait_for(lambda: sched.messages, 10, "the executor's reply")
    assert sched.messages == [(agent["id"], "echo", b"PING")]


def test_executor_crash_is_reported_and_its_tasks_fail_with_the_reason(make_cluster, drivers):
    cluster = make_cluster(1, master={"allocation_interval": 0.01})
    sched = UsesExecutor(2, data=b"hold")
    driver = drivers(sched, "crashing-executor", cluster.master)
    wait_for(lambda: sum(s.state == mezzo.TaskState.TASK_RUNNING for s in sched.statuses) == 2, 20,
             "both tasks to run")
    (agent,) = cluster.state()["agents"]
    driver.send_framework_message("echo", agent["id"], b"crash")

    wait_for(lambda: sched.lost_executors, 15, "executor_lost")
    assert sched.lost_executors == ["echo"]
    wait_for(lambda: sum(mezzo.is_terminal(s.state) for s in sched.statuses) == 2, 15, "both tasks to end")
    ends = [s for s in sched.statuses if mezzo.is_terminal(s.state)]
    assert {s.task_id for s in ends} == {"e1", "e2"}
    for s in ends:
        assert mezzo.state_name(s.state) == "TASK_FAILED" and s.reason == "executor_exited"
        assert "3" in s.message, s.message
    state = cluster.state()
    assert state["tasks"] == [] and state["agents"][0]["executors"] == []
    assert state["agents"][0]["used"] == {}
