"""``mezzo teardown``: an operator ends a framework, as the teardown_frameworks ACL allows.

A real TLS cluster (master and agent subprocesses) and the real command line, with a
certificate per principal: the operator (whom the harness's ACLs allow to tear down any
framework) ends a framework that has a task running, whose scheduler hears why and whose
task is killed; a framework's own principal, which those ACLs do not allow, is refused
with one line naming the key, exit 2, and an audit line, and the framework runs on.
"""

from __future__ import annotations

import subprocess
import sys

import mezzo
from mezzo import CommandInfo, Filters, FrameworkInfo, Resources, TaskInfo
from mezzo.certs import tls_toml
from mezzo.testing import wait_for

from .conftest import Recorder


def teardown_cli(cluster, principal: str, framework_id: str, tmp_path) -> subprocess.CompletedProcess:
    config = tmp_path / f"{principal}.toml"
    config.write_text(tls_toml(cluster.client_tls(principal)))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mezzo",
            "teardown",
            framework_id,
            "--master",
            cluster.master,
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_an_operator_tears_a_framework_down_and_no_one_else_may(mezzo_cluster, tmp_path) -> None:
    cluster = mezzo_cluster(agents=1, tls=True, master={"allocation_interval": 0.01})
    launched: list[str] = []

    def launch_once(driver, offers):
        for offer in offers:
            if launched:
                driver.decline_offer(offer.offer_id, Filters(refuse_seconds=60))
                continue
            launched.append(offer.agent_id)
            task = TaskInfo(
                task_id="long",
                agent_id=offer.agent_id,
                resources=Resources(cpus=0.5, mem=32),
                command=CommandInfo(value="sleep 300"),
            )
            driver.launch_tasks(offer.offer_id, [task], Filters(refuse_seconds=0))

    sched = Recorder(launch_once)
    driver = mezzo.SchedulerDriver(
        sched, FrameworkInfo(name="victim"), cluster.master, tls=cluster.client_tls("fw-1")
    )
    driver.start()
    try:
        wait_for(lambda: "TASK_RUNNING" in sched.states_of("long"), 30, "the task to run")
        fid = driver.framework_id

        refused = teardown_cli(cluster, "fw-1", fid, tmp_path)
        assert refused.returncode == 1, refused  # refused by the ACLs: not a command-line mistake
        assert refused.stderr.strip().splitlines() == [
            f"mezzo teardown: teardown_framework: principal fw-1 may not tear down framework {fid} "
            "(master.acls.teardown_frameworks)"
        ]
        audit = [
            line
            for line in (cluster.dir / "master.log").read_text().splitlines()
            if "component=audit" in line
        ]
        assert len(audit) == 1 and "action=teardown_framework" in audit[0] and "principal=fw-1" in audit[0]
        assert [f["id"] for f in cluster.state()["frameworks"]] == [fid]

        # Nor may it learn which ids exist: an unknown one gets the same refusal.
        probing = teardown_cli(cluster, "fw-1", "no-such-framework", tmp_path)
        assert probing.returncode == 1 and "may not tear down framework no-such-framework" in probing.stderr

        unknown = teardown_cli(cluster, "operator", "no-such-framework", tmp_path)
        assert unknown.returncode == 1 and "no framework 'no-such-framework' is registered" in unknown.stderr

        done = teardown_cli(cluster, "operator", fid, tmp_path)
        assert done.returncode == 0, done
        assert done.stdout.strip() == f"framework {fid} torn down; 1 task(s) killed"
        wait_for(lambda: sched.errors, 20, "the scheduler to hear why")
        assert sched.errors == [f"framework {fid} was torn down by operator"]
        state = cluster.state()
        assert state["frameworks"] == [] and state["tasks"] == []
        assert [t["state"] for t in state["completed_tasks"]] == ["TASK_KILLED"]
        # The agent killed the task's process: nothing of it is left running there.
        wait_for(lambda: cluster.state()["agents"][0]["tasks"] == 0, 20, "the agent to free the task")
    finally:
        driver.abort()
        driver.join()
