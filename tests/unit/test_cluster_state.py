"""The cluster state's invariant, driven through the master service with random calls
(Hypothesis), without sockets: sends are recorded by a RecordingOutbox and time moves
on a ManualClock.

    Every resource of every agent is in exactly one place: the agent's free pool,
    an outstanding offer, a task or an executor; and what the allocator was told a
    framework holds is what the state says it holds.
"""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from mezzo import (
    AgentInfo,
    CommandInfo,
    ExecutorInfo,
    FrameworkInfo,
    Resources,
    TaskInfo,
    TaskState,
    TaskStatus,
)
from mezzo.config import MasterConfig
from mezzo.master import Master
from mezzo.master.ports import ManualClock, RecordingOutbox
from mezzo.master.records import AgentTag, FrameworkTag
from mezzo.master.revocation_monitor import holding
from mezzo.plugins import load_plugins
from mezzo.wire.ttypes import Filters

from .allocator_ledger import AllocatorLedger

AGENT_TOTAL = Resources(cpus=4, mem=1024)


class Link:
    """A peer's link as the state sees it: an identity, a tag, and a sign of life."""

    def __init__(self, name: str) -> None:
        self.peer = name
        self.tag = None
        self.last_received = 0.0

    def remote(self, schema):  # the service answers errors on the calling link directly
        return _Ignore()

    def close(self) -> None:
        pass


class _Ignore:
    def __getattr__(self, name):
        return lambda *args: None


class ClusterMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.outbox = RecordingOutbox()
        self.master = Master(
            MasterConfig(allocation_interval=0.01, agent_reregister_timeout=5, offer_timeout=3),
            load_plugins(),
            clock=ManualClock(),
            outbox=self.outbox,
        )
        self.master.lead()
        self.service = self.master.service
        self.state = self.master.state
        self.links: dict[str, Link] = {}
        self.tasks = 0
        self.ledger = AllocatorLedger(self.state.allocator.inner)

    # -- rules ---------------------------------------------------------------------------

    @initialize()
    def a_small_cluster(self) -> None:
        for _ in range(2):
            self.add_agent()
            self.add_framework(10.0)
        self.master.clock.advance(0)  # the first cycle: both agents offered

    @rule()
    def add_agent(self) -> None:
        link = Link(f"agent-{len(self.links)}")
        self.service.register_agent(link, AgentInfo(hostname=link.peer, port=5051, resources=AGENT_TOTAL))
        self.links[link.peer] = link

    @rule(failover=st.sampled_from([0.0, 10.0]))
    def add_framework(self, failover: float) -> None:
        link = Link(f"framework-{len(self.links)}")
        self.service.register_framework(link, FrameworkInfo(name=link.peer, failover_timeout=failover))
        self.links[link.peer] = link

    @rule(seconds=st.sampled_from([0.0, 1.0, 5.0]))
    def time_passes(self, seconds: float) -> None:
        self.master.clock.advance(seconds)

    @precondition(lambda self: self.state.offer_book.offers)
    @rule(data=st.data(), cpus=st.sampled_from([0.5, 1.0, 4.0, 8.0]), with_executor=st.booleans())
    def launch(self, data, cpus: float, with_executor: bool) -> None:
        offer = data.draw(st.sampled_from(sorted(self.state.offer_book.offers.values(), key=lambda o: o.id)))
        framework = self.state.frameworks[offer.framework_id]
        self.tasks += 1
        task = TaskInfo(
            task_id=f"t{self.tasks}", agent_id=offer.agent_id, resources=Resources(cpus=cpus, mem=64)
        )
        if with_executor:
            task.executor = ExecutorInfo(
                executor_id="e", command=CommandInfo(value="x"), resources=Resources(cpus=0.5, mem=32)
            )
        else:
            task.command = CommandInfo(value="sleep 1")
        self.service.launch_tasks(framework.conn, framework.id, [offer.id], [task], Filters(refuse_seconds=1))

    @precondition(lambda self: self.state.offer_book.offers)
    @rule(data=st.data())
    def decline(self, data) -> None:
        offer = data.draw(st.sampled_from(sorted(self.state.offer_book.offers.values(), key=lambda o: o.id)))
        framework = self.state.frameworks[offer.framework_id]
        self.service.decline_offer(framework.conn, framework.id, [offer.id], Filters(refuse_seconds=2))

    @precondition(lambda self: any(a.tasks and a.conn is not None for a in self.state.agents.values()))
    @rule(
        data=st.data(),
        state=st.sampled_from([TaskState.TASK_RUNNING, TaskState.TASK_FINISHED, TaskState.TASK_FAILED]),
    )
    def task_update(self, data, state: int) -> None:
        agents = sorted(
            (a for a in self.state.agents.values() if a.tasks and a.conn is not None), key=lambda a: a.id
        )
        agent = data.draw(st.sampled_from(agents))
        fid, tid = data.draw(st.sampled_from(sorted(agent.tasks)))
        self.service.status_update(
            agent.conn,
            TaskStatus(
                task_id=tid, state=state, framework_id=fid, agent_id=agent.id, uuid=f"u{self.tasks}-{tid}"
            ),
        )

    @precondition(lambda self: any(a.executors and a.conn is not None for a in self.state.agents.values()))
    @rule(data=st.data())
    def executor_exits(self, data) -> None:
        agents = sorted(
            (a for a in self.state.agents.values() if a.executors and a.conn is not None), key=lambda a: a.id
        )
        agent = data.draw(st.sampled_from(agents))
        fid, eid = data.draw(st.sampled_from(sorted(agent.executors)))
        self.service.executor_exited(agent.conn, agent.id, fid, eid, 0, "exited")

    @precondition(lambda self: any(lk.tag is not None for lk in self.links.values()))
    @rule(data=st.data())
    def disconnect(self, data) -> None:
        link = data.draw(
            st.sampled_from(
                sorted((lk for lk in self.links.values() if lk.tag is not None), key=lambda lk: lk.peer)
            )
        )
        self.service.connection_lost(link)
        link.tag = None

    @precondition(lambda self: any(isinstance(lk.tag, AgentTag) for lk in self.links.values()))
    @rule(data=st.data())
    def agent_goes_silent(self, data) -> None:
        link = data.draw(
            st.sampled_from(
                sorted(
                    (lk for lk in self.links.values() if isinstance(lk.tag, AgentTag)), key=lambda lk: lk.peer
                )
            )
        )
        self.service.agent_link_silent(link, 60.0)

    @precondition(lambda self: any(isinstance(lk.tag, FrameworkTag) for lk in self.links.values()))
    @rule(data=st.data())
    def framework_unregisters(self, data) -> None:
        link = data.draw(
            st.sampled_from(
                sorted(
                    (lk for lk in self.links.values() if isinstance(lk.tag, FrameworkTag)),
                    key=lambda lk: lk.peer,
                )
            )
        )
        self.service.unregister_framework(link, link.tag.framework_id)

    # -- the invariant --------------------------------------------------------------------

    @invariant()
    def every_resource_is_in_exactly_one_place(self) -> None:
        for agent in self.state.agents.values():
            placed = agent.free
            for offer in agent.offers.values():
                placed = placed + offer.resources
            for task in agent.tasks.values():
                placed = placed + task.resources
            for executor in agent.executors.values():
                placed = placed + Resources.of(executor.resources)
            assert placed == agent.total, (agent.id, str(placed))
            assert (agent.id in self.state.offerable) == bool(agent.connected and agent.free)

    @invariant()
    def the_allocator_sees_what_the_state_holds(self) -> None:
        for framework in self.state.frameworks.values():
            assert self.ledger.of(framework.id) == dict(
                holding_with_all_executors(self.state, framework).scalars
            ), framework.id

    @invariant()
    def offers_are_booked_on_both_sides(self) -> None:
        for offer in self.state.offer_book.offers.values():
            assert self.state.frameworks[offer.framework_id].offers[offer.id] is offer
            assert self.state.agents[offer.agent_id].offers[offer.id] is offer


def holding_with_all_executors(state, framework) -> Resources:
    """What counts toward the framework for the allocator: tasks, offers and every
    executor of it (one left without tasks still holds its resources)."""
    total = holding(state, framework, offers=True)
    seen = set(framework.tasks.executors())
    for agent in state.agents.values():
        for (fid, eid), executor in agent.executors.items():
            if fid == framework.id and (agent.id, eid) not in seen:
                total = total + Resources.of(executor.resources)
    return total


ClusterMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
test_cluster_state_invariants = ClusterMachine.TestCase
