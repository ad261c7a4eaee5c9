"""Sandbox files (/files/*) at the agent's own port and through the master's proxy: real
masters, agents and tasks on loopback, real HTTP clients."""

from __future__ import annotations

import http.client
import json
import os
import signal
import ssl
import urllib.parse

import pytest

import mezzo
from mezzo import CommandInfo, Filters, FrameworkInfo, Resources, TaskInfo
from mezzo.acls import single_tenant
from mezzo.rpc.tls import client_tls
from mezzo.testing import LocalProcessCluster, wait_for

from .conftest import Recorder

SCRIPT = (
    "echo first line; ln -s /etc/passwd stdout2; mkdir sub; "
    "head -c 200000 /dev/zero | tr '\\0' 'z' > big; "
    "while [ ! -e go ]; do sleep 0.05; done; echo second line; sleep 300"
)
"""The task: a first line, a symlink planted in its sandbox, a 200 kB file, then a second
line once the test creates ``go`` (through its sandbox on disk)."""


def request(
    address: str, path: str, context: ssl.SSLContext | None = None
) -> tuple[int, dict[str, str], bytes]:
    host, port = address.rsplit(":", 1)
    if context is None:
        conn: http.client.HTTPConnection = http.client.HTTPConnection(host, int(port), timeout=20)
    else:
        conn = http.client.HTTPSConnection(host, int(port), timeout=20, context=context)
    try:
        conn.request("GET", path)
        answer = conn.getresponse()
        return answer.status, dict(answer.getheaders()), answer.read()
    finally:
        conn.close()


def query(**params: object) -> str:
    return urllib.parse.urlencode(params)


def run_task(cluster: LocalProcessCluster, tls=None):
    """Start a framework running SCRIPT as task ``talker``; (driver, framework id, agent)."""

    def launch_once(driver, offers):
        for offer in offers:
            if sched.launched:
                driver.decline_offer(offer.offer_id, Filters(refuse_seconds=60))
                continue
            sched.launched.append(offer.agent_id)
            task = TaskInfo(
                task_id="talker",
                agent_id=offer.agent_id,
                resources=Resources(cpus=0.5, mem=32),
                command=CommandInfo(value=SCRIPT),
            )
            driver.launch_tasks(offer.offer_id, [task], Filters(refuse_seconds=0))

    sched = Recorder(launch_once)
    sched.launched = []
    driver = mezzo.SchedulerDriver(sched, FrameworkInfo(name="files"), cluster.master, tls=tls)
    driver.start()
    wait_for(lambda: "TASK_RUNNING" in sched.states_of("talker"), 30, "the task to run")
    (agent,) = cluster.state()["agents"]
    return driver, driver.framework_id, agent


def sandbox_on_disk(cluster: LocalProcessCluster, fid: str):
    (run,) = (cluster.dir / "agent-1" / "frameworks" / fid / "executors" / "talker" / "runs").iterdir()
    return run


@pytest.fixture
def running(mezzo_cluster):
    cluster = mezzo_cluster(agents=1, master={"allocation_interval": 0.01})
    driver, fid, agent = run_task(cluster)
    yield cluster, fid, agent
    driver.stop()


@pytest.fixture(scope="module")
def running_looked_at(tmp_path_factory):
    """``running``, shared by the tests that only read the task's sandbox and the
    agent's counters (they touch no file of it, and stop nothing)."""
    directory = str(tmp_path_factory.mktemp("running"))
    with LocalProcessCluster(1, master={"allocation_interval": 0.01}, directory=directory) as cluster:
        driver, fid, agent = run_task(cluster)
        try:
            yield cluster, fid, agent
        finally:
            driver.stop()


def test_the_master_proxies_read_browse_and_download_of_a_running_tasks_sandbox(running) -> None:
    cluster, fid, agent = running
    aid = agent["id"]
    sandbox = f"/frameworks/{fid}/executors/talker/runs/latest"
    stdout = f"{sandbox}/stdout"

    def read(**params):
        status, _, body = request(cluster.master, "/files/read?" + query(agent_id=aid, path=stdout, **params))
        assert status == 200, body
        return json.loads(body)

    wait_for(lambda: read()["data"] == "first line\n", 20, "the first line")
    size = read(offset=-1)
    assert size == {"offset": len("first line\n"), "data": "", "length": 0}
    # Growing output: re-read from the previous end.
    (sandbox_on_disk(cluster, fid) / "go").touch()
    wait_for(lambda: read(offset=size["offset"])["data"] == "second line\n", 20, "the second line")
    assert read(offset=6, length=4) == {"offset": 6, "data": "line", "length": 4}

    status, _, body = request(cluster.master, "/master/files/browse?" + query(agent_id=aid, path=sandbox))
    names = {entry["path"].rsplit("/", 1)[-1]: entry for entry in json.loads(body)}
    assert status == 200 and {"stdout", "stderr", "stdout2", "sub", "big"} <= set(names)
    assert names["sub"]["mode"].startswith("d") and names["stdout2"]["mode"].startswith("l")
    assert names["stdout"]["size"] == len("first line\nsecond line\n")

    big = f"{sandbox}/big"
    page = json.loads(
        request(cluster.master, "/files/read?" + query(agent_id=aid, path=big, length=10**6))[2]
    )
    assert len(page["data"]) == 64 * 1024  # the cap

    status, headers, body = request(cluster.master, "/files/download?" + query(agent_id=aid, path=big))
    assert status == 200 and body == b"z" * 200_000
    assert headers["Content-Disposition"] == 'attachment; filename="big"'
    status, _, body = request(cluster.master, "/files/download?" + query(agent_id=aid, path=stdout))
    assert (status, body) == (200, b"first line\nsecond line\n")


