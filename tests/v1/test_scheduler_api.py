"""The v1 scheduler API against a real master and agents, spoken as pymesos speaks it.

Every behaviour of the façade a Mesos framework relies on, and every refusal, with
the bare client of :mod:`.v1_client` (http.client and JSON, nothing of mezzo's).
"""

from __future__ import annotations

import base64
import http.client
import json
import time
from collections.abc import Iterator

import pytest

from mezzo.testing import LocalProcessCluster, wait_for

from ..conftest import Recorder, one_task
from .v1_client import V1Scheduler


CLUSTER = {
    "agents": 2,
    "master": {"allocation_interval": 0.02, "http": {"event_heartbeat": 0.3}},
    "agent_resources": "cpus:2;mem:1024;disk:1000;ports:[31000-31009]",
}


@pytest.fixture
def cluster(mezzo_cluster) -> LocalProcessCluster:
    return mezzo_cluster(**CLUSTER)


@pytest.fixture(scope="module")
def untouched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcessCluster]:
    """One cluster as ``cluster``, shared by the tests whose requests are all refused:
    none of them subscribes a framework or launches a task (each checks that the
    master holds no framework after its refusals)."""
    directory = str(tmp_path_factory.mktemp("untouched"))
    with LocalProcessCluster(directory=directory, **CLUSTER) as started:
        yield started


@pytest.fixture
def scheduler(cluster):
    made: list[V1Scheduler] = []

    def make(auto_ack: bool = True, **info) -> V1Scheduler:
        s = V1Scheduler(cluster.master, info, auto_ack=auto_ack)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def framework_of(cluster: LocalProcessCluster, framework_id: str) -> dict | None:
    for f in cluster.state()["frameworks"]:
        if f["id"] == framework_id:
            return f
    return None


def test_subscribe_streams_subscribed_heartbeats_and_nested_offers(cluster, scheduler) -> None:
    s = scheduler(name="probe", failover_timeout=100)
    response = s.subscribe()
    assert response.status == 200
    assert response.getheader("Transfer-Encoding") == "chunked"  # pymesos refuses anything else
    assert response.getheader("Content-Type") == "application/json"
    assert s.stream_id and len(s.stream_id) <= 128
    first = s.events[0]
    assert first["type"] == "SUBSCRIBED"
    assert first["subscribed"]["heartbeat_interval_seconds"] == 0.3
    info = first["subscribed"]["master_info"]
    assert info["port"] == cluster.port and info["address"]["port"] == cluster.port
    assert info["address"]["ip"] == "127.0.0.1"
    assert s.events[1]["type"] == "HEARTBEAT"  # at once, as Mesos does
    offers = s.offers()
    assert {o["agent_id"]["value"] for o in offers} == {a["id"] for a in cluster.state()["agents"]}
    cpus = [r for r in offers[0]["resources"] if r["name"] == "cpus"]
    assert cpus == [
        {"name": "cpus", "type": "SCALAR", "scalar": {"value": 2.0}, "role": "*", "allocation_info": {"role": "*"}}
    ]
    ports = [r for r in offers[0]["resources"] if r["name"] == "ports"]
    assert ports[0]["type"] == "RANGES" and ports[0]["ranges"] == {"range": [{"begin": 31000, "end": 31009}]}
    # Heartbeats keep coming while nothing else does.
    count = sum(e["type"] == "HEARTBEAT" for e in s.events)
    wait_for(lambda: sum(e["type"] == "HEARTBEAT" for e in s.events) >= count + 2, timeout=5)
    framework = framework_of(cluster, s.framework_id)
    assert framework is not None and framework["name"] == "probe" and framework["active"]


