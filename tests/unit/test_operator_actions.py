"""OperatorActions (drain, reactivate, kill_task) on an in-process master: no sockets,
sends recorded by a RecordingOutbox, time moved by a ManualClock. Also the pieces of
"why pending" and the Mesos-shaped documents that depend on them, rendered in-process,
and RefuseFilters.refused_agents."""

from __future__ import annotations

import math

import pytest

from mezzo import AgentInfo, CommandInfo, Filters, FrameworkInfo, Resources, TaskInfo, TaskState, TaskStatus
from mezzo.acls import FULL_VIEW, parse, single_tenant
from mezzo.config import MasterConfig
from mezzo.master import Master, mesos_view
from mezzo.master.operator_actions import (
    DRAIN_REASON,
    DRAINED,
    DRAINING,
    GRACE_MAX,
    KILLED_BY_OPERATOR_REASON,
    KILLING,
    REACTIVATED,
    REFUSED,
    UNKNOWN,
    OperatorActions,
)
from mezzo.master.ports import ManualClock, RecordingOutbox
from mezzo.master.refusals import RefuseFilters
from mezzo.master.why_pending import PendingFacts, why_pending
from mezzo.plugins import load_plugins
from mezzo.wire.ttypes import RunningTask

AGENT_TOTAL = Resources(cpus=4, mem=1024)


class Link:
    """A peer's link as the master sees it (its answers go through the outbox)."""

    def __init__(self, name: str) -> None:
        self.peer = name
        self.tag = None
        self.last_received = 0.0

    def remote(self, schema):
        return _Ignore()

    def close(self) -> None:
        pass


class _Ignore:
    def __getattr__(self, name):
        return lambda *args: None


class Cluster:
    """A leading master with two agents and one framework, offers made."""

    def __init__(self) -> None:
        self.outbox = RecordingOutbox()
        self.clock = ManualClock()
        self.master = Master(
            MasterConfig(
                allocation_interval=0.01,
                offer_timeout=10_000,
                agent_ping_timeout=10_000,
                framework_idle_timeout=10_000,
            ),
            load_plugins(),
            clock=self.clock,
            outbox=self.outbox,
        )
        self.master.lead()
        self.state = self.master.state
        self.agent_links: dict[str, Link] = {}
        for name in ("a", "b"):
            link = Link(name)
            self.master.service.register_agent(
                link, AgentInfo(hostname=name, port=5051, resources=AGENT_TOTAL)
            )
            ((aid,),) = self.outbox.calls(link, "registered")
            self.agent_links[aid] = link
        self.a, self.b = sorted(self.agent_links, key=lambda aid: self.agent_links[aid].peer)
        self.fw = Link("scheduler")
        self.master.service.register_framework(self.fw, FrameworkInfo(name="f", failover_timeout=300))
        ((self.fid, _),) = self.outbox.calls(self.fw, "registered")
        self.clock.advance(0)

    def offers_of(self, agent_id: str, since: int = 0) -> list:
        """Offers of ``agent_id`` the framework got (in outbox entries from ``since`` on)."""
        return [
            o
            for link, _, call, args in self.outbox.sent[since:]
            if link is self.fw and call == "resource_offers"
            for o in args[0]
            if o.agent_id == agent_id
        ]

    def outstanding(self, agent_id: str) -> list[str]:
        return list(self.state.agents[agent_id].offers)

    def launch(self, agent_id: str, task_id: str) -> None:
        (offer_id,) = self.outstanding(agent_id)
        task = TaskInfo(
            task_id=task_id,
            agent_id=agent_id,
            resources=Resources(cpus=1, mem=64),
            command=CommandInfo(value="sleep 60"),
        )
        self.master.service.launch_tasks(self.fw, self.fid, [offer_id], [task], Filters(refuse_seconds=0))
        self.report(agent_id, task_id, TaskState.TASK_RUNNING)

    def report(self, agent_id: str, task_id: str, state: int, reason: str = "") -> None:
        status = TaskStatus(
            task_id=task_id, state=state, framework_id=self.fid, agent_id=agent_id, uuid=f"{task_id}-{state}"
        )
        status.reason = reason
        self.master.service.status_update(self.agent_links[agent_id], status)

    def kills(self, agent_id: str) -> list[tuple]:
        return self.outbox.calls(self.agent_links[agent_id], "kill_task")

    def close(self) -> None:
        self.master.term.close()


@pytest.fixture
def cluster():
    c = Cluster()
    yield c
    c.close()


def operator_acls():
    return parse(single_tenant(agents=["agent"], operators=["op"], frameworks=["web"])).for_tls(True)


