"""The operator event stream over HTTP: a real master, agents and framework; RecordIO and ndjson."""

from __future__ import annotations

import http.client
import json
import threading

import pytest

import mezzo
from mezzo import CommandInfo, FrameworkInfo, Resources, TaskInfo
from mezzo.testing import LocalProcessCluster, wait_for

from .conftest import Recorder


class Follower:
    """Reads an event stream in a thread; ``events`` grows as they come."""

    def __init__(self, cluster: LocalProcessCluster, *, recordio: bool) -> None:
        host, port = cluster.master.rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port), timeout=30)
        if recordio:
            self.conn.request(
                "POST",
                "/master/api/v1",
                body=b'{"type": "SUBSCRIBE"}',
                headers={"Content-Type": "application/json"},
            )
        else:
            self.conn.request("GET", "/events")
        self.response = self.conn.getresponse()
        self.events: list[dict] = []
        self.ended = threading.Event()
        threading.Thread(target=self._read_recordio if recordio else self._read_lines, daemon=True).start()

    def _read_recordio(self) -> None:
        try:
            while True:
                size = self.response.readline()
                if not size:
                    break
                self.events.append(json.loads(self.response.read(int(size))))
        except (OSError, ValueError, AttributeError):
            pass  # closed by the test (http.client drops its file: AttributeError)
        self.ended.set()

    def _read_lines(self) -> None:
        try:
            for line in self.response:
                self.events.append(json.loads(line))
        except (OSError, ValueError, AttributeError):
            pass  # closed by the test (http.client drops its file: AttributeError)
        self.ended.set()

    def types(self) -> list[str]:
        return [e["type"] for e in self.events]

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def cluster(mezzo_cluster) -> LocalProcessCluster:
    return mezzo_cluster(
        agents=2,
        master={
            "allocation_interval": 0.02,
            "agent_reregister_timeout": 1.0,
            "http": {"event_heartbeat": 0.3},
        },
    )


def test_recordio_subscription_sees_frameworks_tasks_agents_and_heartbeats(cluster) -> None:
    follower = Follower(cluster, recordio=True)
    try:
        assert follower.response.status == 200
        assert follower.response.getheader("Content-Type") == "application/recordio"
        wait_for(lambda: follower.events, 10, "SUBSCRIBED")
        first = follower.events[0]
        assert first["type"] == "SUBSCRIBED"
        assert first["subscribed"]["agents"] == 2 and first["subscribed"]["heartbeat_interval_seconds"] == 0.3

        launched: list[str] = []

        def on_offers(driver, offers):
            for offer in offers:
                if launched:
                    driver.decline_offer(offer.offer_id)
                    continue
                launched.append(offer.agent_id)
                task = TaskInfo(
                    task_id="t1",
                    name="t1",
                    agent_id=offer.agent_id,
                    resources=Resources.parse("cpus:0.1;mem:32"),
                    command=CommandInfo(value="exit 3"),
                )
                driver.launch_tasks([offer.offer_id], [task])

        sched = Recorder(on_offers)
        driver = mezzo.SchedulerDriver(sched, FrameworkInfo(name="watched"), cluster.master)
        driver.start()
        try:
            wait_for(lambda: "FRAMEWORK_ADDED" in follower.types(), 20, "FRAMEWORK_ADDED")
            wait_for(
                lambda: any(
                    e["type"] == "TASK_UPDATED" and e["task_updated"]["state"] == "TASK_FAILED"
                    for e in follower.events
                ),
                20,
                "the task's end",
            )
            added = next(e for e in follower.events if e["type"] == "TASK_ADDED")["task_added"]["task"]
            assert (
                added["id"] == "t1" and added["slave_id"] == launched[0] and added["resources"]["cpus"] == 0.1
            )
            ended = [e for e in follower.events if e["type"] == "TASK_UPDATED"][-1]["task_updated"]
            assert ended["status"]["exit_code"] == 3 and ended["framework_id"] == driver.framework_id
            # Heartbeats keep coming while nothing happens.
            count = follower.types().count("HEARTBEAT")
            wait_for(lambda: follower.types().count("HEARTBEAT") >= count + 2, 10, "two more heartbeats")
        finally:
            driver.stop()
        wait_for(lambda: "FRAMEWORK_REMOVED" in follower.types(), 20, "FRAMEWORK_REMOVED")

        cluster.kill("agent-2")
        wait_for(lambda: "AGENT_REMOVED" in follower.types(), 20, "AGENT_REMOVED")
        cluster.agent_resources.append(cluster.agent_resources[0])
        cluster.start_agent(3)
        wait_for(lambda: "AGENT_ADDED" in follower.types(), 20, "AGENT_ADDED")
        agent = next(e for e in follower.events if e["type"] == "AGENT_ADDED")["agent_added"]["agent"]
        assert agent["hostname"] == "agent-3" and agent["resources"]["cpus"] == 4.0
    finally:
        follower.close()


def test_ndjson_stream_and_bad_subscriptions(cluster) -> None:
    follower = Follower(cluster, recordio=False)
    try:
        assert follower.response.getheader("Content-Type") == "application/x-ndjson"
        wait_for(lambda: "HEARTBEAT" in follower.types(), 10, "a heartbeat")
        assert follower.types()[0] == "SUBSCRIBED"
    finally:
        follower.close()
    host, port = cluster.master.rsplit(":", 1)
    for body, named in ((b"not json", "body"), (b'{"type": "GET_STATE"}', "type")):
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.request("POST", "/api/v1", body=body, headers={"Content-Type": "application/json"})
        answer = conn.getresponse()
        assert answer.status == 400 and f"parameter '{named}'" in json.loads(answer.read())["error"]
        conn.close()