def test_a_command_task_runs_its_updates_carry_uuids_and_acks_end_them(cluster, scheduler) -> None:
    s = scheduler(auto_ack=False)
    s.subscribe()
    offer = s.offers()[0]
    assert s.launch(offer, "t1", "echo hi") == (202, "")
    states = []
    for state in ("TASK_STARTING", "TASK_RUNNING", "TASK_FINISHED"):
        status = s.wait_state("t1", state)
        states.append(status)
        assert status["source"] == "SOURCE_AGENT"  # mezzo's command executor is the agent's own
        assert status["agent_id"] == offer["agent_id"]
        assert len(base64.b64decode(status["uuid"])) == 16
        # The next update comes only once this one is acknowledged (one in flight per task).
        assert len(s.updates("t1")) == len(states)
        assert s.acknowledge(status) == (202, "")
    assert isinstance(states[-1]["timestamp"], float)
    assert [st["state"] for st in s.updates("t1")] == ["TASK_STARTING", "TASK_RUNNING", "TASK_FINISHED"]


def test_v1_and_thrift_frameworks_share_the_cluster_and_the_state(cluster, scheduler, drivers) -> None:
    recorder = Recorder(on_offers=one_task("sleep 30", "thrift-task"))
    drivers(recorder, "thrift-framework", cluster.master)
    wait_for(lambda: "TASK_RUNNING" in recorder.states_of("thrift-task"), timeout=15)
    s = scheduler(name="v1-framework")
    s.subscribe()
    # The Thrift framework holds 1 of some agent's 2 cpus: the v1 framework is offered the
    # rest (in one OFFERS event or several).
    def offered() -> dict[str, dict]:
        return {o["agent_id"]["value"]: o for e in list(s.events) if e["type"] == "OFFERS" for o in e["offers"]["offers"]}

    wait_for(lambda: len(offered()) == 2, timeout=15)
    offers = list(offered().values())
    assert sorted(o_cpus(o) for o in offers) == [1.0, 2.0]
    assert s.launch(offers[0], "v1-task", "sleep 30") == (202, "")
    s.wait_state("v1-task", "TASK_RUNNING")
    state = cluster.state()
    names = {f["id"]: f["name"] for f in state["frameworks"]}
    tasks = {names[t["framework_id"]]: t["id"] for t in state["tasks"]}
    assert tasks == {"thrift-framework": "thrift-task", "v1-framework": "v1-task"}


def o_cpus(offer: dict) -> float:
    return sum(r["scalar"]["value"] for r in offer["resources"] if r["name"] == "cpus")


def test_decline_with_a_filter_suppress_and_revive(cluster, scheduler) -> None:
    s = scheduler()
    s.subscribe()
    offers = s.offers()
    assert s.call("DECLINE", {"offer_ids": [o["id"] for o in offers], "filters": {"refuse_seconds": 60}}) == (202, "")
    seen = len(s.events)
    assert s.call("SUPPRESS") == (202, "")
    framework = framework_of(cluster, s.framework_id)
    wait_for(lambda: not framework_of(cluster, s.framework_id)["active"], timeout=5)
    assert framework is not None
    assert not any(e["type"] == "OFFERS" for e in s.events[seen:])
    # REVIVE both resumes offers and clears the 60 s refuse filter.
    assert s.call("REVIVE") == (202, "")
    assert s.offers(after=seen)


def test_kill_and_implicit_reconciliation(cluster, scheduler) -> None:
    s = scheduler()
    s.subscribe()
    offer = s.offers()[0]
    s.launch(offer, "sleeper", "sleep 60")
    s.wait_state("sleeper", "TASK_RUNNING")
    assert s.call("RECONCILE", {"tasks": []}) == (202, "")
    answer = s.wait_for("UPDATE", lambda e: e["update"]["status"].get("reason") == "REASON_RECONCILIATION")
    status = answer["update"]["status"]
    assert status["state"] == "TASK_RUNNING" and status["source"] == "SOURCE_MASTER"
    assert "uuid" not in status  # master-made: nothing to acknowledge
    assert s.call("KILL", {"task_id": {"value": "sleeper"}}) == (202, "")
    s.wait_state("sleeper", "TASK_KILLED")