# -- drain -------------------------------------------------------------------------------


def test_drain_takes_the_agent_out_of_offers_and_rescinds_what_was_offered(cluster) -> None:
    c = cluster
    assert c.outstanding(c.a) and c.a not in c.state.offerable  # all of it is offered
    offered = c.outstanding(c.a)
    actions = c.master.operator

    outcome, message = actions.drain(None, "peer", c.a, grace=30)

    assert outcome == DRAINING and "1 offer(s) rescinded" in message and c.a in message
    # Its resources are free again, yet it is not offerable.
    assert c.state.agents[c.a].free == AGENT_TOTAL
    assert c.a not in c.state.offerable and c.outstanding(c.a) == []
    assert [args[0] for args in c.outbox.calls(c.fw, "offer_rescinded")] == offered
    drain = c.state.agents[c.a].drain
    assert drain is not None and drain.grace == 30 and drain.by is None
    # No new offer of it in later cycles; the other agent is untouched.
    mark = len(c.outbox.sent)
    c.clock.advance(5)
    assert c.offers_of(c.a, mark) == []
    assert c.outstanding(c.b)
    shown = drain.shown(c.state.agents[c.a])
    assert shown["state"] == DRAINED  # no task on it
    assert shown["config"] == {"max_grace_period": {"nanoseconds": 30_000_000_000}}
    assert shown["deadline"] == pytest.approx(shown["started_time"] + 30)


def test_the_tasks_are_killed_only_once_the_grace_has_passed(cluster) -> None:
    c = cluster
    c.launch(c.a, "t1")
    assert c.state.agents[c.a].tasks
    c.master.operator.drain("op", "peer", c.a, grace=10)
    drain = c.state.agents[c.a].drain
    assert drain.state_of(c.state.agents[c.a]) == DRAINING

    c.clock.advance(9.9)
    assert c.kills(c.a) == []
    c.clock.advance(0.2)
    ((fid, tid, policy),) = c.kills(c.a)
    assert (fid, tid) == (c.fid, "t1")
    assert policy.reason == DRAIN_REASON and "drained" in policy.message
    assert drain.kill_timer is None
    assert c.state.agents[c.a].tasks[(c.fid, "t1")].kill_requested
    # The agent reports the kill: the drain is done.
    c.report(c.a, "t1", TaskState.TASK_KILLED, DRAIN_REASON)
    assert drain.state_of(c.state.agents[c.a]) == DRAINED
    assert c.state.agents[c.a].drain is drain  # still drained until reactivated
    c.clock.advance(100)
    assert len(c.kills(c.a)) == 1


def test_a_grace_of_zero_kills_at_the_next_turn(cluster) -> None:
    c = cluster
    c.launch(c.a, "t1")
    c.master.operator.drain("op", "peer", c.a, grace=0)
    c.clock.advance(0)
    assert [args[:2] for args in c.kills(c.a)] == [(c.fid, "t1")]


def test_draining_again_replaces_the_timer(cluster) -> None:
    c = cluster
    c.launch(c.a, "t1")
    actions = c.master.operator
    actions.drain("op", "peer", c.a, grace=10)
    first = c.state.agents[c.a].drain
    c.clock.advance(6)
    actions.drain("op", "peer", c.a, grace=10)  # counted from now: kills at 16
    second = c.state.agents[c.a].drain
    assert second is not first and first.kill_timer is None or first.kill_timer.cancelled
    c.clock.advance(5)  # 11: the first deadline passed
    assert c.kills(c.a) == []
    c.clock.advance(5.5)  # 16.5
    assert len(c.kills(c.a)) == 1
    c.clock.advance(100)
    assert len(c.kills(c.a)) == 1


def test_reactivate_cancels_the_kill_and_the_agent_is_offered_again(cluster) -> None:
    c = cluster
    c.launch(c.a, "t1")
    actions = c.master.operator
    actions.drain("op", "peer", c.a, grace=10)
    drain = c.state.agents[c.a].drain
    c.clock.advance(1)
    assert c.a not in c.state.offerable

    outcome, message = actions.reactivate("op", "peer", c.a)

    assert outcome == REACTIVATED and "offered again" in message
    assert c.state.agents[c.a].drain is None
    assert c.a in c.state.offerable  # 3 cpus still free on it
    mark = len(c.outbox.sent)
    c.clock.advance(20)
    assert c.kills(c.a) == []
    assert drain.kill_timer is None or drain.kill_timer.cancelled
    assert c.offers_of(c.a, mark), "the agent is offered again"
    # Reactivating an agent that is not draining says so, and is no error.
    outcome, message = actions.reactivate("op", "peer", c.a)
    assert outcome == REACTIVATED and "was not draining" in message


