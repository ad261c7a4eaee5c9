"""Leader election and detection against a real ZooKeeper server (Debian's package).

Sessions are 2 s (the server runs 200 ms ticks), so a crashed leader's node goes
away in about 2 s and the tests stay short.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from kazoo.client import KazooState
from mezzo.errors import ConfigError
from mezzo.testing import wait_for
from mezzo.zk import LeaderDetector, LeaderElection, parse_zk_url

SESSION = 2.0


class Events:
    def __init__(self) -> None:
        self.log: list[str] = []
        self.lock = threading.Lock()

    def elected(self) -> None:
        with self.lock:
            self.log.append("elected")

    def demoted(self, reason: str) -> None:
        with self.lock:
            self.log.append(f"demoted: {reason}")


def contender(url: str, address: str) -> tuple[LeaderElection, Events]:
    events = Events()
    election = LeaderElection(url, address, on_elected=events.elected, on_demoted=events.demoted,
                              session_timeout=SESSION)
    return election, events


def test_zk_urls_parse_and_bad_ones_name_the_problem():
    url = parse_zk_url("zk://10.0.0.1:2181,10.0.0.2:2181/mezzo/prod/")
    assert (url.hosts, url.path, url.election_path) == ("10.0.0.1:2181,10.0.0.2:2181", "/mezzo/prod",
                                                        "/mezzo/prod/leader")
    for bad, says in [("127.0.0.1:2181/mezzo", "expected zk://"), ("zk:///mezzo", "no ZooKeeper host"),
                      ("zk://host/mezzo", "is not HOST:PORT"), ("zk://host:99999/m", "is not HOST:PORT"),
                      ("zk://host:2181", "a path is required"), ("zk://host:2181/", "a path is required"),
                      ("zk://host:2181/a/../b", "not a valid znode path")]:
        with pytest.raises(ConfigError) as err:
            parse_zk_url(bad, key="agent.master")
        assert err.value.key == "agent.master" and says in str(err.value), (bad, str(err.value))


def test_one_leader_at_a_time_and_the_next_takes_over_when_it_leaves(mezzo_zookeeper):
    url = mezzo_zookeeper.url("/mezzo")
    seen: list[str | None] = []
    detector = LeaderDetector(url, on_change=seen.append, session_timeout=SESSION)
    detector.start()
    a, a_events = contender(url, "10.0.0.1:5050")
    b, b_events = contender(url, "10.0.0.2:5050")
    try:
        a.start()
        wait_for(lambda: a.is_leader, 10, "the first contender to lead")
        b.start()
        assert detector.wait_for_leader(10) == "10.0.0.1:5050"
        time.sleep(0.5)
        assert not b.is_leader and b.leader() == "10.0.0.1:5050"
        a.stop()  # a clean exit deletes its node at once
        assert detector.wait_for_leader(10, other_than="10.0.0.1:5050") == "10.0.0.2:5050"
        wait_for(lambda: b.is_leader, 10, "the standby to lead")
        assert a_events.log == ["elected", "demoted: stopping"]
        assert b_events.log == ["elected"]
        # Listeners are told after wait_for_leader is woken (outside the detector's
        # lock, on kazoo's thread): wait for the news to reach this one too.
        wait_for(lambda: seen[-1:] == ["10.0.0.2:5050"], 10, "the listener to hear of the new leader")
        assert seen[0] == "10.0.0.1:5050"
    finally:
        b.stop()
        detector.stop()


def test_a_standby_whose_connection_blinked_keeps_leading_once_elected(mezzo_zookeeper):
    """A standby that lost and regained its connection while waiting in line must not
    step down the moment it wins (the failover benchmark caught it doing so)."""
    url = mezzo_zookeeper.url("/blink")
    a, _ = contender(url, "10.0.0.1:5050")
    b, b_events = contender(url, "10.0.0.2:5050")
    try:
        a.start()
        wait_for(lambda: a.is_leader, 10, "the first contender to lead")
        b.start()
        time.sleep(0.3)
        b._state_changed(KazooState.SUSPENDED)  # as kazoo reports a dropped connection ...
        b._state_changed(KazooState.CONNECTED)  # ... and its recovery
        a.stop()
        wait_for(lambda: b.is_leader, 10, "the standby to lead")
        time.sleep(0.5)
        assert b.is_leader and b_events.log == ["elected"]
    finally:
        b.stop()


CRASHING_LEADER = """
import sys, time
import mezzo.log
from mezzo.zk import LeaderElection
mezzo.log.configure("warning")
e = LeaderElection(sys.argv[1], "10.0.0.9:5050", on_elected=lambda: print("elected", flush=True),
                   on_demoted=lambda r: None, session_timeout=float(sys.argv[2]))
e.start()
time.sleep(600)
"""


def test_a_killed_leader_is_replaced_once_its_session_expires(mezzo_zookeeper):
    url = mezzo_zookeeper.url("/crash")
    proc = subprocess.Popen([sys.executable, "-c", CRASHING_LEADER, url, str(SESSION)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    standby, events = contender(url, "10.0.0.2:5050")
    try:
        assert proc.stdout.readline().strip() == "elected"
        standby.start()
        time.sleep(0.5)
        assert not standby.is_leader
        killed = time.monotonic()
        os.killpg(proc.pid, signal.SIGKILL)  # no clean close: only session expiry frees the node
        wait_for(lambda: standby.is_leader, 15, "the standby to take over")
        took = time.monotonic() - killed
        assert took >= SESSION * 0.5, f"took over after {took:.2f} s, before the session could expire"
        # is_leader turns true before on_elected runs on the election's thread.
        wait_for(lambda: events.log == ["elected"], 5, "the standby to be told it leads")
        assert events.log == ["elected"]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        standby.stop()


def test_a_leader_cut_off_from_zookeeper_steps_down_at_once(mezzo_zookeeper):
    url = mezzo_zookeeper.url("/cut")
    leader, events = contender(url, "10.0.0.1:5050")
    try:
        leader.start()
        wait_for(lambda: leader.is_leader, 10, "election")
        cut = time.monotonic()
        mezzo_zookeeper.stop()  # the ensemble is gone: another master may be leading elsewhere
        wait_for(lambda: not leader.is_leader, 10, "the leader to step down")
        assert time.monotonic() - cut < SESSION * 2
        assert events.log[0] == "elected" and events.log[1].startswith("demoted: ZooKeeper connection")
    finally:
        leader.stop()


def test_unreachable_zookeeper_is_a_clear_timeout():
    election = LeaderElection("zk://127.0.0.1:1/mezzo", "10.0.0.1:5050", on_elected=lambda: None,
                              on_demoted=lambda r: None, session_timeout=SESSION)
    with pytest.raises(TimeoutError, match="cannot reach ZooKeeper at 127.0.0.1:1"):
        election.start(timeout=1)


def test_a_contender_stops_at_once_while_zookeeper_is_down(mezzo_zookeeper):
    # Stopping during an outage must not wait out kazoo's retries (a master asked to stop
    # then took 10 s, and two of them in a test's teardown 20 s).
    election, events = contender(mezzo_zookeeper.url("/mezzo"), "127.0.0.1:1")
    election.start()
    wait_for(lambda: events.log == ["elected"], 10, "the lone contender to lead")
    mezzo_zookeeper.stop()
    wait_for(lambda: len(events.log) == 2, 10, "it to step down with the connection gone")
    done = threading.Event()
    threading.Thread(target=lambda: (election.stop(), done.set()), daemon=True).start()
    assert done.wait(5), "LeaderElection.stop() waited on ZooKeeper"
