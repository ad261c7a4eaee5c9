"""The blocking HTTP client of the operator's commands (mezzo.operator_client) against a
real master: a kept-alive connection the master closed while idle is dialled again."""

from __future__ import annotations

from mezzo.operator_client import OperatorClient
from mezzo.state_client import fetch_metrics
from mezzo.testing import wait_for


def test_a_connection_the_master_closed_while_idle_is_replaced(mezzo_cluster) -> None:
    cluster = mezzo_cluster(agents=1, master={"connections": {"unregistered_idle_timeout": 0.5}})

    def closed_idle() -> int:
        """Connections the master closed for idling (asked on a Thrift connection of our own)."""
        return fetch_metrics(cluster.master)["connections"]["closed"]["unregistered_idle_timeout"]

    before = closed_idle()
    with OperatorClient(cluster.master, timeout=5) as api:
        first = api.get("/version")
        # The master closes the idle keep-alive connection meanwhile.
        wait_for(lambda: closed_idle() >= before + 1, 10, "the master to close the idle connection")
        assert api.get("/version") == first
        (agent,) = api.get("/slaves")["slaves"]
        # A change is sent on a new connection, never down a stale one.
        wait_for(lambda: closed_idle() >= before + 2, 10, "the master to close the idle connection again")
        assert "was not draining" in api.post("/master/reactivate", agentId=agent["id"])["message"]
