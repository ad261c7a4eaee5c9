"""Simulated hosts (mezzo.testing.netsim) and a cluster deployed on them (simcluster):
real network namespaces, a real bridge, real nftables rules, real daemons."""

from __future__ import annotations

import ipaddress
import os
import signal
import subprocess
import sys
import time

import pytest

from mezzo.testing import netsim
from mezzo.testing.netsim import NS_PREFIX, NetsimError, SimNetwork, processes_in, sweep
from mezzo.testing.simcluster import SimCluster

pytestmark = pytest.mark.skipif(
    netsim.available() is not None, reason=f"{netsim.available()} (CI runs as root)"
)

CONNECT = (
    "import socket, sys\n"
    "try:\n"
    "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()\n"
    "except OSError:\n"
    "    sys.exit(1)\n"
)
SERVE = (
    "import socket, sys\n"
    "s = socket.create_server((sys.argv[1], int(sys.argv[2])))\n"
    "print('listening', flush=True)\n"
    "while True:\n"
    "    s.accept()[0].close()\n"
)


def blocked(host, address: str, port: int = 7000) -> bool:
    """Whether a connection from ``host`` to ``address`` fails, for packets dropped by a
    filter (not a link cut): a dropped SYN is never answered, so a second tells as well as
    the 3 s that :func:`connects` allows."""
    return not connects(host, address, port, timeout=1.0)


def connects(host, address: str, port: int = 7000, timeout: float = 3.0) -> bool:
    """Whether a TCP connection from ``host`` (None: this test's own namespace) opens
    within ``timeout``: 3 s by default, past TCP's first SYN retry at 1 s, since a host
    whose address failed to resolve while it was cut off resolves it again only then."""
    argv = [sys.executable, "-c", CONNECT, address, str(port), str(timeout)]
    if host is not None:
        argv = host.command(argv)
    return subprocess.run(argv, timeout=timeout + 10).returncode == 0


