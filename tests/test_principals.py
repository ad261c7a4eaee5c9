"""Frameworks and agents belong to the principal that registered them (issue 15).

A real TLS cluster (master and agent subprocesses, a certificate each) and an
attacker holding a certificate of the same CA but its own name ("intruder"), written
as the probe wrote it: a raw Thrift client (:class:`mezzo.testing.RawPeer` over TLS).
Before, it could take over a framework by re-registering with its id (the real
scheduler was told "framework failed over to another scheduler") and take over an
agent with ``reregister_agent`` and an empty task list (its running tasks were
marked lost). Now each is refused with an error to the attacker and an audit line at
the master, and the victim goes on as if nothing happened; the rightful principal
still fails over.
"""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

import mezzo
from mezzo import AgentInfo, FrameworkInfo, Resources
from mezzo.acls import single_tenant
from mezzo.services import AGENT, EXECUTOR, SCHEDULER
from mezzo.testing import RawPeer, wait_for
from mezzo.wire.ttypes import RunningTask

from .test_custom_executor import UsesExecutor


class Registers(mezzo.Scheduler):
    def __init__(self) -> None:
        self.up = threading.Event()
        self.errors: list[str] = []

    def registered(self, driver, framework_id, master):
        self.up.set()

    def reregistered(self, driver, framework_id, master):
        self.up.set()

    def error(self, driver, message):
        self.errors.append(message)


@pytest.fixture
def cluster(mezzo_cluster):
    # The ACLs let the intruder register agents (of its own): what stops it taking over
    # another principal's agent or framework here is ownership, not the ACLs
    # (tests/test_acls.py has those).
    acls = single_tenant(agents=["agent", "intruder"], operators=["operator"])
    return mezzo_cluster(agents=1, tls=True, master={"allocation_interval": 0.01, "acls": acls})


def audit_lines(cluster) -> list[str]:
    lines = (cluster.dir / "master.log").read_text().splitlines()
    return [line for line in lines if "component=audit" in line]


def test_another_principal_cannot_take_over_a_framework_but_its_own_can_fail_it_over(cluster) -> None:
    victim = Registers()
    driver = mezzo.SchedulerDriver(
        victim,
        FrameworkInfo(name="victim", failover_timeout=60),
        cluster.master,
        tls=cluster.client_tls("fw-1"),
    )
    driver.start()
    try:
        assert victim.up.wait(20)
        fid = driver.framework_id
        attacker = RawPeer(cluster.master, SCHEDULER, tls=cluster.client_tls("intruder"), timeout=10)
        attacker.send("register_framework", FrameworkInfo(name="mine now", framework_id=fid))
        with pytest.raises(RuntimeError, match=f"framework {fid} belongs to another principal than intruder"):
            attacker.expect("reregistered")
        attacker.close()
        wait_for(lambda: audit_lines(cluster), what="the audit line")
        (line,) = audit_lines(cluster)
        assert "action=register_framework" in line and "principal=intruder" in line and fid in line
        # The victim was not failed over: still registered, no error, still its framework.
        state = cluster.state()
        assert [f["id"] for f in state["frameworks"]] == [fid]
        assert victim.errors == [] and driver.connected
    finally:
        driver.abort()
        driver.join()
    # Its own principal, from a new scheduler process, takes it over as failover allows.
    again = Registers()
    successor = mezzo.SchedulerDriver(
        again,
        FrameworkInfo(name="victim", framework_id=fid, failover_timeout=60),
        cluster.master,
        tls=cluster.client_tls("fw-1"),
    )
    successor.start()
    try:
        assert again.up.wait(20) and again.errors == []
        assert successor.framework_id == fid
    finally:
        successor.stop()
        successor.join()


