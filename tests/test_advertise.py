"""Where peers reach a master and an agent: ``advertise``, or else the bound address.

Real daemons on loopback addresses other than 127.0.0.1 (the whole 127/8 answers on
Linux), so that an address taken from the wrong place shows."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import pytest

from mezzo.master.service import MAX_ADDRESS_CHARS, agent_address
from mezzo.rpc.address import dialable_address


def mezzo(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mezzo", *args], capture_output=True, text=True, timeout=timeout
    )


def get_json(address: str, path: str) -> dict:
    with urllib.request.urlopen(f"http://{address}{path}", timeout=10) as answer:
        return json.loads(answer.read())


# -- the rules, on their own -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10.0.0.5", "10.0.0.5:5051"),
        ("10.0.0.5:7000", "10.0.0.5:7000"),
        ("agent-7.example.org", "agent-7.example.org:5051"),
        ("[fd00::5]:7000", "[fd00::5]:7000"),
        ("fd00::5", "[fd00::5]:5051"),
    ],
)
def test_an_advertised_address_is_written_whole(text: str, expected: str) -> None:
    assert dialable_address(text, 5051) == expected


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("0.0.0.0:5051", "no host peers can dial"),
        ("[::]:5051", "no host peers can dial"),
        (":5051", "no host peers can dial"),
        ("10.0.0.5:0", "port 0"),
        ("10.0.0.5:70000", "out of range"),
        ("10.0.0.5:http", "not a number"),
        ("   ", "the host is empty"),
        ("[]:7000", "the host is empty"),
        ("::0", "wildcard"),
        ("[fd00::5]7000", "is not \\[IPv6\\]"),
        ("[fd00::5", "is not \\[IPv6\\]"),
        ("10.0.0.5 :7000", "neither an IP address nor a DNS name"),
        ("300.1.1.1", "neither an IP address nor a DNS name"),
        ("a" * 254, "neither an IP address nor a DNS name"),
    ],
)
def test_an_address_no_peer_can_dial_is_refused_naming_why(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        dialable_address(text, 5051)


def test_the_master_takes_an_agents_claim_or_else_where_its_connection_came_from() -> None:
    assert agent_address("10.0.0.5", "10.0.0.9:41234", 5051) == "10.0.0.5:5051"
    assert agent_address("", "10.0.0.9:41234", 5051) == "10.0.0.9:5051"
    assert agent_address("", "::1:41234", 5051) == "[::1]:5051"
    assert agent_address("", "?", 5051) == ""
    assert agent_address("  ", "10.0.0.9:41234", 5051) == "10.0.0.9:5051"  # blank: not given
    # An agent bound to loopback (the default) is reached at its machine's address...
    assert agent_address("127.0.0.1:5051", "10.0.0.9:41234", 5051) == "10.0.0.9:5051"
    # ...unless its connection comes from loopback too: then the claim is right.
    assert agent_address("127.0.0.2:6000", "127.0.0.1:41234", 5051) == "127.0.0.2:6000"
    for hostile in ("x" * (MAX_ADDRESS_CHARS + 1), "0.0.0.0", 12345):
        with pytest.raises(ValueError):
            agent_address(hostile, "10.0.0.9:41234", 5051)


# -- for real -------------------------------------------------------------------------------


def test_an_agent_is_shown_at_the_address_it_bound_and_answers_there(make_cluster) -> None:
    cluster = make_cluster(1, agent={"listen": "127.0.0.2:0"})
    (agent,) = cluster.state()["agents"]
    assert agent["address"] == f"127.0.0.2:{agent['port']}"
    with urllib.request.urlopen(f"http://{agent['address']}/health", timeout=10) as answer:
        assert answer.status == 200  # the agent's own HTTP API, at the address shown
    (slave,) = get_json(cluster.master, "/master/slaves")["slaves"]
    assert slave["pid"] == f"slave(1)@{agent['address']}"


def test_an_agent_bound_everywhere_is_shown_where_its_connection_came_from(make_cluster) -> None:
    cluster = make_cluster(1, agent={"listen": "0.0.0.0:0"})
    (agent,) = cluster.state()["agents"]
    assert agent["address"] == f"127.0.0.1:{agent['port']}"


@pytest.mark.parametrize(
    ("advertise", "shown"),
    [("agent-one.example:7070", "agent-one.example:7070"), ("10.1.2.3", "10.1.2.3:{port}")],
)
def test_an_agent_is_shown_at_the_address_it_advertises(make_cluster, advertise: str, shown: str) -> None:
    cluster = make_cluster(1, agent={"advertise": advertise})
    (agent,) = cluster.state()["agents"]
    assert agent["address"] == shown.format(port=agent["port"])


def test_a_master_publishes_its_advertised_address_and_agents_dial_it(mezzo_zookeeper, mezzo_cluster) -> None:
    # Bound on 127.0.0.1, advertised by name: the agent finds the leader in ZooKeeper and
    # registers through the name, and the state says where the master is to be reached.
    cluster = mezzo_cluster(
        1,
        masters=1,
        zk=mezzo_zookeeper.url("/mezzo"),
        master={"advertise": "localhost", "zk_session_timeout": 2.0},
        agent={"reconnect_interval": 0.1},
    )
    port = cluster.master_ports["master-1"]
    state = cluster.state()
    assert state["master"]["address"] == f"localhost:{port}"
    assert [a["connected"] for a in state["agents"]] == [True]
    status, location = redirect_of(f"127.0.0.1:{port}")
    assert (status, location) == (307, f"//localhost:{port}")


def redirect_of(address: str) -> tuple[int, str]:
    import http.client

    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", "/master/redirect")
        answer = conn.getresponse()
        return answer.status, answer.getheader("Location") or ""
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("command", "key"),
    [
        (["master", "--listen", "127.0.0.1:0", "--advertise", "0.0.0.0"], "master.advertise"),
        (["agent", "--advertise", "10.0.0.5:99999"], "agent.advertise"),
    ],
)
def test_a_bad_advertised_address_is_one_line_naming_the_key(command: list[str], key: str) -> None:
    r = mezzo(*command, timeout=30)
    assert r.returncode == 2, r.stderr
    assert key in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