def serve(host, port: int = 7000) -> subprocess.Popen:
    proc = subprocess.Popen(
        host.command([sys.executable, "-c", SERVE, host.address, str(port)]), stdout=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"listening\n"
    return proc


@pytest.fixture
def net():
    with SimNetwork() as network:
        yield network


def test_hosts_have_addresses_of_their_own_and_reach_each_other(net):
    a, b = net.add_host("a"), net.add_host("b")
    assert a.address != b.address
    assert {ipaddress.ip_address(h.address) in net.subnet for h in (a, b)} == {True}
    server = serve(b)
    try:
        assert connects(a, b.address)
        assert connects(None, b.address)  # the test's own namespace is on the bridge
        assert not connects(a, "127.0.0.1")  # a's loopback is a's alone
        assert processes_in(b.netns) == [server.pid]
    finally:
        server.kill()
        server.wait()


def test_faults_cut_partition_one_way_loss_and_heal(net):
    a, b, c = (net.add_host(n) for n in "abc")
    servers = [serve(h) for h in (a, b, c)]
    try:
        net.partition([a], [b, c])
        assert blocked(a, b.address) and blocked(b, a.address)
        assert connects(b, c.address), "hosts on the same side still talk"
        net.heal()
        assert connects(a, b.address) and connects(b, a.address)

        net.one_way([a], [b])  # what a sends b is dropped; b's packets to a pass
        assert blocked(a, b.address)
        assert "saddr " + a.address in b.run(["nft", "list", "chain", "inet", netsim.TABLE, "input"])
        assert a.address not in a.run(["nft", "list", "chain", "inet", netsim.TABLE, "input"])
        net.heal()

        c.cut()
        # The full 3 s here: a link cut stops address resolution too, and a neighbour
        # entry that failed after a shorter probe is retried later than the check after heal.
        assert not connects(a, c.address) and not connects(None, c.address)
        net.heal()
        assert connects(a, c.address)

        b.lose(100)
        assert blocked(a, b.address)
        net.heal()
        assert connects(a, b.address)
        with pytest.raises(ValueError, match="percent"):
            b.lose(0)
    finally:
        for s in servers:
            s.kill()
            s.wait()
    assert any(line.startswith("ip link set") and "down" in line for line in net.log)


CONNECT_TIME = (
    "import socket, sys, time\n"
    "times = []\n"
    "for _ in range(5):\n"
    "    t = time.monotonic()\n"
    "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()\n"
    "    times.append(time.monotonic() - t)\n"
    "print(sorted(times)[2])\n"
)


def connect_time(host, address: str, port: int = 7000) -> float:
    """The median of 5 TCP handshakes from ``host``: one round trip each."""
    out = subprocess.run(host.command([sys.executable, "-c", CONNECT_TIME, address, str(port)]),
                         capture_output=True, text=True, timeout=30, check=True).stdout
    return float(out)


def test_delay_holds_what_a_host_sends_and_heal_ends_it(net):
    a, b = net.add_host("a"), net.add_host("b")
    server = serve(b)
    try:
        before = connect_time(a, b.address)
        a.delay(0.2)
        delayed = connect_time(a, b.address)
        assert 0.2 <= delayed < 0.2 + before + 0.1, (before, delayed)  # the SYN waited 0.2 s
        b.delay(0.1)
        assert 0.3 <= connect_time(a, b.address) < 0.45  # and b's SYN-ACK 0.1 s
        assert any("mezzo.testing.netdelay 0.2" in line for line in net.log)
        net.heal()
        assert connect_time(a, b.address) < 0.05
        assert "NFQUEUE" not in a.run(["iptables", "-t", "mangle", "-S", "OUTPUT"])
        with pytest.raises(ValueError, match="seconds"):
            a.delay(0)
    finally:
        server.kill()
        server.wait()


def test_bad_host_names_are_refused(net):
    net.add_host("a")
    with pytest.raises(ValueError, match="already"):
        net.add_host("a")
    with pytest.raises(ValueError, match="host name 'A B'"):
        net.add_host("A B")


def test_close_kills_what_runs_on_the_hosts_and_removes_them():
    with SimNetwork() as network:
        host = network.add_host("a")
        sleeper = subprocess.Popen(host.command(["sleep", "300"]))
        deadline = time.monotonic() + 5
        while sleeper.pid not in host.processes() and time.monotonic() < deadline:
            time.sleep(0.01)  # nsenter has entered the namespace
        bridge = network.bridge
    assert sleeper.wait(5) == -signal.SIGKILL
    assert not os.path.exists(f"/run/netns/{host.netns}")
    assert not os.path.exists(f"/sys/class/net/{bridge}")


def test_sweep_removes_what_a_killed_test_left_behind():
    script = (
        "import subprocess, sys, time\n"
        "from mezzo.testing.netsim import SimNetwork\n"
        "net = SimNetwork()\n"
        "host = net.add_host('left')\n"
        "p = subprocess.Popen(host.command(['sleep', '300']))\n"
        "print(host.netns, net.bridge, p.pid, flush=True)\n"
        "time.sleep(300)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    netns, bridge, sleeper = child.stdout.readline().split()
    assert netns not in sweep(), "a live creator's network is not swept"
    assert os.path.exists(f"/run/netns/{netns}")
    child.kill()
    child.wait()
    removed = sweep()
    assert netns in removed and bridge in removed
    assert not os.path.exists(f"/run/netns/{netns}")
    assert not os.path.exists(f"/sys/class/net/{bridge}")
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{sleeper}") and time.monotonic() < deadline:
        time.sleep(0.05)  # reparented to init, which reaps it
    assert (
        not os.path.exists(f"/proc/{sleeper}")
        or "Z" in open(f"/proc/{sleeper}/stat").read().split(")")[1][:3]
    )


def test_names_stay_clear_of_the_netbw_isolators_and_a_full_supernet_is_refused():
    assert not NS_PREFIX.startswith("mezzo-net-")
    with SimNetwork("10.78.0.0/24") as first:
        assert str(first.subnet) == "10.78.0.0/24"
        with pytest.raises(NetsimError, match="no free /24 left in 10.78.0.0/24"):
            SimNetwork("10.78.0.0/24")


# -- a cluster on simulated hosts -----------------------------------------------------


def mezzo_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mezzo", *args], capture_output=True, text=True, timeout=timeout
    )


def test_a_cluster_on_simulated_hosts_runs_tasks_and_fails_over(tmp_path):
    with SimCluster(
        agents=3, masters=2, directory=str(tmp_path / "cluster"), master={"allocation_interval": 0.05}
    ) as sim:
        cluster = sim.cluster
        assert cluster is not None and sim.zk is not None and sim.net is not None
        assert sim.zk.hosts.startswith(sim.host("zk").address + ":")
        state = cluster.state()
        leader = cluster.leader()
        assert state["master"]["address"].startswith(sim.host(leader).address + ":")
        by_host = {a["hostname"]: a for a in state["agents"]}
        for i in (1, 2, 3):
            name = f"agent-{i}"
            assert by_host[name]["address"].startswith(sim.host(name).address + ":"), by_host[name]
            assert cluster.procs[name].pid in sim.host(name).processes()

        # A task runs on an agent's host: it sees that host's address, not loopback's.
        ran = mezzo_cli(
            "run",
            "--master",
            sim.master,
            "--timeout",
            "60",
            "--",
            sys.executable,
            "-c",
            "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
            f"s.connect(('{sim.net.gateway}', 9)); print('from', s.getsockname()[0])",
        )
        assert ran.returncode == 0, ran.stdout + ran.stderr
        agent_addresses = {sim.host(f"agent-{i}").address for i in (1, 2, 3)}
        seen = [line.split()[-1] for line in ran.stdout.splitlines() if line.startswith("from ")]
        assert seen and seen[0] in agent_addresses, ran.stdout

        # The leader's host dies: another master, on another host, takes over.
        cluster.kill(leader, signal.SIGKILL)
        new = cluster.leader(timeout=30)
        assert new != leader
        cluster.wait_for_agents(3)
        assert cluster.state()["master"]["address"].startswith(sim.host(new).address + ":")
    assert not any(os.path.exists(f"/run/netns/{h.netns}") for h in sim.net.hosts.values())
