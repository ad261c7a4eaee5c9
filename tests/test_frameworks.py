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
