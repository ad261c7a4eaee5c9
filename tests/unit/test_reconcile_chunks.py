"""Reconciliation of many tasks is answered a chunk at a time, so one big request does
not hold the master's loop (an 80,000-id request held it 43 s when the answer was
quadratic, and would still hold it for the whole answer if sent in one go)."""

from __future__ import annotations

from mezzo import FrameworkInfo, TaskState, TaskStatus
from mezzo.config import MasterConfig
from mezzo.master import Master
from mezzo.master.ports import ManualClock
from mezzo.master.task_lifecycle import RECONCILE_CHUNK
from mezzo.plugins import load_plugins

from .test_master_connections import RecordingConnection


def framework() -> tuple[Master, RecordingConnection, str]:
    master = Master(MasterConfig(), load_plugins(), clock=ManualClock())
    master.lead()
    sched = RecordingConnection("scheduler")
    master.service.register_framework(sched, FrameworkInfo(name="f"))
    ((fid, _),) = sched.called("registered")
    return master, sched, fid


def test_a_big_request_is_answered_in_chunks_in_order_each_task_once():
    master, sched, fid = framework()
    n = 2 * RECONCILE_CHUNK + 17
    asked = [TaskStatus(task_id=f"t{i}") for i in range(n)]
    master.service.reconcile_tasks(sched, fid, asked)
    assert len(sched.called("status_update")) == RECONCILE_CHUNK  # the first chunk at once
    master.clock.advance(0)  # the loop turns: the rest, a chunk per turn
    answers = [s for (s,) in sched.called("status_update")]
    assert [s.task_id for s in answers] == [f"t{i}" for i in range(n)]
    assert {s.state for s in answers} == {TaskState.TASK_UNKNOWN}


def test_a_framework_gone_between_chunks_gets_no_more_answers():
    master, sched, fid = framework()
    master.service.reconcile_tasks(sched, fid, [TaskStatus(task_id=f"t{i}") for i in range(3 * RECONCILE_CHUNK)])
    master.service.unregister_framework(sched, fid)
    master.clock.advance(0)
    assert len(sched.called("status_update")) == RECONCILE_CHUNK