def test_an_unreadable_task_is_task_error_and_the_others_launch(cluster, scheduler) -> None:
    s = scheduler()
    s.subscribe()
    offer = s.offers()[0]
    good = {
        "task_id": {"value": "good"},
        "agent_id": offer["agent_id"],
        "name": "good",
        "command": {"value": "true"},
        "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.1}}],
    }
    bad = {**good, "task_id": {"value": "bad"}, "name": "bad",
           "resources": [{"name": "disks", "type": "SET", "set": {"item": ["sda1"]}}]}
    status, _ = s.call("ACCEPT", {"offer_ids": [offer["id"]],
                                  "operations": [{"type": "LAUNCH", "launch": {"task_infos": [good, bad]}}]})
    assert status == 202
    error = s.wait_state("bad", "TASK_ERROR")
    assert "SET" in error["message"] and error["reason"] == "REASON_TASK_INVALID"
    s.wait_state("good", "TASK_FINISHED")


def test_the_scheduler_leaves_and_comes_back_within_its_failover_timeout(cluster, scheduler) -> None:
    s = scheduler(failover_timeout=60)
    s.subscribe()
    s.launch(s.offers()[0], "keeps", "sleep 60")
    s.wait_state("keeps", "TASK_RUNNING")
    fid = s.framework_id
    s.disconnect()
    wait_for(lambda: not framework_of(cluster, fid)["connected"], timeout=10)
    # A call on a stream that is gone: 403, as Mesos answers a disconnected framework.
    assert s.call("REVIVE")[0] in (400, 403)
    back = V1Scheduler(cluster.master, {"name": "v1-test", "failover_timeout": 60})
    try:
        assert back.subscribe(framework_id=fid).status == 200
        assert back.framework_id == fid
        assert [t["id"] for t in cluster.state()["tasks"] if t["framework_id"] == fid] == ["keeps"]
        assert back.call("KILL", {"task_id": {"value": "keeps"}}) == (202, "")
        back.wait_state("keeps", "TASK_KILLED")
    finally:
        back.close()


def test_teardown_removes_the_framework_and_kills_its_tasks(cluster, scheduler) -> None:
    s = scheduler(failover_timeout=60)
    s.subscribe()
    s.launch(s.offers()[0], "doomed", "sleep 60")
    s.wait_state("doomed", "TASK_RUNNING")
    assert s.call("TEARDOWN") == (202, "")
    assert s.ended.wait(10)
    wait_for(lambda: framework_of(cluster, s.framework_id) is None, timeout=10)


# -- refusals ------------------------------------------------------------------------------


def raw_post(cluster, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", cluster.port, timeout=10)
    try:
        conn.request("POST", "/api/v1/scheduler", body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def test_content_type_missing_is_400_and_not_json_415(untouched) -> None:
    body = b'{"type": "SUBSCRIBE"}'
    status, text = raw_post(untouched, body, {})
    assert status == 400 and "Content-Type" in text
    status, text = raw_post(untouched, body, {"Content-Type": "application/x-protobuf"})
    assert status == 415 and "application/json" in text
    assert untouched.state()["frameworks"] == []


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"{not json", "JSON"),
        (b"[1, 2]", "object"),
        (b'{"type": 7}', "type"),
        (b'{"type": "SUBSCRIBE", "subscribe": {"framework_info": {"user": "u"}}}', "name"),
        (b'{"type": "SUBSCRIBE", "subscribe": {"framework_info": {"name": "x", "failover_timeout": -1}}}',
         "failover_timeout"),
        (b"[" * 10_000 + b"]" * 10_000, "deep"),
    ],
)
def test_a_malformed_subscription_is_400_naming_what_is_wrong(untouched, body, words) -> None:
    status, text = raw_post(untouched, body, {"Content-Type": "application/json"})
    assert status == 400, text
    assert words.lower() in text.lower()
    assert untouched.state()["frameworks"] == []  # and the master serves on