def test_unknown_agents_and_bad_graces(cluster) -> None:
    actions = cluster.master.operator
    outcome, message = actions.drain(None, "peer", "no-such-agent", grace=1)
    assert outcome == UNKNOWN and "'no-such-agent'" in message
    outcome, message = actions.reactivate(None, "peer", "no-such-agent")
    assert outcome == UNKNOWN and "'no-such-agent'" in message
    for grace in (-1.0, math.nan, math.inf, GRACE_MAX + 1):
        with pytest.raises(ValueError):
            actions.drain(None, "peer", cluster.a, grace=grace)
    assert cluster.state.agents[cluster.a].drain is None
    assert actions.drain(None, "peer", cluster.a, grace=GRACE_MAX)[0] == DRAINING


def test_the_end_of_the_term_cancels_drain_kills(cluster) -> None:
    c = cluster
    c.launch(c.a, "t1")
    c.master.operator.drain("op", "peer", c.a, grace=10)
    drain = c.state.agents[c.a].drain
    c.master.operator.cancel()
    assert drain.kill_timer is None
    c.clock.advance(20)
    assert c.kills(c.a) == []


def test_a_drain_kill_for_a_disconnected_agent_waits_for_it(cluster) -> None:
    c = cluster
    c.launch(c.a, "t1")
    c.master.operator.drain("op", "peer", c.a, grace=1)
    agent = c.state.agents[c.a]
    conn = agent.conn
    agent.conn = None  # as while the agent is disconnected
    try:
        c.clock.advance(2)
        assert c.kills(c.a) == []
        assert list(agent.pending_kills) == [(c.fid, "t1")]
        assert agent.pending_kills[(c.fid, "t1")].reason == DRAIN_REASON
    finally:
        agent.conn = conn


def test_a_deferred_drain_kill_keeps_its_reason_when_the_agent_comes_back(cluster) -> None:
    c = cluster
    c.launch(c.a, "t1")
    task = c.state.agents[c.a].tasks[(c.fid, "t1")].info
    c.master.service.connection_lost(c.agent_links[c.a])
    assert not c.state.agents[c.a].connected
    c.master.operator.drain("op", "peer", c.a, grace=1)
    c.clock.advance(2)
    assert list(c.state.agents[c.a].pending_kills) == [(c.fid, "t1")]
    back = Link("a-again")
    running = RunningTask(
        framework_id=c.fid,
        task=task,
        latest=TaskStatus(task_id="t1", state=TaskState.TASK_RUNNING, framework_id=c.fid, agent_id=c.a),
    )
    info = AgentInfo(hostname="a", port=5051, resources=AGENT_TOTAL, agent_id=c.a)
    c.master.service.reregister_agent(back, info, [running], [])
    assert c.outbox.calls(back, "reregistered") == [(c.a,)]
    ((fid, tid, *policy),) = c.outbox.calls(back, "kill_task")
    assert (fid, tid) == (c.fid, "t1")
    assert policy and policy[0] is not None and policy[0].reason == DRAIN_REASON


# -- kill --------------------------------------------------------------------------------


def test_kill_task_sends_the_kill_with_the_operators_reason(cluster) -> None:
    c = cluster
    c.launch(c.a, "t1")
    outcome, message = c.master.operator.kill_task("op", "peer", c.fid, "t1")
    assert outcome == KILLING and "t1" in message
    ((fid, tid, policy),) = c.kills(c.a)
    assert (fid, tid) == (c.fid, "t1")
    assert policy.reason == KILLED_BY_OPERATOR_REASON and policy.message == "killed by op"
    # Unknown task, unknown framework.
    outcome, message = c.master.operator.kill_task("op", "peer", c.fid, "nope")
    assert outcome == UNKNOWN and "'nope'" in message
    outcome, message = c.master.operator.kill_task("op", "peer", "no-framework", "t1")
    assert outcome == UNKNOWN and "'no-framework'" in message
    assert len(c.kills(c.a)) == 1


# -- ACLs --------------------------------------------------------------------------------


