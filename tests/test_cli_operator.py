"""The operator's commands (`mezzo ps`/`tasks`, `task`, `logs`, `kill`, `agents`, `frameworks`,
`drain`, `undrain`) end to end: one real cluster of two agents for the module, tasks started
by a framework of the test's own, the commands run as subprocesses."""

from __future__ import annotations

import json
import queue
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass

import pytest

import mezzo
from mezzo import CommandInfo, Filters, FrameworkInfo, Resources, TaskInfo
from mezzo.testing import LocalProcessCluster, free_port, wait_for

from .conftest import Recorder, mezzo_cli, one_line_error

PS_HEADER = ["ID", "FRAMEWORK", "STATE", "HOST", "CPUS", "MEM", "AGE", "EXIT"]


class Launcher(Recorder):
    """A scheduler launching the tasks :meth:`submit` queues, all on the agent named
    ``host`` (0.2 cpus and 16 MB each); every other offer is declined for a minute."""

    def __init__(self, host: str) -> None:
        super().__init__(self._launch)
        self.host = host
        self.pending: list[tuple[str, str]] = []

    def submit(self, driver: mezzo.SchedulerDriver, task_id: str, command: str) -> None:
        with self.lock:
            self.pending.append((task_id, command))
        driver.set_needs_offers(True)  # clears the refusals of earlier declines

    def _launch(self, driver, offers) -> None:
        for o in offers:
            with self.lock:
                batch, self.pending = (self.pending, []) if o.hostname == self.host else ([], self.pending)
            if not batch:
                driver.decline_offer(o.offer_id, Filters(refuse_seconds=60))
                continue
            tasks = [
                TaskInfo(
                    task_id=tid,
                    agent_id=o.agent_id,
                    resources=Resources(cpus=0.2, mem=16),
                    command=CommandInfo(value=cmd),
                )
                for tid, cmd in batch
            ]
            driver.launch_tasks(o.offer_id, tasks, Filters(refuse_seconds=0))


