"""Shared fixtures: real clusters in subprocesses and framework helpers."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import mezzo
from mezzo.testing import wait_for  # noqa: F401  (re-exported for tests)


@pytest.fixture
def make_cluster(mezzo_cluster):
    """``make_cluster(agents=3, master={...}, ...)``: the ``mezzo_cluster`` fixture of
    mezzo's pytest plugin (a started LocalProcessCluster, stopped when the test ends),
    under the name these tests have always used."""
    return mezzo_cluster


@pytest.fixture
def drivers():
    """Collects scheduler drivers and stops them at the end of the test."""
    started: list = []

    def start(scheduler, name: str, master: str, **info) -> "mezzo.SchedulerDriver":
        d = mezzo.SchedulerDriver(scheduler, mezzo.FrameworkInfo(name=name, **info), master)
        d.start()
        started.append(d)
        return d

    yield start
    for d in started:
        try:
            d.stop()
        except Exception:
            pass


@contextlib.contextmanager
def installed_for_daemons(package: Path, target: Path) -> Iterator[None]:
    """Install the plugin package at ``package`` as its users would (pip) into ``target``,
    and put ``target`` on the PYTHONPATH of every daemon started meanwhile. Not into
    this interpreter's environment: that would show the package's entry point to this
    process, which could not import it until restarted."""
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                        str(package)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(target), saved]))
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def one_task(command: str, task_id: str = "t"):
    """An ``on_offers`` for :class:`Recorder`: launch one task of 1 cpu and 64 MB running
    ``command`` on the first offer, and decline every other offer for a minute."""
    launched: list[str] = []

    def on_offers(driver, offers):
        for o in offers:
            if launched:
                driver.decline_offer(o.offer_id, mezzo.Filters(refuse_seconds=60))
                continue
            launched.append(o.agent_id)
            task = mezzo.TaskInfo(task_id=task_id, agent_id=o.agent_id, resources=mezzo.Resources(cpus=1, mem=64),
                                  command=mezzo.CommandInfo(value=command))
            driver.launch_tasks(o.offer_id, [task], mezzo.Filters(refuse_seconds=0))

    return on_offers


def mezzo_cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    """``mezzo ARGS`` as a subprocess; whatever it does, it never prints a traceback."""
    r = subprocess.run(
        [sys.executable, "-m", "mezzo", *args], capture_output=True, encoding="utf-8", timeout=timeout
    )
    assert "Traceback" not in r.stderr, r.stderr
    return r


def one_line_error(r: subprocess.CompletedProcess, code: int, text: str) -> str:
    """The error ``r`` printed: exit ``code``, one line of stderr containing ``text``."""
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and text in lines[0], r.stderr
    return lines[0]


class Recorder(mezzo.Scheduler):
    """A scheduler that records every callback; offers are declined unless ``on_offers`` is set."""

    def __init__(self, on_offers=None) -> None:
        self.lock = threading.Lock()
        self.framework_id = None
        self.registered_event = threading.Event()
        self.reregistered_event = threading.Event()
        self.disconnections = 0
        self.offers: list = []
        self.statuses: list = []
        self.rescinded: list = []
        self.errors: list = []
        self.lost_agents: list = []
        self.on_offers = on_offers

    def registered(self, driver, framework_id, master):
        self.framework_id = framework_id
        self.registered_event.set()

    def reregistered(self, driver, framework_id, master):
        self.framework_id = framework_id
        self.reregistered_event.set()

    def disconnected(self, driver):
        self.disconnections += 1

    def resource_offers(self, driver, offers):
        with self.lock:
            self.offers.extend((time.monotonic(), o) for o in offers)
        if self.on_offers is not None:
            self.on_offers(driver, offers)

    def offer_rescinded(self, driver, offer_id):
        with self.lock:
            self.rescinded.append((time.monotonic(), offer_id))

    def status_update(self, driver, status):
        with self.lock:
            self.statuses.append(status)

    def agent_lost(self, driver, agent_id):
        self.lost_agents.append(agent_id)

    def error(self, driver, message):
        self.errors.append(message)

    def states_of(self, task_id: str) -> list[str]:
        with self.lock:
            return [mezzo.state_name(s.state) for s in self.statuses if s.task_id == task_id]

    def final(self, task_id: str):
        with self.lock:
            for s in reversed(self.statuses):
                if s.task_id == task_id and mezzo.is_terminal(s.state):
                    return s
        return None


def pytest_addoption(parser):
    parser.addoption(
        "--fuzz-examples", type=int, default=None, metavar="N",
        help="examples per structure-aware fuzz test (tests/test_fuzz_services.py, "
             "tests/unit/test_fuzz_master_service.py) instead of their quick defaults",
    )
    parser.addoption(
        "--nemesis-seed", type=int, default=None, metavar="N",
        help="seed of tests/test_nemesis.py's fault schedule (default: 1; printed either way)",
    )
    parser.addoption(
        "--nemesis-seconds", type=float, default=None, metavar="S",
        help="how long tests/test_nemesis.py's faults go on (default: 30)",
    )
    parser.addoption(
        "--nemesis-tasks", type=int, default=None, metavar="N",
        help="tasks tests/test_nemesis.py's frameworks launch in all (default: 2,000)",
    )


@pytest.fixture
def fuzz_examples(request):
    """``examples(default)``: how many examples a fuzz test runs: ``--fuzz-examples N``
    if given, else ``default`` (sized for the normal suite)."""
    given = request.config.getoption("--fuzz-examples")
    return lambda default: given if given is not None else default