def test_acls_refuse_drain_reactivate_and_kill_to_others_than_operators(cluster) -> None:
    c = cluster
    c.launch(c.a, "t1")
    actions = OperatorActions(c.state, operator_acls())
    for who in ("web", None):
        outcome, message = actions.drain(who, "peer", c.a, grace=0)
        assert outcome == REFUSED and "master.acls.drain_agents" in message
        assert c.state.agents[c.a].drain is None and c.a in c.state.offerable
        outcome, message = actions.reactivate(who, "peer", c.a)
        assert outcome == REFUSED and "master.acls.drain_agents" in message
        outcome, message = actions.kill_task(who, "peer", c.fid, "t1")
        assert outcome == REFUSED and "master.acls.kill_tasks" in message
        # A refusal does not tell whether the agent or task exists.
        assert actions.drain(who, "peer", "no-such-agent")[0] == REFUSED
        assert actions.kill_task(who, "peer", c.fid, "no-such-task")[0] == REFUSED
    assert "a caller without a certificate" in actions.drain(None, "peer", c.a)[1]
    c.clock.advance(1)
    assert c.kills(c.a) == []

    assert actions.kill_task("op", "peer", c.fid, "t1")[0] == KILLING
    assert actions.drain("op", "peer", c.b, grace=5)[0] == DRAINING
    assert c.state.agents[c.b].drain.by == "op"
    assert actions.reactivate("op", "peer", c.b)[0] == REACTIVATED


# -- why pending and the documents, in-process ----------------------------------------------


def test_why_pending_and_documents_show_drains_refusals_and_held_offers(cluster) -> None:
    c = cluster
    m = c.master
    record = c.state.frameworks[c.fid]

    def reasons() -> dict[str, dict]:
        return {r["reason"]: r for r in why_pending(PendingFacts(m), record)}

    assert "offers_held" in reasons() and reasons()["offers_held"]["offers"] == 2
    # Decline b for 60 s: refused, b's id listed with the seconds left.
    (offer_b,) = c.outstanding(c.b)
    m.service.decline_offer(c.fw, c.fid, [offer_b], Filters(refuse_seconds=60))
    c.clock.advance(1)
    refused = reasons()["refuse_filters"]
    assert refused["agents_refused"] == 1
    ((left,),) = [[a["seconds_left"] for a in refused["agents"] if a["slave_id"] == c.b]]
    assert 58 <= left <= 59.5
    # Draining a: its offer is rescinded; b is refused, so nothing is held.
    m.operator.drain(None, "peer", c.a, grace=60)
    assert "offers_held" not in reasons()
    assert "no_free_resources" not in reasons()  # b is free (refused, but offerable)
    overview = mesos_view.overview(m, FULL_VIEW)
    assert overview["agents"] == {"active": 1, "inactive": 0, "draining": 1}
    assert overview["offers"] == 0 and overview["tasks"]["TASK_RUNNING"] == 0
    assert overview["resources"]["total"]["cpus"] == 8.0
    (framework,) = overview["frameworks"]
    assert [r["reason"] for r in framework["why_pending"]] == ["refuse_filters"]
    slaves = mesos_view.slaves(m, FULL_VIEW)
    by_id = {s["id"]: s for s in slaves["slaves"]}
    assert by_id[c.a]["draining"] is True and by_id[c.a]["drain_info"]["state"] == DRAINED
    assert by_id[c.b]["draining"] is False and "drain_info" not in by_id[c.b]
    page = mesos_view.slaves(m, FULL_VIEW, limit=1, offset=1)
    assert len(page["slaves"]) == 1 and page["total"] == 2
    assert mesos_view.offers(m, FULL_VIEW) == {"offers": [], "total": 0}
    # Both drained: no agent is offerable, and the reason names the drains.
    m.operator.drain(None, "peer", c.b, grace=60)
    assert "2 agent(s) draining" in reasons()["no_free_resources"]["message"]
    # Suppressed, then disconnected with a failover countdown.
    m.service.set_needs_offers(c.fw, c.fid, False)
    assert "suppressed" in reasons()
    m.service.connection_lost(c.fw)
    gone = reasons()
    assert "suppressed" not in gone  # disconnected says more
    assert 299 <= gone["disconnected"]["failover_seconds_left"] <= 300
    (framework,) = mesos_view.frameworks(m, FULL_VIEW)["frameworks"]
    assert framework["connected"] is False and framework["failover_deadline"] == pytest.approx(
        record.failover_deadline
    )


def test_the_frameworks_document_computes_the_cluster_wide_facts_once(cluster, monkeypatch) -> None:
    c = cluster
    for name in ("g", "h"):
        c.master.service.register_framework(Link(name), FrameworkInfo(name=name))
    made: list[object] = []
    real = mesos_view.PendingFacts

    def counting(master, view):
        made.append(master)
        return real(master, view)

    monkeypatch.setattr(mesos_view, "PendingFacts", counting)
    document = mesos_view.frameworks(c.master, FULL_VIEW)
    assert len(document["frameworks"]) == 3
    assert all("why_pending" in f for f in document["frameworks"])
    assert len(made) == 1


