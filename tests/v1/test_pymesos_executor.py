"""pymesos 0.3.15's executor driver, unmodified, runs a framework's tasks on mezzo: the
agent serves the Mesos v1 executor API (``POST /api/v1/executor`` at its own port).

The framework (:mod:`.pymesos_executor_framework`) and its executor
(:mod:`.pymesos_executor`) are written only against pymesos' documented API; each
logs its callbacks as JSON lines, which these tests read beside the master's state.
The executor is started by the agent, as Mesos' agents start one, with MESOS_* in
its environment. The refusals are checked with a bare HTTP client (http.client).
"""

from __future__ import annotations

import base64
import http.client
import json
import re
import signal
import socket
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

from mezzo.testing import LocalProcessCluster, wait_for

pytest.importorskip("pymesos", reason="pymesos is installed by make setup (tests/v1/install_pymesos.py)")

from .test_pymesos import FAST, Workload  # noqa: E402 - after the skip, as that module does

FRAMEWORK = Path(__file__).with_name("pymesos_executor_framework.py")
EXECUTOR_ID = "pymesos-executor"
TERMINAL = {
    "TASK_FINISHED",
    "TASK_FAILED",
    "TASK_KILLED",
    "TASK_LOST",
    "TASK_ERROR",
    "TASK_DROPPED",
    "TASK_GONE",
}
DURATION = re.compile(r"^\d+(\.\d+)?(ns|us|ms|secs|mins|hrs|days|weeks)$")
"""What pymesos' parse_duration reads (MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD)."""


class JsonLines:
    """A JSON-lines log some process appends to."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def lines(self) -> list[dict]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]

    def of(self, name: str) -> list[dict]:
        return [line for line in self.lines() if line["cb"] == name]


class ExecutorWorkload(Workload):
    """:class:`Workload` running :mod:`.pymesos_executor_framework`, with the log its
    executor keeps beside its own."""

    def __init__(self, master: str, directory: Path, **settings) -> None:  # noqa: D107 - replaces Workload's
        self.log_path = directory / "scheduler.jsonl"
        self.log_path.write_text("")
        self.executor = JsonLines(directory / "executor.jsonl")
        settings.setdefault("executor_log", str(self.executor.path))
        settings.setdefault("executor_id", EXECUTOR_ID)
        self.settings = settings
        self.process = subprocess.Popen(
            [sys.executable, str(FRAMEWORK), master, str(self.log_path), json.dumps(settings)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def framework_id(self) -> str:
        registered = self.callbacks("registered")
        assert len(registered) == 1, self.lines()
        return registered[0]["framework_id"]

    def agent_id(self) -> str:
        launches = self.callbacks("launch")
        assert len(launches) == 1, self.lines()
        return launches[0]["agent"]

    def updates(self, task: str | None = None) -> list[dict]:
        """The task's updates from its agent (no reconciliation answers), in order."""
        return [
            u
            for u in self.callbacks("update")
            if u["reason"] != "REASON_RECONCILIATION" and (task is None or u["task"] == task)
        ]

    def terminal_counts(self) -> Counter:
        """How many terminal updates each task got (exactly one each, whatever the state)."""
        return Counter(u["task"] for u in self.updates() if u["state"] in TERMINAL)


@pytest.fixture
def workload(tmp_path):
    made: list[ExecutorWorkload] = []

    def start(master: str, **settings) -> ExecutorWorkload:
        w = ExecutorWorkload(master, tmp_path, **settings)
        made.append(w)
        return w

    yield start
    for w in made:
        w.kill()


def diagnose(w: ExecutorWorkload, cluster: LocalProcessCluster) -> str:
    """What a failing test prints: both logs, the executor's stderr, the agents' logs."""
    parts = [
        "--- scheduler log (last 30)",
        *map(json.dumps, w.lines()[-30:]),
        "--- executor log (last 30)",
        *map(json.dumps, w.executor.lines()[-30:]),
    ]
    for start in w.executor.of("start"):
        stderr = Path(start["cwd"]) / "stderr"
        if stderr.exists():
            parts += [f"--- {stderr} (last 30 lines)", *stderr.read_text(errors="replace").splitlines()[-30:]]
    parts += [cluster.log_tail(name, 20) for name in cluster.procs]
    return "\n".join(parts)


