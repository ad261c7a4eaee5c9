"""The `mezzo` command: help for every sub-command, config errors naming the key,
`plugins`, `state`, and `run` end to end against a real cluster."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SUBCOMMANDS = ["master", "agent", "local", "run", "state", "plugins", "ps", "task", "logs", "kill",
               "agents", "frameworks", "drain", "undrain"]


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


def test_state_prints_the_cluster(make_cluster):
    cluster = make_cluster(2, master={"allocation_interval": 0.01})
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


def test_state_metrics_prints_the_master_counters(make_cluster):
    cluster = make_cluster(2, master={"allocation_interval": 0.01})
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
