"""The `mezzo` command: help for every sub-command, config errors naming the key,
`plugins`, `state`, and `run` end to end against a real cluster."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .conftest import one_line_error

SUBCOMMANDS = ["master", "agent", "local", "run", "state", "plugins", "ps", "task", "logs", "kill",
               "agents", "frameworks", "drain", "undrain", "queue", "submit", "jobs", "cancel"]


def mezzo(*args, timeout=60, **kw):
    return subprocess.run([sys.executable, "-m", "mezzo", *args], capture_output=True, text=True,
                          timeout=timeout, **kw)


@pytest.mark.parametrize("cmd", SUBCOMMANDS)
def test_help(cmd):
    r = mezzo(cmd, "--help")
    assert r.returncode == 0
    assert "--config" in r.stdout
    assert r.stdout.count("--") >= 3


def test_top_level_help_lists_every_command():
    r = mezzo("--help")
    assert r.returncode == 0
    for cmd in SUBCOMMANDS:
        assert cmd in r.stdout


def test_bad_toml_key_is_named(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[master]\noffer_timout = 3\n")
    r = mezzo("master", "--config", str(cfg), timeout=20)
    assert r.returncode == 2
    assert "master.offer_timout: unknown key" in r.stderr


def test_missing_allocator_names_installed_ones_and_the_package(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[master]\nlisten = "127.0.0.1:0"\n[master.allocator]\nname = "fair"\n')
    r = mezzo("master", "--config", str(cfg), timeout=20)
    assert r.returncode == 2
    assert "master.allocator.name" in r.stderr and "'fair' is not installed" in r.stderr
    assert "drf" in r.stderr and "strict-priority" in r.stderr


def test_plugins_lists_allocators_and_builtins():
    r = mezzo("plugins", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    components = {(c["kind"], c["name"]): row["distribution"] for row in rows for c in row["components"]}
    assert components[("allocator", "drf")].startswith("mezzo-allocator-drf")
    assert components[("allocator", "strict-priority")].startswith("mezzo-allocator-priority")
    assert ("isolator", "posix") in components
    assert ("offer_filter", "agents") in components and ("offer_filter", "min-free") in components


def test_state_of_an_unreachable_master_is_a_clear_error():
    from mezzo.testing import free_port

    r = mezzo("state", "--master", f"127.0.0.1:{free_port()}", "--timeout", "2", timeout=20)
    assert r.returncode == 1  # not a mistake on the command line (exit 2 is for those)
    assert "cannot reach the master" in r.stderr


def test_run_shows_states_and_output_and_exit_code(make_cluster):
    cluster = make_cluster(1, master={"allocation_interval": 0.01})
    ok = mezzo("run", "--master", cluster.master, "--cpus", "0.5", "--mem", "32", "--",
               "sh", "-c", "echo out-line; echo err-line >&2")
    assert ok.returncode == 0, ok.stderr
    assert "TASK_RUNNING" in ok.stderr and "TASK_FINISHED" in ok.stderr
    assert "out-line" in ok.stdout
    bad = mezzo("run", "--master", cluster.master, "--", "sh", "-c", "exit 7")
    assert bad.returncode == 7
    assert "TASK_FAILED" in bad.stderr


@pytest.fixture(scope="module")
def two_agents(tmp_path_factory):
    """A cluster of two agents shared by the tests that only ask for its state and
    counters (no framework, no task; the counters they check count from the start)."""
    from mezzo.testing import LocalProcessCluster

    directory = str(tmp_path_factory.mktemp("two-agents"))
    with LocalProcessCluster(2, master={"allocation_interval": 0.01}, directory=directory) as cluster:
        yield cluster


def test_state_prints_the_cluster(two_agents):
    cluster = two_agents
    r = mezzo("state", "--master", cluster.master)
    assert r.returncode == 0, r.stderr
    state = json.loads(r.stdout)
    assert len(state["agents"]) == 2
    assert {"master", "agents", "frameworks", "tasks", "offers"} <= set(state)


def test_settings_for_a_component_that_does_not_exist_are_an_error(tmp_path):
    cfg = tmp_path / "typo.toml"
    cfg.write_text('[master]\nlisten = "127.0.0.1:0"\n[master.allocator.dfr]\nroles = { a = 2.0 }\n')
    r = mezzo("master", "--config", str(cfg), timeout=20)
    assert r.returncode == 2
    assert "master.allocator.dfr: settings for allocator 'dfr'" in r.stderr


METRIC_KEYS = {"messages_received", "messages_sent", "agents", "frameworks", "tasks_running",
               "cpu_seconds", "rss_bytes"}


def test_state_metrics_prints_the_master_counters(two_agents):
    cluster = two_agents
    r = mezzo("state", "--metrics", "--master", cluster.master, timeout=20)
    assert r.returncode == 0, r.stderr
    metrics = json.loads(r.stdout)
    assert METRIC_KEYS <= set(metrics), sorted(metrics)
    assert "agents" in metrics and not isinstance(metrics["agents"], list)  # counters, not the state
    assert metrics["agents"] == 2 and metrics["agents_connected"] == 2
    assert metrics["leading"] is True and metrics["recovering"] is False
    assert metrics["frameworks"] == 0 and metrics["tasks_running"] == 0
    # At least both registrations and this request came in; the registrations were answered.
    assert metrics["messages_received"] >= 3
    assert metrics["messages_sent"] >= 2
    assert metrics["cpu_seconds"] > 0
    assert 1 << 20 < metrics["rss_bytes"] < 1 << 32
    # The collection at start-up (heap.tune_gc) is not counted; the counters are there.
    assert set(metrics["gc"]) == {
        *(f"gen{g}_{what}" for g in range(3) for what in ("collections", "seconds")),
        "max_pause_seconds",
    }


def test_fetch_metrics_counts_the_traffic_between_two_calls(make_cluster, drivers):
    from mezzo.state_client import fetch_metrics

    from .conftest import Recorder, wait_for

    cluster = make_cluster(1, master={"allocation_interval": 0.01})
    before = fetch_metrics(cluster.master)
    assert before["agents"] == 1 and before["frameworks"] == 0
    sched = Recorder()  # keeps its offers
    drivers(sched, "metered", cluster.master)
    assert sched.registered_event.wait(10)
    wait_for(lambda: len(sched.offers) >= 1, 10, "an offer")
    after = fetch_metrics(cluster.master)
    assert after["frameworks"] == 1
    # In: the registration and our second request; out: our first answer, registered, an offer.
    assert after["messages_received"] >= before["messages_received"] + 2
    assert after["messages_sent"] >= before["messages_sent"] + 3
    assert after["offers_made"] >= before["offers_made"] + 1
    assert after["offers_outstanding"] >= 1
    assert after["allocation_cycles"] > before["allocation_cycles"]
    assert after["uptime_seconds"] >= before["uptime_seconds"]
    assert after["cpu_seconds"] >= before["cpu_seconds"]
    # The counters keep counting: asking again is traffic too.
    again = fetch_metrics(cluster.master)
    assert again["messages_received"] > after["messages_received"]
    assert again["messages_sent"] > after["messages_sent"]


def test_the_master_and_the_agent_log_a_line_when_a_task_ends(make_cluster):
    from mezzo.testing import wait_for

    cluster = make_cluster(1, master={"allocation_interval": 0.01})
    r = mezzo("run", "--master", cluster.master, "--cpus", "0.5", "--mem", "32", "--", "sh", "-c", "exit 3")
    assert r.returncode == 3, r.stderr

    def ended_line(name):
        lines = [line for line in (cluster.dir / f"{name}.log").read_text().splitlines() if "task ended" in line]
        return lines[0] if lines else ""

    wait_for(lambda: ended_line("master") and ended_line("agent-1"), 10, "both task-end lines")
    for name in ("master", "agent-1"):
        line = ended_line(name)
        assert "state=TASK_FAILED" in line and "exit_code=3" in line and "framework=" in line, line
        assert "seconds=" in line and "task=mezzo-run" in line, line


# -- mezzo run never waits silently; user mistakes are one line -----------------------------


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.mark.parametrize(("flag", "value"), [("--cpus", "-1"), ("--cpus", "nan"), ("--mem", "-5"),
                                             ("--cpus", "inf"), ("--cpus", "1e308"), ("--mem", "2e15"),
                                             ("--timeout", "soon")])
def test_run_with_a_bad_amount_is_one_line_naming_the_flag(flag, value):
    r = mezzo("run", flag, value, "--", "true", timeout=20)
    assert r.returncode == 2
    assert f"argument {flag}" in one_line(r.stderr)


def test_a_daemon_whose_port_is_taken_says_so_in_one_line():
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = "127.0.0.1:%d" % taken.getsockname()[1]
        r = mezzo("master", "--listen", address, timeout=20)
    assert r.returncode == 2
    line = one_line(r.stderr)
    assert f"master.listen: cannot listen on {address}" in line and "in use" in line


def test_run_fails_at_once_when_no_master_listens_or_no_agent_could_hold_the_task(make_cluster):
    import time

    from mezzo.testing import free_port

    started = time.monotonic()
    r = mezzo("run", "--master", f"127.0.0.1:{free_port()}", "--", "true", timeout=20)
    assert r.returncode == 1 and "cannot reach the master" in one_line(r.stderr)
    assert time.monotonic() - started < 5  # a Python start-up and a refused dial, not a retry loop

    cluster = make_cluster(1, agent_resources="cpus:2;mem:512", master={"allocation_interval": 0.01})
    r = mezzo("run", "--master", cluster.master, "--cpus", "64", "--", "echo", "hi", timeout=20)
    assert r.returncode == 1
    assert "no agent offers 64 cpus (the largest has 2 cpus, 512 mem)" in one_line(r.stderr)


def test_run_prints_all_of_a_long_output_and_a_failed_tasks_stderr_and_sandbox(make_cluster):
    cluster = make_cluster(1, master={"allocation_interval": 0.01})
    r = mezzo("run", "--master", cluster.master, "--cpus", "0.5", "--mem", "32", "--", "seq", "1", "100000")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "".join(f"{i}\n" for i in range(1, 100001))  # 588,895 bytes, not a 64 KiB tail

    script = "echo out; for i in $(seq 1 30); do echo err-$i >&2; done; exit 5"
    r = mezzo("run", "--master", cluster.master, "--cpus", "0.5", "--mem", "32", "--", "sh", "-c", script)
    assert r.returncode == 5 and r.stdout == "out\n"
    assert "the last lines of its stderr" in r.stderr
    assert "err-30" in r.stderr and "err-21" in r.stderr and "err-20\n" not in r.stderr
    assert "sandbox: /frameworks/" in r.stderr and "mezzo logs --stderr" in r.stderr


def test_run_says_what_it_waits_for_and_gives_up_when_the_master_is_gone(make_cluster):
    import time

    cluster = make_cluster(1, agent_resources="cpus:1;mem:512", master={"allocation_interval": 0.01})
    hog = subprocess.Popen([sys.executable, "-m", "mezzo", "run", "--master", cluster.master, "--cpus", "1",
                            "--mem", "16", "--lost-master-after", "2", "--", "sleep", "60"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        from mezzo.operator_client import OperatorClient
        from mezzo.testing import wait_for

        with OperatorClient(cluster.master) as api:
            wait_for(lambda: api.get("/tasks", state="TASK_RUNNING")["total"] == 1, 30, "the hog to run")
        # The waiting line comes 3 s in (mezzo.cli.run_task.WAITING_REPORT_SECONDS).
        r = mezzo("run", "--master", cluster.master, "--cpus", "1", "--mem", "16", "--timeout", "4",
                  "--", "true", timeout=30)
        assert r.returncode == 124
        assert "waiting: no agent has 1 cpus, 16 mem free now" in r.stderr
        assert "gave up after 4 s" in r.stderr

        cluster.stop()  # the master goes away under the running hog
        started = time.monotonic()
        _, err = hog.communicate(timeout=60)
    finally:
        hog.kill()
    # Given up once the master was gone for --lost-master-after (not a redial for ever);
    # that is 10 s unless given.
    assert hog.returncode == 1 and "gave up: the master was gone for 2 s" in err
    assert time.monotonic() - started < 20
    from mezzo.cli.main import build_parser

    assert build_parser().parse_args(["run", "--", "true"]).lost_master_after == 10.0


def test_run_says_it_needs_the_http_api_when_the_master_has_it_off(make_cluster):
    # mezzo run is a v1 framework (the master's /api/v1/scheduler): one line, at once.
    cluster = make_cluster(1, master={"allocation_interval": 0.01, "http": {"enabled": False}})
    r = mezzo("run", "--master", cluster.master, "--cpus", "0.5", "--mem", "32", "--", "echo", "hi", timeout=30)
    one_line_error(r, 1, "mezzo run needs the master's HTTP API")
    assert r.stdout == ""


def test_run_of_a_task_longer_than_its_timeouts_keeps_its_stream(make_cluster):
    # The stream is quiet between heartbeats (15 s): reading it must not time out like a
    # call (5 s), which would redial and fail the framework over for nothing.
    cluster = make_cluster(1, master={"allocation_interval": 0.01})
    r = mezzo("run", "--master", cluster.master, "--cpus", "0.5", "--mem", "32", "--", "sh", "-c",
              "sleep 7; echo done", timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "done\n"
    assert "redialling" not in r.stderr and "lost the master" not in r.stderr


def test_run_waiting_on_a_full_cluster_keeps_its_quiet_stream(make_cluster):
    # Nothing is offered while a hog holds the only agent whole: the stream carries no
    # event for longer than the calls' 5 s timeout, and that is not a lost master.
    cluster = make_cluster(1, agent_resources="cpus:1;mem:512", master={"allocation_interval": 0.01})
    hog = subprocess.Popen([sys.executable, "-m", "mezzo", "run", "--master", cluster.master, "--cpus", "1",
                            "--mem", "512", "--", "sleep", "30"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        from mezzo.operator_client import OperatorClient
        from mezzo.testing import wait_for

        with OperatorClient(cluster.master) as api:
            wait_for(lambda: api.get("/tasks", state="TASK_RUNNING")["total"] == 1, 30, "the hog to run")
        r = mezzo("run", "--master", cluster.master, "--cpus", "1", "--mem", "16", "--timeout", "7",
                  "--", "true", timeout=30)
    finally:
        hog.kill()
    assert r.returncode == 124, r.stderr
    assert "gave up after 7 s" in r.stderr
    assert "lost the master" not in r.stderr and "redialling" not in r.stderr
