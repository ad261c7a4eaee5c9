"""A new leader's recovery, in process and without sockets: offers and reconciliation
wait for the admitted agents, agents and frameworks are adopted from reports, lost
agents are refused, silent agents are removed, updates wait for their scheduler.

The behaviour end to end (real processes, real ZooKeeper) is in tests/zk/.
"""

from __future__ import annotations


import pytest

from mezzo import AgentInfo, CommandInfo, FrameworkInfo, Resources, TaskInfo, TaskState, TaskStatus
from mezzo.config import MasterConfig
from mezzo.master import Master
from mezzo.master.ports import ManualClock
from mezzo.plugins import load_plugins
from mezzo.wire.ttypes import RunningTask

from .test_master_connections import RecordingConnection


@pytest.fixture
def master():
    m = Master(MasterConfig(allocation_interval=0.01, recovery_hold_timeout=60,
                            framework_recovery_timeout=60), load_plugins(), clock=ManualClock())
    yield m
    m.term.close()


def agent_info(agent_id: str, cpus: float = 4) -> AgentInfo:
    return AgentInfo(agent_id=agent_id, hostname=f"host-{agent_id}", port=5051,
                     resources=Resources(cpus=cpus, mem=1024))


def running(fid: str, tid: str, agent_id: str, cpus: float = 1) -> RunningTask:
    task = TaskInfo(task_id=tid, agent_id=agent_id, resources=Resources(cpus=cpus, mem=64),
                    command=CommandInfo(value="sleep 60"))
    return RunningTask(framework_id=fid, task=task,
                       latest=TaskStatus(task_id=tid, state=TaskState.TASK_RUNNING, uuid="u-run"))


def offers_made(conn: RecordingConnection) -> list:
    return [o for (batch,) in conn.called("resource_offers") for o in batch]


def test_offers_and_reconciliation_wait_until_every_admitted_agent_is_back(master):
    master.registry.admitted.update({"A1", "A2"})
    master.lead({"A1", "A2"})
    assert master.term.recovery.holding and master.term.recovery.awaiting == {"A1", "A2"}

    # The framework comes back first: known from nobody yet, it keeps its id.
    sched = RecordingConnection("scheduler")
    master.service.register_framework(sched, FrameworkInfo(name="f", framework_id="F1", failover_timeout=30))
    assert sched.called("reregistered") == [("F1", master.address)]

    a1 = RecordingConnection("a1")
    master.service.reregister_agent(a1, agent_info("A1"), [running("F1", "t1", "A1")], [],
                            [FrameworkInfo(name="f", framework_id="F1")])
    assert a1.called("reregistered") == [("A1",)]
    master.term.allocation.run()
    assert offers_made(sched) == []  # A2 is still out: no offers yet
    master.service.reconcile_tasks(sched, "F1", [TaskStatus(task_id="t1"), TaskStatus(task_id="gone", agent_id="A1")])
    assert sched.called("status_update") == []  # deferred too

    a2 = RecordingConnection("a2")
    master.service.reregister_agent(a2, agent_info("A2"), [], [], [])
    assert not master.term.recovery.holding
    answers = {s.task_id: (TaskState(s.state).name, s.reason) for (s,) in sched.called("status_update")}
    assert answers == {"t1": ("TASK_RUNNING", "reconciliation"), "gone": ("TASK_DROPPED", "reconciliation")}
    master.term.allocation.run()
    free = {o.agent_id: o.resources.get("cpus") for o in offers_made(sched)}
    assert free == {"A1": 3.0, "A2": 4.0}  # the running task's cpu is not offered
    assert master.state.frameworks["F1"].tasks.keys() == {"t1"}


