"""mezzo's pytest plugin: the harnesses of :mod:`mezzo.testing` as fixtures.

Installing mezzo registers it with pytest (entry point ``mezzo`` in the group
``pytest11``), so any test can ask for:

- ``mezzo_cluster``: ``mezzo_cluster(agents=3, **kwargs)`` starts a real cluster
  (:class:`mezzo.testing.LocalProcessCluster`) and returns it; every cluster the
  test started is stopped when it ends;
- ``mezzo_zookeeper``: a running :class:`mezzo.testing.ZooKeeperServer`;
- ``mezzo_scripted_cycle``: the class :class:`mezzo.testing.ScriptedCycle`, an
  allocation cycle with fixed agents for allocator unit tests.

The names start with ``mezzo_`` so that they cannot clash with a project's own
fixtures. ``pytest -p no:mezzo`` turns the plugin off.

pytest imports this module at the start of every run in an environment where mezzo
is installed, whether the run tests anything of mezzo or not. So it imports nothing
of mezzo itself (the package pulls in the Thrift types, :mod:`mezzo.testing` asyncio
and the rpc layer: tens of milliseconds more per run): each fixture imports what it
needs when a test first uses it. For the same reason it is a top-level module of
the mezzo distribution rather than a module of the package.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from mezzo.testing import LocalProcessCluster, ScriptedCycle, ZooKeeperServer


class ClusterStarter:
    """What the ``mezzo_cluster`` fixture hands out: call it to start a cluster."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.clusters: list[LocalProcessCluster] = []
        """Every cluster started (or tried) so far, in order."""

    def __call__(self, agents: int = 3, **kwargs: Any) -> LocalProcessCluster:
        """Start a cluster of ``agents`` agents (``kwargs`` as for ``LocalProcessCluster``)
        and return it once every agent has registered; raises ``ClusterError`` (with the
        tail of each log) if it does not come up."""
        from mezzo.testing import LocalProcessCluster

        kwargs.setdefault("directory", str(self.directory / f"cluster{len(self.clusters)}"))
        cluster = LocalProcessCluster(agents, **kwargs)
        self.clusters.append(cluster)
        return cluster.start()

    def stop_all(self) -> None:
        """Stop every cluster started so far (done anyway when the test ends; call it
        to check something after they stopped). Stopping twice is harmless."""
        for cluster in self.clusters:
            cluster.stop()


@pytest.fixture
def mezzo_cluster(tmp_path: Path) -> Iterator[ClusterStarter]:
    """``mezzo_cluster(agents=3, **kwargs)``: start a ``mezzo.testing.LocalProcessCluster``
    (a master and ``agents`` agents as subprocesses; ``kwargs`` as for the class, e.g.
    ``master={"allocation_interval": 0.01}``) and return it once every agent has
    registered. Each cluster runs in its own directory under the test's ``tmp_path``
    (configuration and logs, kept by pytest for inspection). Every cluster the test
    started is stopped when the test ends, also one whose start failed;
    ``mezzo_cluster.stop_all()`` stops them earlier."""
    starter = ClusterStarter(tmp_path)
    yield starter
    starter.stop_all()


@pytest.fixture
def mezzo_zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    """A running ``mezzo.testing.ZooKeeperServer``: a real standalone ZooKeeper on a free
    loopback port, its data and log in the test's ``tmp_path``, stopped when the test
    ends. ``mezzo_zookeeper.url("/mezzo")`` is a ``zk://`` URL for masters and agents
    (``LocalProcessCluster(zk=...)``). Needs Java and Debian's ``zookeeper`` package."""
    from mezzo.testing import ZooKeeperServer

    with ZooKeeperServer(tmp_path / "zookeeper") as server:
        yield server


@pytest.fixture
def mezzo_scripted_cycle() -> type[ScriptedCycle]:
    """The class ``mezzo.testing.ScriptedCycle``:
    ``mezzo_scripted_cycle(allocator, free, refused=())`` is an allocation cycle over the
    agents of ``free`` (agent id -> free ``Resources``) in which the (framework id, agent
    id) pairs of ``refused`` are refused; ``offer`` calls ``allocator.allocated`` as the
    master does, and ``.offers`` records the offers made, in order."""
    from mezzo.testing import ScriptedCycle

    return ScriptedCycle
