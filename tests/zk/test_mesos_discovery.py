"""The leader's Mesos-style discovery node (``<path>/json.info_<seq>``), against a real
ZooKeeper server: what Mesos frameworks given ``zk://`` (pymesos) read to find the
leading master. See :mod:`mezzo.zk.mesos_discovery`.

``pymesos_rule`` is pymesos 0.3.15's rule (``pymesos/detector.py`` and
``MesosSchedulerDriver.onNewMasterDetectedMessage``) written out; the last tests run
pymesos' own detector when it is installed (``make setup`` installs it).
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.security import Permissions

from mezzo.testing import wait_for
from mezzo.zk import LeaderDetector, LeaderElection, parse_zk_url
from mezzo.zk.client import RETRY
from mezzo.zk.mesos_discovery import PREFIX, MesosDiscovery, master_info

from .test_leader_election import CRASHING_LEADER, SESSION, contender
from .test_zk_acls import secured


def plain_client(hosts: str) -> KazooClient:
    """A started client without credentials. It retries as mezzo's own clients do: the first
    handshake with a server just started can take longer than a single try allows."""
    zk = KazooClient(hosts=hosts, connection_retry=dict(RETRY))
    zk.start(timeout=15)
    return zk


def pymesos_rule(zk: KazooClient, path: str, children: list[str] | None = None) -> str | None:
    """The master pymesos would dial, ``ip:port``, or None: the smallest child of ``path``
    but ``log_replicas``, its data read as JSON ``MasterInfo`` (anything else: None)."""
    if children is None:
        children = zk.get_children(path)
    children = [c for c in children if c != "log_replicas"]
    if not children:
        return None
    try:
        data, _ = zk.get(f"{path}/{min(children)}")
        address = json.loads(data.decode("utf-8"))["address"]
    except (NoNodeError, ValueError, KeyError, TypeError):
        return None
    ip, port = address.get("ip"), address.get("port")
    return f"{ip}:{port}" if ip and port else None


class Reader:
    """A client without credentials that applies :func:`pymesos_rule` on every change of
    ``path``'s children, as pymesos' ChildrenWatch does, and records what it found."""

    def __init__(self, hosts: str, path: str) -> None:
        self.zk = plain_client(hosts)
        self.path = path
        self.seen: list[str | None] = []
        self.listings: list[list[str]] = []
        self.lock = threading.Lock()
        self.zk.ChildrenWatch(path, self._changed)  # the path must exist

    def _changed(self, children: list[str]) -> None:
        found = pymesos_rule(self.zk, self.path, children)
        with self.lock:
            self.seen.append(found)
            self.listings.append(children)

    def now(self) -> str | None:
        return pymesos_rule(self.zk, self.path)

    def wait_until_watch_finds(self, address: str | None, what: str) -> None:
        """Until the watch's latest reading is ``address``, and a fresh one agrees."""
        wait_for(lambda: self.seen[-1:] == [address] and self.now() == address, 10, what)

    def leaders(self) -> list[str]:
        """The masters found, in order, each once per stretch."""
        with self.lock:
            found = [s for s in self.seen if s is not None]
        return [s for i, s in enumerate(found) if i == 0 or found[i - 1] != s]

    def stop(self) -> None:
        self.zk.stop()
        self.zk.close()


def discovery_nodes(zk: KazooClient, path: str) -> list[str]:
    return sorted(c for c in zk.get_children(path) if c.startswith(PREFIX))


def test_master_info_is_mesos_json():
    assert master_info("127.0.0.1:5050", "m-1") == {
        "id": "m-1",
        "ip": 16777343,  # what a Mesos master writes for 127.0.0.1 (bytes in network order, little-endian)
        "port": 5050,
        "pid": "master@127.0.0.1:5050",
        "hostname": "127.0.0.1",
        "version": __import__("mezzo").__version__,
        "address": {"hostname": "127.0.0.1", "ip": "127.0.0.1", "port": 5050},
    }
    assert master_info("192.168.33.10:5050", "x")["ip"] == 169978048  # as in a real Mesos cluster's node
    named = master_info("master-1.example.org:5051", "x")
    assert named["ip"] == 0 and named["address"] == {
        "hostname": "master-1.example.org",
        "ip": "master-1.example.org",
        "port": 5051,
    }


