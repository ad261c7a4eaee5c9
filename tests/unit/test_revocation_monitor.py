"""The master's revocation monitor, in process and without sockets: who is starved,
offers before tasks, what a policy may return, the hold for the starved framework,
and one round per launch.

End to end (real agents, real drivers, real kills) in tests/test_revocation.py.
"""

from __future__ import annotations

import time

import pytest
from mezzo import AgentInfo, CommandInfo, FrameworkInfo, Resources, TaskInfo, TaskState, TaskStatus
from mezzo.config import MasterConfig, from_dict
from mezzo.hookspecs import RevocationPolicy, Victim
from mezzo.master import Master
from mezzo.master.ports import ManualClock
from mezzo.master.revocation_monitor import HOLD_SECONDS
from mezzo.plugins import load_plugins
from mezzo.wire.ttypes import Filters, KillPolicy

from .test_master_connections import RecordingConnection

DELAY = 2.0


@pytest.fixture
def master():
    config = from_dict({"master": {
        "allocation_interval": 0.01, "revocation_delay": DELAY, "revocation_grace_period": 0.5,
        "allocator": {"drf": {"guarantees": {"frameworks": {"A": 0.5, "S": 0.5}}}},
    }}).master
    m = Master(config, load_plugins(), clock=ManualClock())
    m.lead()
    yield m
    m.term.close()


def add_agent(master: Master, name: str, cpus: float = 4) -> tuple[str, RecordingConnection]:
    conn = RecordingConnection(name)
    master.service.register_agent(conn, AgentInfo(hostname=name, port=5051, resources=Resources(cpus=cpus, mem=4096)))
    (agent_id,) = conn.called("registered")[0]
    return agent_id, conn


def add_framework(master: Master, name: str) -> RecordingConnection:
    conn = RecordingConnection(name)
    master.service.register_framework(conn, FrameworkInfo(name=name, framework_id=name))
    return conn


