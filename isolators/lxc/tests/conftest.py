"""Fixtures for the lxc isolator's tests: a real agent running real LXC containers.

The tests need root and Debian's lxc package (``make setup`` installs it). Where either
is missing they are skipped, saying which; in CI (root, after ``make setup``) they run.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading

import pytest

import mezzo
from mezzo import CommandInfo, Filters, Resources, TaskInfo
from mezzo.testing import LocalProcessCluster
from mezzo_isolator_lxc import cgroups
from mezzo_isolator_lxc.isolator import DEFAULT_LXC_PATH, LOCK_ROOT, NAME_PREFIX


def _why_no_lxc() -> str | None:
    if os.geteuid() != 0:
        return "needs root: LXC containers and their cgroups are made as root (CI runs as root)"
    if shutil.which("lxc-execute") is None:
        return "Debian's lxc package is not installed (`make setup` installs it; or apt-get install lxc)"
    return None


@pytest.fixture
def lxc_host():
    """Skip, stating why, where real LXC containers cannot be run."""
    reason = _why_no_lxc()
    if reason is not None:
        pytest.skip(reason)


def leftovers() -> list[str]:
    """What the isolator's containers could leave behind: cgroups, container
    directories, lxc lock files."""
    found = [f"cgroup of {name}" for name in sorted(cgroups.container_names(prefix=NAME_PREFIX))]
    for directory in (DEFAULT_LXC_PATH, LOCK_ROOT + DEFAULT_LXC_PATH):
        if os.path.isdir(directory):
            found += [
                os.path.join(directory, e)
                for e in sorted(os.listdir(directory))
                if e.lstrip(".").startswith(NAME_PREFIX)
            ]
    found += [
        h + "/" + cgroups.PIVOT for h in cgroups.hierarchies() if os.path.isdir(h + "/" + cgroups.PIVOT)
    ]
    return found


@pytest.fixture
def lxc_cluster(lxc_host, mezzo_cluster):
    """``lxc_cluster(**agent_keys)``: a master and one agent with ``isolation = ["lxc"]``
    (started by mezzo's ``mezzo_cluster`` fixture); stopped at the end of the test,
    which then checks that nothing was left behind."""

    def make(tables=None, **agent) -> LocalProcessCluster:
        keys = {"isolation": ["lxc"], "kill_grace_period": 2.0, "statistics_interval": 0.2, **agent}
        return mezzo_cluster(
            1,
            master={"allocation_interval": 0.01},
            agent=keys,
            tables=tables,
            agent_resources="cpus:2;mem:1024;disk:1000",
        )

    yield make
    mezzo_cluster.stop_all()  # before the check: what a stopped agent left behind counts
    assert leftovers() == [], "the lxc isolator left these behind"


class OneTask(mezzo.Scheduler):
    """Launches one command task ``t`` on the first offer and records its updates."""

    driver: mezzo.SchedulerDriver
    """Its driver, set by ``run_task`` once started."""

    def __init__(self, command: str, cpus: float = 0.5, mem: float = 64) -> None:
        self.command = command
        self.resources = Resources(cpus=cpus, mem=mem)
        self.launched = False
        self.statuses: list = []
        self.lock = threading.Lock()
        self.done = threading.Event()

    def resource_offers(self, driver, offers):
        for offer in offers:
            if self.launched:
                driver.decline_offer(offer.offer_id, Filters(refuse_seconds=60))
                continue
            self.launched = True
            task = TaskInfo(
                task_id="t",
                name="t",
                agent_id=offer.agent_id,
                resources=self.resources,
                command=CommandInfo(value=self.command),
            )
            driver.launch_tasks([offer.offer_id], [task], Filters(refuse_seconds=0))

    def status_update(self, driver, status):
        with self.lock:
            self.statuses.append(status)
        if mezzo.is_terminal(status.state):
            self.done.set()

    def states(self) -> list[str]:
        with self.lock:
            return [mezzo.state_name(s.state) for s in self.statuses]

    def final(self, timeout: float = 30.0):
        assert self.done.wait(timeout), f"no terminal update within {timeout:g} s (got {self.states()})"
        with self.lock:
            return self.statuses[-1]


@pytest.fixture
def run_task():
    """``run_task(cluster, command, user="", **resources)`` starts a framework (of unix user
    ``user``; "": the driver's, this process's) with one command task and returns its
    :class:`OneTask`; the drivers are stopped at the end."""
    drivers = []

    def start(cluster: LocalProcessCluster, command: str, user: str = "", **resources) -> OneTask:
        scheduler = OneTask(command, **resources)
        info = mezzo.FrameworkInfo(name="lxc-test", user=user)
        driver = mezzo.SchedulerDriver(scheduler, info, cluster.master)
        driver.start()
        drivers.append(driver)
        scheduler.driver = driver
        return scheduler

    yield start
    for driver in drivers:
        with contextlib.suppress(Exception):  # a driver that failed to start has nothing to stop
            driver.stop()
