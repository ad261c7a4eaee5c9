"""Clusters of several masters electing a leader through a real ZooKeeper server.

The server is mezzo's ``mezzo_zookeeper`` fixture, the clusters are started with its
``mezzo_cluster`` (both from mezzo's pytest plugin, :mod:`mezzo.testing`)."""

from __future__ import annotations

import pytest

FAST = {"allocation_interval": 0.01, "zk_session_timeout": 2.0, "recovery_hold_timeout": 5.0}


@pytest.fixture
def ha_cluster(mezzo_zookeeper, mezzo_cluster):
    """``ha_cluster(agents=2, masters=3, **kwargs)``: ``masters`` masters electing through
    the test's ZooKeeper, with short timeouts (``FAST``), and agents that reconnect fast.
    (It asks for the ZooKeeper first so that pytest stops the clusters before it.)"""

    def make(agents: int = 2, masters: int = 3, **kw):
        master = {**FAST, **kw.pop("master", {})}
        agent = {"reconnect_interval": 0.1, **kw.pop("agent", {})}
        return mezzo_cluster(
            agents, masters=masters, zk=mezzo_zookeeper.url("/mezzo"), master=master, agent=agent, **kw
        )

    return make