def test_calls_need_the_right_stream_and_framework(cluster, scheduler) -> None:
    s = scheduler()
    s.subscribe()
    real = s.stream_id
    s.stream_id = None
    status, text = s.call("REVIVE")
    assert status == 400 and "Mesos-Stream-Id" in text
    s.stream_id = "0" * 32
    assert s.call("REVIVE")[0] == 400
    s.stream_id = real
    fid, s.framework_id = s.framework_id, "no-such-framework"
    status, text = s.call("REVIVE")
    assert status == 400 and "not the framework of this stream" in text
    s.framework_id = fid
    status, text = s.call("SUBSCRIBE", {"framework_info": {"name": "again"}})
    assert status == 400 and "Mesos-Stream-Id" in text
    status, text = s.call("ACCEPT", {"offer_ids": [], "operations": [{"type": "RESERVE", "reserve": {}}]})
    assert status == 400 and "RESERVE" in text
    status, text = s.call("ACCEPT_INVERSE_OFFERS", {})
    assert status == 400 and "ACCEPT_INVERSE_OFFERS" in text
    status, text = s.call("ACKNOWLEDGE", {"agent_id": {"value": "a"}, "task_id": {"value": "t"}, "uuid": "%%%"})
    assert status == 400 and "uuid" in text
    status, text = s.call("REVIVE", raw=b"x" * (9 << 20))
    assert status == 413
    # None of it harmed the stream or the master.
    seen = len(s.events)
    wait_for(lambda: any(e["type"] == "HEARTBEAT" for e in s.events[seen:]), timeout=5)
    assert framework_of(cluster, s.framework_id) is not None


def test_a_call_before_subscribing_is_refused(untouched) -> None:
    body = json.dumps({"type": "REVIVE", "framework_id": {"value": "f"}}).encode()
    status, text = raw_post(untouched, body, {"Content-Type": "application/json", "Mesos-Stream-Id": "x"})
    assert status == 400 and "stream ID 'x'" in text and "not valid" in text
    status, text = raw_post(untouched, body, {"Content-Type": "application/json"})
    assert status == 400 and "cannot be found" in text
    assert untouched.state()["frameworks"] == []


def test_a_body_is_bounded_before_it_is_read(cluster, scheduler) -> None:
    # Without a stream, 64 KiB at most (a SUBSCRIBE is tiny); a stream's calls 4 MiB.
    status, text = raw_post(cluster, b" " * (65 << 10), {"Content-Type": "application/json"})
    assert status == 413
    s = scheduler()
    s.subscribe()
    tasks = [{"task_id": {"value": f"t{i}"}} for i in range(10_001)]
    status, text = s.call("ACCEPT", {"offer_ids": [], "operations": [{"type": "LAUNCH", "launch": {"task_infos": tasks}}]})
    assert status == 400 and "more than 10000 tasks" in text
    assert not any(e["type"] == "UPDATE" for e in s.events)  # no TASK_ERROR storm either


def test_stopping_the_master_leaves_a_v1_frameworks_tasks_running(cluster, scheduler) -> None:
    # A master stopping is not its schedulers leaving: a framework without failover_timeout
    # removed then would have its tasks killed through the agents still connected. Its
    # stream must end after the agents' connections (or not count, if its handler is
    # cancelled first: scheduler_api), as a Thrift scheduler's connection does.
    import subprocess
    import time

    marker = "61.25"
    s = scheduler(failover_timeout=0)
    s.subscribe()
    s.launch(s.offers()[0], "lives-on", f"sleep {marker}")
    s.wait_state("lives-on", "TASK_RUNNING")
    cluster.kill("master")
    time.sleep(1.0)  # what the agents would have been told, they would have done by now
    alive = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True)
    assert alive.stdout.strip(), "the task was killed when the master stopped"


# -- the calls' fast lane (mezzo.http.call_lane) ------------------------------------------