def test_pages_read_ahead_by_the_master_are_the_agents_and_a_rewrite_shows_within_a_second(running) -> None:
    """The master answers sequential pages from a piece it fetched ahead
    (mezzo.master.read_ahead): byte for byte the agent's own answers, and a file rewritten
    in place reads as rewritten once the piece's second is up."""
    cluster, fid, agent = running
    aid = agent["id"]
    big = f"/frameworks/{fid}/executors/talker/runs/latest/big"
    direct = f"127.0.0.1:{agent['port']}"
    wait_for(
        lambda: (
            json.loads(request(direct, "/files/read?" + query(path=big, offset=-1))[2])["offset"] == 200_000
        ),
        20,
        "big to be written",
    )
    for offset, length in [(0, 65536), (65536, 1000), (66536, 65536), (132072, 65536), (197608, 65536)]:
        via_master = request(
            cluster.master, "/files/read?" + query(agent_id=aid, path=big, offset=offset, length=length)
        )
        at_agent = request(direct, "/files/read?" + query(path=big, offset=offset, length=length))
        assert via_master[0] == at_agent[0] == 200
        assert json.loads(via_master[2]) == json.loads(at_agent[2]), (offset, length)
    assert len(json.loads(via_master[2])["data"]) == 200_000 - 197_608  # the last page, short

    with open(sandbox_on_disk(cluster, fid) / "big", "r+b") as f:
        f.write(b"y" * 10)  # in place: the owner and the size stay
    wait_for(
        lambda: (
            json.loads(request(cluster.master, "/files/read?" + query(agent_id=aid, path=big, length=12))[2])[
                "data"
            ]
            == "y" * 10 + "zz"
        ),
        5,
        "the rewrite through the master",
    )


def test_the_proxy_refuses_what_is_outside_sandboxes_and_names_bad_parameters(running_looked_at) -> None:
    cluster, fid, agent = running_looked_at
    aid = agent["id"]
    sandbox = f"/frameworks/{fid}/executors/talker/runs/latest"
    wait_for(
        lambda: (
            request(cluster.master, "/files/read?" + query(agent_id=aid, path=f"{sandbox}/stdout2"))[0] == 403
        ),
        20,
        "the symlink refused",
    )

    def answer(endpoint: str, **params) -> tuple[int, dict]:
        status, _, body = request(cluster.master, endpoint + "?" + query(**params))
        return status, json.loads(body)

    status, body = answer("/files/read", agent_id=aid, path=f"{sandbox}/stdout2")
    assert status == 403 and "symlink" in body["error"]
    status, body = answer("/files/download", agent_id=aid, path=f"{sandbox}/stdout2")
    assert status == 403
    for path in ("/etc/passwd", f"{sandbox}/../../../../../meta/journal", "/meta/journal"):
        status, body = answer("/files/read", agent_id=aid, path=path)
        assert status == 403, (path, body)
    status, body = answer("/files/read", agent_id=aid, path=f"{sandbox}/no-such-file")
    assert status == 404 and body["status"] == 404
    status, body = answer("/files/read", agent_id=aid, path=f"{sandbox}/sub")
    assert status == 400 and "directory" in body["error"]
    status, body = answer("/files/read", path=f"{sandbox}/stdout")
    assert status == 400 and "'agent_id'" in body["error"]
    status, body = answer("/files/read", agent_id=aid, path=f"{sandbox}/stdout", offset="x")
    assert status == 400 and "'offset'" in body["error"]
    status, body = answer("/files/browse", agent_id="no-such-agent", path=sandbox)
    assert status == 404 and "no-such-agent" in body["error"]