def test_the_leader_publishes_its_master_info_and_nobody_else_does(mezzo_zookeeper):
    url = mezzo_zookeeper.url("/mesos")
    a = LeaderElection(
        url,
        "127.0.0.1:5050",
        on_elected=lambda: None,
        on_demoted=lambda reason: None,
        session_timeout=SESSION,
        master_id=lambda: "master-a",
    )
    b, _ = contender(url, "127.0.0.2:5050")
    zk = plain_client(mezzo_zookeeper.hosts)
    try:
        a.start()
        wait_for(lambda: discovery_nodes(zk, "/mesos"), 10, "the leader's node")
        b.start()
        time.sleep(0.5)
        (node,) = discovery_nodes(zk, "/mesos")
        assert node.startswith("json.info_") and len(node) == len("json.info_") + 10
        data, stat = zk.get(f"/mesos/{node}")
        assert json.loads(data) == master_info("127.0.0.1:5050", "master-a")
        assert stat.ephemeralOwner == a.client.client_id[0]
        assert a._discovery.node == f"/mesos/{node}" and b._discovery.node is None
        # The only children: mezzo's election and this node, which sorts first.
        assert sorted(zk.get_children("/mesos")) == [node, "leader"]
        assert pymesos_rule(zk, "/mesos") == "127.0.0.1:5050"
        a.stop()  # a clean exit deletes it at once; the next leader publishes its own
        wait_for(lambda: pymesos_rule(zk, "/mesos") == "127.0.0.2:5050", 10, "the next leader's node")
        (after,) = discovery_nodes(zk, "/mesos")
        assert after > node
        b.stop()
        wait_for(lambda: discovery_nodes(zk, "/mesos") == [], 10, "the last leader's node to go")
    finally:
        a.stop()
        b.stop()
        zk.stop()
        zk.close()


