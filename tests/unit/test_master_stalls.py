"""The master's own stalls are not its agents' fault, and a mass loss is not acted on
blindly: the listening clock (mezzo.master.loop_watch) and the removal limit
(mezzo.master.agent_removals), in process on a manual clock. A real master frozen
with SIGSTOP: tests/test_master_stall.py.
"""

from __future__ import annotations

import pytest

from mezzo import AgentInfo, Resources
from mezzo.config import MasterConfig
from mezzo.master import Master
from mezzo.master.loop_watch import TICK, LoopWatch
from mezzo.master.ports import ManualClock
from mezzo.plugins import load_plugins

HEALTH = dict(allocation_interval=0.01, agent_ping_interval=0.2, agent_ping_timeout=1.0)


class AgentLink:
    """An agent's connection as the health check sees it: when it last heard from it."""

    def __init__(self, name: str, clock: ManualClock) -> None:
        self.peer = name
        self.tag = None
        self.closed = False
        self.pings = 0
        self._clock = clock
        self.last_received = clock.now()

    def heard(self) -> None:
        self.last_received = self._clock.now()

    def remote(self, schema):
        link = self

        class _Calls:
            def __getattr__(self, method):
                if method == "ping":
                    def ping():
                        link.pings += 1
                    return ping
                return lambda *args: None

        return _Calls()

    def close(self) -> None:
        self.closed = True


def cluster(agents: int, **config) -> tuple[Master, ManualClock, list[AgentLink]]:
    clock = ManualClock()
    master = Master(MasterConfig(**{**HEALTH, **config}), load_plugins(), clock=clock)
    master.lead()
    links = []
    for i in range(agents):
        link = AgentLink(f"agent-{i}", clock)
        master.service.register_agent(link, AgentInfo(hostname=f"h{i}", port=5051,
                                                      resources=Resources(cpus=1, mem=64)))
        links.append(link)
    return master, clock, links


def test_the_listening_clock_leaves_a_stall_out():
    clock = ManualClock()
    watch = LoopWatch(clock)
    watch.start()
    clock.advance(1.0)
    before = clock.now()
    clock.jump(3.0)  # the loop is held for 3 s: no tick fires
    clock.advance(0)  # ... then the overdue tick runs, 3 s late
    assert watch.stalls == 1 and watch.stalled_seconds == pytest.approx(3.0 - 0.05, abs=0.11)
    assert watch.listened_since(before) < 2 * TICK
    clock.advance(0.5)
    assert watch.listened_since(before) == pytest.approx(0.5, abs=2 * TICK)
    assert watch.listened_since(clock.now() - 0.2) == pytest.approx(0.2)


def test_a_master_stalled_past_the_ping_timeout_loses_no_agent():
    master, clock, links = cluster(3)
    clock.advance(0.5)
    for link in links:
        link.heard()
    clock.jump(5.0)  # five times agent_ping_timeout
    clock.advance(0)  # the health check runs first after the stall
    assert len(master.state.agents) == 3 and not any(link.closed for link in links)
    assert master.metrics()["loop_stalls"] >= 1
    # Judged on the moments since the stall: pinged once silent past the interval, and
    # kept as long as they answer.
    clock.advance(0.3)
    assert all(link.pings >= 1 for link in links)
    for _ in range(20):
        clock.advance(0.1)
        for link in links:
            link.heard()
    assert len(master.state.agents) == 3


def test_an_agent_silent_in_listening_time_is_still_lost():
    master, clock, links = cluster(3)
    clock.advance(0.2)
    for link in links[1:]:
        link.heard()
    for _ in range(15):  # links[0] never answers; the others do
        clock.advance(0.1)
        for link in links[1:]:
            link.heard()
    assert [a.info.hostname for a in master.state.agents.values()] == ["h1", "h2"]
    assert links[0].closed


def test_many_agents_lost_at_once_are_removed_a_window_share_at_a_time():
    master, clock, links = cluster(20, agent_removal_fraction=0.1, agent_removal_window=60)
    clock.advance(0.5)
    silent, alive = links[:5], links[5:]
    for _ in range(20):  # five agents go quiet together; the rest keep answering
        clock.advance(0.1)
        for link in alive:
            link.heard()
    assert len(master.state.agents) == 18  # 10 % of 20: two in this window
    assert sum(link.closed for link in silent) == 2
    assert master.metrics()["agent_removals_deferred"] >= 3
    for _ in range(600):  # the next window: 10 % of the 18 left, one more
        clock.advance(0.1)
        for link in alive:
            link.heard()
    assert len(master.state.agents) == 17
    assert all(link.pings for link in silent)  # the ones kept are still asked, every check


def test_one_lost_agent_of_a_small_cluster_goes_at_once():
    master, clock, links = cluster(2, agent_removal_fraction=0.1)
    for _ in range(15):
        clock.advance(0.1)
        links[1].heard()
    assert len(master.state.agents) == 1 and links[0].closed  # at least one per window


def test_a_saturated_master_sheds_container_statistics_first():
    master, clock, links = cluster(1)
    agent_id = next(iter(master.state.agents))
    master.service.container_statistics(links[0], agent_id, '[{"container_id": "c1"}]')
    assert master.state.agents[agent_id].statistics == [{"container_id": "c1"}]
    master.loop_watch.lag = 0.2  # the loop runs 200 ms late
    assert master.loop_watch.saturated()
    master.service.container_statistics(links[0], agent_id, '[{"container_id": "c2"}]')
    assert master.state.agents[agent_id].statistics == [{"container_id": "c1"}]
    assert master.metrics()["statistics_shed"] == 1
    master.loop_watch.lag = 0.0
    master.service.container_statistics(links[0], agent_id, '[{"container_id": "c3"}]')
    assert master.state.agents[agent_id].statistics == [{"container_id": "c3"}]
