"""The batch queue end to end: a real cluster (master and one agent as processes), the
queue daemon as a process (`mezzo queue`), and `mezzo submit`, `jobs` and `cancel` run as
commands against its unix socket."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from mezzo.queue.client import QueueClient, QueueRefused
from mezzo.testing import LocalProcessCluster, free_port, wait_for

from .conftest import mezzo_cli, one_line_error

JOBS_HEADER = ["JOB", "STATE", "USER", "CPUS", "MEM", "TRIES", "HOST", "TIME", "EXIT", "COMMAND"]


class Queue:
    """A `mezzo queue` process of its own socket and state directory."""

    def __init__(self, master: str, directory: Path) -> None:
        self.master = master
        self.dir = directory
        self.socket = str(directory / "queue.sock")
        self.state_dir = str(directory / "state")
        self.proc: subprocess.Popen | None = None

    def start(self) -> Queue:
        log = open(self.dir / "queue.log", "ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mezzo",
                "queue",
                "--master",
                self.master,
                "--socket",
                self.socket,
                "--state-dir",
                self.state_dir,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        wait_for(lambda: self._registered(), 20, "the queue to register with the master")
        return self

    def _registered(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, self.log()
        try:
            return bool(QueueClient(self.socket, timeout=2).get("/health")["queue"]["registered"])
        except Exception:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def log(self) -> str:
        path = self.dir / "queue.log"
        return path.read_text()[-3000:] if path.exists() else ""

    def cli(self, command: str, *args: str) -> subprocess.CompletedProcess:
        return mezzo_cli(command, "--queue", self.socket, *args)

    def jobs(self, state: str = "all") -> dict[str, dict]:
        answer = QueueClient(self.socket).get("/jobs", state=state)
        return {j["id"]: j for j in answer["jobs"]}

    def wait_until_none_waiting(self, timeout: float = 60) -> dict[str, dict]:
        wait_for(lambda: not self.jobs("waiting"), timeout, "every job to end")
        return self.jobs()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    directory = tmp_path_factory.mktemp("queue-cluster")
    with LocalProcessCluster(
        1, master={"allocation_interval": 0.01}, agent_resources="cpus:4;mem:4096", directory=str(directory)
    ) as cluster:
        cluster.wait_for_agents(1)
        yield cluster


@pytest.fixture
def queue(cluster, tmp_path):
    q = Queue(cluster.master, tmp_path).start()
    try:
        yield q
    finally:
        q.stop()


def table_rows(stdout: str) -> dict[str, list[str]]:
    lines = stdout.splitlines()
    assert lines[0].startswith("queue: "), stdout
    assert lines[1].split() == JOBS_HEADER, stdout
    return {cells[0]: cells for cells in (line.split(None, len(JOBS_HEADER) - 1) for line in lines[2:])}


# -- submit, list ---------------------------------------------------------------------------


def test_an_array_runs_every_index_once_and_the_listing_shows_them(queue, tmp_path):
    out = tmp_path / "out"
    r = queue.cli(
        "submit", "--array", "1-20", "--cpus", "0.5", "--mem", "16", "--", f"echo {{index}} >> {out}"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "submitted 20 jobs: 1_1 to 1_20", r.stdout
    jobs = queue.wait_until_none_waiting()
    assert sorted(int(line) for line in out.read_text().split()) == list(range(1, 21))
    assert {j["state"] for j in jobs.values()} == {"FINISHED"} and len(jobs) == 20
    assert jobs["1_7"]["exit_code"] == 0 and jobs["1_7"]["user"] == "root"

    r = queue.cli("jobs")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].startswith(f"queue: registered with {queue.master} as "), r.stdout
    assert "0 queued, 0 running" in r.stdout.splitlines()[0]
    rows = table_rows(queue.cli("jobs", "--all").stdout)
    assert rows["1_20"][1:6] == ["FINISHED", "root", "0.5", "16", "1/1"], rows["1_20"]
    listed = json.loads(queue.cli("jobs", "--all", "--json").stdout)
    assert listed["total"] == 20 and listed["queue"]["registered"] is True


def test_a_single_job_gets_the_job_environment_and_runs_its_argv(queue, tmp_path):
    out = tmp_path / "env"
    r = queue.cli("submit", "--cpus", "0.1", "--mem", "16", "--", "sh", "-c", f"env > {out}")
    assert r.stdout.strip() == "submitted job 1", r.stdout
    queue.wait_until_none_waiting()
    env = dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
    assert env["MEZZO_JOB_ID"] == "1" and env["MEZZO_JOB_SUBMISSION"] == "1"
    assert "MEZZO_ARRAY_INDEX" not in env


def test_a_waiting_array_is_one_row_and_what_never_fits_waits(queue):
    r = queue.cli("submit", "--array", "1-50", "--cpus", "64", "--", "true")
    assert r.returncode == 0, r.stderr
    why = "no agent has 64 cpus (the largest has 4 cpus, 4096 mem); it waits until one joins"
    assert r.stderr.strip() == f"mezzo submit: note: {why}"
    listing = queue.cli("jobs").stdout
    rows = table_rows("\n".join(listing.splitlines()[:3]))
    assert list(rows) == ["1_[1-50]"], rows
    assert rows["1_[1-50]"][1] == "QUEUED"
    assert "50 queued, 0 running" in listing
    assert listing.splitlines()[3] == f"1_[1-50]: {why}"
    r = queue.cli("submit", "--cpus", "4", "--mem", "4097", "--", "true")
    assert "no agent has 4097 mem" in r.stderr
    assert queue.cli("cancel", "2").returncode == 0
    assert queue.cli("cancel", "1").stdout.startswith("cancelled 1_1, 1_2")


def test_a_failing_job_is_retried_then_fails_with_its_exit_code(queue, tmp_path):
    tries = tmp_path / "tries"
    r = queue.cli(
        "submit", "--retries", "2", "--cpus", "0.1", "--mem", "16", "--", f"echo x >> {tries}; exit 3"
    )
    assert r.returncode == 0, r.stderr
    job = queue.wait_until_none_waiting()["1"]
    assert job["state"] == "FAILED" and job["attempts"] == 3 and job["exit_code"] == 3, job
    assert job["task_id"] is None or job["task_id"].startswith("job-1.")
    assert len(tries.read_text().split()) == 3
    rows = table_rows(queue.cli("jobs", "--state", "failed").stdout)
    assert rows["1"][5] == "3/3" and rows["1"][8] == "3", rows


def test_cancel_ends_queued_jobs_at_once_and_kills_a_running_one(queue, cluster):
    r = queue.cli("submit", "--array", "1-3", "--cpus", "4", "--mem", "16", "--", "sleep 60")
    assert r.returncode == 0, r.stderr
    wait_for(lambda: queue.jobs()["1_1"]["state"] == "RUNNING", 20, "the first job to run")
    task_id = queue.jobs()["1_1"]["task_id"]
    r = queue.cli("cancel", "1")
    assert r.returncode == 0, r.stderr
    assert "cancelled 1_2, 1_3" in r.stdout and "cancelling 1_1" in r.stdout, r.stdout
    wait_for(lambda: queue.jobs()["1_1"]["state"] == "CANCELLED", 20, "the running job to be cancelled")
    assert queue.jobs()["1_1"]["last"].startswith("TASK_KILLED")
    tasks = {t["id"]: t for t in cluster.state()["completed_tasks"]}
    assert tasks[task_id]["state"] == "TASK_KILLED"
    # Cancelling again, or what does not exist: said, and exit 1 for the unknown.
    assert queue.cli("cancel", "1_1").stdout.strip() == "nothing to cancel: those jobs have ended"
    one_line_error(queue.cli("cancel", "77", "1_9"), 1, "no such job: 77, 1_9")


def test_only_the_submitter_or_root_may_cancel_and_jobs_run_as_their_submitter(cluster):
    if os.geteuid() != 0:
        pytest.skip("needs root: the test submits and cancels as another user (nobody)")
    # Out of pytest's own tmp (0700): nobody must reach the socket and write the output.
    directory = Path(tempfile.mkdtemp(prefix="mezzo-queue-users-"))
    directory.chmod(0o755)
    shared = directory / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    out = shared / "whoami"
    queue = Queue(cluster.master, directory).start()

    def as_nobody(method: str, *args):
        """``QueueClient(socket).method(*args)`` from a child process running as nobody."""
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: becomes nobody, asks, reports, exits
            try:
                os.setgid(65534)
                os.setuid(65534)
                try:
                    result = {"ok": getattr(QueueClient(queue.socket), method)(*args)}
                except Exception as exc:
                    result = {"failed": f"{type(exc).__name__}: {exc}"}
                os.write(write_end, json.dumps(result).encode())
            finally:
                os._exit(0)
        os.close(write_end)
        os.waitpid(pid, 0)
        with os.fdopen(read_end) as f:
            answer = json.loads(f.read())
        assert "ok" in answer, answer
        return answer["ok"]

    try:
        mine = as_nobody("post", "/jobs", {"command": f"id -un > {out}", "cpus": 0.1, "mem": 16})
        assert mine["user"] == "nobody"
        queue.wait_until_none_waiting()
        assert queue.jobs()["1"]["state"] == "FINISHED", queue.jobs()
        assert out.read_text().strip() == "nobody"
        assert out.stat().st_uid == 65534

        r = queue.cli("submit", "--cpus", "64", "--", "true")  # root's, never fits
        root_job = r.stdout.split()[-1]
        answer = as_nobody("post", "/cancel", {"jobs": [root_job]})
        assert answer["refused"] == [root_job] and answer["cancelled"] == []
        assert queue.jobs()[root_job]["state"] == "QUEUED"
        assert queue.cli("cancel", root_job).returncode == 0
    finally:
        queue.stop()
        shutil.rmtree(directory, ignore_errors=True)


# -- restarts ---------------------------------------------------------------------------------


def test_a_restarted_queue_keeps_its_jobs_and_its_running_tasks(queue, tmp_path, cluster):
    out = tmp_path / "ran"
    go = tmp_path / "go"
    command = f"echo {{index}} >> {out}; while [ ! -e {go} ]; do sleep 0.05; done"
    r = queue.cli("submit", "--array", "1-6", "--cpus", "2", "--mem", "16", "--", command)
    assert r.returncode == 0, r.stderr
    wait_for(lambda: len(out.read_text().split()) == 2 if out.exists() else False, 20, "two jobs to run")
    before = queue.jobs()
    running = sorted(j for j, v in before.items() if v["state"] == "RUNNING")
    assert len(running) == 2, before
    framework_id = QueueClient(queue.socket).get("/health")["queue"]["framework_id"]

    queue.stop()  # tasks keep running: the queue disconnects, it does not unregister
    one_line_error(queue.cli("jobs"), 1, f"no queue at {queue.socket}")
    assert len([t for t in cluster.state()["tasks"] if t["state"] == "TASK_RUNNING"]) == 2

    queue.start()
    assert QueueClient(queue.socket).get("/health")["queue"]["framework_id"] == framework_id
    after = queue.jobs()
    assert sorted(j for j, v in after.items() if v["state"] == "RUNNING") == running
    assert sum(v["state"] == "QUEUED" for v in after.values()) == 4
    go.touch()
    jobs = queue.wait_until_none_waiting()
    assert {v["state"] for v in jobs.values()} == {"FINISHED"}
    # Every index ran exactly once: the two that ran through the restart were not run again.
    assert sorted(int(i) for i in out.read_text().split()) == [1, 2, 3, 4, 5, 6]
    r = queue.cli("submit", "--", "true")
    assert r.stdout.strip() == "submitted job 2", r.stdout  # numbering carries on


def test_a_job_that_ended_while_the_queue_was_down_is_settled_by_reconciliation(queue, cluster, tmp_path):
    go = tmp_path / "go"
    r = queue.cli("submit", "--cpus", "0.1", "--mem", "16", "--", f"while [ ! -e {go} ]; do sleep 0.05; done")
    assert r.returncode == 0, r.stderr
    wait_for(lambda: queue.jobs()["1"]["state"] == "RUNNING", 20, "the job to run")
    task_id = queue.jobs()["1"]["task_id"]
    (framework_id,) = [t["framework_id"] for t in cluster.state()["tasks"] if t["id"] == task_id]
    queue.stop()
    go.touch()

    def ended() -> bool:  # as the master saw it (the queue's framework: ids restart with each queue)
        completed = cluster.state()["completed_tasks"]
        return any(t["id"] == task_id and t["framework_id"] == framework_id for t in completed)

    wait_for(ended, 20, "the task to end while no scheduler is connected")
    queue.start()
    job = queue.wait_until_none_waiting(30)["1"]
    assert job["state"] == "FINISHED", job


# -- mistakes and failures: one line, the right exit status ------------------------------------


def test_submit_without_a_queue_fails_fast_in_one_line(tmp_path):
    started = time.monotonic()
    r = mezzo_cli("submit", "--queue", str(tmp_path / "none.sock"), "--", "true")
    assert time.monotonic() - started < 5  # the process start-up included; the error itself is at once
    one_line_error(r, 1, f"no queue at {tmp_path / 'none.sock'} (start one: mezzo queue")


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--array", "5-1", "--", "true"], "--array: '5-1' ends before it starts"),
        (["--array", "x", "--", "true"], "--array: expected FIRST-LAST"),
        (["--cpus", "-1", "--", "true"], "--cpus"),
        (["--retries", "1000", "--", "true"], "--retries"),
        ([], "CMD: no command given"),
    ],
)
def test_submit_mistakes_are_one_line_naming_the_flag_exit_2(tmp_path, args, text):
    one_line_error(mezzo_cli("submit", "--queue", str(tmp_path / "q.sock"), *args), 2, text)


def test_the_queue_refuses_bad_requests_naming_the_field(queue):
    client = QueueClient(queue.socket)
    for body, field in [
        ({"command": ""}, "command"),
        ({"command": "true", "cpus": "many"}, "cpus"),
        ({"command": "true", "cpus": float("nan")}, "cpus"),
        ({"command": "true", "mem": -5}, "mem"),
        ({"command": "true", "retries": 1.5}, "retries"),
        ({"command": "true", "array": "1-999999"}, "array"),
        ({"command": ["true"]}, "command"),
    ]:
        with pytest.raises(QueueRefused) as caught:
            client.post("/jobs", body)
        assert caught.value.status == 400 and f"'{field}'" in str(caught.value), (body, caught.value)
    with pytest.raises(QueueRefused, match="'state'"):
        client.get("/jobs", state="SLEEPING")
    assert queue.jobs() == {}  # nothing of it was queued
    assert queue.proc is not None and queue.proc.poll() is None


def test_a_second_queue_on_the_same_socket_is_refused_in_one_line(queue):
    r = mezzo_cli("queue", "--master", queue.master, "--socket", queue.socket, "--state-dir", queue.state_dir)
    one_line_error(r, 2, f"queue.socket: another queue serves {queue.socket} already")


def test_a_queue_without_a_master_takes_jobs_and_says_it_has_no_master(tmp_path):
    q = Queue(f"127.0.0.1:{free_port()}", tmp_path)
    log = open(tmp_path / "queue.log", "ab")
    q.proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mezzo",
            "queue",
            "--master",
            q.master,
            "--socket",
            q.socket,
            "--state-dir",
            q.state_dir,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    try:
        wait_for(lambda: Path(q.socket).exists(), 20, "the queue to listen")
        r = q.cli("submit", "--", "true")
        assert r.returncode == 0 and r.stdout.strip() == "submitted job 1", (r.stdout, r.stderr)
        assert "the queue has no master" in r.stderr and "jobs wait until it registers" in r.stderr
        assert q.cli("jobs").stdout.splitlines()[0].startswith("queue: no master for ")
    finally:
        q.stop()


# -- hostile or mistaken requests: bounded, refused in one line, nothing lost ------------------


def test_a_cancel_naming_a_running_job_many_times_kills_it_once(queue, tmp_path, cluster):
    go = tmp_path / "go"
    r = queue.cli("submit", "--cpus", "0.1", "--mem", "16", "--", f"while [ ! -e {go} ]; do sleep 0.05; done")
    assert r.returncode == 0, r.stderr
    wait_for(lambda: queue.jobs()["1"]["state"] == "RUNNING", 20, "the job to run")
    answer = QueueClient(queue.socket).post("/cancel", {"jobs": ["1"] * 5000 + ["1"] * 5000})
    assert answer["cancelling"] == ["1"], answer  # once, however often it was named
    wait_for(lambda: queue.jobs()["1"]["state"] == "CANCELLED", 20, "the job to be cancelled")
    with pytest.raises(QueueRefused, match="at most 10000"):
        QueueClient(queue.socket).post("/cancel", {"jobs": ["1"] * 10001})
    # The master did not disconnect the queue for a flood of kills: it is still registered.
    status = QueueClient(queue.socket).get("/health")["queue"]
    assert status["registered"] is True, status
    assert "framework_id" in status and queue.log().count("refused the queue") == 0


def test_amounts_and_text_the_cluster_cannot_carry_are_refused(queue):
    client = QueueClient(queue.socket)
    for body, field in [
        ({"command": "true", "cpus": 1e306}, "cpus"),
        ({"command": "true", "mem": 2e9}, "mem"),
        ({"command": "true", "name": "\udcff"}, "name"),
        ({"command": "echo \udcff"}, "command"),
        ({"command": "x" * 60_000, "array": "1-1000"}, "array"),
    ]:
        with pytest.raises(QueueRefused) as caught:
            client.post("/jobs", body)
        assert caught.value.status == 400 and f"'{field}'" in str(caught.value), (body, caught.value)
    assert queue.jobs() == {}
    # And the queue still launches: nothing of the refused ones is in its way.
    assert queue.cli("submit", "--cpus", "0.1", "--mem", "16", "--", "true").returncode == 0
    assert queue.wait_until_none_waiting()["1"]["state"] == "FINISHED"  # refused ones took no number


def test_one_queue_per_state_directory(queue, tmp_path):
    other = tmp_path / "other.sock"
    r = mezzo_cli(
        "queue", "--master", queue.master, "--socket", str(other), "--state-dir", queue.state_dir, timeout=30
    )
    one_line_error(r, 2, f"queue state {queue.state_dir}: another queue uses it")
    assert not other.exists()
    assert queue.cli("submit", "--cpus", "0.1", "--mem", "16", "--", "true").returncode == 0
    assert queue.wait_until_none_waiting()["1"]["state"] == "FINISHED"


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--master", "127.0.0.1:notaport"], "queue.master: "),
        (["--socket", "/tmp/" + "s" * 120], "is longer than a unix socket's 107 bytes"),
        (["--failover-timeout", "-1"], "--failover-timeout"),
    ],
)
def test_queue_mistakes_are_one_line_exit_2(tmp_path, args, text):
    defaults = {"--master": "127.0.0.1:1", "--socket": str(tmp_path / "q.sock")}
    for flag, value in defaults.items():
        if flag not in args:
            args = [*args, flag, value]
    one_line_error(mezzo_cli("queue", "--state-dir", str(tmp_path / "s"), *args), 2, text)


def test_a_queue_the_master_removed_registers_anew_and_runs_its_jobs_again(queue, tmp_path, cluster):
    go = tmp_path / "go"
    runs = tmp_path / "runs"
    command = f"echo run >> {runs}; while [ ! -e {go} ]; do sleep 0.05; done"
    assert queue.cli("submit", "--cpus", "0.1", "--mem", "16", "--", command).returncode == 0
    wait_for(lambda: queue.jobs()["1"]["state"] == "RUNNING", 20, "the job to run")
    old_id = QueueClient(queue.socket).get("/health")["queue"]["framework_id"]
    r = mezzo_cli("teardown", old_id, "--master", cluster.master)
    assert r.returncode == 0, r.stderr

    def registered_anew() -> bool:
        status = QueueClient(queue.socket).get("/health")["queue"]
        return status["registered"] and status["framework_id"] != old_id

    wait_for(registered_anew, 20, "the queue to register as a new framework")
    wait_for(lambda: runs.exists() and len(runs.read_text().split()) == 2, 20, "the job to run again")
    go.touch()
    job = queue.wait_until_none_waiting()["1"]
    assert job["state"] == "FINISHED" and job["attempts"] == 1, job
    assert queue.proc is not None and queue.proc.poll() is None


def test_mezzo_local_queue_runs_the_queue_over_tls_with_the_cluster(tmp_path):
    """`mezzo local --queue`: TLS by default, the queue registered with the operator's
    certificate, its socket where $MEZZO_QUEUE says, its journal in the work dir."""
    socket_path = tmp_path / "local-queue.sock"
    work = tmp_path / "work"
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mezzo",
            "local",
            "--agents",
            "1",
            "--listen",
            f"127.0.0.1:{port}",
            "--resources",
            "cpus:2;mem:1024",
            "--work-dir",
            str(work),
            "--queue",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, MEZZO_QUEUE=str(socket_path)),
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline().strip() for _ in range(2)]
        assert lines[0].startswith("mezzo local: TLS on, throw-away certificates")
        assert lines[1] == f"mezzo local: batch queue at {socket_path} (mezzo submit, mezzo jobs)"
        client = QueueClient(str(socket_path))

        def registered() -> bool:
            try:
                return bool(client.get("/health")["queue"]["registered"])
            except Exception:
                return False

        wait_for(registered, 30, "the queue of mezzo local to register")
        out = tmp_path / "out"
        r = mezzo_cli("submit", "--queue", str(socket_path), "--cpus", "3", "--", f"echo hi > {out}")
        assert "no agent has 3 cpus (the largest has 2 cpus, 1024 mem)" in r.stderr  # /overview over TLS
        assert mezzo_cli("cancel", "--queue", str(socket_path), "1").returncode == 0
        r = mezzo_cli(
            "submit", "--queue", str(socket_path), "--cpus", "0.5", "--mem", "64", "--", f"echo hi > {out}"
        )
        assert r.returncode == 0 and r.stdout.strip() == "submitted job 2", (r.stdout, r.stderr)
        wait_for(lambda: client.get("/jobs/2")["state"] == "FINISHED", 30, "the job to finish")
        assert out.read_text() == "hi\n"
        assert (work / "queue" / "jobs.journal").exists()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)