@dataclass
class Env:
    cluster: LocalProcessCluster
    driver: mezzo.SchedulerDriver
    sched: Launcher
    fid: str
    agents: dict[str, str]  # hostname -> agent id

    @property
    def master(self) -> str:
        return self.cluster.master

    def op(self, command: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return mezzo_cli(command, "--master", self.master, *args, timeout=timeout)

    def start(self, task_id: str, command: str, until: str = "TASK_RUNNING") -> None:
        self.sched.submit(self.driver, task_id, command)
        wait_for(lambda: until in self.sched.states_of(task_id), 30, f"{task_id} to reach {until}")

    def ps_rows(self, *args: str) -> dict[str, list[str]]:
        r = self.op("ps", *args)
        assert r.returncode == 0, r.stderr
        return table_rows(r.stdout, PS_HEADER)


def table_rows(stdout: str, header: list[str]) -> dict[str, list[str]]:
    """The rows of a table whose cells hold no spaces (but the last), by their first cell."""
    lines = stdout.splitlines()
    assert lines and lines[0].split() == " ".join(header).split(), stdout
    return {cells[0]: cells for cells in (line.split(None, len(header) - 1) for line in lines[1:])}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    directory = tmp_path_factory.mktemp("operator-cluster")
    with LocalProcessCluster(2, master={"allocation_interval": 0.01}, directory=str(directory)) as cluster:
        sched = Launcher("agent-1")
        driver = mezzo.SchedulerDriver(sched, FrameworkInfo(name="operator-tests"), cluster.master)
        driver.start()
        try:
            assert sched.registered_event.wait(20), "the framework did not register"
            agents = {a["hostname"]: a["id"] for a in cluster.state()["agents"]}
            assert set(agents) == {"agent-1", "agent-2"}, agents
            yield Env(cluster, driver, sched, driver.framework_id, agents)
        finally:
            driver.stop()


# -- ps ------------------------------------------------------------------------------------


def test_ps_lists_running_tasks_then_ended_ones_with_all_and_filters(env, tmp_path):
    go = tmp_path / "go"
    env.start("ps-task", f"while [ ! -e {go} ]; do sleep 0.05; done; exit 3")
    row = wait_for(lambda: env.ps_rows().get("ps-task"), 20, "ps to list the running task")
    assert row[1:6] == [env.fid, "TASK_RUNNING", "agent-1", "0.2", "16"], row
    assert row[7] == "-"  # no exit code yet
    assert "ps-task" in table_rows(env.op("tasks").stdout, PS_HEADER)  # the alias

    answer = json.loads(env.op("ps", "--json", "--framework", env.fid).stdout)
    assert "ps-task" in [t["id"] for t in answer["tasks"]]
    assert answer["total"] == len(answer["tasks"]) >= 1
    assert all(t["end_time"] is None for t in answer["tasks"])  # active ones only
    limited = env.op("ps", "--json", "--limit", "0")
    assert json.loads(limited.stdout)["tasks"] == [] and json.loads(limited.stdout)["total"] >= 1
    assert "0 of" in env.op("ps", "--limit", "0").stderr

    assert "ps-task" in env.ps_rows("--agent", env.agents["agent-1"])
    assert "ps-task" in env.ps_rows("--state", "running")
    other = env.op("ps", "--agent", env.agents["agent-2"])
    assert other.returncode == 0 and "ps-task" not in table_rows(other.stdout, PS_HEADER)
    assert table_rows(other.stdout, PS_HEADER) == {}  # every task runs on agent-1
    assert "no active tasks" in other.stderr

    go.touch()
    wait_for(lambda: env.sched.final("ps-task"), 30, "the task to end")
    wait_for(lambda: "ps-task" not in env.ps_rows(), 20, "ps to drop the ended task")
    ended = wait_for(lambda: env.ps_rows("--all").get("ps-task"), 20, "ps --all to list the task")
    assert ended[1:4] == [env.fid, "TASK_FAILED", "agent-1"] and ended[7] == "3", ended
    assert env.ps_rows("--state", "ended")["ps-task"][2] == "TASK_FAILED"
    assert "ps-task" in env.ps_rows("--state", "TASK_FAILED")
    assert "ps-task" not in env.ps_rows("--state", "running")
    assert "ps-task" not in env.ps_rows("--all", "--agent", env.agents["agent-2"])
    (t,) = [t for t in json.loads(env.op("ps", "--json", "--all").stdout)["tasks"] if t["id"] == "ps-task"]
    assert t["state"] == "TASK_FAILED" and t["exit_code"] == 3


# -- task ----------------------------------------------------------------------------------


def test_task_shows_its_history_sandbox_and_exit_code(env):
    env.start("hist-task", "echo hello; exit 0", until="TASK_FINISHED")
    r = wait_for(
        lambda: (r := env.op("task", "hist-task")) and "TASK_FINISHED" in r.stdout and r,
        20,
        "the master to show the task ended",
    )
    assert r.returncode == 0, r.stderr
    head, _, history = r.stdout.partition("\n\n")
    fields = dict(line.split(":", 1) for line in head.splitlines())
    fields = {k: v.strip() for k, v in fields.items()}
    assert fields["task"] == "hist-task"
    assert fields["framework"] == env.fid
    assert fields["state"] == "TASK_FINISHED"
    assert fields["exit code"] == "0"
    assert fields["agent"] == f"{env.agents['agent-1']} (agent-1)"
    sandbox = fields["sandbox"]
    assert sandbox == f"/frameworks/{env.fid}/executors/hist-task/runs/latest"
    # The path the master's files API reads the sandbox by.
    query = urllib.parse.urlencode({"agent_id": env.agents["agent-1"], "path": f"{sandbox}/stdout"})
    with urllib.request.urlopen(f"http://{env.master}/files/read?{query}", timeout=20) as answer:
        assert json.loads(answer.read())["data"] == "hello\n"

    lines = history.strip().splitlines()
    assert lines[0].split() == ["STATE", "AT", "SOURCE", "REASON", "MESSAGE"]
    rows = [line.split() for line in lines[1:]]
    states, times = [r[0] for r in rows], [f"{r[1]} {r[2]}" for r in rows]
    assert states[0] == "TASK_STAGING" and states[-1] == "TASK_FINISHED", states
    assert states.index("TASK_STAGING") < states.index("TASK_RUNNING") < states.index("TASK_FINISHED")
    assert times == sorted(times)
    # Who reported each state (the master launched it; the agent's built-in command
    # executor ended it), and the message of the last.
    assert rows[0][3] == "master" and rows[-1][3] == "agent", lines
    assert "command exited with status 0" in lines[-1]

    as_json = json.loads(env.op("task", "hist-task", "--json").stdout)
    assert as_json["id"] == "hist-task" and as_json["state"] == "TASK_FINISHED"
    assert as_json["sandbox"] == sandbox
    assert env.op("task", "hist-task", "--framework", env.fid).returncode == 0


def test_task_unknown_is_exit_1_and_one_line(env):
    r = env.op("task", "no-such-task")
    one_line_error(r, 1, "knows no task")
    assert "no-such-task" in r.stderr and r.stdout == ""
    one_line_error(env.op("task", "hist-task", "--framework", "no-such-framework"), 1, "knows no task")


# -- logs ----------------------------------------------------------------------------------

LOG_SCRIPT = "printf 'one\\ntwo\\nthree\\n'; printf 'é€😀 four\\n'; echo err-1 >&2; echo err-2 >&2"


def test_logs_prints_stdout_stderr_and_the_tail_intact(env):
    env.start("log-task", LOG_SCRIPT, until="TASK_FINISHED")
    out = env.op("logs", "log-task")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "one\ntwo\nthree\né€😀 four\n"
    err = env.op("logs", "log-task", "--stderr")
    assert err.returncode == 0, err.stderr
    assert err.stdout == "err-1\nerr-2\n"
    tail = env.op("logs", "log-task", "--tail", "2")
    assert tail.returncode == 0, tail.stderr
    assert tail.stdout == "three\né€😀 four\n"
    assert env.op("logs", "log-task", "--tail", "1").stdout == "é€😀 four\n"
    assert env.op("logs", "log-task", "--tail", "100").stdout == out.stdout
    assert env.op("logs", "log-task", "--stderr", "--tail", "1").stdout == "err-2\n"
    one_line_error(env.op("logs", "no-such-task"), 1, "knows no task")


def test_logs_follow_waits_for_a_file_not_there_yet(env, tmp_path):
    go = tmp_path / "go"
    # The task takes its stdout away (as if its sandbox were not made yet), then writes a new one.
    env.start(
        "late-file", f"rm stdout; while [ ! -e {go} ]; do sleep 0.05; done; echo later > stdout; sleep 1"
    )
    one_line_error(env.op("logs", "late-file"), 1, "")  # without -f: the file is not there
    proc = subprocess.Popen(
        [sys.executable, "-m", "mezzo", "logs", "-f", "late-file", "--master", env.master],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        encoding="utf-8",
    )
    try:
        wait_for(lambda: env.sched.final("late-file") is None and proc.poll() is None, 5, "logs -f to wait")
        time.sleep(1.0)
        assert proc.poll() is None  # still waiting, not failed
        go.touch()
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert out == "later\n"
        assert "mezzo logs: waiting for late-file's stdout (TASK_RUNNING)" in err.splitlines()
        assert "[task late-file TASK_FINISHED]" in err.splitlines()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_logs_follow_prints_every_line_in_order_and_exits_when_the_task_ends(env, tmp_path):
    go = tmp_path / "go"
    script = (
        f"echo line-1; while [ ! -e {go} ]; do sleep 0.05; done; "
        "for i in 2 3 4 5 6 7; do echo line-$i; sleep 0.3; done"
    )
    env.start("follow-task", script)
    proc = subprocess.Popen(
        [sys.executable, "-m", "mezzo", "logs", "-f", "follow-task", "--master", env.master],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        encoding="utf-8",
    )
    lines: queue.Queue = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True)
    reader.start()
    try:
        assert lines.get(timeout=20) == "line-1\n"  # printed while the task waits: it follows
        assert env.sched.final("follow-task") is None
        go.touch()
        assert proc.wait(timeout=30) == 0
        reader.join(10)
        wait_for(lambda: env.sched.final("follow-task"), 10, "the task to end")
        rest = []
        while not lines.empty():
            rest.append(lines.get_nowait())
        assert rest == [f"line-{i}\n" for i in range(2, 8)]
        stderr = proc.stderr.read()
        assert "Traceback" not in stderr
        assert "[task follow-task TASK_FINISHED]" in stderr.splitlines()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


