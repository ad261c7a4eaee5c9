"""TLS on mezzo's connections, against real processes and real handshakes.

A ``mezzo master`` subprocess with ``[tls]`` on, certificates made by ``mezzo certs``
(:mod:`mezzo.certs`), and peers written as an attacker or a misconfigured operator
would: a plaintext socket at the TLS port, a TLS client at a plaintext port, a
client with no certificate or one signed by another CA, a host name the server's
certificate does not carry. Each must be refused, with a log line at the master
that says which side to fix, and the master must go on serving the peers that are
right.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import mezzo
import mezzo.config
from mezzo.certs import issue, principal_tls, tls_toml
from mezzo.config import TlsConfig
from mezzo.errors import ConfigError
from mezzo.rpc import client_tls, connect
from mezzo.rpc.tls import check_tls
from mezzo.services import SCHEDULER, TOOL
from mezzo.state_client import MasterUnreachable, fetch_metrics, fetch_state
from mezzo.testing import LocalProcessCluster, RawPeer, wait_for

HOSTS = ["127.0.0.1", "localhost"]


def mezzo_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mezzo", *args], capture_output=True, text=True, timeout=60, check=False
    )


def master_log(cluster: LocalProcessCluster) -> str:
    return (cluster.dir / "master.log").read_text(errors="replace")


@pytest.fixture
def tls_master(mezzo_cluster) -> LocalProcessCluster:
    """A master alone, TLS on, every peer required to show a certificate."""
    return mezzo_cluster(agents=0, tls=True, master={"allocation_interval": 0.01})


# -- mezzo certs -------------------------------------------------------------------


def test_mezzo_certs_makes_a_ca_and_certificates_a_handshake_accepts(tmp_path: Path) -> None:
    d = tmp_path / "tls"
    done = mezzo_cli("certs", str(d), "--principal", "fw-1", "--principal", "master", "--host", "127.0.0.1")
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    for name in ("ca", "fw-1", "master"):
        assert stat.S_IMODE((d / f"{name}.key").stat().st_mode) == 0o600
        assert stat.S_IMODE((d / f"{name}.crt").stat().st_mode) == 0o644
    # The certificates do what TLS needs: a real handshake between the two, each
    # side verifying the other against the CA, the client checking the host name.
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(d / "master.crt", d / "master.key")
    server.load_verify_locations(d / "ca.crt")
    server.verify_mode = ssl.CERT_REQUIRED
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.load_verify_locations(d / "ca.crt")
    client.load_cert_chain(d / "fw-1.crt", d / "fw-1.key")
    a, b = socket.socketpair()
    seen = {}

    def serve() -> None:
        with server.wrap_socket(a, server_side=True) as s:
            seen["peer"] = dict(x[0] for x in s.getpeercert()["subject"])["commonName"]

    t = threading.Thread(target=serve)
    t.start()
    with client.wrap_socket(b, server_hostname="127.0.0.1") as c:
        assert dict(x[0] for x in c.getpeercert()["subject"])["commonName"] == "master"
    t.join(10)
    assert seen["peer"] == "fw-1"


def test_mezzo_certs_keeps_what_exists_and_refuses_bad_names(tmp_path: Path) -> None:
    d = tmp_path / "tls"
    assert mezzo_cli("certs", str(d), "--principal", "fw-1").returncode == 0
    ca_before = (d / "ca.crt").read_bytes()
    key_before = (d / "fw-1.key").read_bytes()
    again = mezzo_cli("certs", str(d), "--principal", "fw-1")
    assert again.returncode == 2
    assert again.stderr.strip().splitlines() == [
        f"mezzo certs: {d / 'fw-1.crt'} exists already (--force replaces it)"
    ]
    assert (d / "fw-1.key").read_bytes() == key_before
    # Adding a principal later signs with the same CA.
    assert mezzo_cli("certs", str(d), "--principal", "fw-2").returncode == 0
    assert (d / "ca.crt").read_bytes() == ca_before
    for bad, says in (
        (["--principal", "a b"], "principal 'a b'"),
        (["--principal", "x" * 65], "principal 'xxx"),
        (["--host", "not a host"], "host 'not a host'"),
        (["--principal", "ca"], "principal 'ca'"),
    ):
        done = mezzo_cli("certs", str(tmp_path / "other"), *bad)
        assert done.returncode == 2, bad
        assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


# -- [tls] settings -----------------------------------------------------------------


def test_tls_settings_name_the_key_that_is_wrong(tmp_path: Path) -> None:
    d = tmp_path / "tls"
    issue(d, "master", HOSTS)
    issue(d, "other", HOSTS)
    ok = {
        "enabled": True,
        "ca": str(d / "ca.crt"),
        "cert": str(d / "master.crt"),
        "key": str(d / "master.key"),
    }
    check_tls(TlsConfig(**ok))  # no error
    cases = [
        ({"ca": ""}, "tls.ca: required when tls.enabled is true"),
        ({"key": ""}, "tls.key: tls.cert and tls.key go together"),
        ({"key": str(d / "other.key")}, "tls.key: "),
        ({"cert": str(d / "nope.crt")}, "tls.cert: "),
        ({"ca": str(d / "master.key")}, "tls.ca: "),
        ({"peer_certificates": "sometimes"}, "tls.peer_certificates: expected one of"),
    ]
    for change, says in cases:
        with pytest.raises(ConfigError) as err:
            check_tls(TlsConfig(**{**ok, **change}))
        assert str(err.value).startswith(says), (change, str(err.value))
    # Through the command line: one line, exit 2, before anything starts.
    config = tmp_path / "bad.toml"
    config.write_text(tls_toml(TlsConfig(**{**ok, "key": str(d / "other.key")})))
    done = mezzo_cli("master", "--config", str(config), "--listen", "127.0.0.1:0")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"mezzo master: tls.key: '{d / 'other.key'}' is not the key of '{d / 'master.crt'}'"
    ]


# -- the master's port --------------------------------------------------------------


def test_a_framework_over_tls_runs_and_the_master_knows_it_by_its_certificate(tls_master) -> None:
    """Registration, offers and the state, all over TLS; the state shows nothing to a
    tool without TLS, which is told why."""
    registered = threading.Event()

    class Sched(mezzo.Scheduler):
        def registered(self, driver, framework_id, master):
            registered.set()

    driver = mezzo.SchedulerDriver(
        Sched(), mezzo.FrameworkInfo(name="tls-fw"), tls_master.master, tls=tls_master.client_tls("fw-1")
    )
    driver.start()
    try:
        assert registered.wait(20)
        state = tls_master.state()
        assert [f["name"] for f in state["frameworks"]] == ["tls-fw"]
    finally:
        driver.stop()
        driver.join()
    with pytest.raises(MasterUnreachable, match=r"if it listens with TLS, give \[tls\] settings"):
        fetch_state(tls_master.master, timeout=3)
    wait_for(
        lambda: "refused a connection: the peer spoke plaintext at this TLS port" in master_log(tls_master)
    )


def test_plaintext_at_the_tls_port_is_refused_and_logged_and_the_master_serves_on(tls_master) -> None:
    peer = RawPeer(tls_master.master, SCHEDULER)
    peer.send("register_framework", mezzo.FrameworkInfo(name="plain"))
    peer.sock.settimeout(10)
    assert peer.sock.recv(1) == b""  # closed, nothing answered
    peer.close()
    wait_for(lambda: "the peer spoke plaintext at this TLS port" in master_log(tls_master))
    assert fetch_metrics(tls_master.master, timeout=5, tls=tls_master.tls)["frameworks"] == 0


def test_a_client_without_a_certificate_or_with_another_cas_is_refused(tls_master, tmp_path: Path) -> None:
    ca_only = TlsConfig(enabled=True, ca=tls_master.tls.ca)
    with pytest.raises(MasterUnreachable):
        fetch_metrics(tls_master.master, timeout=3, tls=ca_only)
    wait_for(lambda: "the peer showed no certificate, and this port requires one" in master_log(tls_master))
    # A certificate of another CA (whoever made it, the master does not trust it).
    other = tmp_path / "other"
    issue(other, "operator", HOSTS)
    forged = TlsConfig(
        enabled=True, ca=tls_master.tls.ca, cert=str(other / "operator.crt"), key=str(other / "operator.key")
    )
    with pytest.raises(MasterUnreachable):
        fetch_metrics(tls_master.master, timeout=3, tls=forged)
    wait_for(lambda: "certificates not trusted between this side and the peer" in master_log(tls_master))
    # The master trusted no one it should not have, and still serves those it should.
    assert fetch_metrics(tls_master.master, timeout=5, tls=tls_master.tls)["frameworks"] == 0


def test_the_client_refuses_a_master_it_does_not_trust(tls_master, tmp_path: Path) -> None:
    other = tmp_path / "other"
    issue(other, "operator", HOSTS)
    # Trusting another CA: the master's certificate does not verify.
    with pytest.raises(MasterUnreachable, match=r"certificate is not trusted"):
        fetch_metrics(tls_master.master, timeout=3, tls=TlsConfig(enabled=True, ca=str(other / "ca.crt")))
    # The right CA, but dialled by a name the master's certificate does not carry.
    d = tmp_path / "narrow"
    issue(d, "master", ["127.0.0.1"])
    config = tmp_path / "narrow.toml"
    config.write_text(tls_toml(principal_tls(d, "master")))
    with socket.socket() as s:  # a second master, on a port of its own
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "mezzo", "master", "--config", str(config), "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        ca_only = TlsConfig(enabled=True, ca=str(d / "ca.crt"), peer_certificates="optional")
        wait_for(lambda: _answers(f"127.0.0.1:{port}", ca_only), timeout=20)
        with pytest.raises(MasterUnreachable, match=r"Hostname mismatch"):
            fetch_metrics(f"localhost:{port}", timeout=3, tls=ca_only)
    finally:
        proc.terminate()
        proc.wait(10)


def _answers(master: str, tls: TlsConfig) -> bool:
    """True once ``master`` got as far as the handshake: a plaintext-free refusal for want
    of a client certificate counts, since this probe has none."""
    try:
        fetch_metrics(master, timeout=2, tls=tls)
    except MasterUnreachable as exc:
        return "TLS" in str(exc) or "closed the connection" in str(exc)
    return True


def test_tls_at_a_plaintext_port_is_refused_and_logged(mezzo_cluster, tmp_path: Path) -> None:
    cluster = mezzo_cluster(agents=0)
    issue(tmp_path / "tls", "operator", HOSTS)
    tls = TlsConfig(
        enabled=True,
        ca=str(tmp_path / "tls" / "ca.crt"),
        cert=str(tmp_path / "tls" / "operator.crt"),
        key=str(tmp_path / "tls" / "operator.key"),
    )
    with pytest.raises(MasterUnreachable, match=r"broke off the handshake \(is tls.enabled on at"):
        fetch_metrics(cluster.master, timeout=5, tls=tls)
    wait_for(
        lambda: "the peer began a TLS handshake at this plaintext port" in master_log(cluster), timeout=10
    )
    assert fetch_metrics(cluster.master, timeout=5)["frameworks"] == 0


def test_a_peer_that_never_finishes_its_handshake_is_dropped(mezzo_cluster) -> None:
    cluster = mezzo_cluster(agents=0, tls=True, tables={"tls": {"handshake_timeout": 0.5}})
    host, port = cluster.master.split(":")
    with socket.create_connection((host, int(port))) as s:
        s.settimeout(10)  # far past handshake_timeout: a recv that times out fails the test
        assert s.recv(1) == b""  # the master hung up
    wait_for(lambda: "did not finish the TLS handshake in time" in master_log(cluster))


def test_a_connection_knows_its_peers_principal(tls_master) -> None:
    """Each end of a TLS connection knows the other's principal (the common name of its
    certificate): here the client's view of the master. The master's view of its peers
    is what tests/test_principals.py relies on."""

    async def principal_seen_by_client() -> str | None:
        tls = client_tls(tls_master.tls)
        host, port = tls_master.master.split(":")
        conn = await connect(host, int(port), TOOL, object(), tls=tls)
        try:
            return conn.principal  # the client's view: the master's certificate
        finally:
            conn.close()

    assert asyncio.run(principal_seen_by_client()) == "master"


# -- a whole cluster over TLS --------------------------------------------------------


def test_a_whole_cluster_over_tls_runs_command_and_executor_tasks(mezzo_cluster) -> None:
    """Master, agent (its own certificate), a framework's own executor (checking its
    agent against the CA it is given) and ``mezzo run``: every connection TLS."""
    from .test_custom_executor import UsesExecutor

    cluster = mezzo_cluster(agents=1, tls=True, master={"allocation_interval": 0.01})
    (agent,) = cluster.state()["agents"]
    assert agent["connected"]
    sched = UsesExecutor(2)
    driver = mezzo.SchedulerDriver(
        sched, mezzo.FrameworkInfo(name="tls-executor"), cluster.master, tls=cluster.client_tls("fw-1")
    )
    driver.start()
    try:
        assert sched.done.wait(30), f"finished: {sorted(sched.finished)}"
        driver.send_framework_message("echo", agent["id"], b"ping")
        wait_for(lambda: sched.messages, 10, "the executor's reply")
    finally:
        driver.stop()
        driver.join()
    client = cluster.dir / "operator.toml"
    t = cluster.tls
    client.write_text(tls_toml(t))
    done = mezzo_cli(
        "run", "--config", str(client), "--master", cluster.master, "--", "sh", "-c", "echo over-tls"
    )
    assert done.returncode == 0, done.stderr
    assert "over-tls" in done.stdout
    # Nothing in the logs of a handshake gone wrong: everyone trusted everyone.
    for name in ("master", "agent-1"):
        log = (cluster.dir / f"{name}.log").read_text()
        assert "refused a connection" not in log and "plaintext port" not in log, name


def test_mezzo_local_runs_tls_by_default_and_writes_its_clients_config(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    work = tmp_path / "local"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mezzo",
            "local",
            "--agents",
            "1",
            "--listen",
            f"127.0.0.1:{port}",
            "--resources",
            "cpus:1;mem:512",
            "--work-dir",
            str(work),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        first = proc.stdout.readline()
        client = work / "client.toml"
        assert (
            first.strip() == f"mezzo local: TLS on, throw-away certificates; clients: MEZZO_CONFIG={client}"
        )
        tls = mezzo.config.load(client).tls
        state = wait_for(lambda: _state_with_agent(f"127.0.0.1:{port}", tls), timeout=30)
        assert state["agents"][0]["connected"]
        with pytest.raises(MasterUnreachable, match="listens with TLS"):
            fetch_state(f"127.0.0.1:{port}", timeout=3)
        assert stat.S_IMODE((work / "tls" / "operator.key").stat().st_mode) == 0o600
    finally:
        proc.terminate()
        proc.wait(20)


def _state_with_agent(master: str, tls: TlsConfig) -> dict | None:
    try:
        state = fetch_state(master, timeout=2, tls=tls)
    except MasterUnreachable:
        return None
    return state if state["agents"] else None


def test_the_master_runs_on_the_event_loop_its_configuration_names(mezzo_cluster) -> None:
    """uvloop by default (TLS in C); asyncio's own loop when master.event_loop says so."""
    uv = mezzo_cluster(agents=0, tls=True)
    wait_for(lambda: "master started" in master_log(uv))
    assert "event_loop=uvloop" in master_log(uv)
    plain = mezzo_cluster(agents=0, master={"event_loop": "asyncio"})
    wait_for(lambda: "master started" in master_log(plain))
    assert "event_loop=asyncio" in master_log(plain)


def test_a_bad_event_loop_is_refused_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "m.toml"
    config.write_text('[master]\nevent_loop = "trio"\n')
    done = mezzo_cli("master", "--config", str(config), "--listen", "127.0.0.1:0")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "mezzo master: master.event_loop: expected one of 'uvloop', 'asyncio', got 'trio'"
    ]
