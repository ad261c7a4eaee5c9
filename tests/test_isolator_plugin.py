"""The example isolator package (examples/isolator-procstat), installed by this test
and run by a real agent: its usage measurements reach `mezzo state`, its limit ends
a task with its reason, and a bad setting stops the agent naming the key.

It is also the end-to-end test of the isolator contract's usage and limitation
hooks, which need no privileges with this isolator.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import mezzo
from mezzo.state_client import fetch_agent_statistics

from .conftest import Recorder, installed_for_daemons, one_task, wait_for

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "isolator-procstat"
NAME = "example/procstat"


@pytest.fixture(scope="module", autouse=True)
def example_installed(tmp_path_factory):
    """The example installed for the daemons of these tests (see installed_for_daemons)."""
    with installed_for_daemons(EXAMPLE, tmp_path_factory.mktemp("site")):
        r = subprocess.run([sys.executable, "-m", "mezzo", "plugins"], capture_output=True, text=True, timeout=60)
        assert NAME in r.stdout, r.stdout + r.stderr
        yield


def test_usage_reaches_the_agent_and_the_master(make_cluster, drivers):
    cluster = make_cluster(1, master={"allocation_interval": 0.01},
                           agent={"isolation": ["posix", NAME], "statistics_interval": 0.2})
    rec = Recorder(one_task(f"{sys.executable} -c 'while True: pass'"))
    driver = drivers(rec, "measured", cluster.master)
    wait_for(lambda: "TASK_RUNNING" in rec.states_of("t"), 15, "the spinner to run")
    (agent,) = cluster.state()["agents"]

    def busy_enough():
        stats = fetch_agent_statistics(f"127.0.0.1:{agent['port']}")
        return stats and stats[0]["statistics"].get("cpu_seconds", 0) >= 0.3 and stats
    (entry,) = wait_for(busy_enough, 15, "half a second of CPU to be measured")
    assert entry["tasks"] == ["t"] and entry["executor_id"] == "t"
    assert entry["statistics"]["mem_rss_bytes"] > 1_000_000 and entry["statistics"]["processes"] >= 1

    reported = wait_for(lambda: cluster.state()["agents"][0]["containers"], 10, "the report to reach the master")
    assert reported[0]["container_id"] == entry["container_id"]
    assert reported[0]["statistics"]["cpu_seconds"] > 0
    driver.kill_task("t")
    wait_for(lambda: rec.final("t"), 15, "the kill")


def test_an_isolators_limit_ends_the_task_with_its_reason(make_cluster, drivers):
    cluster = make_cluster(1, master={"allocation_interval": 0.01}, agent={"isolation": ["posix", NAME]},
                           tables={f'agent.isolators."{NAME}"': {"max_seconds": 1.0}})
    rec = Recorder(one_task("sleep 30"))
    drivers(rec, "limited", cluster.master)
    final = wait_for(lambda: rec.final("t"), 20, "the task to hit its limit")
    assert mezzo.state_name(final.state) == "TASK_FAILED"
    assert final.reason == "time_limit" and "limit of 1 s" in final.message


def test_a_bad_isolator_setting_stops_the_agent_naming_the_key(tmp_path):
    cfg = tmp_path / "agent.toml"
    cfg.write_text(f'[agent]\nisolation = ["posix", "{NAME}"]\nwork_dir = "{tmp_path}/w"\n'
                   f'[agent.isolators."{NAME}"]\nmax_secs = 5\n')
    r = subprocess.run([sys.executable, "-m", "mezzo", "agent", "--config", str(cfg)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2
    assert f"agent.isolators.{NAME}.max_secs: unknown setting" in r.stderr