def test_a_reader_following_pymesos_rule_finds_the_leader_at_every_step(mezzo_zookeeper):
    """A killed leader (its node goes with its session), then two clean exits: what the
    rule finds is the leader, or nobody while none leads; never a leader of the past."""
    url = mezzo_zookeeper.url("/steps")
    proc = subprocess.Popen(
        [sys.executable, "-c", CRASHING_LEADER, url, str(SESSION)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    b, _ = contender(url, "10.0.0.2:5050")
    c, _ = contender(url, "10.0.0.3:5050")
    reader = None
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "elected"
        reader = Reader(mezzo_zookeeper.hosts, "/steps")
        reader.wait_until_watch_finds("10.0.0.9:5050", "the first leader's node")
        b.start()
        c.start()
        time.sleep(0.5)
        assert reader.now() == "10.0.0.9:5050"

        os.killpg(proc.pid, signal.SIGKILL)  # only session expiry frees its nodes
        wait_for(lambda: b.is_leader, 15, "the first standby to take over")
        reader.wait_until_watch_finds("10.0.0.2:5050", "the new leader's node")
        assert len(discovery_nodes(reader.zk, "/steps")) == 1

        b.stop()
        reader.wait_until_watch_finds("10.0.0.3:5050", "the last one's node")
        assert len(discovery_nodes(reader.zk, "/steps")) == 1

        c.stop()
        # No node once nobody leads: the smallest child is "leader", not JSON; pymesos waits.
        reader.wait_until_watch_finds(None, "nobody")
        assert discovery_nodes(reader.zk, "/steps") == []
        assert reader.leaders() == ["10.0.0.9:5050", "10.0.0.2:5050", "10.0.0.3:5050"]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        b.stop()
        c.stop()
        if reader is not None:
            reader.stop()


def test_a_stale_node_of_a_live_session_is_replaced_in_one_step(mezzo_zookeeper):
    """A node left by a deposed leader whose session still lives has the smaller sequence
    number: the new leader deletes it in the same transaction that creates its own."""
    url = mezzo_zookeeper.url("/stale")
    ghost = plain_client(mezzo_zookeeper.hosts)
    ghost.ensure_path("/stale")
    reader = Reader(mezzo_zookeeper.hosts, "/stale")
    a, _ = contender(url, "10.0.0.1:5050")
    try:
        stale = ghost.create(
            "/stale/json.info_",
            json.dumps(master_info("10.0.0.66:5050", "old")).encode(),
            ephemeral=True,
            sequence=True,
        )
        reader.wait_until_watch_finds("10.0.0.66:5050", "the stale node")
        a.start()
        reader.wait_until_watch_finds("10.0.0.1:5050", "the leader's node")
        assert ghost.exists(stale) is None and ghost.connected  # deleted, though its session lives
        (node,) = discovery_nodes(ghost, "/stale")
        assert f"/stale/{node}" > stale
        # The stale node went as the leader's came: no listing holds both.
        assert reader.leaders() == ["10.0.0.66:5050", "10.0.0.1:5050"]
        assert all(len([c for c in listing if c.startswith(PREFIX)]) <= 1 for listing in reader.listings)
    finally:
        a.stop()
        reader.stop()
        ghost.stop()
        ghost.close()


def test_a_deposed_master_can_neither_publish_nor_delete(mezzo_zookeeper):
    """Publishing is fenced by the election node the master won with: once that is gone
    (its session expired, or it stepped down), a late attempt changes nothing."""
    url = mezzo_zookeeper.url("/fenced")
    leader, _ = contender(url, "10.0.0.1:5050")
    late = plain_client(mezzo_zookeeper.hosts)
    try:
        leader.start()
        wait_for(lambda: leader._discovery.node is not None, 10, "the leader's node")
        before = discovery_nodes(late, "/fenced")
        deposed = MesosDiscovery(late, parse_zk_url(url), "10.0.0.66:5050")
        deposed.publish("/fenced/leader/_c_gone-lock-0000000000")
        assert deposed.node is None and discovery_nodes(late, "/fenced") == before
        assert pymesos_rule(late, "/fenced") == "10.0.0.1:5050"
    finally:
        leader.stop()
        late.stop()
        late.close()


def test_a_leader_demoted_and_reconnected_leaves_no_node_behind(mezzo_zookeeper):
    """Demoted on a suspended connection, then reconnected within its session: its node
    goes before its election node does, so the next leader is the only one named."""
    url = mezzo_zookeeper.url("/blinked")
    a, a_events = contender(url, "10.0.0.1:5050")
    b, _ = contender(url, "10.0.0.2:5050")
    reader = None
    try:
        a.start()
        reader = Reader(mezzo_zookeeper.hosts, "/blinked")
        reader.wait_until_watch_finds("10.0.0.1:5050", "the leader's node")
        b.start()
        time.sleep(0.3)
        a._state_changed(KazooState.SUSPENDED)  # as kazoo reports a dropped connection ...
        a._state_changed(KazooState.CONNECTED)  # ... and its recovery, the session intact
        wait_for(lambda: b.is_leader, 10, "the standby to lead")
        reader.wait_until_watch_finds("10.0.0.2:5050", "the new leader's node")
        time.sleep(0.5)
        assert reader.now() == "10.0.0.2:5050" and len(discovery_nodes(reader.zk, "/blinked")) == 1
        assert reader.leaders() == ["10.0.0.1:5050", "10.0.0.2:5050"]
        assert a_events.log[:2] == ["elected", "demoted: ZooKeeper connection suspended"]
    finally:
        a.stop()
        b.stop()
        if reader is not None:
            reader.stop()


def test_with_credentials_anyone_may_read_the_node_and_nobody_else_may_write(mezzo_zookeeper):
    url = secured(mezzo_zookeeper, "/secure")
    leader, _ = contender(url, "10.0.0.1:5050")
    stranger = plain_client(mezzo_zookeeper.hosts)  # no credentials, as pymesos
    try:
        leader.start()
        wait_for(lambda: leader._discovery.node is not None, 10, "the leader's node")
        # Exactly what pymesos does: list the path, read the smallest child.
        assert pymesos_rule(stranger, "/secure") == "10.0.0.1:5050"
        (node,) = discovery_nodes(stranger, "/secure")
        acls, _ = stranger.get_acls(f"/secure/{node}")
        assert sorted((a.id.scheme, a.id.id.split(":")[0], a.perms) for a in acls) == [
            ("digest", "mezzo", Permissions.ALL),
            ("world", "anyone", Permissions.READ),
        ]
        acls, _ = stranger.get_acls("/secure")
        assert sorted((a.id.scheme, a.id.id.split(":")[0], a.perms) for a in acls) == [
            ("digest", "mezzo", Permissions.ALL),
            ("world", "anyone", Permissions.READ),
        ]
        # Reading, nothing more.
        with pytest.raises(NoAuthError):
            stranger.set(f"/secure/{node}", json.dumps(master_info("6.6.6.6:5050", "evil")).encode())
        with pytest.raises(NoAuthError):
            stranger.delete(f"/secure/{node}")
        with pytest.raises(NoAuthError):
            stranger.create("/secure/json.info_", b"{}", ephemeral=True, sequence=True)
        with pytest.raises(NoAuthError):
            stranger.get_children("/secure/leader")  # the election stays the cluster's own
        # A path open for reading is still the cluster's alone: mezzo processes accept it.
        detector = LeaderDetector(url, session_timeout=SESSION)
        detector.start(timeout=10)
        try:
            assert detector.wait_for_leader(10) == "10.0.0.1:5050"
        finally:
            detector.stop()
    finally:
        leader.stop()
        stranger.stop()
        stranger.close()


# -- pymesos itself ------------------------------------------------------------------


class FakeScheduler:
    """What pymesos' MasterDetector calls back (``MesosSchedulerDriver`` in real life):
    records the raw node data and, through pymesos' own parsing of it, the master."""

    def __init__(self) -> None:
        self.data: list[bytes | None] = []
        self.masters: list[str | None] = []
        self.lock = threading.Lock()

    def onNewMasterDetectedMessage(self, data):  # pymesos calls it so
        with self.lock:
            self.data.append(data)
        # pymesos' own code: JSON, address.ip:address.port, then change_master(master).
        importlib.import_module("pymesos.scheduler").MesosSchedulerDriver.onNewMasterDetectedMessage(
            self, data
        )

    def onNoMasterDetectedMessage(self):
        self.change_master(None)

    def change_master(self, master):
        with self.lock:
            self.masters.append(master)


@pytest.mark.parametrize("credentials", [False, True], ids=["open", "with-credentials"])
def test_pymesos_detector_finds_the_leader(mezzo_zookeeper, credentials):
    detector_module = pytest.importorskip("pymesos.detector", reason="pymesos is not installed (make setup)")
    path = "/pymesos"
    url = secured(mezzo_zookeeper, path) if credentials else mezzo_zookeeper.url(path)
    a, _ = contender(url, "127.0.0.1:5050")
    b, _ = contender(url, "127.0.0.1:5051")
    scheduler = FakeScheduler()
    # The master URI as a framework would be given it, less pymesos' "zk://" (its driver
    # strips that): with credentials, the same URL mezzo's processes use.
    detector = detector_module.MasterDetector(url[len("zk://") :], scheduler)
    try:
        a.start()
        wait_for(lambda: a._discovery.node is not None, 10, "the leader's node")
        b.start()
        detector.start()
        wait_for(lambda: scheduler.masters[-1:] == ["127.0.0.1:5050"], 15, "pymesos to find the leader")
        data = scheduler.data[-1]
        assert data is not None and json.loads(data)["pid"] == "master@127.0.0.1:5050"
        a.stop()
        wait_for(lambda: scheduler.masters[-1:] == ["127.0.0.1:5051"], 15, "pymesos to find the next leader")
        assert [m for m in scheduler.masters if m is not None] == ["127.0.0.1:5050", "127.0.0.1:5051"]
    finally:
        detector.stop()
        a.stop()
        b.stop()


# -- a real cluster ------------------------------------------------------------------


def test_a_clusters_leader_publishes_itself_with_its_master_id(ha_cluster, mezzo_zookeeper):
    """The master's wiring: the leader's node carries its address and master id."""
    cluster = ha_cluster(agents=1, masters=2)
    zk = plain_client(mezzo_zookeeper.hosts)

    def published() -> dict:
        wait_for(lambda: len(discovery_nodes(zk, "/mezzo")) == 1, 10, "the leader's node")
        (node,) = discovery_nodes(zk, "/mezzo")
        return json.loads(zk.get(f"/mezzo/{node}")[0])

    try:
        first = cluster.leader()
        master = cluster.state()["master"]
        assert published() == master_info(master["address"], master["id"])
        cluster.kill(first, signal.SIGKILL)
        assert cluster.leader(timeout=20) != first
        master = cluster.state()["master"]
        assert published() == master_info(master["address"], master["id"])
    finally:
        zk.stop()
        zk.close()


def test_pymesos_rule_in_a_real_cluster(ha_cluster, mezzo_zookeeper):
    # Nothing mezzo keeps under the path may sort before json.info_ (the registry of
    # admitted agents was <path>/agents once: pymesos took it for the leader's node).
    cluster = ha_cluster(agents=1, masters=1)
    master = cluster.state()["master"]
    zk = plain_client(mezzo_zookeeper.hosts)
    try:
        wait_for(lambda: discovery_nodes(zk, "/mezzo"), 10, "the leader's node")
        assert pymesos_rule(zk, "/mezzo") == master["address"], sorted(zk.get_children("/mezzo"))
    finally:
        zk.stop()
        zk.close()


def test_the_admitted_agents_list_moves_out_of_the_way_of_pymesos(mezzo_zookeeper):
    # A cluster made before kept its registry at <path>/agents, which sorts before
    # json.info_: a leader moves it to <path>/registry, every agent kept.
    from mezzo.master.registry import ZkRegistry, node_name

    zk = plain_client(mezzo_zookeeper.hosts)
    try:
        old = [node_name("a1", None), node_name("a2", "agent")]
        for name in old:
            zk.create(f"/old-cluster/agents/{name}", b"", makepath=True)
        registry = ZkRegistry(zk, "/old-cluster", lambda f, *a: f(*a))
        assert registry.load() == {"a1": None, "a2": "agent"}
        assert sorted(zk.get_children("/old-cluster")) == ["registry", "unreachable"]
        assert sorted(zk.get_children("/old-cluster/registry")) == sorted(old)
        # Loading again (the next leader) finds the new list as it is.
        assert ZkRegistry(zk, "/old-cluster", lambda f, *a: f(*a)).load() == {"a1": None, "a2": "agent"}
    finally:
        zk.stop()
        zk.close()


def test_an_unreachable_agent_is_listed_as_such_for_the_next_leader_and_welcome_back(mezzo_zookeeper):
    # Declared lost for its silence, an agent moves to <path>/unreachable: a leader
    # elected later welcomes it back (UNREACHABLE), and once re-admitted it is listed
    # as admitted again, under its first owner.

    from mezzo.master.registry import REFUSE, UNREACHABLE, WELCOME, ZkRegistry

    zk = plain_client(mezzo_zookeeper.hosts)
    try:
        registry = ZkRegistry(zk, "/partitioned", lambda f, *a: f(*a))
        registry.load()
        admitted = []
        registry.admit("a1", "agent", admitted.append)
        registry.admit("a2", None, admitted.append)
        deadline = time.monotonic() + 10
        while len(admitted) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        registry.mark_unreachable("a1")
        assert registry.verdict("a1") == UNREACHABLE and registry.owner("a1") == "agent"
        while zk.get_children("/partitioned/registry") != ["a2"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert zk.get_children("/partitioned/unreachable") == ["a1@agent"]

        next_leader = ZkRegistry(zk, "/partitioned", lambda f, *a: f(*a))
        assert next_leader.load() == {"a2": None}, "not waited for after a failover"
        assert next_leader.verdict("a1") == UNREACHABLE and next_leader.owner("a1") == "agent"
        assert next_leader.verdict("a3") == REFUSE
        back = []
        next_leader.admit("a1", "someone-else", back.append)
        while not back and time.monotonic() < deadline:
            time.sleep(0.01)
        assert back == [True] and next_leader.verdict("a1") == WELCOME and next_leader.owner("a1") == "agent"
        while zk.get_children("/partitioned/unreachable") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sorted(zk.get_children("/partitioned/registry")) == ["a1@agent", "a2"]
        assert zk.get_children("/partitioned/unreachable") == []
    finally:
        zk.stop()
        zk.close()
