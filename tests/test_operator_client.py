"""The blocking HTTP client of the operator's commands (mezzo.operator_client) against a
real master: a kept-alive connection the master closed while idle is dialled again."""

from __future__ import annotations

import time

from mezzo.operator_client import OperatorClient


def test_a_connection_the_master_closed_while_idle_is_replaced(mezzo_cluster) -> None:
    cluster = mezzo_cluster(agents=1, master={"connections": {"unregistered_idle_timeout": 0.5}})
    with OperatorClient(cluster.master, timeout=5) as api:
        first = api.get("/version")
        time.sleep(2)  # the master closes the idle keep-alive connection meanwhile
        assert api.get("/version") == first
        (agent,) = api.get("/slaves")["slaves"]
        time.sleep(2)  # a change is sent on a new connection, never down a stale one
        assert "was not draining" in api.post("/master/reactivate", agentId=agent["id"])["message"]