def wait_while_running(
    w: ExecutorWorkload, cluster: LocalProcessCluster, predicate, what: str, timeout: float = 20
):
    """``wait_for(predicate)``, failing at once (with the logs) if the framework exits first."""

    def check():
        value = predicate()
        if not value and w.process.poll() is not None:
            raise AssertionError(f"the framework exited while waiting for {what}\n{diagnose(w, cluster)}")
        return value

    try:
        return wait_for(check, timeout=timeout, what=what)
    except AssertionError as exc:
        if "timed out" in str(exc):
            raise AssertionError(f"{exc}\n{diagnose(w, cluster)}") from None
        raise


def finish(w: ExecutorWorkload, cluster: LocalProcessCluster, timeout: float = 30) -> None:
    """Wait for the framework to stop by itself (every task ended): exit status 0."""
    try:
        output = w.wait(timeout=timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{diagnose(w, cluster)}") from None
    assert w.process.returncode == 0, f"{output}\n{diagnose(w, cluster)}"
    assert w.callbacks("done"), diagnose(w, cluster)


def agent_address(cluster: LocalProcessCluster, agent_id: str | None = None) -> tuple[str, int]:
    """Where an agent (the first one, or ``agent_id``) serves: loopback, its port in the
    master's state (its hostname ``agent-N`` resolves nowhere)."""
    agents = cluster.state()["agents"]
    agent = next(a for a in agents if agent_id is None or a["id"] == agent_id)
    return "127.0.0.1", agent["port"]


def request(
    address: tuple[str, int], method: str, path: str, body: bytes | None = None, headers: dict | None = None
) -> tuple[int, str]:
    """One request from this (the test's) process; a 200 stream is not read, only reported."""
    conn = http.client.HTTPConnection(*address, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        if response.status == 200 and response.getheader("Transfer-Encoding") == "chunked":
            return 200, "<an event stream>"
        return response.status, response.read().decode(errors="replace")
    finally:
        conn.close()


def post(address: tuple[str, int], body: bytes | dict, headers: dict | None = None) -> tuple[int, str]:
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    return request(address, "POST", "/api/v1/executor", body, headers)


def subscribe_call(framework_id: str, executor_id: str) -> dict:
    return {
        "type": "SUBSCRIBE",
        "framework_id": {"value": framework_id},
        "executor_id": {"value": executor_id},
        "subscribe": {"unacknowledged_tasks": [], "unacknowledged_updates": []},
    }


def update_call(framework_id: str, executor_id: str, task_id: str, state: str) -> dict:
    """An UPDATE as pymesos' sendStatusUpdate sends it."""
    return {
        "type": "UPDATE",
        "framework_id": {"value": framework_id},
        "executor_id": {"value": executor_id},
        "update": {
            "status": {
                "task_id": {"value": task_id},
                "state": state,
                "source": "SOURCE_EXECUTOR",
                "timestamp": 1.0,
                "uuid": base64.b64encode(uuid.uuid4().bytes).decode(),
            }
        },
    }


JSON = {"Content-Type": "application/json"}


# -- the whole workload ------------------------------------------------------------------


def test_a_frameworks_tasks_run_on_a_pymesos_executor(mezzo_cluster, workload) -> None:
    cluster = mezzo_cluster(agents=2, master=FAST)
    w = workload(cluster.master)
    finish(w, cluster)
    why = diagnose(w, cluster)
    fid, agent = w.framework_id(), w.agent_id()
    assert not w.callbacks("error") and not w.callbacks("executor_lost") and not w.callbacks("agent_lost"), (
        why
    )

    # Every task ended exactly once, as its executor said.
    assert w.ends() == {
        "t0": ["TASK_FINISHED"],
        "t1": ["TASK_FINISHED"],
        "t-fail": ["TASK_FAILED"],
        "t-kill": ["TASK_KILLED"],
    }, why
    assert w.terminal_counts() == {"t0": 1, "t1": 1, "t-fail": 1, "t-kill": 1}, why
    for task in ("t0", "t1", "t-fail", "t-kill"):
        states = [u["state"] for u in w.updates(task)]
        assert "TASK_RUNNING" in states and states.index("TASK_RUNNING") < len(states) - 1, (task, states)
        assert all(u["source"] == "SOURCE_EXECUTOR" for u in w.updates(task)), (task, w.updates(task))
        assert all(u["has_uuid"] for u in w.updates(task)), (task, w.updates(task))
        assert all(u["agent_id"] in (None, agent) for u in w.updates(task)), (task, w.updates(task))
    kill_at = next(i for i, line in enumerate(w.lines()) if line["cb"] == "kill")
    running = next(
        i
        for i, line in enumerate(w.lines())
        if line["cb"] == "update" and line["task"] == "t-kill" and line["state"] == "TASK_RUNNING"
    )
    assert running < kill_at, why

    # The framework message went to the executor and its echo came back, from it.
    assert [(m["data"], m["executor_id"], m["agent_id"]) for m in w.callbacks("message")] == [
        ("echo:ping", EXECUTOR_ID, agent)
    ], why

    # The framework's TEARDOWN shut the executor down, and it exited by itself.
    wait_for(lambda: w.executor.of("exit"), timeout=15, what="the executor to shut down and exit")
    ex = w.executor
    assert not ex.of("error") and not ex.of("send_error") and not ex.of("crash"), ex.lines()
    assert len({line["pid"] for line in ex.lines()}) == 1, "one executor process ran every task"

    # It was started as a Mesos agent starts an executor.
    (start,) = ex.of("start")
    env = start["env"]
    host, port = agent_address(cluster, agent)
    assert env["MESOS_FRAMEWORK_ID"] == fid and env["MESOS_EXECUTOR_ID"] == EXECUTOR_ID, env
    assert env["MESOS_AGENT_ID"] == agent, env
    assert env["MESOS_AGENT_ENDPOINT"].rsplit(":", 1)[1] == str(port), (env, port)
    assert env["MESOS_DIRECTORY"] and env["MESOS_DIRECTORY"] == env["MESOS_SANDBOX"], env
    sandbox = Path(env["MESOS_SANDBOX"])
    assert sandbox.is_dir() and sandbox.resolve().is_relative_to(cluster.dir.resolve()), sandbox
    assert Path(start["cwd"]).resolve() == sandbox.resolve(), (start["cwd"], sandbox)
    assert DURATION.match(env["MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD"] or ""), env
    assert env["MESOS_CHECKPOINT"] == "1", env  # the agent checkpoints (its default)
    assert start["has_token"], "MESOS_EXECUTOR_AUTHENTICATION_TOKEN is set"

    # SUBSCRIBED named this executor of this framework on this agent.
    (registered,) = ex.of("registered")
    assert registered["executor_id"] == EXECUTOR_ID and registered["framework_id"] == fid, registered
    assert registered["agent_id"] == agent, registered
    assert not ex.of("reregistered"), ex.lines()

    # One LAUNCH per task, each its TaskInfo as Mesos gives it.
    launches = ex.of("launch")
    specs = {"t0": {"sleep": 0.2}, "t1": {"sleep": 0.2}, "t-fail": {"fail": True}, "t-kill": {"sleep": 60}}
    assert sorted(line["task"] for line in launches) == sorted(specs), ex.lines()
    for line in launches:
        assert line["name"] == line["task"] and line["agent_id"] == agent, line
        assert line["executor_id"] == EXECUTOR_ID, line
        assert {"cpus", "mem"} <= set(line["resources"]), line
        assert line["data"] == specs[line["task"]], line
    assert not ex.of("launch_group"), ex.lines()
    assert [(k["task"], k["known"]) for k in ex.of("kill")] == [("t-kill", True)], ex.lines()
    assert [m["data"] for m in ex.of("message")] == ["ping"] and ex.of("echoed"), ex.lines()
    sent = Counter((s["task"], s["state"]) for s in ex.of("sent"))
    assert sent == {
        ("t0", "TASK_RUNNING"): 1,
        ("t0", "TASK_FINISHED"): 1,
        ("t1", "TASK_RUNNING"): 1,
        ("t1", "TASK_FINISHED"): 1,
        ("t-fail", "TASK_RUNNING"): 1,
        ("t-fail", "TASK_FAILED"): 1,
        ("t-kill", "TASK_RUNNING"): 1,
        ("t-kill", "TASK_KILLED"): 1,
    }, ex.lines()  # every update the executor sent was accepted (2xx)
    (shutdown,) = ex.of("shutdown")
    assert shutdown["unfinished"] == [], shutdown
    names = [line["cb"] for line in ex.lines()]
    assert "disconnected" not in names[: names.index("shutdown")], names  # the stream held until SHUTDOWN

    # The master saw the tasks under the framework, and forgot the framework after TEARDOWN.
    expected = {
        "t0": "TASK_FINISHED",
        "t1": "TASK_FINISHED",
        "t-fail": "TASK_FAILED",
        "t-kill": "TASK_KILLED",
    }

    def completed():
        state = cluster.state()
        return {t["id"]: t["state"] for t in state["completed_tasks"] if t["framework_id"] == fid}

    wait_for(
        lambda: completed() == expected, timeout=10, what=f"the master's completed tasks to be {expected}"
    )
    for t in cluster.state()["completed_tasks"]:
        if t["framework_id"] == fid:
            assert t["agent_id"] == agent, t
    wait_for(lambda: all(f["id"] != fid for f in cluster.state()["frameworks"]), timeout=10)
    wait_for(
        lambda: not any(e["framework_id"] == fid for a in cluster.state()["agents"] for e in a["executors"]),
        timeout=10,
        what="the agent to report the executor gone",
    )


def test_a_task_group_is_one_launch_per_task(mezzo_cluster, workload) -> None:
    cluster = mezzo_cluster(agents=1, master=FAST)
    tasks = {"g0": {"sleep": 0.1}, "g1": {"sleep": 0.1}}
    w = workload(cluster.master, tasks=tasks, group=True, kill=None, message=None)
    finish(w, cluster)
    why = diagnose(w, cluster)
    assert w.ends() == {"g0": ["TASK_FINISHED"], "g1": ["TASK_FINISHED"]}, why
    assert w.terminal_counts() == {"g0": 1, "g1": 1}, why
    assert all(u["source"] == "SOURCE_EXECUTOR" for u in w.updates()), why
    wait_for(lambda: w.executor.of("shutdown"), timeout=15, what="the executor to be shut down")
    ex = w.executor
    assert len(ex.of("registered")) == 1 and len({line["pid"] for line in ex.lines()}) == 1, ex.lines()
    assert sorted(line["task"] for line in ex.of("launch")) == ["g0", "g1"], ex.lines()
    assert all(line["executor_id"] == EXECUTOR_ID for line in ex.of("launch")), ex.lines()
    assert not ex.of("launch_group") and not ex.of("send_error"), ex.lines()


# -- strangers -----------------------------------------------------------------------------


def start_a_long_task(cluster: LocalProcessCluster, workload, release: Path):
    """A framework whose one task (``long``) runs on its executor until ``release`` exists;
    returns it once the task is RUNNING, with its framework id and its agent's address."""
    w = workload(
        cluster.master, tasks={"long": {"until": str(release), "timeout": 40}}, kill=None, message=None
    )
    wait_while_running(
        w, cluster, lambda: any(u["state"] == "TASK_RUNNING" for u in w.updates("long")), "the task to run"
    )
    fid, agent = w.framework_id(), w.agent_id()
    # The master knows the executor (the agent reported it).
    wait_while_running(
        w,
        cluster,
        lambda: (
            {"framework_id": fid, "executor_id": EXECUTOR_ID}
            in next(a for a in cluster.state()["agents"] if a["id"] == agent)["executors"]
        ),
        "the master's state to show the executor on its agent",
    )
    return w, fid, agent_address(cluster, agent)


def the_executor_carried_on(w: ExecutorWorkload, cluster: LocalProcessCluster, release: Path) -> None:
    """Once released, the task finishes as its executor says, on the one subscription it had."""
    release.touch()
    finish(w, cluster)
    why = diagnose(w, cluster)
    assert w.ends() == {"long": ["TASK_FINISHED"]}, why
    assert w.terminal_counts() == {"long": 1}, why
    assert all(u["source"] == "SOURCE_EXECUTOR" for u in w.updates("long")), why
    wait_for(lambda: w.executor.of("shutdown"), timeout=15, what="the executor to be shut down")
    ex = w.executor
    assert len(ex.of("registered")) == 1 and not ex.of("reregistered"), ex.lines()
    names = [line["cb"] for line in ex.lines()]
    assert "disconnected" not in names[: names.index("shutdown")], names
    assert not ex.of("send_error") and not ex.of("error"), ex.lines()


def test_a_stranger_cannot_subscribe_as_a_running_executor(mezzo_cluster, workload, tmp_path) -> None:
    cluster = mezzo_cluster(agents=1, master=FAST)
    release = tmp_path / "release"
    w, fid, address = start_a_long_task(cluster, workload, release)
    # This test's process is no part of the executor's process tree.
    status, text = post(address, subscribe_call(fid, EXECUTOR_ID), JSON)
    assert status == 403, (status, text)
    assert text.strip(), "the refusal says why"
    status, text = post(
        address, subscribe_call(fid, EXECUTOR_ID), {**JSON, "Authorization": "Bearer not-the-token"}
    )
    assert status == 403, (status, text)
    assert text.strip(), "the refusal says why"
    the_executor_carried_on(w, cluster, release)


def test_a_stranger_cannot_update_or_message_for_a_running_executor(
    mezzo_cluster, workload, tmp_path
) -> None:
    # Beyond SUBSCRIBE: a stranger's UPDATE (failing the task) and MESSAGE for the same
    # executor are refused as well, and change nothing.
    cluster = mezzo_cluster(agents=1, master=FAST)
    release = tmp_path / "release"
    w, fid, address = start_a_long_task(cluster, workload, release)
    status, text = post(address, update_call(fid, EXECUTOR_ID, "long", "TASK_FAILED"), JSON)
    assert status == 403 and "not a process of executor" in text, (status, text)
    message = {
        "type": "MESSAGE",
        "framework_id": {"value": fid},
        "executor_id": {"value": EXECUTOR_ID},
        "message": {"data": base64.b64encode(b"forged").decode()},
    }
    status, text = post(address, message, JSON)
    assert status == 403, (status, text)
    # A refusal closes the connection: a stranger pays a connection per attempt.
    body = json.dumps(message).encode()
    with socket.create_connection(address, timeout=10) as raw:
        raw.sendall(
            b"POST /api/v1/executor HTTP/1.1\r\nHost: agent\r\nContent-Type: application/json\r\n"
            + b"Content-Length: %d\r\n\r\n" % len(body)
            + body
        )
        received = b""
        while chunk := raw.recv(65536):  # until the agent closes its end
            received += chunk
    assert received.startswith(b"HTTP/1.1 403 ") and b"Connection: close" in received, received[:300]
    the_executor_carried_on(w, cluster, release)
    assert not w.callbacks("message"), w.callbacks("message")


# -- bad input -------------------------------------------------------------------------------


def test_bad_calls_at_the_executor_api_are_refused_and_the_agent_serves_on(mezzo_cluster) -> None:
    cluster = mezzo_cluster(agents=1, master=FAST)
    address = agent_address(cluster)
    subscribe = json.dumps(subscribe_call("no-such-framework", "no-such-executor")).encode()

    status, text = post(address, b"{not json", JSON)
    assert status == 400, (status, text)
    status, text = post(address, b'{"type": "SUBSCRIBE", "framework_id": ', JSON)  # cut short
    assert status == 400, (status, text)
    for body in (b"[1, 2]", b'{"type": 7}', b'{"type": "NO_SUCH_CALL"}', b"{}"):
        status, text = post(address, body, JSON)
        assert 400 <= status < 500, (body, status, text)

    status, text = post(address, subscribe, {})
    assert status == 400, (status, text)
    status, text = post(address, subscribe, {"Content-Type": "text/plain"})
    assert status == 415, (status, text)

    status, text = post(address, subscribe, JSON)
    assert 400 <= status < 500, (status, text)
    status, text = post(
        address, update_call("no-such-framework", "no-such-executor", "t", "TASK_RUNNING"), JSON
    )
    assert 400 <= status < 500, (status, text)

    assert request(address, "GET", "/health")[0] == 200
    assert all(a["connected"] for a in cluster.state()["agents"])


# -- the executor's own token, and an agent restart ---------------------------------------


def executor_token(w: ExecutorWorkload) -> str:
    """The token the agent gave the executor, read from its process's environment (the
    test runs as the agent's user, so it may)."""
    (start,) = w.executor.of("start")
    environ = Path(f"/proc/{start['pid']}/environ").read_bytes().split(b"\0")
    (token,) = [v.split(b"=", 1)[1] for v in environ if v.startswith(b"MESOS_EXECUTOR_AUTHENTICATION_TOKEN=")]
    return token.decode()


def test_the_executors_bearer_token_is_its_proof(mezzo_cluster, workload, tmp_path) -> None:
    # Mesos' scheme: a call carrying the executor's token is the executor's, wherever it
    # comes from. While its subscription lasts a second one is refused (409), not taken over.
    cluster = mezzo_cluster(agents=1, master=FAST)
    release = tmp_path / "release"
    w, fid, address = start_a_long_task(cluster, workload, release)
    bearer = {**JSON, "Authorization": f"Bearer {executor_token(w)}"}
    status, text = post(address, subscribe_call(fid, EXECUTOR_ID), bearer)
    assert status == 409 and "subscribed already" in text, (status, text)
    status, text = post(address, update_call(fid, EXECUTOR_ID, "long", "TASK_RUNNING"), bearer)
    assert status == 202, (status, text)
    the_executor_carried_on(w, cluster, release)


def test_a_pymesos_executor_outlives_an_agent_restart(mezzo_cluster, workload, tmp_path) -> None:
    # The agent checkpoints (MESOS_CHECKPOINT=1), so pymesos keeps its executor running when
    # the connection drops, and subscribes again; the restarted agent takes it back.
    cluster = mezzo_cluster(agents=1, master=FAST, agent={"reconnect_interval": 0.1})
    release = tmp_path / "release"
    w, fid, _address = start_a_long_task(cluster, workload, release)
    (start,) = w.executor.of("start")
    cluster.kill("agent-1", signal.SIGKILL)
    wait_while_running(w, cluster, lambda: w.executor.of("disconnected"), "the executor to see its agent go")
    cluster.start_agent(1)
    cluster.wait_for_agents(1)
    wait_while_running(w, cluster, lambda: w.executor.of("reregistered"), "the executor to subscribe again")
    release.touch()
    finish(w, cluster)
    why = diagnose(w, cluster)
    assert w.ends() == {"long": ["TASK_FINISHED"]}, why
    assert w.terminal_counts() == {"long": 1}, why
    ex = w.executor
    assert {line["pid"] for line in ex.lines()} == {start["pid"]}, "the same executor process throughout"
    assert len(ex.of("registered")) == 1 and len(ex.of("reregistered")) == 1, ex.lines()
    assert not ex.of("send_error"), ex.lines()