# -- kill ----------------------------------------------------------------------------------


def test_kill_ends_a_task_as_killed(env):
    env.start("kill-task", "sleep 300")
    r = env.op("kill", "kill-task")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
    wait_for(
        lambda: "TASK_KILLED" in env.sched.states_of("kill-task"), 30, "the framework to hear TASK_KILLED"
    )

    def killed():
        answer = json.loads(env.op("ps", "--all", "--json").stdout)
        return [t for t in answer["tasks"] if t["id"] == "kill-task" and t["state"] == "TASK_KILLED"]

    wait_for(killed, 20, "ps --all --json to show the task killed")
    assert "kill-task" not in env.ps_rows()
    one_line_error(env.op("kill", "no-such-task"), 1, "knows no task")
    one_line_error(env.op("kill", "no-such-task", "--framework", env.fid), 1, "no-such-task")


# -- agents, drain, undrain ------------------------------------------------------------------

AGENT_HEADER = ["ID", "HOST", "STATE", "CPUS", "USED", "MEM", "USED"]


def agent_rows(env) -> dict[str, list[str]]:
    r = env.op("agents")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == AGENT_HEADER, r.stdout
    return {cells[0]: cells for cells in (line.split() for line in lines[1:])}


def test_drain_and_undrain_change_the_agents_state(env):
    aid = env.agents["agent-2"]
    rows = agent_rows(env)
    assert rows[aid][1:3] == ["agent-2", "active"] and rows[aid][3] == "0/4", rows[aid]
    assert rows[env.agents["agent-1"]][1:3] == ["agent-1", "active"]
    try:
        r = env.op("drain", aid, "--grace", "0")
        assert r.returncode == 0, r.stderr
        wait_for(lambda: agent_rows(env)[aid][2] in ("DRAINING", "DRAINED"), 20, "agents to show it draining")
        (entry,) = [a for a in json.loads(env.op("agents", "--json").stdout)["slaves"] if a["id"] == aid]
        assert entry["draining"]
        assert agent_rows(env)[env.agents["agent-1"]][2] == "active"  # only the one named
    finally:
        r = env.op("undrain", aid)
    assert r.returncode == 0, r.stderr
    wait_for(lambda: agent_rows(env)[aid][2] == "active", 20, "agents to show it active again")

    one_line_error(env.op("drain", "no-such-agent", "--grace", "0"), 1, "no-such-agent")
    one_line_error(env.op("undrain", "no-such-agent"), 1, "no-such-agent")
    assert mezzo_cli("drain", aid, "--grace", "-1", "--master", env.master).returncode == 2