def test_frameworks_named_by_agents_are_recovered_and_get_their_held_updates(master):
    master.lead()
    agent = RecordingConnection("agent")
    master.service.reregister_agent(agent, agent_info("A1"), [running("F9", "t1", "A1")], [],
                            [FrameworkInfo(name="nine", framework_id="F9", failover_timeout=5)])
    record = master.state.frameworks["F9"]
    assert record.conn is None and record.tasks.keys() == {"t1"}
    assert record.failover_handle is not None  # removed if its scheduler never comes back

    done = TaskStatus(task_id="t1", state=TaskState.TASK_FINISHED, framework_id="F9", agent_id="A1", uuid="u-fin")
    master.service.status_update(agent, done)
    master.service.status_update(agent, done)  # the agent's retry replaces itself
    assert agent.called("status_update_acknowledged") == []  # nobody acknowledged for it

    sched = RecordingConnection("scheduler")
    master.service.register_framework(sched, FrameworkInfo(name="nine", framework_id="F9", failover_timeout=5))
    assert sched.called("reregistered") == [("F9", master.address)]
    assert [s.uuid for (s,) in sched.called("status_update")] == ["u-fin"]
    master.service.acknowledge_status_update(sched, "F9", "A1", "t1", "u-fin")
    assert agent.called("status_update_acknowledged") == [("F9", "t1", "u-fin")]


def test_a_silent_agent_is_lost_and_on_its_return_kills_what_was_reported_lost(master):
    master.lead()
    sched = RecordingConnection("scheduler")
    master.service.register_framework(sched, FrameworkInfo(name="f"))
    ((fid, _),) = sched.called("registered")
    conn = RecordingConnection("agent")
    aid = "A1"  # known from an earlier master: adopted with its task
    master.service.reregister_agent(conn, agent_info(aid, 2), [running(fid, "t", aid)], [], [])
    assert master.state.frameworks[fid].tasks.keys() == {"t"}

    master.service.agent_link_silent(conn, 16.0)
    assert conn.closed and aid not in master.state.agents
    assert sched.called("agent_lost") == [(aid,)]
    ((lost,),) = sched.called("status_update")
    assert (lost.task_id, TaskState(lost.state).name, lost.reason) == ("t", "TASK_LOST", "agent_removed")
    assert "no answer to pings for 16.0 s" in lost.message

    # Only unreachable: welcome back under its id, and the task reported lost is killed,
    # without a word more to its framework.
    back = RecordingConnection("back")
    master.service.reregister_agent(back, agent_info(aid, 2), [running(fid, "t", aid)], [], [])
    assert back.called("reregistered") == [(aid,)] and master.state.agents[aid].connected
    ((killed_fid, killed_tid, policy),) = back.called("kill_task")
    assert (killed_fid, killed_tid, policy.reason) == (fid, "t", "agent_removed")
    assert master.state.agents[aid].tasks == {} and master.state.frameworks[fid].tasks == {}
    assert len(sched.called("status_update")) == 1
    # Its TASK_KILLED, when it comes, is acknowledged to the agent and goes no further.
    master.service.status_update(back, TaskStatus(task_id="t", framework_id=fid, agent_id=aid,
                                                  state=TaskState.TASK_KILLED, uuid="u-kill"))
    assert len(sched.called("status_update")) == 1
    assert back.called("status_update_acknowledged") == [(fid, "t", "u-kill")]


def test_a_quiet_kill_lost_with_the_link_is_sent_again(master):
    master.lead()
    sched = RecordingConnection("scheduler")
    master.service.register_framework(sched, FrameworkInfo(name="f"))
    ((fid, _),) = sched.called("registered")
    conn = RecordingConnection("agent")
    aid = "A1"
    master.service.reregister_agent(conn, agent_info(aid, 2), [running(fid, "t", aid)], [], [])
    master.service.agent_link_silent(conn, 16.0)  # TASK_LOST to the framework
    back = RecordingConnection("back")
    master.service.reregister_agent(back, agent_info(aid, 2), [running(fid, "t", aid)], [], [])
    assert len(back.called("kill_task")) == 1
    master.service.connection_lost(back)  # before the agent got to the kill

    again = RecordingConnection("again")
    master.service.reregister_agent(again, agent_info(aid, 2), [running(fid, "t", aid)], [], [])
    assert again.called("reregistered") == [(aid,)]
    ((killed_fid, killed_tid, policy),) = again.called("kill_task")
    assert (killed_fid, killed_tid, policy.reason) == (fid, "t", "agent_removed")
    assert master.state.agents[aid].tasks == {} and len(sched.called("status_update")) == 1