def test_another_principal_cannot_take_over_an_agent_and_lose_its_tasks(cluster) -> None:
    sched = UsesExecutor(1, data=b"hold")  # its task runs until killed
    driver = mezzo.SchedulerDriver(
        sched, FrameworkInfo(name="holder"), cluster.master, tls=cluster.client_tls("fw-1")
    )
    driver.start()
    try:
        wait_for(
            lambda: any(s.state == mezzo.TaskState.TASK_RUNNING for s in sched.statuses), 30, "a running task"
        )
        (agent,) = cluster.state()["agents"]
        attacker = RawPeer(cluster.master, AGENT, tls=cluster.client_tls("intruder"), timeout=10)
        info = AgentInfo(
            agent_id=agent["id"], hostname="evil", port=5051, resources=Resources(cpus=4, mem=4096)
        )
        attacker.send("reregister_agent", info, [], [], [])
        with pytest.raises(
            RuntimeError, match=f"agent {agent['id']} belongs to another principal than intruder"
        ):
            attacker.expect("reregistered")
        attacker.close()
        wait_for(lambda: audit_lines(cluster), what="the audit line")
        assert "action=reregister_agent" in audit_lines(cluster)[0]
        state = cluster.state()
        (after,) = state["agents"]
        assert after["connected"] and after["hostname"] == agent["hostname"]
        assert [t["state"] for t in state["tasks"]] == ["TASK_RUNNING"]
        assert not any(mezzo.is_terminal(s.state) for s in sched.statuses)
    finally:
        driver.stop()
        driver.join()


def test_an_agent_cannot_report_on_another_agents_task_or_speak_for_its_executor(cluster) -> None:
    """The probe registered an agent of its own and sent a victim framework TASK_FINISHED
    for a task running elsewhere, and framework messages in its executor's name; the
    scheduler believed both. Now an agent may report only on the tasks and executors
    the master placed on it: the intruder's agent is registered (its principal may
    register agents), but its forgeries are refused, audited, and never reach the
    scheduler."""
    sched = UsesExecutor(1, data=b"hold")  # its task runs until killed
    driver = mezzo.SchedulerDriver(
        sched, FrameworkInfo(name="victim"), cluster.master, tls=cluster.client_tls("fw-1")
    )
    driver.start()
    try:
        wait_for(
            lambda: any(s.state == mezzo.TaskState.TASK_RUNNING for s in sched.statuses), 30, "a running task"
        )
        fid = driver.framework_id
        (victim_task,) = cluster.state()["tasks"]
        attacker = RawPeer(cluster.master, AGENT, tls=cluster.client_tls("intruder"), timeout=10)
        attacker.send(
            "register_agent", AgentInfo(hostname="evil", port=5051, resources=Resources(cpus=1, mem=64))
        )
        (own_id,) = attacker.expect("registered")
        forged = mezzo.TaskStatus(
            task_id=victim_task["id"],
            state=mezzo.TaskState.TASK_FINISHED,
            framework_id=fid,
            agent_id=own_id,
            uuid="forged-1",
            message="all done (not really)",
        )
        attacker.send("status_update", forged)
        attacker.send("executor_to_framework", own_id, fid, "echo", b"believe me")
        # The master acknowledges the refused update, so the forger has nothing to resend.
        assert attacker.expect("status_update_acknowledged") == (fid, victim_task["id"], "forged-1")
        wait_for(lambda: len(audit_lines(cluster)) >= 2, what="two audit lines")
        actions = sorted(line.split("action=")[1].split()[0] for line in audit_lines(cluster))
        assert actions == ["executor_to_framework", "status_update"]
        attacker.close()
        state = cluster.state()
        assert [t["state"] for t in state["tasks"]] == ["TASK_RUNNING"]
        assert not any(mezzo.is_terminal(s.state) for s in sched.statuses)
        assert sched.messages == []
    finally:
        driver.stop()
        driver.join()


