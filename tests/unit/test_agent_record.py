"""AgentRecord keeps the master's index of offerable agents (connected, something free)."""

from __future__ import annotations

from mezzo.master.records import AgentRecord
from mezzo.resources import Resources
from mezzo.wire.ttypes import AgentInfo


def record(index: dict | None, free: Resources, connected: bool = True, aid: str = "ag-1") -> AgentRecord:
    total = Resources(cpus=4, mem=1024)
    return AgentRecord(id=aid, info=AgentInfo(agent_id=aid, hostname=f"{aid}.example", port=5051,
                                                resources=total),
                       conn=None, total=total, free=free, connected=connected, offerable=index)


def test_a_new_connected_agent_with_free_resources_is_offerable():
    index: dict = {}
    a = record(index, Resources(cpus=4, mem=1024))
    assert index == {"ag-1": a}


def test_an_agent_with_nothing_free_or_disconnected_is_not():
    index: dict = {}
    record(index, Resources(), aid="empty")
    record(index, Resources(cpus=1), connected=False, aid="gone")
    assert index == {}


def test_the_index_follows_every_change_of_free_and_connected():
    index: dict = {}
    a = record(index, Resources(cpus=4, mem=1024))
    a.free = Resources()                      # all of it offered
    assert "ag-1" not in index
    a.free = a.free + Resources(cpus=1)       # a task ended
    assert index["ag-1"] is a
    a.connected = False                       # its connection dropped
    assert "ag-1" not in index
    a.free = Resources(cpus=2)                # freed while disconnected: still not offerable
    assert "ag-1" not in index
    a.connected = True                        # it came back
    assert index["ag-1"] is a


def test_a_record_without_an_index_works_on_its_own():
    a = record(None, Resources(cpus=1))
    a.free = Resources()
    a.connected = False
    assert (a.free, a.connected, a.offerable) == (Resources(), False, None)