# -- RefuseFilters.refused_agents ------------------------------------------------------------


def test_refused_agents_counts_all_and_lists_the_soonest_first() -> None:
    f = RefuseFilters()
    r = Resources(cpus=1, mem=64)
    f.add("fw", "late", r, until=100.0, free=r)
    f.add("fw", "soon", r, until=20.0, free=r)
    f.add("fw", "forever", r, until=math.inf, free=r)
    f.add("other", "soon", r, until=5.0, free=r)
    count, soonest = f.refused_agents("fw", now=10.0, limit=2)
    assert count == 3
    assert soonest == [("soon", 10.0), ("late", 90.0)]
    count, listed = f.refused_agents("fw", now=10.0, limit=10)
    assert listed[-1] == ("forever", math.inf)
    assert f.refused_agents("nobody", now=0.0, limit=10) == (0, [])
    # A refusal in two parts lapses for sure when its last part ends.
    half = Resources(cpus=0.5, mem=32)
    g = RefuseFilters()
    g.add("fw", "ag", half, until=50.0, free=half)
    g.add("fw", "ag", half, until=80.0, free=half)
    assert g.refused_agents("fw", now=0.0, limit=10) == (1, [("ag", 80.0)])


# -- found in review ----------------------------------------------------------------------


def test_removing_a_draining_agent_cancels_its_kill_timer(cluster) -> None:
    c = cluster
    c.launch(c.a, "t1")
    c.master.operator.drain("op", "peer", c.a, grace=7 * 24 * 3600)
    drain = c.state.agents[c.a].drain
    assert drain.kill_timer is not None
    c.master.term.agents.remove(c.state.agents[c.a], "gone for the test")
    assert drain.kill_timer is None  # the week-long timer no longer holds the term's state


def test_revocation_takes_no_task_on_a_draining_agent(cluster) -> None:
    c = cluster
    c.launch(c.a, "t1")
    c.master.operator.drain("op", "peer", c.a, grace=600)
    record = c.state.frameworks[c.fid]
    task = record.tasks["t1"]
    from mezzo.master.revocation_monitor import RevocationMonitor

    monitor = RevocationMonitor.__new__(RevocationMonitor)
    monitor.cluster = c.state
    monitor.revoking = {}
    assert not monitor._revocable(record, task)  # freeing it there would give nobody anything


def test_events_report_tasks_the_master_ends_itself(cluster) -> None:
    import asyncio
    import json

    c = cluster
    c.launch(c.a, "t1")

    async def main() -> list[dict]:
        subscriber = c.master.events.subscribe(FULL_VIEW)
        assert subscriber is not None
        c.master.term.agents.remove(c.state.agents[c.a], "lost for the test")
        return [json.loads(r) for r in await subscriber.next_batch(1)]

    events = asyncio.run(main())
    updates = [e["task_updated"] for e in events if e["type"] == "TASK_UPDATED"]
    assert [(u["status"]["task_id"], u["state"], u["status"]["source"]) for u in updates] == [
        ("t1", "TASK_LOST", "master")
    ]
    assert [e["type"] for e in events][-1] == "AGENT_REMOVED"


def test_a_restricted_viewer_learns_nothing_of_frameworks_and_agents_it_may_not_see(cluster) -> None:
    c = cluster
    # A second framework, of another user, that the viewer may not see.
    other = Link("other")
    c.master.service.register_framework(other, FrameworkInfo(name="hidden", user="bob"))
    c.master.service.decline_offer(
        c.fw, c.fid, c.outstanding(c.a) + c.outstanding(c.b), Filters(refuse_seconds=60)
    )
    acls = parse(
        {"permissive": False, "view_frameworks": [{"principals": ["viewer"], "users": ["nobody"]}]}
    )
    view = acls.view_of("viewer")
    assert not view.cluster
    (reasons,) = [
        f["why_pending"] for f in mesos_view.frameworks(c.master, view)["frameworks"] if f["id"] == c.fid
    ]
    refused = next(r for r in reasons if r["reason"] == "refuse_filters")
    assert all("slave_id" not in a for a in refused["agents"])  # no agent ids without view_cluster
    order = [r for r in reasons if r["reason"] == "allocator_order"]
    assert all(r["of"] == 1 for r in order)  # ranked among the frameworks it sees only
