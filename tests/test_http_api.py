"""The master's HTTP API at its Thrift port: real masters and agents, real HTTP clients."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from collections.abc import Iterator

import mezzo
import pytest
from mezzo import CommandInfo, Filters, FrameworkInfo, Resources, TaskInfo
from mezzo.acls import single_tenant
from mezzo.rpc.tls import client_tls
from mezzo.testing import LocalProcessCluster, wait_for
from prometheus_client.parser import text_string_to_metric_families

from .conftest import Recorder


def get(
    cluster: LocalProcessCluster, path: str, method: str = "GET", context: ssl.SSLContext | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One request to the master; (status, headers, body)."""
    host, port = cluster.master.rsplit(":", 1)
    if context is None:
        conn: http.client.HTTPConnection = http.client.HTTPConnection(host, int(port), timeout=10)
    else:
        conn = http.client.HTTPSConnection(host, int(port), timeout=10, context=context)
    try:
        conn.request(method, path)
        answer = conn.getresponse()
        return answer.status, dict(answer.getheaders()), answer.read()
    finally:
        conn.close()


def master_log(cluster: LocalProcessCluster) -> str:
    return (cluster.dir / "master.log").read_text(errors="replace")


PLAIN = {"agents": 1, "master": {"allocation_interval": 0.01}}


@pytest.fixture
def plain_master(mezzo_cluster) -> LocalProcessCluster:
    return mezzo_cluster(**PLAIN)


@pytest.fixture(scope="module")
def plain_looked_at(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcessCluster]:
    """A ``plain_master`` shared by the tests that only look at it: their requests
    read, or are refused (no framework, no task, no change of any agent)."""
    with LocalProcessCluster(directory=str(tmp_path_factory.mktemp("plain")), **PLAIN) as cluster:
        yield cluster


