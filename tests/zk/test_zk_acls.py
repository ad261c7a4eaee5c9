"""ZooKeeper credentials and ACLs (issue 15), against a real ZooKeeper server.

Without credentials mezzo's nodes are ``world:anyone``: anyone who reaches ZooKeeper
could write a node under the election path and become the leader agents follow (the
probe did). With ``zk://USER:PASSWORD@...`` every node mezzo creates belongs to that
digest user alone, and a mezzo process refuses a path that others may write.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import OPEN_ACL_UNSAFE, Permissions

from mezzo.discovery import peer_address
from mezzo.errors import ConfigError, MasterUnreachable
from mezzo.state_client import leader_of
from mezzo.testing import free_port, wait_for
from mezzo.zk import LeaderDetector, parse_zk_url
from mezzo.zk.client import UnprotectedPath

from .test_leader_election import SESSION, contender


def secured(server, path: str = "/secure") -> str:
    return f"zk://mezzo:s3cret@{server.hosts}{path}"


def test_credentials_parse_and_never_show() -> None:
    url = parse_zk_url("zk://mezzo:s3cret@10.0.0.1:2181,10.0.0.2:2181/mezzo")
    assert url.credentials == ("mezzo", "s3cret") and url.hosts == "10.0.0.1:2181,10.0.0.2:2181"
    assert str(url) == "zk://mezzo:***@10.0.0.1:2181,10.0.0.2:2181/mezzo" and "s3cret" not in repr(url)
    for bad in ("zk://mezzo@host:2181/m", "zk://:pw@host:2181/m", "zk://mezzo:@host:2181/m"):
        with pytest.raises(ConfigError, match="USER:PASSWORD@"):
            parse_zk_url(bad, key="master.zk")
    # Nor in an error about the rest of the URL, nor in a client's "cannot reach".
    with pytest.raises(ConfigError) as err:
        parse_zk_url("zk://mezzo:s3cret@host:x/m", key="master.zk")
    assert "s3cret" not in str(err.value) and "mezzo:***@host:x" in str(err.value)
    # A '/' in the password: percent-encoded it works, raw it is an error that hides it.
    assert parse_zk_url("zk://mezzo:s3c%2Fret@h:2181/m").credentials == ("mezzo", "s3c/ret")
    for bad in ("zk://mezzo:s3c/ret@h:2181/m", "zk://mezzo:s3c/ret@h:2181"):
        with pytest.raises(ConfigError) as err:
            parse_zk_url(bad)
        assert "s3c" not in str(err.value) and "percent-encoded" in str(err.value)
        with pytest.raises(ValueError) as err:
            peer_address(bad, 5050)
        assert "s3c" not in str(err.value)
    assert parse_zk_url("zk://h:2181/a@b").path == "/a@b"  # '@' in a path, no credentials
    with pytest.raises(MasterUnreachable) as unreachable:
        asyncio.run(leader_of(f"zk://mezzo:s3cret@127.0.0.1:{free_port()}/m", 0.2))
    assert "s3cret" not in str(unreachable.value) and "zk://mezzo:***@" in str(unreachable.value)


def test_with_credentials_every_node_is_the_users_alone_and_strangers_cannot_lead(mezzo_zookeeper) -> None:
    url = secured(mezzo_zookeeper)
    election, events = contender(url, "10.0.0.1:5050")
    election.start()
    try:
        wait_for(lambda: election.is_leader, 10, "the master to lead")
        wait_for(lambda: election._discovery.node is not None, 10, "the leader's node for Mesos frameworks")
        owner = KazooClient(hosts=mezzo_zookeeper.hosts, auth_data=[("digest", "mezzo:s3cret")])
        owner.start(timeout=10)
        try:
            for path in (
                "/secure/leader",
                *(f"/secure/leader/{c}" for c in owner.get_children("/secure/leader")),
            ):
                acls, _ = owner.get_acls(path)
                assert [(a.id.scheme, a.id.id.split(":")[0]) for a in acls] == [("digest", "mezzo")], path
            # The path itself anyone may list (not write), for Mesos frameworks to find the
            # leader's json.info_ node (test_mesos_discovery.py).
            acls, _ = owner.get_acls("/secure")
            assert sorted((a.id.scheme, a.id.id.split(":")[0], a.perms) for a in acls) == [
                ("digest", "mezzo", Permissions.ALL),
                ("world", "anyone", Permissions.READ),
            ]
        finally:
            owner.stop()
            owner.close()
        stranger = KazooClient(hosts=mezzo_zookeeper.hosts)
        stranger.start(timeout=10)
        try:
            with pytest.raises(NoAuthError):
                stranger.get_acls("/secure/leader")
            # The probe's move: a node of its own under the election path, to lead.
            with pytest.raises(NoAuthError):
                stranger.create("/secure/leader/_c_evil-lock-0000000000", b"6.6.6.6:5050")
            with pytest.raises(NoAuthError):
                stranger.get_children("/secure/leader")  # not even who contends
        finally:
            stranger.stop()
            stranger.close()
        detector = LeaderDetector(url, session_timeout=SESSION)
        detector.start()
        try:
            assert detector.wait_for_leader(10) == "10.0.0.1:5050"
        finally:
            detector.stop()
    finally:
        election.stop()


def test_a_path_others_may_write_is_refused(mezzo_zookeeper) -> None:
    # Someone made the path first, open to all (ZooKeeper's default), and may fill it.
    squatter = KazooClient(hosts=mezzo_zookeeper.hosts)
    squatter.start(timeout=10)
    try:
        squatter.create("/taken/leader", makepath=True, acl=OPEN_ACL_UNSAFE)
    finally:
        squatter.stop()
        squatter.close()
    detector = LeaderDetector(secured(mezzo_zookeeper, "/taken"), session_timeout=SESSION)
    with pytest.raises(UnprotectedPath, match=r"/taken is writable by world:anyone"):
        detector.start(timeout=10)
    # mezzo master says so, naming the key, and exits 2.
    port = free_port()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mezzo",
            "master",
            "--listen",
            f"127.0.0.1:{port}",
            "--zk",
            secured(mezzo_zookeeper, "/taken"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    # Its log lines go to stderr too; the error is one line of its own.
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("mezzo master:")]
    assert line.startswith("mezzo master: master.zk: zk://mezzo:***@") and "writable by world:anyone" in line
    assert "s3cret" not in done.stderr


def test_wrong_credentials_are_refused_too(mezzo_zookeeper) -> None:
    url = secured(mezzo_zookeeper, "/mine")
    election, _ = contender(url, "10.0.0.1:5050")
    election.start()
    try:
        wait_for(lambda: election.is_leader, 10, "the master to lead")
        wrong = LeaderDetector(f"zk://mezzo:guess@{mezzo_zookeeper.hosts}/mine", session_timeout=SESSION)
        with pytest.raises(UnprotectedPath, match="not allowed to use /mine"):
            wrong.start(timeout=10)
    finally:
        election.stop()


def test_a_cluster_runs_through_a_protected_path(mezzo_zookeeper, mezzo_cluster) -> None:
    """Masters elect, the agent and ``mezzo state`` find the leader, all with the
    credentials in their ``zk://`` URL; the password shows in no log."""
    url = secured(mezzo_zookeeper, "/cluster")
    cluster = mezzo_cluster(agents=1, masters=2, zk=url)
    state = cluster.state()
    assert state["master"]["leading"] and [a["connected"] for a in state["agents"]] == [True]
    for name in ("master-1", "master-2", "agent-1"):
        assert "s3cret" not in (cluster.dir / f"{name}.log").read_text(), name
