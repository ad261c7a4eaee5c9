"""Framework life cycle through the real master: removal on disconnect, refusal of a
removed framework's id, failover within failover_timeout, and the README example."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import mezzo
from mezzo import CommandInfo, Filters, FrameworkInfo, Resources, TaskInfo

from .conftest import Recorder, wait_for

ROOT = Path(__file__).resolve().parents[1]


def _launch_one(task_id):
    launched = []

    def on_offers(driver, offers):
        for o in offers:
            if launched:
                driver.decline_offer(o.offer_id, Filters(refuse_seconds=60))
                continue
            launched.append(o.agent_id)
            driver.launch_tasks(o.offer_id, [TaskInfo(task_id=task_id, agent_id=o.agent_id,
                                                      resources=Resources(cpus=0.5, mem=32),
                                                      command=CommandInfo(value="sleep 60"))],
                                Filters(refuse_seconds=0))
    return on_offers


def test_removed_framework_cannot_come_back_under_its_id(make_cluster, drivers):
    cluster = make_cluster(1, master={"allocation_interval": 0.01})
    first = Recorder(_launch_one("t"))
    d1 = drivers(first, "short-lived", cluster.master)
    wait_for(lambda: "TASK_RUNNING" in first.states_of("t"), 15, "the task to run")
    fid = first.framework_id
    d1.stop(failover=True)  # disconnect without unregistering; failover_timeout is 0
    wait_for(lambda: cluster.state()["frameworks"] == [], 10, "the framework's removal")
    assert cluster.state()["tasks"] == []
    wait_for(lambda: cluster.state()["agents"][0]["used"] == {}, 10, "the task's resources to come back")

    second = Recorder()
    d2 = mezzo.SchedulerDriver(second, FrameworkInfo(name="short-lived", framework_id=fid), cluster.master)
    d2.start()
    try:
        wait_for(lambda: second.errors, 10, "the master's refusal")
        assert fid in second.errors[0] and "was removed" in second.errors[0]
        assert d2.status == mezzo.DriverStatus.ABORTED
    finally:
        d2.stop()


def test_scheduler_failover_within_failover_timeout_keeps_the_tasks(make_cluster, drivers):
    cluster = make_cluster(1, master={"allocation_interval": 0.01})
    first = Recorder(_launch_one("kept"))
    d1 = drivers(first, "failing-over", cluster.master, failover_timeout=30.0)
    wait_for(lambda: "TASK_RUNNING" in first.states_of("kept"), 15, "the task to run")
    fid = first.framework_id
    d1.stop(failover=True)
    time.sleep(0.3)
    (fw,) = cluster.state()["frameworks"]
    assert fw["connected"] is False and fw["tasks"] == 1

    second = Recorder()
    drivers(second, "failing-over", cluster.master, framework_id=fid, failover_timeout=30.0)
    wait_for(second.reregistered_event.is_set, 10, "the new scheduler to take over")
    (fw,) = cluster.state()["frameworks"]
    assert fw["id"] == fid and fw["connected"] is True and fw["tasks"] == 1


def test_a_second_scheduler_takes_over_and_the_first_is_told(make_cluster, drivers):
    cluster = make_cluster(1, master={"allocation_interval": 0.01})
    first = Recorder(_launch_one("kept"))
    d1 = drivers(first, "replaced", cluster.master, failover_timeout=30.0)
    wait_for(lambda: "TASK_RUNNING" in first.states_of("kept"), 15, "the task to run")
    fid = first.framework_id

    second = Recorder()
    drivers(second, "replaced", cluster.master, framework_id=fid, failover_timeout=30.0)
    wait_for(second.reregistered_event.is_set, 10, "the new scheduler to take over")
    wait_for(lambda: first.errors, 10, "the first scheduler to hear it was replaced")
    assert "failed over to another scheduler" in first.errors[0]
    assert d1.status == mezzo.DriverStatus.ABORTED
    (fw,) = cluster.state()["frameworks"]
    assert fw["id"] == fid and fw["connected"] is True and fw["tasks"] == 1
    assert first.final("kept") is None  # the take-over ended nothing


def test_tasks_are_killed_when_the_failover_timeout_passes(make_cluster, drivers, tmp_path):
    cluster = make_cluster(1, master={"allocation_interval": 0.01})
    pidfile = tmp_path / "pid"
    launched = []

    def launch(driver, offers):
        for o in offers:
            if launched:
                driver.decline_offer(o.offer_id, Filters(refuse_seconds=60))
                continue
            launched.append(o.agent_id)
            driver.launch_tasks(o.offer_id, [TaskInfo(
                task_id="orphan", agent_id=o.agent_id, resources=Resources(cpus=0.5, mem=32),
                command=CommandInfo(value=f"echo $$ > {pidfile}; exec sleep 60"))], Filters(refuse_seconds=0))

    rec = Recorder(launch)
    d = drivers(rec, "gone-for-good", cluster.master, failover_timeout=1.0)
    wait_for(lambda: "TASK_RUNNING" in rec.states_of("orphan") and pidfile.exists()
             and pidfile.read_text().strip(), 15, "the task to run")
    pid = int(pidfile.read_text())
    d.stop(failover=True)
    gone_at = time.monotonic()
    time.sleep(0.5)
    assert [f["tasks"] for f in cluster.state()["frameworks"]] == [1]  # still within the timeout
    wait_for(lambda: cluster.state()["frameworks"] == [], 10, "the framework's removal")
    assert time.monotonic() - gone_at >= 1.0
    state = cluster.state()
    assert state["tasks"] == [] and state["completed_tasks"][-1]["state"] == "TASK_KILLED"
    wait_for(lambda: cluster.state()["agents"][0]["used"] == {}, 10, "the resources to be recovered")
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), 10, "the task's process to be killed")


def test_readme_example_runs(make_cluster):
    cluster = make_cluster(3, master={"allocation_interval": 0.01})
    readme = (ROOT / "README.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", readme, re.S)
    code = code.replace('"127.0.0.1:5050"', f'"{cluster.master}"')
    script = textwrap.dedent(code) + "\nprint('example done')\n"
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "example done" in r.stdout
    done = cluster.state()["completed_tasks"]
    assert [(t["id"], t["state"]) for t in done] == [("hello", "TASK_FINISHED")]