def log_since(cluster: LocalProcessCluster, offset: int) -> str:
    """What the master logged past ``offset`` bytes of its log (this test's own lines,
    on a master other tests use too)."""
    with open(cluster.dir / "master.log", "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def log_size(cluster: LocalProcessCluster) -> int:
    return (cluster.dir / "master.log").stat().st_size


def test_health_version_and_their_master_aliases_answer_at_the_thrift_port(plain_looked_at) -> None:
    status, _, body = get(plain_looked_at, "/health")
    assert (status, body) == (200, b"")
    for path in ("/version", "/master/version"):
        status, headers, body = get(plain_looked_at, path)
        assert status == 200 and headers["Content-Type"].startswith("application/json")
        assert json.loads(body)["name"] == "mezzo" and json.loads(body)["version"]
    # Thrift goes on at the same port: the agent registered, and a tool's state request is answered.
    assert [a["hostname"] for a in plain_looked_at.state()["agents"]] == ["agent-1"]


def test_metrics_snapshot_uses_mesos_names_and_prometheus_text_parses(plain_looked_at) -> None:
    status, _, body = get(plain_looked_at, "/metrics/snapshot")
    snap = json.loads(body)
    assert status == 200
    assert snap["master/elected"] == 1.0
    assert snap["master/slaves_connected"] == 1.0 and snap["master/slaves_disconnected"] == 0.0
    assert snap["master/tasks_running"] == 0.0
    assert snap["allocator/mesos/allocation_runs"] >= 1
    assert all(isinstance(v, float) for v in snap.values())
    assert "mezzo/connections/open" in snap  # nested counters flattened

    status, headers, body = get(plain_looked_at, "/master/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    assert families["mezzo_master_elected"].samples[0].value == 1.0
    assert families["mezzo_master_slaves_connected"].samples[0].value == 1.0


def test_unknown_paths_and_wrong_methods_are_json_errors_naming_them(plain_looked_at) -> None:
    status, _, body = get(plain_looked_at, "/no/such/thing")
    assert status == 404 and json.loads(body) == {"error": "no such endpoint: /no/such/thing", "status": 404}
    status, headers, body = get(plain_looked_at, "/metrics/snapshot", method="DELETE")
    assert status == 405 and "GET" in headers["Allow"]
    assert "DELETE not allowed on /metrics/snapshot" in json.loads(body)["error"]


def test_redirect_points_at_the_leader(plain_looked_at) -> None:
    status, headers, _ = get(plain_looked_at, "/master/redirect")
    assert status == 307 and headers["Location"] == f"//{plain_looked_at.master}"


def test_a_request_that_never_ends_is_closed_and_the_master_serves_on(mezzo_cluster) -> None:
    cluster = mezzo_cluster(agents=0, master={"connections": {"partial_frame_timeout": 1.0}})
    host, port = cluster.master.rsplit(":", 1)
    slow = socket.create_connection((host, int(port)))
    slow.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
    slow.settimeout(15)  # far past partial_frame_timeout: a recv that times out fails the test
    assert slow.recv(100) == b""  # closed on it
    slow.close()
    wait_for(lambda: "partial_frame_timeout" in master_log(cluster), 5, "the closing logged")
    assert get(cluster, "/health")[0] == 200


def test_oversized_headers_are_refused_and_the_master_serves_on(plain_looked_at) -> None:
    host, port = plain_looked_at.master.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n")
        answer = s.recv(300)
    assert answer.split(b" ")[1] == b"400" and b"Got more than 8190 bytes" in answer, answer
    assert get(plain_looked_at, "/health")[0] == 200


def test_with_http_off_a_request_is_closed_like_a_bad_peer(mezzo_cluster) -> None:
    cluster = mezzo_cluster(agents=0, master={"http": {"enabled": False}})
    host, port = cluster.master.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(100) == b""
    assert cluster.state()["master"]


# -- with TLS -----------------------------------------------------------------------------


@pytest.fixture
def tls_master(mezzo_cluster) -> LocalProcessCluster:
    acls = single_tenant(agents=["agent"], operators=["operator"], frameworks=["web"])
    return mezzo_cluster(agents=1, tls=True, master={"acls": acls})


@pytest.fixture(scope="module")
def tls_looked_at(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcessCluster]:
    """A ``tls_master`` shared by the tests that only look at it (reads, refusals)."""
    acls = single_tenant(agents=["agent"], operators=["operator"], frameworks=["web"])
    directory = str(tmp_path_factory.mktemp("tls"))
    with LocalProcessCluster(1, tls=True, master={"acls": acls}, directory=directory) as cluster:
        yield cluster


def context_for(cluster: LocalProcessCluster, principal: str) -> ssl.SSLContext:
    return client_tls(cluster.client_tls(principal)).context


def test_over_tls_an_operator_reads_metrics_and_another_principal_is_refused_with_403(tls_looked_at) -> None:
    status, _, body = get(tls_looked_at, "/metrics/snapshot", context=context_for(tls_looked_at, "operator"))
    assert status == 200 and json.loads(body)["master/slaves_connected"] == 1.0

    logged = log_size(tls_looked_at)
    status, _, body = get(tls_looked_at, "/metrics", context=context_for(tls_looked_at, "web"))
    assert status == 403
    assert json.loads(body)["error"] == "principal web may not view the cluster (master.acls.view_cluster)"
    wait_for(lambda: "principal=web" in log_since(tls_looked_at, logged), 5, "an audit line")
    # Health needs no permission.
    assert get(tls_looked_at, "/health", context=context_for(tls_looked_at, "web"))[0] == 200


def test_over_tls_a_client_without_a_certificate_is_refused_at_the_handshake(tls_looked_at) -> None:
    bare = ssl.create_default_context(cafile=tls_looked_at.tls.ca)  # trusts the server, shows nothing
    with pytest.raises((ssl.SSLError, ConnectionError)):
        get(tls_looked_at, "/health", context=bare)
    assert get(tls_looked_at, "/health", context=context_for(tls_looked_at, "operator"))[0] == 200


# -- teardown -------------------------------------------------------------------------------


def post_form(cluster: LocalProcessCluster, path: str, body: str, context: ssl.SSLContext) -> tuple[int, dict]:
    host, port = cluster.master.rsplit(":", 1)
    conn = http.client.HTTPSConnection(host, int(port), timeout=10, context=context)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/x-www-form-urlencoded"})
        answer = conn.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        conn.close()


def test_post_teardown_ends_a_framework_for_an_operator_and_refuses_others(tls_master) -> None:
    sched = Recorder()
    driver = mezzo.SchedulerDriver(
        sched, FrameworkInfo(name="victim"), tls_master.master, tls=tls_master.client_tls("web")
    )
    driver.start()
    try:
        wait_for(lambda: driver.framework_id, 20, "the framework to register")
        fid = driver.framework_id
        web_ctx, operator_ctx = context_for(tls_master, "web"), context_for(tls_master, "operator")

        status, body = post_form(tls_master, "/master/teardown", f"frameworkId={fid}", web_ctx)
        assert status == 403 and "may not tear down framework" in body["error"]
        status, body = post_form(tls_master, "/master/teardown", "frameworkId=no-such-id", operator_ctx)
        assert status == 400 and "no framework 'no-such-id' is registered" in body["error"]
        status, body = post_form(tls_master, "/teardown", "somethingElse=1", operator_ctx)
        assert status == 400 and "'frameworkId'" in body["error"]
        status, body = post_form(tls_master, "/teardown", "frameworkId=" + "x" * (2 << 20), operator_ctx)
        assert status == 413

        status, body = post_form(tls_master, "/teardown", f"frameworkId={fid}", operator_ctx)
        assert status == 200 and body["message"].startswith(f"framework {fid} torn down")
        wait_for(lambda: any("torn down by operator" in e for e in sched.errors), 10, "the scheduler told")
        assert [f["id"] for f in tls_master.state()["frameworks"]] == []
    finally:
        driver.stop()


def test_flags_show_the_masters_settings_to_viewers_of_the_cluster_only(tls_looked_at) -> None:
    status, _, body = get(tls_looked_at, "/master/flags", context=context_for(tls_looked_at, "operator"))
    flags = json.loads(body)["flags"]
    assert status == 200
    assert flags["listen"] == tls_looked_at.master
    assert flags["http"] == {"enabled": True, "event_heartbeat": 15.0, "file_timeout": 10.0, "credentials": ""}  # a path, not secrets
    assert flags["acls"]["permissive"] is False and flags["acls"]["rules"]["view_cluster"] == 1
    assert get(tls_looked_at, "/flags", context=context_for(tls_looked_at, "web"))[0] == 403


# -- the state in Mesos' shape -------------------------------------------------------------


def test_state_summary_frameworks_slaves_and_tasks_in_mesos_shape(plain_master) -> None:
    def launch_once(driver, offers):
        for offer in offers:
            if sched.launched:
                driver.decline_offer(offer.offer_id, Filters(refuse_seconds=60))
                continue
            sched.launched.append(offer.agent_id)
            task = TaskInfo(
                task_id="sleeper",
                name="a sleeper",
                agent_id=offer.agent_id,
                resources=Resources(cpus=0.5, mem=32),
                command=CommandInfo(value="sleep 300"),
                labels={"team": "ops"},
            )
            driver.launch_tasks(offer.offer_id, [task], Filters(refuse_seconds=0))

    sched = Recorder(launch_once)
    sched.launched = []
    driver = mezzo.SchedulerDriver(sched, FrameworkInfo(name="shaped", user="nobody"), plain_master.master)
    driver.start()
    try:
        wait_for(lambda: "TASK_RUNNING" in sched.states_of("sleeper"), 30, "the task to run")
        fid = driver.framework_id

        status, _, body = get(plain_master, "/master/state")
        state = json.loads(body)
        assert status == 200 and state["pid"] == f"master@{plain_master.master}"
        assert state["activated_slaves"] == 1 and state["completed_frameworks"] == []
        (slave,) = state["slaves"]
        assert slave["resources"] == {"cpus": 4.0, "disk": 10000.0, "mem": 4096.0, "ports": "[31000-32000]"}
        assert slave["used_resources"] == {"cpus": 0.5, "mem": 32.0} and slave["active"] is True
        (framework,) = state["frameworks"]
        assert (framework["id"], framework["name"], framework["user"]) == (fid, "shaped", "nobody")
        assert framework["used_resources"] == {"cpus": 0.5, "mem": 32.0}
        (task,) = framework["tasks"]
        assert task["id"] == "sleeper" and task["name"] == "a sleeper" and task["slave_id"] == slave["id"]
        assert task["state"] == "TASK_RUNNING" and task["statuses"][-1]["state"] == "TASK_RUNNING"
        assert task["labels"] == [{"key": "team", "value": "ops"}]
        assert json.loads(get(plain_master, "/state.json")[2])["frameworks"][0]["id"] == fid

        summary = json.loads(get(plain_master, "/state-summary")[2])
        assert summary["slaves"][0]["TASK_RUNNING"] == 1 and summary["slaves"][0]["framework_ids"] == [fid]
        assert summary["frameworks"][0]["slave_ids"] == [slave["id"]] and "tasks" not in summary["frameworks"][0]

        assert json.loads(get(plain_master, f"/frameworks?framework_id={fid}")[2])["frameworks"][0]["id"] == fid
        assert json.loads(get(plain_master, "/frameworks?framework_id=nope")[2])["frameworks"] == []
        assert json.loads(get(plain_master, "/slaves")[2]) == json.loads(get(plain_master, "/master/agents")[2])

        tasks = json.loads(get(plain_master, f"/tasks?framework_id={fid}&limit=1&order=asc")[2])["tasks"]
        assert [t["id"] for t in tasks] == ["sleeper"]
        assert json.loads(get(plain_master, "/tasks?offset=1")[2])["tasks"] == []
        status, _, body = get(plain_master, "/tasks?limit=many")
        assert status == 400 and json.loads(body)["error"] == "parameter 'limit': 'many' is not a whole number"
        status, _, body = get(plain_master, "/tasks?order=sideways")
        assert status == 400 and "'order'" in json.loads(body)["error"]
    finally:
        driver.stop()


def test_a_principal_that_may_view_nothing_gets_403_for_the_state(tls_looked_at) -> None:
    status, _, body = get(tls_looked_at, "/state", context=context_for(tls_looked_at, "web"))
    assert status == 403 and "may not view the cluster" in json.loads(body)["error"]
    status, _, body = get(tls_looked_at, "/master/state-summary", context=context_for(tls_looked_at, "operator"))
    assert status == 200 and len(json.loads(body)["slaves"]) == 1


def test_plain_http_at_the_tls_port_is_told_in_http_to_use_https(tls_looked_at) -> None:
    logged = log_size(tls_looked_at)
    status, _, body = get(tls_looked_at, "/state")
    assert status == 400 and "this port speaks HTTPS" in json.loads(body)["error"]
    wait_for(
        lambda: "the peer sent an HTTP request at this TLS port" in log_since(tls_looked_at, logged),
        5,
        "the log line",
    )


def test_ended_tasks_and_frameworks_are_kept_bounded_with_their_statuses(mezzo_cluster) -> None:
    cluster = mezzo_cluster(agents=1, master={"allocation_interval": 0.01, "max_completed_tasks_per_framework": 2})

    def launch(driver, offers):
        for offer in offers:
            if len(sched.launched) >= 3:
                driver.decline_offer(offer.offer_id, Filters(refuse_seconds=60))
                continue
            n = len(sched.launched)
            sched.launched.append(n)
            task = TaskInfo(
                task_id=f"quick-{n}",
                agent_id=offer.agent_id,
                resources=Resources(cpus=0.1, mem=16),
                command=CommandInfo(value="true"),
            )
            driver.launch_tasks(offer.offer_id, [task], Filters(refuse_seconds=0))

    sched = Recorder(launch)
    sched.launched = []
    driver = mezzo.SchedulerDriver(sched, FrameworkInfo(name="quick"), cluster.master)
    driver.start()
    try:
        for n in range(3):
            wait_for(lambda n=n: "TASK_FINISHED" in sched.states_of(f"quick-{n}"), 30, f"quick-{n} to finish")
        fid = driver.framework_id
        (framework,) = json.loads(get(cluster, "/state")[2])["frameworks"]
        assert [t["id"] for t in framework["completed_tasks"]] == ["quick-1", "quick-2"]  # 2 kept, oldest first
        statuses = [s["state"] for s in framework["completed_tasks"][-1]["statuses"]]
        assert statuses[0] == "TASK_STAGING" and statuses[-1] == "TASK_FINISHED" and "TASK_RUNNING" in statuses
        times = [s["timestamp"] for s in framework["completed_tasks"][-1]["statuses"]]
        assert times == sorted(times)
        newest = json.loads(get(cluster, f"/tasks?framework_id={fid}&limit=1")[2])["tasks"]
        assert [t["id"] for t in newest] == ["quick-2"] and newest[0]["state"] == "TASK_FINISHED"
    finally:
        driver.stop()
    wait_for(lambda: json.loads(get(cluster, "/state")[2])["completed_frameworks"], 10, "the framework to end")
    state = json.loads(get(cluster, "/state")[2])
    assert state["frameworks"] == []
    (ended,) = state["completed_frameworks"]
    assert ended["id"] == fid and ended["unregistered_time"] >= ended["registered_time"]
    assert [t["id"] for t in ended["completed_tasks"]] == ["quick-1", "quick-2"]
    assert [t["id"] for t in json.loads(get(cluster, "/tasks")[2])["tasks"]] == ["quick-2", "quick-1"]


def test_a_post_a_browser_says_another_site_sent_is_refused(plain_looked_at) -> None:
    host, port = plain_looked_at.master.rsplit(":", 1)
    for headers in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}):
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            conn.request(
                "POST",
                "/master/teardown",
                body="frameworkId=x",
                headers={"Content-Type": "application/x-www-form-urlencoded", **headers},
            )
            answer = conn.getresponse()
            status, body = answer.status, json.loads(answer.read())
        finally:
            conn.close()
        assert status == 403 and "sent by another site" in body["error"], body
    # The same from a tool (no Origin) reaches the endpoint: an unknown id, 400.
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request(
            "POST", "/teardown", body="frameworkId=x", headers={"Content-Type": "application/x-www-form-urlencoded"}
        )
        assert conn.getresponse().status == 400
    finally:
        conn.close()