class RawCalls:
    """Calls written by hand on one keep-alive socket, answers read back in order."""

    def __init__(self, cluster, s: V1Scheduler) -> None:
        import socket

        self.sock = socket.create_connection(("127.0.0.1", cluster.port), timeout=10)
        self.answers = self.sock.makefile("rb")
        self.s = s

    def call_bytes(self, kind: str, body: dict | None = None, *, extra: str = "", raw: bytes | None = None) -> bytes:
        message = {"type": kind, "framework_id": {"value": self.s.framework_id}}
        if body is not None:
            message[kind.lower()] = body
        payload = raw if raw is not None else json.dumps(message).encode()
        head = (
            "POST /api/v1/scheduler HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            f"Mesos-Stream-Id: {self.s.stream_id}\r\nContent-Length: {len(payload)}\r\n{extra}\r\n"
        )
        return head.encode() + payload

    def answer(self) -> tuple[int, dict[str, str], str]:
        status = int(self.answers.readline().split()[1])
        headers = {}
        while (line := self.answers.readline().decode().rstrip("\r\n")) != "":
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        body = self.answers.read(int(headers.get("content-length", "0"))).decode()
        return status, headers, body

    def close(self) -> None:
        self.answers.close()
        self.sock.close()


def test_the_lane_and_aiohttp_answer_calls_alike_and_in_order(cluster, scheduler) -> None:
    s = scheduler()
    s.subscribe()
    raw = RawCalls(cluster, s)
    try:
        # Three pipelined calls in one write: the lane answers each, in order (its
        # answers carry no Server header; aiohttp's do).
        bad = raw.call_bytes("REVIVE", raw=b'{"type": "REVIVE", "framework_id": {"value": 7}}')
        raw.sock.sendall(raw.call_bytes("SUPPRESS", {}) + bad + raw.call_bytes("REVIVE", {}))
        answers = [raw.answer() for _ in range(3)]
        assert [a[0] for a in answers] == [202, 400, 202]
        assert all("server" not in a[1] for a in answers)
        assert "framework_id" in answers[1][2] and "Failed to validate scheduler::Call" in answers[1][2]
        lane_error = answers[1][2]
        # A request of another shape (an Origin header, of this very host) goes to aiohttp,
        # and the connection stays aiohttp's: the same calls, the same answers.
        origin = "Origin: http://test\r\n"  # the Host these calls name
        raw.sock.sendall(raw.call_bytes("SUPPRESS", {}, extra=origin) + bad + raw.call_bytes("REVIVE", {}))
        answers = [raw.answer() for _ in range(3)]
        assert [a[0] for a in answers] == [202, 400, 202]
        assert all("server" in a[1] for a in answers)
        assert answers[1][2] == lane_error
        raw.sock.sendall(b"GET /version HTTP/1.1\r\nHost: test\r\n\r\n")
        status, _, body = raw.answer()
        assert status == 200 and json.loads(body)["name"] == "mezzo"
    finally:
        raw.close()


def test_a_call_trickled_in_is_answered_once_whole(cluster, scheduler) -> None:
    import time

    s = scheduler()
    s.subscribe()
    raw = RawCalls(cluster, s)
    try:
        # Explicit reconciliation of a task the master never knew: its answer (an
        # UPDATE) shows the call was applied, not only answered.
        data = raw.call_bytes("RECONCILE", {"tasks": [{"task_id": {"value": "never-was"}}]})
        for i in range(0, len(data), 7):
            raw.sock.sendall(data[i : i + 7])
            time.sleep(0.002)
        status, headers, _ = raw.answer()
        assert status == 202 and "server" not in headers
        assert s.wait_for("UPDATE", lambda e: e["update"]["status"]["task_id"]["value"] == "never-was", 10)
    finally:
        raw.close()