def test_a_principal_not_allowed_agents_cannot_charge_a_framework_for_made_up_tasks(mezzo_cluster) -> None:
    """The probe re-registered a made-up agent reporting a task of 1,000,000 cpus for a
    victim framework, so that DRF charged the victim and starved it. Now re-registering
    is registering: the register_agents ACL (here: principal "agent" only) refuses
    anyone else, before the report is read."""
    cluster = mezzo_cluster(agents=1, tls=True, master={"allocation_interval": 0.01})
    victim = Registers()
    driver = mezzo.SchedulerDriver(
        victim, FrameworkInfo(name="victim"), cluster.master, tls=cluster.client_tls("fw-1")
    )
    driver.start()
    try:
        assert victim.up.wait(20)
        fid = driver.framework_id
        attacker = RawPeer(cluster.master, AGENT, tls=cluster.client_tls("intruder"), timeout=10)
        huge = Resources(cpus=1_000_000, mem=1_000_000)
        info = AgentInfo(agent_id="made-up-S9", hostname="evil", port=5051, resources=huge)
        fake = RunningTask(
            framework_id=fid,
            task=mezzo.TaskInfo(
                task_id="fake", agent_id="made-up-S9", resources=huge, command=mezzo.CommandInfo(value="true")
            ),
        )
        attacker.send("reregister_agent", info, [fake], [], [FrameworkInfo(name="victim", framework_id=fid)])
        with pytest.raises(RuntimeError, match="principal intruder may not register agents"):
            attacker.expect("reregistered")
        attacker.close()
        state = cluster.state()
        assert [a["hostname"] for a in state["agents"]] != ["evil"] and len(state["agents"]) == 1
        (framework,) = state["frameworks"]
        # Charged nothing: no task of it anywhere (its share is what it was offered).
        assert framework["tasks"] == 0 and not any(framework["used"].values()) and state["tasks"] == []
        assert any("action=reregister_agent" in line for line in audit_lines(cluster))
    finally:
        driver.stop()
        driver.join()


def test_a_process_without_the_executors_token_cannot_register_as_it(cluster) -> None:
    """The probe registered at the agent's port as a task's executor before the real one
    started, and was handed its task. Now the agent gives the process it starts a token
    (MEZZO_EXECUTOR_TOKEN); a registration without it is told to shut down, and the real
    executor, when it comes, gets the task."""
    sched = UsesExecutor(1)
    # The real executor starts 3 s late, leaving the impostor all the time it needs.
    sched.executor.command.value = f"sleep 3; exec {sched.executor.command.value}"
    driver = mezzo.SchedulerDriver(
        sched, FrameworkInfo(name="late"), cluster.master, tls=cluster.client_tls("fw-1")
    )
    driver.start()
    try:
        state = wait_for(lambda: (s := cluster.state())["tasks"] and s, 20, "the task staged")
        (agent,) = state["agents"]
        fid = driver.framework_id
        ca_only = mezzo.TlsConfig(enabled=True, ca=cluster.tls.ca)  # executors have no certificate
        impostor = RawPeer(f"127.0.0.1:{agent['port']}", EXECUTOR, tls=ca_only, timeout=10)
        impostor.send_frame(AGENT.encode("register_executor", (fid, "echo", "a-guess"), {}))
        impostor.expect("shutdown")
        assert [name for name, _ in impostor.received] == []  # no task came its way
        impostor.close()
        assert sched.done.wait(30), f"statuses: {[mezzo.state_name(s.state) for s in sched.statuses]}"
        log = (cluster.dir / "agent-1.log").read_text()
        assert "refusing executor registration: wrong token" in log
    finally:
        driver.stop()
        driver.join()


def test_a_task_inherits_only_the_allowed_part_of_the_agents_environment(mezzo_cluster, monkeypatch) -> None:
    """The probe read the agent's whole environment from inside a task. Now a task gets
    the variables named in ``agent.inherited_environment`` (PATH and the locale by
    default), its command's own, and mezzo's."""
    monkeypatch.setenv("AGENT_SECRET_TOKEN", "do-not-leak")  # the agents inherit it from here
    script = 'echo "secret=${AGENT_SECRET_TOKEN:-none} path=${PATH:+set}"'

    def run_in(cluster) -> str:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "mezzo",
                "run",
                "--config",
                str(cluster.config_path),
                "--",
                "sh",
                "-c",
                script,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    plain = mezzo_cluster(agents=1, master={"allocation_interval": 0.01})
    assert "secret=none path=set" in run_in(plain)
    allowed = mezzo_cluster(
        agents=1,
        master={"allocation_interval": 0.01},
        agent={"inherited_environment": ["PATH", "AGENT_SECRET_TOKEN"]},
    )
    assert "secret=do-not-leak path=set" in run_in(allowed)
