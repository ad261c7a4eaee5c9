"""pymesos 0.3.15, unmodified, runs a framework on mezzo: by host:port, by zk://, and
through a master failover.

The framework (:mod:`.pymesos_framework`) runs in a process of its own, as it would
in production, and logs its callbacks; these tests read that log and the master's
state. pymesos is installed by ``make setup`` (``tests/v1/install_pymesos.py``).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from mezzo.testing import LocalProcessCluster, wait_for

pytest.importorskip("pymesos", reason="pymesos is installed by make setup (tests/v1/install_pymesos.py)")

FRAMEWORK = Path(__file__).with_name("pymesos_framework.py")
FAST = {"allocation_interval": 0.02, "http": {"event_heartbeat": 1.0}}


class Workload:
    """The pymesos framework as a subprocess, and what its log says."""

    def __init__(self, master: str, directory: Path, **settings) -> None:
        self.log_path = directory / "pymesos.jsonl"
        self.log_path.write_text("")
        self.process = subprocess.Popen(
            [sys.executable, str(FRAMEWORK), master, str(self.log_path), json.dumps(settings)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def lines(self) -> list[dict]:
        return [json.loads(line) for line in self.log_path.read_text().splitlines() if line.strip()]

    def callbacks(self, name: str) -> list[dict]:
        return [line for line in self.lines() if line["cb"] == name]

    def wait(self, timeout: float = 60) -> str:
        try:
            output, _ = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            output, _ = self.process.communicate()
            raise AssertionError(f"the pymesos framework did not finish: {self.lines()[-20:]}\n{output}") from None
        return output

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()

    def ends(self) -> dict[str, list[str]]:
        """Each task's terminal states, in order (each should have exactly one)."""
        ends: dict[str, list[str]] = defaultdict(list)
        for update in self.callbacks("update"):
            if update["reason"] == "REASON_RECONCILIATION":
                continue
            if update["state"] in ("TASK_FINISHED", "TASK_FAILED", "TASK_KILLED", "TASK_LOST", "TASK_ERROR"):
                if update["state"] not in ends[update["task"]]:
                    ends[update["task"]].append(update["state"])
        return dict(ends)


@pytest.fixture
def workload(tmp_path):
    made: list[Workload] = []

    def start(master: str, **settings) -> Workload:
        w = Workload(master, tmp_path, **settings)
        made.append(w)
        return w

    yield start
    for w in made:
        w.kill()


def check_the_whole_workload(w: Workload, cluster: LocalProcessCluster) -> None:
    output = w.wait()
    assert w.process.returncode == 0, output
    assert len(w.callbacks("registered")) == 1
    assert not w.callbacks("error"), w.callbacks("error")
    ends = w.ends()
    assert ends == {
        "w1-t0": ["TASK_KILLED"],
        "w1-t1": ["TASK_FINISHED"],
        "w1-t2": ["TASK_FINISHED"],
        "w2-t0": ["TASK_FINISHED"],
        "w2-t1": ["TASK_FINISHED"],
    }
    names = [line["cb"] for line in w.lines()]
    # Suppressed once the first wave was out, revived for the second.
    assert names.index("suppress") < names.index("revive") < max(
        i for i, line in enumerate(w.lines()) if line["cb"] == "launch"
    )
    from_agents = [u for u in w.callbacks("update") if u["source"] in ("SOURCE_AGENT", "SOURCE_EXECUTOR")]
    assert from_agents and all(u["has_uuid"] for u in from_agents)
    answers = [u for u in w.callbacks("update") if u["reason"] == "REASON_RECONCILIATION"]
    assert answers and not any(u["has_uuid"] for u in answers)
    assert answers[0]["task"] == "w1-t0" and answers[0]["state"] == "TASK_KILLED"
    # stop() tore the framework down (no failover): the master forgot it.
    wait_for(lambda: not cluster.state()["frameworks"], timeout=10)


@pytest.mark.parametrize("implicit_acks", [True, False], ids=["implicit-acks", "explicit-acks"])
def test_a_pymesos_framework_runs_by_host_and_port(mezzo_cluster, workload, implicit_acks) -> None:
    cluster = mezzo_cluster(agents=2, master=FAST)
    w = workload(cluster.master, kill="w1-t0", implicit_acks=implicit_acks)
    check_the_whole_workload(w, cluster)
    # Acknowledged (implicitly by pymesos, or explicitly by the framework): no update came twice.
    seen = [(u["task"], u["state"]) for u in w.callbacks("update") if u["has_uuid"]]
    assert len(seen) == len(set(seen))


@pytest.fixture
def ha_cluster(mezzo_zookeeper, mezzo_cluster):
    def make(agents: int = 2, masters: int = 2) -> LocalProcessCluster:
        master = {**FAST, "zk_session_timeout": 2.0, "recovery_hold_timeout": 5.0}
        return mezzo_cluster(
            agents,
            masters=masters,
            zk=mezzo_zookeeper.url("/mezzo"),
            master=master,
            agent={"reconnect_interval": 0.1},
        )

    return make


def test_a_pymesos_framework_finds_the_leader_through_zookeeper(ha_cluster, workload) -> None:
    cluster = ha_cluster()
    assert cluster.master.startswith("zk://")
    w = workload(cluster.master, kill="w1-t0")
    check_the_whole_workload(w, cluster)


def test_a_pymesos_framework_survives_a_master_failover(ha_cluster, workload) -> None:
    cluster = ha_cluster()
    w = workload(cluster.master, waves=[4], command="sleep 4", failover_timeout=120)
    wait_for(lambda: sum(u["state"] == "TASK_RUNNING" for u in w.callbacks("update")) >= 4, timeout=30)
    old = cluster.leader()
    cluster.kill(old, signal.SIGKILL)
    output = w.wait(timeout=90)  # a framework that never recovers fails here
    assert w.process.returncode == 0, output
    assert w.callbacks("reregistered"), [line["cb"] for line in w.lines()]
    # Every task ended exactly once, as it did on its agent: nothing lost, nothing doubled.
    assert w.ends() == {f"w1-t{i}": ["TASK_FINISHED"] for i in range(4)}