def test_the_lane_refuses_what_the_route_refuses(cluster, scheduler) -> None:
    s = scheduler()
    s.subscribe()
    other = scheduler()
    other.subscribe()
    raw = RawCalls(cluster, s)
    try:
        # Another framework's id on this stream; a SUBSCRIBE on a stream; an unknown stream.
        raw.sock.sendall(
            raw.call_bytes("REVIVE", raw=json.dumps({"type": "REVIVE", "framework_id": {"value": other.framework_id}}).encode())
        )
        status, headers, text = raw.answer()
        assert (status, "server" in headers) == (400, False) and "not the framework of this stream" in text
        raw.sock.sendall(raw.call_bytes("SUBSCRIBE", {"framework_info": {"user": "", "name": "x"}}))
        status, _, text = raw.answer()
        assert status == 400 and "should not include the 'Mesos-Stream-Id'" in text
        raw.s = type("Gone", (), {"framework_id": s.framework_id, "stream_id": "no-such-stream"})()
        raw.sock.sendall(raw.call_bytes("REVIVE", {}))
        status, _, text = raw.answer()
        assert status == 400 and "'no-such-stream'" in text and "not valid" in text
    finally:
        raw.close()


@pytest.mark.parametrize("through", ["lane", "aiohttp"])
def test_a_quiet_calls_connection_is_kept_open(mezzo_cluster, through) -> None:
    # pymesos makes its calls on one keep-alive connection and fails its next call (its
    # driver thread with it) on a connection the server closed while it was quiet; Mesos
    # never closes one. So a connection that made a call on a live stream is spared the
    # port's idle timeout, whichever path answered that call.
    cluster = mezzo_cluster(
        agents=1, master={"allocation_interval": 0.02, "connections": {"unregistered_idle_timeout": 0.5}}
    )
    s = V1Scheduler(cluster.master, {})
    try:
        assert s.subscribe().status == 200
        s.wait_for("SUBSCRIBED")
        # An Origin header (of this very host) sends a call past the lane, to aiohttp.
        headers = {"Origin": f"http://{cluster.master}"} if through == "aiohttp" else None
        assert s.call("SUPPRESS", {}, headers=headers) == (202, "")
        time.sleep(1.5)  # three idle timeouts
        assert s.call("REVIVE", {}, headers=headers) == (202, "")
    finally:
        s.close()


def test_a_task_group_that_does_not_fit_whole_launches_none_of_its_tasks(cluster, scheduler) -> None:
    # Mesos refuses a LAUNCH_GROUP whole. The offer has 2 cpus: g1 (1.5) would fit alone,
    # g2 (1.5) then would not; both get TASK_ERROR, nothing runs, and the LAUNCH after the
    # group gets the resources g1 would have taken.
    s = scheduler()
    s.subscribe()
    offer = s.offers()[0]

    def member(task_id: str, cpus: float) -> dict:
        return {
            "task_id": {"value": task_id},
            "agent_id": offer["agent_id"],
            "name": task_id,
            "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": cpus}}],
        }

    executor = {
        "type": "CUSTOM",
        "executor_id": {"value": "group-executor"},
        "command": {"value": "sleep 30"},
        "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.1}}],
    }
    after = {**member("after", 1.5), "command": {"value": "true"}}
    status, text = s.call(
        "ACCEPT",
        {
            "offer_ids": [offer["id"]],
            "operations": [
                {
                    "type": "LAUNCH_GROUP",
                    "launch_group": {"executor": executor, "task_group": {"tasks": [member("g1", 1.5), member("g2", 1.5)]}},
                },
                {"type": "LAUNCH", "launch": {"task_infos": [after]}},
            ],
        },
    )
    assert status == 202, text
    g1, g2 = s.wait_state("g1", "TASK_ERROR"), s.wait_state("g2", "TASK_ERROR")
    assert "more than is left of its offers" in g2["message"]
    assert "another task of its group was refused (g2: " in g1["message"]
    assert (g1["reason"], g2["reason"]) == ("REASON_TASK_GROUP_INVALID", "REASON_TASK_INVALID")
    assert [u["state"] for u in s.updates("g1")] == ["TASK_ERROR"]
    s.wait_state("after", "TASK_FINISHED")
    agents = cluster.state()["agents"]
    assert not any(e["executor_id"] == "group-executor" for a in agents for e in a["executors"])
