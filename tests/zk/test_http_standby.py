"""Standby masters send HTTP callers to the leader (as Mesos' do), and answer /health themselves."""

from __future__ import annotations

import http.client

from mezzo.testing import wait_for


def ask(port: int, path: str) -> tuple[int, dict[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        answer = conn.getresponse()
        answer.read()
        return answer.status, dict(answer.getheaders())
    finally:
        conn.close()


def test_a_standby_redirects_every_call_but_health_to_the_leader(ha_cluster) -> None:
    cluster = ha_cluster(agents=0, masters=2)
    leader = cluster.leader()
    (standby,) = [name for name in cluster.master_ports if name != leader]
    standby_port = cluster.master_ports[standby]
    leader_address = f"127.0.0.1:{cluster.master_ports[leader]}"
    # A standby learns who leads from ZooKeeper a moment after the election: 503 until then
    # (and the cluster is up once one master leads: the other may not listen yet).
    def redirects() -> bool:
        try:
            return ask(standby_port, "/redirect")[0] == 307
        except ConnectionRefusedError:
            return False

    wait_for(redirects, 10, "the standby to know the leader")

    status, headers = ask(standby_port, "/master/metrics/snapshot?x=1")
    assert status == 307 and headers["Location"] == f"//{leader_address}/master/metrics/snapshot?x=1"
    status, headers = ask(standby_port, "/redirect")
    assert status == 307 and headers["Location"] == f"//{leader_address}"
    assert ask(standby_port, "/health")[0] == 200
    assert ask(cluster.master_ports[leader], "/metrics/snapshot")[0] == 200