def test_the_agent_answers_files_and_metrics_at_its_own_port(running_looked_at) -> None:
    cluster, fid, agent = running_looked_at
    address = f"127.0.0.1:{agent['port']}"
    stdout = f"/frameworks/{fid}/executors/talker/runs/latest/stdout"
    wait_for(
        lambda: json.loads(request(address, "/files/read?" + query(path=stdout))[2])["data"], 20, "output"
    )
    status, _, body = request(address, "/files/read?" + query(path=stdout))
    assert status == 200 and json.loads(body) == {"offset": 0, "data": "first line\n", "length": 11}
    real = str(sandbox_on_disk(cluster, fid) / "stdout")
    assert json.loads(request(address, "/files/read?" + query(path=real, offset=-1))[2])["offset"] == 11
    status, _, body = request(address, "/files/browse?" + query(path=stdout.rsplit("/", 1)[0]))
    assert status == 200 and any(e["path"].endswith("/stderr") for e in json.loads(body))
    status, _, body = request(address, "/files/download?" + query(path=stdout))
    assert (status, body) == (200, b"first line\n")
    assert request(address, "/files/read?" + query(path=str(cluster.dir / "agent-1" / "meta")))[0] == 403

    status, _, body = request(address, "/metrics/snapshot")
    snap = json.loads(body)
    assert status == 200 and snap["slave/registered"] == 1.0 and snap["slave/tasks_running"] == 1.0
    assert (
        snap["slave/cpus_total"] == 4.0 and snap["slave/cpus_used"] == 0.5 and snap["slave/mem_used"] == 32.0
    )
    assert snap["slave/executors_running"] == 1.0 and snap["slave/uptime_secs"] > 0
    status, headers, body = request(address, "/metrics")
    assert status == 200 and b"mezzo_slave_tasks_running 1.0" in body
    assert request(address, "/health")[0] == 200
    assert json.loads(request(address, "/version")[2])["name"] == "mezzo"
    # Thrift goes on at the same port: the agent is still registered, its task running.
    assert cluster.state()["agents"][0]["connected"]


# -- with TLS -----------------------------------------------------------------------------


def context_for(cluster: LocalProcessCluster, principal: str) -> ssl.SSLContext:
    return client_tls(cluster.client_tls(principal)).context


def test_over_tls_the_agent_serves_its_readers_only_and_the_master_proxy_still_reads(mezzo_cluster) -> None:
    acls = single_tenant(agents=["agent"], operators=["operator"], frameworks=["web"])
    cluster = mezzo_cluster(
        agents=1,
        tls=True,
        master={"acls": acls, "allocation_interval": 0.01},
        agent={"http": {"readers": ["auditor"]}},
    )
    driver, fid, agent = run_task(cluster, tls=cluster.client_tls("web"))
    try:
        address = f"127.0.0.1:{agent['port']}"
        stdout = f"/frameworks/{fid}/executors/talker/runs/latest/stdout"
        params = "?" + query(path=stdout)
        for principal in ("web", "operator"):
            status, _, body = request(address, "/files/read" + params, context_for(cluster, principal))
            assert status == 403 and "agent.http.readers" in json.loads(body)["error"]
        status, _, body = request(address, "/metrics/snapshot", context_for(cluster, "web"))
        assert status == 403
        bare = ssl.create_default_context(cafile=cluster.tls.ca)
        assert request(address, "/files/read" + params, bare)[0] == 403
        assert request(address, "/health", bare)[0] == 200
        wait_for(
            lambda: request(address, "/files/read" + params, context_for(cluster, "auditor"))[0] == 200,
            20,
            "a reader to read",
        )

        through = "/files/read?" + query(agent_id=agent["id"], path=stdout)
        wait_for(
            lambda: (
                json.loads(request(cluster.master, through, context_for(cluster, "operator"))[2]).get("data")
                == "first line\n"
            ),
            20,
            "the operator to read through the master",
        )
        status, _, body = request(cluster.master, through, context_for(cluster, "web"))
        assert status == 403 and "view" in json.loads(body)["error"]
    finally:
        driver.stop()


def test_an_agent_that_does_not_answer_is_504_and_a_disconnected_one_503(mezzo_cluster) -> None:
    cluster = mezzo_cluster(agents=1, master={"allocation_interval": 0.01, "http": {"file_timeout": 2.0}})
    driver, fid, agent = run_task(cluster)
    through = "/files/read?" + query(
        agent_id=agent["id"], path=f"/frameworks/{fid}/executors/talker/runs/latest/stdout"
    )
    try:
        assert request(cluster.master, through)[0] == 200
        proc = cluster.procs["agent-1"]
        os.kill(proc.pid, signal.SIGSTOP)  # its link stays open, nothing answers
        try:
            status, _, body = request(cluster.master, through)
            assert status == 504 and "did not answer within 2 s" in json.loads(body)["error"]
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        cluster.kill("agent-1", signal.SIGKILL)
        wait_for(lambda: not cluster.state()["agents"][0]["connected"], 20, "the agent disconnected")
        status, headers, body = request(cluster.master, through)
        assert status == 503 and "disconnected" in json.loads(body)["error"] and headers["Retry-After"] == "1"
    finally:
        driver.stop()
