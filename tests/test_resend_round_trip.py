"""A slow master is not flooded with resends (issue 14, "graceful under overload").

A real agent re-sends a status update the master has not acknowledged in time. When
the master (or the scheduler behind it) takes longer than the agent's first resend
wait to acknowledge, a fixed schedule re-sends every update in flight, which is the
retry storm that tipped the 50,000-agent cluster over. The agent learns the round trip
from the acknowledgements that come back and stretches its resends to it.

Here the scheduler acknowledges every update 0.8 s after it arrives, eight times the
agent's ``status_update_retry`` of 0.1 s. The first wave of tasks, before any
acknowledgement came back, is re-sent on the plain schedule (so the count can fail);
the second wave, after the agent has seen how slow the answers are, is not.
"""

from __future__ import annotations

import threading

import mezzo
from mezzo import CommandInfo, Filters, Resources, TaskInfo
from mezzo.state_client import fetch_metrics

from .conftest import wait_for

ACK_DELAY = 0.8
RETRY = 0.1
RESEND_LINE = "re-sending unacknowledged status update"


class SlowAcks(mezzo.Scheduler):
    """Launches the tasks it is told to, one wave at a time; acknowledges late."""

    def __init__(self) -> None:
        self.driver: mezzo.SchedulerDriver | None = None
        self.wanted: list[str] = []
        self.finished: set[str] = set()
        self.acked = 0
        self.lock = threading.Lock()

    def resource_offers(self, driver, offers):
        per_task = Resources(cpus=0.25, mem=16)
        for offer in offers:
            with self.lock:
                batch, self.wanted = self.wanted, []
            tasks = [
                TaskInfo(
                    task_id=t,
                    name=t,
                    agent_id=offer.agent_id,
                    resources=per_task,
                    command=CommandInfo(value="true"),
                )
                for t in batch
            ]
            if tasks:
                driver.launch_tasks([offer.offer_id], tasks, Filters(refuse_seconds=0))
            else:
                driver.decline_offer(offer.offer_id, Filters(refuse_seconds=0.05))

    def status_update(self, driver, status):
        timer = threading.Timer(ACK_DELAY, self._ack, (driver, status))
        timer.daemon = True
        timer.start()

    def _ack(self, driver, status):
        driver.acknowledge_status_update(status)
        with self.lock:
            self.acked += 1
            if mezzo.is_terminal(status.state):
                self.finished.add(status.task_id)

    def run_wave(self, names: list[str]) -> None:
        with self.lock:
            self.wanted = list(names)
        wait_for(lambda: set(names) <= self.finished, 60, f"wave {names[0]}.. to finish")


def resends_of(log: str, prefix: str) -> int:
    return sum(1 for line in log.splitlines() if RESEND_LINE in line and f"task={prefix}" in line)


def test_an_agent_stretches_its_resends_to_a_master_that_acknowledges_slowly(make_cluster):
    cluster = make_cluster(
        1,
        agent={"status_update_retry": RETRY},
        agent_resources="cpus:4;mem:1024",
        tables={"log": {"level": "debug", "format": "console"}},
    )
    sched = SlowAcks()
    driver = mezzo.SchedulerDriver(
        sched, mezzo.FrameworkInfo(name="slow-acks"), cluster.master, implicit_acknowledgements=False
    )
    driver.start()
    try:
        sched.run_wave([f"first-{i}" for i in range(4)])
        sched.run_wave([f"second-{i}" for i in range(8)])
    finally:
        driver.stop()
    log = (cluster.dir / "agent-1.log").read_text()
    first, second = resends_of(log, "first-"), resends_of(log, "second-")
    # On the plain schedule each update waiting 0.8 s is re-sent at 0.1-0.2 s, again
    # 0.2-0.4 s later, ...: at least one resend per task of the first wave.
    assert first >= 4, f"first wave: {first} resends"
    # 16 updates in the second wave; the plain schedule would re-send each twice or more.
    assert second <= 2, f"second wave: {second} resends (first wave: {first})"
    # Every resend came while the scheduler's acknowledgement was pending: the master
    # applied it but did not forward it again (mezzo.master.forwarded_updates).
    assert fetch_metrics(cluster.master)["status_resends_not_forwarded"] >= first
