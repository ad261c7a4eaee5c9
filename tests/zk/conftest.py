"""A real ZooKeeper server per test, and clusters of several masters electing through it."""

from __future__ import annotations

import pytest
from mezzo.testing import LocalProcessCluster, ZooKeeperServer

FAST = {"allocation_interval": 0.01, "zk_session_timeout": 2.0, "recovery_hold_timeout": 5.0}


@pytest.fixture
def zk():
    with ZooKeeperServer() as server:
        yield server


@pytest.fixture
def ha_cluster(zk, tmp_path):
    clusters = []

    def make(agents: int = 2, masters: int = 3, **kw) -> LocalProcessCluster:
        master = {**FAST, **kw.pop("master", {})}
        c = LocalProcessCluster(agents, masters=masters, zk=zk.url("/mezzo"), master=master,
                                agent={"reconnect_interval": 0.1, **kw.pop("agent", {})},
                                directory=str(tmp_path / f"cluster{len(clusters)}"), **kw)
        clusters.append(c)
        return c.start()

    yield make
    for c in clusters:
        c.stop()
