"""``mezzo state`` against a real master process: rendered in a forked child (one per
request, counted in the metrics), or inline: a small state by default, any with
``render_state_in_child = false``."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest

from mezzo.state_client import fetch_metrics, fetch_state, fetch_state_async
from mezzo.testing import LocalProcessCluster

AGENTS = 2


@pytest.fixture(scope="module")
def forking(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcessCluster]:
    """A cluster rendering its state in children (the default), shared by the tests
    that only fetch its state and metrics (each counts the snapshots from its own start).
    A state this small is rendered on the loop by default: forking is forced here."""
    directory = str(tmp_path_factory.mktemp("forking"))
    with LocalProcessCluster(
        AGENTS, agent_resources="cpus:1;mem:256", directory=directory, master={"render_inline_max_items": 0}
    ) as cluster:
        yield cluster


def snapshots(cluster) -> int:
    return fetch_metrics(cluster.master)["state_snapshots"]


def children_of(pid: int) -> list[int]:
    """Every child of process ``pid`` (zombies included) from /proc."""
    out: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            out += [int(c) for c in f.read().split()]
    return out


def check_state(cluster, state: dict) -> None:
    assert state["master"]["address"] == cluster.master
    assert len(state["agents"]) == AGENTS
    assert all(a["connected"] for a in state["agents"])
    assert sorted(a["hostname"] for a in state["agents"]) == [f"agent-{i}" for i in range(1, AGENTS + 1)]


def test_each_fetch_renders_one_snapshot_in_a_child(forking):
    cluster = forking
    before = snapshots(cluster)
    assert before >= 1, "starting the cluster fetched the state: at least one child rendered it"
    for i in range(1, 4):
        check_state(cluster, fetch_state(cluster.master))
        assert snapshots(cluster) == before + i
    # Metrics are not rendered in a child.
    fetch_metrics(cluster.master)
    assert snapshots(cluster) == before + 3
    # Every child was reaped: no zombie left in the master.
    assert children_of(cluster.procs["master"].pid) == []


def test_concurrent_fetches_each_get_their_answer(forking):
    cluster = forking
    before = snapshots(cluster)
    n = 8

    async def many():
        return await asyncio.gather(*(fetch_state_async(cluster.master, timeout=10) for _ in range(n)))

    states = asyncio.run(many())
    assert len(states) == n
    for state in states:
        check_state(cluster, state)
    forked = snapshots(cluster) - before
    assert 1 <= forked <= n, forked
    assert children_of(cluster.procs["master"].pid) == []


def test_rendering_inline_when_configured(make_cluster):
    cluster = make_cluster(AGENTS, agent_resources="cpus:1;mem:256",
                           master={"render_state_in_child": False})
    assert "render_state_in_child = false" in cluster.config_path.read_text()
    for _ in range(3):
        check_state(cluster, fetch_state(cluster.master))
    assert snapshots(cluster) == 0
    assert children_of(cluster.procs["master"].pid) == []


def test_a_small_state_is_rendered_on_the_loop_by_default(make_cluster):
    """No fork for a cluster of two agents (``master.render_inline_max_items``): a fork
    would cost the master's loop more than the rendering, and the asker 5 ms."""
    cluster = make_cluster(AGENTS, agent_resources="cpus:1;mem:256")
    before = fetch_metrics(cluster.master)
    for _ in range(3):
        check_state(cluster, fetch_state(cluster.master))
    after = fetch_metrics(cluster.master)
    assert after["state_snapshots"] == before["state_snapshots"]
    assert after["state_snapshots_inline"] == before["state_snapshots_inline"] + 3
    assert children_of(cluster.procs["master"].pid) == []
