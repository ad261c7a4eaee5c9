"""The `mezzo` command with ZooKeeper: `--zk` for masters, `zk://` for `state` and `run`."""

from __future__ import annotations

import json
import signal

from mezzo.testing import wait_for

from ..test_cli import mezzo


def test_state_and_run_follow_the_leader_across_a_failover(ha_cluster):
    cluster = ha_cluster(agents=1)
    r = mezzo("state", "--metrics", "--master", cluster.master, timeout=30)
    assert r.returncode == 0, r.stderr
    metrics = json.loads(r.stdout)
    assert metrics["leading"] is True and metrics["agents_connected"] == 1

    r = mezzo("run", "--master", cluster.master, "--cpus", "0.5", "--mem", "32", "--timeout", "30",
              "--", "echo", "through zookeeper", timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "through zookeeper\n"

    old = cluster.leader()
    cluster.kill(old, signal.SIGKILL)
    wait_for(lambda: cluster.leader() != old, 20, "a new leader")
    cluster.wait_for_agents(1)
    r = mezzo("run", "--master", cluster.master, "--cpus", "0.5", "--mem", "32", "--timeout", "30",
              "--", "sh", "-c", "exit 7", timeout=60)
    assert r.returncode == 7, r.stderr


def test_a_running_mezzo_run_rides_out_a_master_failover(ha_cluster):
    # Its framework's failover_timeout is --lost-master-after: the new leader, rebuilt from
    # the agents' reports, hands the task back when the run subscribes again.
    import subprocess
    import sys

    cluster = ha_cluster(agents=1)
    run = subprocess.Popen([sys.executable, "-m", "mezzo", "run", "--master", cluster.master, "--cpus", "0.5",
                            "--mem", "32", "--lost-master-after", "30", "--", "sh", "-c", "sleep 4; echo survived"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        from mezzo.operator_client import OperatorClient

        with OperatorClient(cluster.master) as api:
            wait_for(lambda: api.get("/tasks", state="TASK_RUNNING")["total"] == 1, 30, "the task to run")
        old = cluster.leader()
        cluster.kill(old, signal.SIGKILL)
        out, err = run.communicate(timeout=60)
    finally:
        run.kill()
    assert run.returncode == 0, err
    assert out == "survived\n"
    assert "lost the master; redialling" in err and "the master is back" in err


def test_master_names_a_bad_zk_url_and_an_unreachable_zookeeper(tmp_path):
    r = mezzo("master", "--zk", "zk://127.0.0.1:2181", "--listen", "127.0.0.1:0", timeout=30)
    assert r.returncode == 2
    assert "master.zk" in r.stderr and "a path is required" in r.stderr
    cfg = tmp_path / "m.toml"
    cfg.write_text('[master]\nzk = "zk://127.0.0.1:1/mezzo"\nlisten = "127.0.0.1:0"\nzk_session_timeout = 1.0\n')
    r = mezzo("master", "--config", str(cfg), timeout=60)
    assert r.returncode == 2
    assert "master.zk" in r.stderr and "cannot reach ZooKeeper at 127.0.0.1:1" in r.stderr


def test_agent_and_state_name_a_bad_master_url():
    r = mezzo("agent", "--master", "zk://nohost/mezzo", timeout=30)
    assert r.returncode == 2 and "agent.master" in r.stderr and "is not HOST:PORT" in r.stderr
    r = mezzo("state", "--master", "zk://127.0.0.1:1/mezzo", "--timeout", "1", timeout=30)
    assert r.returncode != 0 and "cannot reach ZooKeeper" in r.stderr