def launch_all(master: Master, sched: RecordingConnection, fid: str, per_task: float = 1) -> list[str]:
    """Allocate, and launch ``per_task``-cpu tasks on every offer ``fid`` got."""
    master.term.allocation.run()
    launched = []
    for (batch,) in sched.called("resource_offers"):
        for offer in batch:
            if offer.offer_id not in master.state.frameworks[fid].offers:
                continue
            n = int(Resources.of(offer.resources).get("cpus") // per_task)
            tasks = [TaskInfo(task_id=f"{fid}-{len(launched) + i}", agent_id=offer.agent_id,
                              resources=Resources(cpus=per_task, mem=256), command=CommandInfo(value="sleep 60"))
                     for i in range(n)]
            launched += [t.task_id for t in tasks]
            master.service.launch_tasks(sched, fid, [offer.offer_id], tasks, Filters(refuse_seconds=0))
    sched.calls.clear()
    return launched


def starve(master: Master, fid: str) -> None:
    """Make ``fid`` look like it has launched nothing for longer than the delay."""
    master.term.revocation.waiting_since[fid] = master.state.now() - DELAY - 1


def kills(conn: RecordingConnection) -> list[tuple[str, str, KillPolicy]]:
    return conn.called("kill_task")


@pytest.fixture
def full(master):
    """One agent of 4 cpus filled by "A" (guaranteed half), then "S" (guaranteed
    half) registers wanting offers."""
    agent_id, agent_conn = add_agent(master, "host-1")
    a = add_framework(master, "A")
    assert len(launch_all(master, a, "A")) == 4
    s = add_framework(master, "S")
    return agent_id, agent_conn, a, s


def test_nobody_is_starved_before_the_delay(master, full):
    _, agent_conn, _, _ = full
    assert master.term.revocation.check() == []
    assert master.term.revocation.starved_now == [] and kills(agent_conn) == []


def test_a_starved_framework_gets_the_newest_tasks_killed_with_the_grace_and_reason(master, full):
    _, agent_conn, _, _ = full
    starve(master, "S")
    victims = master.term.revocation.check()
    assert [v.task_id for v in victims] == ["A-3", "A-2"]  # newest first, 2 cpus meet S's half
    sent = kills(agent_conn)
    assert [(f, t) for f, t, _ in sent] == [("A", "A-3"), ("A", "A-2")]
    policy = sent[0][2]
    assert (policy.grace_seconds, policy.reason) == (0.5, "revoked")
    assert policy.message.startswith("revoked: framework A above its guarantee")
    assert master.metrics()["tasks_revoked"] == 2
    state = master.term.revocation.state()
    assert [(e["task_id"], e["for_framework_id"]) for e in state["revoking"]] == [("A-3", "S"), ("A-2", "S")]


def test_no_second_round_while_kills_are_in_flight_or_until_the_framework_launches(master, full):
    _, agent_conn, _, _ = full
    starve(master, "S")
    assert len(master.term.revocation.check()) == 2
    starve(master, "S")
    assert master.term.revocation.check() == []  # what is dying counts toward S's want, and S was served
    assert len(kills(agent_conn)) == 2


def test_what_a_revoked_task_frees_is_held_for_the_starved_framework(master, full):
    agent_id, agent_conn, a, s = full
    starve(master, "S")
    master.term.revocation.check()
    for tid in ("A-3", "A-2"):
        master.service.status_update(agent_conn, TaskStatus(task_id=tid, state=TaskState.TASK_KILLED, framework_id="A",
                                                    agent_id=agent_id, reason="revoked", uuid=f"u-{tid}"))
    master.term.allocation.run()
    offered_to = {o.framework_id for (batch,) in [*a.called("resource_offers"), *s.called("resource_offers")]
                  for o in batch}
    assert offered_to == {"S"}
    assert master.state.refusals.agents_refused_by("A") == 1
    assert master.term.revocation.revoking == {}
    # The hold ends after HOLD_SECONDS: then A may be offered it again.
    master.state.refusals.expire(master.state.now() + HOLD_SECONDS + 0.1)
    assert master.state.refusals.agents_refused_by("A") == 0


def test_a_framework_that_meets_its_guarantee_waits_the_whole_delay_once_below_it(master, full):
    _, agent_conn, _, _ = full
    starve(master, "A")  # A idles at twice its guarantee: not starved, and its wait starts over
    assert master.term.revocation.check() == []
    assert master.term.revocation.waiting_since["A"] == pytest.approx(master.state.now(), abs=0.5)
    assert kills(agent_conn) == []


def test_a_launch_makes_the_framework_eligible_again(master, full):
    starve(master, "S")
    master.term.revocation.check()
    assert "S" in master.term.revocation.served
    master.term.revocation.launched("S")
    assert "S" not in master.term.revocation.served and "S" not in master.term.revocation.waiting_since


def a_above_its_guarantee_with_an_offer(master: Master) -> tuple[RecordingConnection, RecordingConnection, str]:
    """"A" runs 6 of 8 cpus (above its half) and holds the offer of the other 2; "S"
    is starved. Returns A's and the agent's connections and the offer id."""
    agent_id, agent_conn = add_agent(master, "host-1", cpus=8)
    a = add_framework(master, "A")
    master.term.allocation.run()
    first = a.called("resource_offers")[0][0][0]
    tasks = [TaskInfo(task_id=f"A-{i}", agent_id=agent_id, resources=Resources(cpus=1, mem=256),
                      command=CommandInfo(value="sleep 60")) for i in range(6)]
    master.service.launch_tasks(a, "A", [first.offer_id], tasks, Filters(refuse_seconds=0))
    master.term.allocation.run()
    (offer,) = [o for (b,) in a.called("resource_offers")[1:] for o in b]
    add_framework(master, "S")
    starve(master, "S")
    return a, agent_conn, offer.offer_id


def test_offers_sat_on_longer_than_the_delay_are_rescinded_before_any_task_is_killed(master):
    a, agent_conn, offer_id = a_above_its_guarantee_with_an_offer(master)
    master.state.frameworks["A"].offers[offer_id].created_at = time.time() - DELAY - 1
    assert master.term.revocation.check() == []
    assert a.called("offer_rescinded") == [(offer_id,)]
    assert kills(agent_conn) == [] and master.term.revocation.offers_rescinded == 1
    assert master.state.refusals.agents_refused_by("A") == 1  # held for S


def test_young_offers_are_left_alone(master):
    # In a full cluster leftovers are offered all the time: they are no reason to wait.
    a, _, offer_id = a_above_its_guarantee_with_an_offer(master)
    assert len(master.term.revocation.check()) == 4  # S's want is 4 cpus; A keeps 2 tasks and its offer
    assert a.called("offer_rescinded") == [] and offer_id in master.state.frameworks["A"].offers


class Misbehaving(RevocationPolicy):
    name = "misbehaving"

    def __init__(self, answer) -> None:
        self.answer = answer

    def select(self, starved, holders):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_a_policy_that_raises_is_logged_and_nothing_is_killed(master, full):
    _, agent_conn, _, _ = full
    master.term.revocation.policy = Misbehaving(RuntimeError("policy bug"))
    starve(master, "S")
    assert master.term.revocation.check() == []
    assert kills(agent_conn) == []


def test_victims_the_policy_was_not_offered_or_names_twice_are_skipped(master, full):
    agent_id, agent_conn, _, _ = full
    good = Victim("A", "A-0", agent_id, "ok", "S")
    master.term.revocation.policy = Misbehaving([
        Victim("A", "no-such-task", agent_id, "x", "S"), good, good, Victim("S", "A-1", agent_id, "x", "S"),
    ])
    starve(master, "S")
    assert master.term.revocation.check() == [good]
    assert [(f, t) for f, t, _ in kills(agent_conn)] == [("A", "A-0")]


def test_tasks_being_killed_and_tasks_on_disconnected_agents_are_not_offered_to_the_policy(master, full):
    agent_id, _, a, _ = full
    seen = []

    class Spy(RevocationPolicy):
        name = "spy"

        def select(self, starved, holders):
            seen.append(sorted(t.task_id for h in holders for t in h.tasks))
            return []

    master.term.revocation.policy = Spy({}, key="spy")
    master.state.frameworks["A"].tasks["A-0"].state = TaskState.TASK_KILLING
    master.service.kill_task(a, "A", "A-1")  # its framework is killing it already
    starve(master, "S")
    master.term.revocation.check()
    assert seen == [["A-2", "A-3"]]
    master.state.agents[agent_id].conn = None
    starve(master, "S")
    master.term.revocation.check()
    assert seen[-1] == []


def test_off_by_default():
    m = Master(MasterConfig(), load_plugins(), clock=ManualClock())
    try:
        m.lead()
        assert m.term.revocation is None and m.metrics()["tasks_revoked"] == 0
    finally:
        m.term.close()
