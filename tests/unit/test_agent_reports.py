"""An agent reports only on the tasks and executors the master placed on it (issue 15).

The probe's agent sent a victim framework TASK_FINISHED for a task running on another
agent, and the scheduler believed it. The master now passes on an update only from the
agent holding the task, with two exceptions that real agents need: the end of a task
its re-registration reported as ended (or that did not fit), and the resend of an
update the master already forwarded. The end-to-end attack is in tests/test_principals.py.
"""

from __future__ import annotations

from mezzo import FrameworkInfo, TaskState, TaskStatus

from .test_master_connections import RecordingConnection
from .test_master_recovery import agent_info, master, running  # noqa: F401 - the fixture

FRAMEWORKS = [FrameworkInfo(name="f", framework_id="F1")]


def ended(fid: str, tid: str, agent_id: str):
    report = running(fid, tid, agent_id)
    report.latest = TaskStatus(task_id=tid, state=TaskState.TASK_FINISHED, uuid="u-end")
    return report


def test_only_the_agent_holding_a_task_reports_on_it(master):  # noqa: F811
    master.lead(set())
    sched = RecordingConnection("scheduler")
    master.service.register_framework(sched, FrameworkInfo(name="f", framework_id="F1", failover_timeout=30))
    holder, other = RecordingConnection("holder"), RecordingConnection("other")
    master.service.reregister_agent(holder, agent_info("A1"), [running("F1", "t1", "A1")], [], FRAMEWORKS)
    master.service.reregister_agent(other, agent_info("A2"), [], [], [])

    forged = TaskStatus(
        task_id="t1", state=TaskState.TASK_FINISHED, framework_id="F1", agent_id="A2", uuid="f-1"
    )
    master.service.status_update(other, forged)
    assert sched.called("status_update") == []
    assert other.called("status_update_acknowledged") == [("F1", "t1", "f-1")]  # so it stops resending
    assert master.state.frameworks["F1"].tasks["t1"].state == TaskState.TASK_RUNNING

    real = TaskStatus(
        task_id="t1", state=TaskState.TASK_FINISHED, framework_id="F1", agent_id="A1", uuid="r-1"
    )
    master.service.status_update(holder, real)
    assert [s.uuid for (s,) in sched.called("status_update")] == ["r-1"]
    assert "t1" not in master.state.frameworks["F1"].tasks


def test_the_end_of_a_task_reported_ended_at_re_registration_still_goes_on(master):  # noqa: F811
    """A task that ended while no master led: the agent re-registers listing it with its
    terminal update unacknowledged, then resends that update to the new leader."""
    master.lead(set())
    sched = RecordingConnection("scheduler")
    master.service.register_framework(sched, FrameworkInfo(name="f", framework_id="F1", failover_timeout=30))
    agent, other = RecordingConnection("agent"), RecordingConnection("other")
    master.service.reregister_agent(agent, agent_info("A1"), [ended("F1", "short", "A1")], [], FRAMEWORKS)
    master.service.reregister_agent(other, agent_info("A2"), [], [], [])

    def update() -> TaskStatus:  # a new one each time: the master stamps the sender's id on it
        return TaskStatus(task_id="short", state=TaskState.TASK_FINISHED, framework_id="F1", uuid="u-end")

    master.service.status_update(other, update())  # not from the agent that ran it
    assert sched.called("status_update") == []
    master.service.status_update(agent, update())
    assert [(s.task_id, s.agent_id) for (s,) in sched.called("status_update")] == [("short", "A1")]
    assert master.state.agents["A1"].unadopted_tasks == set()  # forgotten once reported