def test_a_partition_aware_framework_gets_unreachable_and_its_task_back(master):
    master.lead()
    sched = RecordingConnection("scheduler")
    master.service.register_framework(sched, FrameworkInfo(name="f", capabilities=["PARTITION_AWARE"]))
    ((fid, _),) = sched.called("registered")
    conn = RecordingConnection("agent")
    aid = "A1"
    master.service.reregister_agent(
        conn, agent_info(aid, 2), [running(fid, "t", aid), running(fid, "gone-meanwhile", aid)], [], []
    )

    master.service.agent_link_silent(conn, 16.0)
    gone = {u.task_id: u for (u,) in sched.called("status_update")}
    assert {t: (TaskState(u.state).name, u.reason) for t, u in gone.items()} == {
        "t": ("TASK_UNREACHABLE", "agent_unreachable"),
        "gone-meanwhile": ("TASK_UNREACHABLE", "agent_unreachable"),
    }
    assert master.state.frameworks[fid].unreachable_tasks.keys() == {"t", "gone-meanwhile"}
    master.service.reconcile_tasks(sched, fid, [TaskStatus(task_id="t", agent_id=aid)])
    asked = sched.called("status_update")[-1][0]
    assert (TaskState(asked.state).name, asked.reason) == ("TASK_UNREACHABLE", "reconciliation")
    master.service.reconcile_tasks(sched, fid, [TaskStatus(task_id="elsewhere", agent_id=aid)])
    asked = sched.called("status_update")[-1][0]
    assert TaskState(asked.state).name == "TASK_UNREACHABLE", "any task named on an unreachable agent"

    # A kill while it is out of reach waits for its return (no TASK_LOST meanwhile),
    # and its answer says so.
    master.service.kill_task(sched, fid, "t")
    answer = sched.called("status_update")[-1][0]
    assert (answer.task_id, TaskState(answer.state).name, answer.reason) == ("t", "TASK_UNREACHABLE", "agent_unreachable")
    assert "killed if it comes back" in answer.message

    back = RecordingConnection("back")
    master.service.reregister_agent(back, agent_info(aid, 2), [running(fid, "t", aid)], [], [])
    assert back.called("reregistered") == [(aid,)]
    assert [(f, t) for f, t, *_ in back.called("kill_task")] == [(fid, "t")], "the kill asked meanwhile"
    again, missing = (u for (u,) in sched.called("status_update")[-2:])
    assert (again.task_id, TaskState(again.state).name, again.reason) == ("t", "TASK_RUNNING", "agent_reregistered")
    # Not reported by the agent that came back: lost after all.
    assert (missing.task_id, TaskState(missing.state).name, missing.reason) == (
        "gone-meanwhile", "TASK_LOST", "task_missing_on_agent"
    )
    assert master.state.unreachable_on == {}
    assert master.state.frameworks[fid].tasks.keys() == {"t"} and not master.state.frameworks[fid].unreachable_tasks
    history = [TaskState(s[0]).name for s in master.state.frameworks[fid].tasks["t"].statuses]
    assert "TASK_UNREACHABLE" in history, history  # its history went on through the partition


def test_an_agent_removed_for_good_is_refused_and_may_register_anew(master):
    # After a failover, an admitted agent that did not come back in time is removed
    # outright (the new leader never knew its tasks): refused, it starts over.
    master.lead()
    aid = "A1"
    master.state.registry.remove(aid)
    back = RecordingConnection("back")
    master.service.reregister_agent(back, agent_info(aid, 2), [], [], [])
    ((refused_id, why),) = back.called("reregistration_refused")
    assert refused_id == aid and "not admitted" in why
    master.service.register_agent(back, AgentInfo(hostname="h", port=1, resources=Resources(cpus=2)))
    ((new_id,),) = back.called("registered")
    assert new_id != aid and master.state.agents[new_id].connected


