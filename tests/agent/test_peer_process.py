"""mezzo.agent.peer_process: which container's process holds the far end of a connection.

Real processes and real loopback sockets: a child started as a container is (the leader
of its own session, as the containerizer starts one), dialling a listening socket of
the test's, which plays the agent.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from mezzo.agent.peer_process import _column, connection_from_container, socket_inode

DIAL = """
import socket, sys, time
family = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(family)
s.connect((sys.argv[1], int(sys.argv[2])))
print("connected", flush=True)
time.sleep(60)
"""

DIAL_FROM_GRANDCHILD = """
import subprocess, sys
subprocess.run([sys.executable, "-c", sys.argv[3], sys.argv[1], sys.argv[2]])
"""


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    yield srv
    srv.close()


def container(argv: list[str]) -> subprocess.Popen:
    """A process started as the containerizer starts a container's first process."""
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)


def accepted(srv: socket.socket, proc: subprocess.Popen) -> socket.socket:
    assert proc.stdout is not None and proc.stdout.readline().strip() == "connected"
    conn, _ = srv.accept()
    return conn


def ends(conn: socket.socket) -> tuple[tuple[str, int], tuple[str, int]]:
    return conn.getpeername()[:2], conn.getsockname()[:2]


def test_a_connection_from_the_container_is_known_and_a_strangers_is_not(listener):
    host, port = listener.getsockname()
    proc = container([sys.executable, "-c", DIAL, host, str(port)])
    try:
        theirs = accepted(listener, proc)
        assert connection_from_container(proc.pid, *ends(theirs))
        # The test process dials too: same host, same ids it could name, not the container.
        mine = socket.create_connection((host, port))
        stranger, _ = listener.accept()
        assert not connection_from_container(proc.pid, *ends(stranger))
        mine.close()
        stranger.close()
        theirs.close()
    finally:
        proc.kill()
        proc.wait()


def test_a_descendant_of_the_leader_counts(listener):
    host, port = listener.getsockname()
    proc = container([sys.executable, "-c", DIAL_FROM_GRANDCHILD, host, str(port), DIAL])
    try:
        conn = accepted(listener, proc)
        assert connection_from_container(proc.pid, *ends(conn))
        conn.close()
    finally:
        proc.kill()
        proc.wait()


def test_once_the_process_is_gone_the_connection_is_not_the_containers(listener):
    host, port = listener.getsockname()
    proc = container([sys.executable, "-c", DIAL, host, str(port)])
    conn = accepted(listener, proc)
    peer, local = ends(conn)
    proc.kill()
    proc.wait()
    assert not connection_from_container(proc.pid, peer, local)
    conn.close()


def test_an_agent_listening_on_ipv6_finds_an_ipv4_dialler():
    if not socket.has_ipv6:
        pytest.skip("this kernel has no IPv6: nothing to test")
    srv = socket.socket(socket.AF_INET6)
    try:
        srv.bind(("::", 0))
    except OSError as exc:
        pytest.skip(f"cannot bind [::]: {exc}")
    srv.listen()
    proc = container([sys.executable, "-c", DIAL, "127.0.0.1", str(srv.getsockname()[1])])
    try:
        conn = accepted(srv, proc)
        peer, local = ends(conn)
        assert peer[0] == "::ffff:127.0.0.1"
        assert connection_from_container(proc.pid, peer, local)
        conn.close()
    finally:
        proc.kill()
        proc.wait()
        srv.close()


def test_no_such_socket():
    assert socket_inode(1, ("127.0.0.1", 1), ("127.0.0.1", 2)) is None
    assert socket_inode(1, ("not an address", 1), ("127.0.0.1", 2)) is None


def test_addresses_as_the_kernel_prints_them():
    import ipaddress

    # /proc/net/tcp of a little-endian host prints 127.0.0.1:8080 as 0100007F:1F90.
    if sys.byteorder == "little":
        assert _column(ipaddress.ip_address("127.0.0.1"), 8080) == "0100007F:1F90"
        assert _column(ipaddress.ip_address("::1"), 1) == "00000000000000000000000001000000:0001"


INSIDE_A_NAMESPACE = """
import socket, subprocess, sys, time
# A container with a network namespace of its own: a loopback connection inside it, to
# the agent's port number (argv[1]), from the client port argv[2], which it prints.
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
srv = socket.socket()
srv.bind(("127.0.0.1", int(sys.argv[1])))
srv.listen()
cli = socket.socket()
cli.bind(("127.0.0.1", int(sys.argv[2])))
cli.connect(("127.0.0.1", int(sys.argv[1])))
accepted = srv.accept()  # kept: closed, the client socket would leave ESTABLISHED
print(cli.getsockname()[1], flush=True)
time.sleep(60)
"""


def test_a_stranger_beside_the_agent_is_not_taken_for_a_container_in_its_own_namespace(listener):
    # Addresses name a socket only within one namespace. A container of the netbw isolator
    # has its own: a socket in it may have the very addresses a stranger in the agent's
    # namespace dials from; the stranger must still not pass for the container.
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("needs root, unshare and ip to make a network namespace (CI runs as root)")
    host, port = listener.getsockname()
    # The stranger's port first, bound here where ports are taken; inside the new
    # namespace nothing else holds it.
    stranger = socket.socket()
    stranger.bind(("127.0.0.1", 0))
    leader = subprocess.Popen(
        [
            "unshare",
            "-n",
            sys.executable,
            "-c",
            INSIDE_A_NAMESPACE,
            str(port),
            str(stranger.getsockname()[1]),
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert leader.stdout is not None
        assert int(leader.stdout.readline()) == stranger.getsockname()[1]
        stranger.connect((host, port))
        conn, _ = listener.accept()
        # The container's own table holds a socket 127.0.0.1:client_port -> 127.0.0.1:port.
        assert socket_inode(leader.pid, *ends(conn)) is not None
        assert not connection_from_container(leader.pid, *ends(conn))
        conn.close()
        stranger.close()
    finally:
        stranger.close()
        leader.kill()
        leader.wait()