# -- frameworks ----------------------------------------------------------------------------


def test_frameworks_lists_the_registered_framework(env):
    r = env.op("frameworks")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["ID", "NAME", "ROLE", "STATE", "CPUS", "MEM", "SHARE", "WHY", "PENDING"]
    rows = {cells[0]: cells for cells in (line.split() for line in lines[1:])}
    assert rows[env.fid][1:4] == ["operator-tests", "*", "connected"], rows
    answer = json.loads(env.op("frameworks", "--json").stdout)
    assert "operator-tests" in [f["name"] for f in answer["frameworks"]]
    assert env.op("frameworks", "--why").returncode == 0


# -- failures ------------------------------------------------------------------------------

EVERY_COMMAND = [
    ["ps"],
    ["tasks", "--all"],
    ["task", "x"],
    ["logs", "x"],
    ["kill", "x"],
    ["kill", "x", "--framework", "f"],
    ["agents"],
    ["frameworks"],
    ["drain", "x"],
    ["undrain", "x"],
]


@pytest.mark.parametrize("command", EVERY_COMMAND, ids=lambda c: "-".join(c))
def test_an_unreachable_master_is_one_line_and_exit_1_at_once(command):
    started = time.monotonic()
    r = mezzo_cli(*command, "--master", f"127.0.0.1:{free_port()}")
    took = time.monotonic() - started
    one_line_error(r, 1, "cannot reach the master")
    assert took < 2, took
    assert r.stdout == ""


@pytest.fixture(scope="module")
def not_mezzo(tmp_path_factory):
    """``python -m http.server`` on a free port: HTTP, but not a mezzo master."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "http.server",
            str(port),
            "--bind",
            "127.0.0.1",
            "--directory",
            str(tmp_path_factory.mktemp("www")),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def listening():
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    try:
        wait_for(listening, 20, "http.server to listen")
        yield f"127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    "command", [["ps"], ["task", "x"], ["agents"], ["drain", "x"]], ids=lambda c: "-".join(c)
)
def test_an_http_server_that_is_not_a_master_is_named(not_mezzo, command):
    r = mezzo_cli(*command, "--master", not_mezzo)
    one_line_error(r, 1, "did not answer as a mezzo master's HTTP API")


def test_bad_state_and_limit_are_command_line_mistakes(env):
    line = one_line_error(env.op("ps", "--state", "bogus"), 2, "state")
    assert "'state'" in line or "state:" in line, line
    r = env.op("ps", "--limit", "-3")
    assert r.returncode == 2 and "negative" in r.stderr


def test_version():
    r = mezzo_cli("--version")
    assert r.returncode == 0
    assert r.stdout == f"mezzo {mezzo.__version__}\n"