def test_a_standby_refuses_through_its_gate_and_a_demoted_leader_forgets_everything(master):
    gate = master.gate
    sched = RecordingConnection("scheduler")
    master.leader_address = "10.0.0.9:5050"
    gate.register_framework(sched, FrameworkInfo(name="f"))
    assert sched.called("not_leader") == [("10.0.0.9:5050",)] and sched.closed
    assert master.state.frameworks == {}

    master.lead()
    sched = RecordingConnection("scheduler")
    gate.register_framework(sched, FrameworkInfo(name="f"))
    assert len(sched.called("registered")) == 1 and len(master.state.frameworks) == 1
    old_id = master.id

    master.step_down("test")
    assert sched.closed and master.state.frameworks == {} and not master.leading
    assert master.id != old_id  # a later term hands out ids of its own
    agent = RecordingConnection("agent")
    gate.register_agent(agent, AgentInfo(hostname="h", port=1, resources=Resources(cpus=1)))
    assert agent.called("not_leader") == [("",)] and master.state.agents == {}


def test_calls_arriving_while_taking_over_are_held_then_served(master):
    gate = master.gate
    master.leader_is(master.address)  # ZooKeeper names us; the registry is still being read
    early = RecordingConnection("early")
    gate.register_framework(early, FrameworkInfo(name="quick"))
    assert early.calls == [] and not early.closed  # neither refused nor served yet
    master.lead()
    assert len(early.called("registered")) == 1 and len(master.state.frameworks) == 1

    master.step_down("test")
    master.leader_is(master.address)
    late = RecordingConnection("late")
    gate.register_framework(late, FrameworkInfo(name="late"))
    master.leader_is("10.0.0.7:5050")  # someone else won after all: the held call is refused
    assert late.called("not_leader") == [("10.0.0.7:5050",)] and late.closed


def test_a_known_agent_coming_back_without_a_task_has_it_dropped_and_gets_deferred_kills(master):
    master.lead()
    sched = RecordingConnection("scheduler")
    master.service.register_framework(sched, FrameworkInfo(name="f", failover_timeout=30))
    ((fid, _),) = sched.called("registered")
    conn = RecordingConnection("agent")
    master.service.reregister_agent(conn, agent_info("A1"), [running(fid, "kept", "A1"), running(fid, "kill-me", "A1")],
                            [], [])
    agent = master.state.agents["A1"]
    # A launch the agent never got: the master holds it as STAGING.
    from mezzo.master.records import TaskRecord
    lost_launch = TaskRecord(framework_id=fid, agent_id="A1", resources=Resources(cpus=1),
                             info=TaskInfo(task_id="in-flight", agent_id="A1", resources=Resources(cpus=1)))
    agent.tasks[(fid, "in-flight")] = lost_launch
    master.state.frameworks[fid].tasks["in-flight"] = lost_launch
    agent.free = agent.free - Resources(cpus=1)

    master.service.connection_lost(conn)
    master.service.kill_task(sched, fid, "kill-me")  # deferred: the agent is away
    assert conn.called("kill_task") == []
    back = RecordingConnection("back")
    master.service.reregister_agent(back, agent_info("A1"), [running(fid, "kept", "A1"), running(fid, "kill-me", "A1")],
                            [], [])
    ((dropped,),) = sched.called("status_update")
    assert (dropped.task_id, TaskState(dropped.state).name, dropped.reason) == \
        ("in-flight", "TASK_DROPPED", "task_missing_on_agent")
    assert set(master.state.frameworks[fid].tasks) == {"kept", "kill-me"}
    assert agent.free.get("cpus") == 2.0  # 4 - kept - kill-me; the dropped one is freed
    assert back.called("kill_task") == [(fid, "kill-me")]


def test_a_task_told_lost_stays_lost_though_its_framework_turned_partition_aware(master):
    # What a framework was told when the agent was declared lost decides, not what it
    # asks for when the agent comes back: a task reported TASK_LOST is never RUNNING again.
    master.lead()
    sched = RecordingConnection("scheduler")
    master.service.register_framework(sched, FrameworkInfo(name="f", failover_timeout=60))
    ((fid, _),) = sched.called("registered")
    conn = RecordingConnection("agent")
    master.service.reregister_agent(conn, agent_info("A1", 2), [running(fid, "t", "A1")], [], [])
    master.service.agent_link_silent(conn, 16.0)
    ((lost,),) = sched.called("status_update")
    assert TaskState(lost.state).name == "TASK_LOST"

    upgraded = RecordingConnection("upgraded scheduler")
    master.service.register_framework(
        upgraded, FrameworkInfo(name="f", framework_id=fid, failover_timeout=60, capabilities=["PARTITION_AWARE"])
    )
    assert master.state.frameworks[fid].partition_aware
    back = RecordingConnection("back")
    master.service.reregister_agent(back, agent_info("A1", 2), [running(fid, "t", "A1")], [], [])
    assert [(f, t) for f, t, *_ in back.called("kill_task")] == [(fid, "t")]
    assert upgraded.called("status_update") == [] and master.state.frameworks[fid].tasks == {}


def test_a_framework_removed_while_its_agent_was_away_is_shut_down_there(master):
    master.lead()
    sched = RecordingConnection("scheduler")
    master.service.register_framework(sched, FrameworkInfo(name="f", capabilities=["PARTITION_AWARE"]))
    ((fid, _),) = sched.called("registered")
    conn = RecordingConnection("agent")
    master.service.reregister_agent(conn, agent_info("A1", 2), [running(fid, "t", "A1")], [], [])
    master.service.agent_link_silent(conn, 16.0)
    master.service.unregister_framework(sched, fid)
    assert fid not in master.state.frameworks and master.state.unreachable_on == {}

    back = RecordingConnection("back")
    master.service.reregister_agent(back, agent_info("A1", 2), [running(fid, "t", "A1")], [], [])
    assert back.called("shutdown_framework") == [(fid,)]
    agent = master.state.agents["A1"]
    assert agent.tasks == {} and agent.free == agent.total and master.state.orphans == {}


def test_capabilities_are_checked_and_kept_to_the_one_acted_on(master):
    master.lead()
    sched = RecordingConnection("scheduler")
    master.service.register_framework(sched, FrameworkInfo(name="f", capabilities=["x"] * 17))
    ((message,),) = sched.called("error")
    assert "capabilities must be at most 16" in message
    sched = RecordingConnection("scheduler 2")
    master.service.register_framework(sched, FrameworkInfo(name="g", capabilities=["MULTI_ROLE", "PARTITION_AWARE"]))
    ((fid, _),) = sched.called("registered")
    assert master.state.frameworks[fid].info.capabilities == ["PARTITION_AWARE"]


def test_tasks_of_an_unreachable_agent_dropped_from_the_list_are_lost(monkeypatch):
    from mezzo.master import registry

    monkeypatch.setattr(registry, "MAX_UNREACHABLE", 1)  # the master's list keeps one
    master = Master(MasterConfig(allocation_interval=0.01, agent_removal_fraction=1.0), load_plugins(),
                    clock=ManualClock())
    master.lead()
    sched = RecordingConnection("scheduler")
    master.service.register_framework(sched, FrameworkInfo(name="f", capabilities=["PARTITION_AWARE"]))
    ((fid, _),) = sched.called("registered")
    links = {}
    for aid in ("A1", "A2"):
        links[aid] = RecordingConnection(aid)
        master.service.reregister_agent(links[aid], agent_info(aid, 2), [running(fid, f"t-{aid}", aid)], [], [])
    master.service.agent_link_silent(links["A1"], 16.0)
    master.service.agent_link_silent(links["A2"], 16.0)  # listed now; A1 is forgotten
    last = {u.task_id: (TaskState(u.state).name, u.reason) for (u,) in sched.called("status_update")}
    assert last == {"t-A1": ("TASK_LOST", "agent_forgotten"), "t-A2": ("TASK_UNREACHABLE", "agent_unreachable")}
    assert master.state.frameworks[fid].unreachable_tasks.keys() == {"t-A2"}
    assert "A1" not in master.state.unreachable_on
    master.term.close()
