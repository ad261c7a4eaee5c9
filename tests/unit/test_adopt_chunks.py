"""A re-registering agent's big report is adopted a chunk at a time (issue 14: no
message holds the master's loop for long): at most ``ADOPT_CHUNK`` tasks per turn,
the agent not offered and its link not read until the whole report is adopted.
Each turn of the loop is ``ManualClock.turn()``."""

from __future__ import annotations

import pytest

from mezzo import AgentInfo, CommandInfo, FrameworkInfo, Resources, TaskInfo, TaskState, TaskStatus
from mezzo.config import MasterConfig
from mezzo.master import Master
from mezzo.master.agent_lifecycle import ADOPT_CHUNK
from mezzo.plugins import load_plugins
from mezzo.wire.ttypes import RunningTask

from .test_fuzz_master_service import assert_every_resource_in_one_place
from .test_master_connections import RecordingConnection

FID = "F1"
AID = "A1"


@pytest.fixture
def master(taking_over_master):
    return taking_over_master


def report(n: int, fid: str = FID) -> list[RunningTask]:
    return [
        RunningTask(
            framework_id=fid,
            task=TaskInfo(
                task_id=f"t{i}", agent_id=AID, resources=Resources(cpus=0.001, mem=1), command=CommandInfo(value="y")
            ),
            latest=TaskStatus(task_id=f"t{i}", state=TaskState.TASK_RUNNING, uuid="u"),
        )
        for i in range(n)
    ]


def reregister(master, n: int, conn=None, frameworks=None) -> RecordingConnection:
    conn = conn or RecordingConnection("agent")
    info = AgentInfo(agent_id=AID, hostname="h", port=5051, resources=Resources(cpus=100, mem=100_000))
    if frameworks is None:
        frameworks = [FrameworkInfo(name="f", framework_id=FID)]
    master.service.reregister_agent(conn, info, report(n), [], frameworks)
    return conn


def turn(master) -> None:
    master.clock.turn()


def test_a_small_report_is_adopted_in_one_turn_as_before(master):
    conn = reregister(master, ADOPT_CHUNK)
    agent = master.state.agents[AID]
    assert len(agent.tasks) == ADOPT_CHUNK
    assert agent.connected and AID in master.state.offerable
    assert conn.called("reregistered") == [(AID,)]
    assert conn.held == 0 and not master.term.agents.adopting
    assert_every_resource_in_one_place(master)


def test_a_big_report_is_adopted_over_several_turns_and_offered_only_then(master):
    n = 20_000
    conn = reregister(master, n)
    agent = master.state.agents[AID]
    sizes = [len(agent.tasks)]
    while not conn.called("reregistered"):
        # Unfinished: not offered, not told, its link not read.
        assert not agent.connected and AID not in master.state.offerable
        assert conn.held == 1
        assert_every_resource_in_one_place(master)
        turn(master)
        sizes.append(len(agent.tasks))
        assert len(sizes) < 100
    steps = [b - a for a, b in zip([0, *sizes], sizes, strict=False)]
    assert len(steps) > 2 and max(steps) <= ADOPT_CHUNK
    assert len(agent.tasks) == n and len(master.state.frameworks[FID].tasks) == n
    assert agent.connected and AID in master.state.offerable
    assert conn.called("reregistered") == [(AID,)] and conn.held == 0
    assert agent.free == Resources(cpus=100 - n * 0.001, mem=100_000 - n)
    assert_every_resource_in_one_place(master)


def finish(master, conn) -> None:
    for _ in range(100):
        if conn.called("reregistered"):
            return
        turn(master)


def test_a_link_lost_midway_stops_the_adoption_and_a_reregistration_finishes_it(master):
    n = 5 * ADOPT_CHUNK
    conn = reregister(master, n)
    turn(master)
    master.service.connection_lost(conn)
    agent = master.state.agents[AID]
    adopted = len(agent.tasks)
    assert 0 < adopted < n and conn.held == 0
    for _ in range(10):
        turn(master)
    assert len(agent.tasks) == adopted and not conn.called("reregistered")
    assert not agent.connected and AID not in master.state.offerable
    # Back on a new link, reporting one task fewer (it ended meanwhile).
    again = RecordingConnection("agent again")
    info = AgentInfo(agent_id=AID, hostname="h", port=5051, resources=Resources(cpus=100, mem=100_000))
    master.service.reregister_agent(again, info, report(n)[1:], [], [FrameworkInfo(name="f", framework_id=FID)])
    finish(master, again)
    assert again.called("reregistered") == [(AID,)]
    assert again.called("kill_task") == [], "the rest of the report is adopted, not killed"
    assert set(agent.tasks) == {(FID, f"t{i}") for i in range(1, n)}
    assert len(master.state.frameworks[FID].tasks) == n - 1
    assert agent.connected and agent.free == Resources(cpus=100 - (n - 1) * 0.001, mem=100_000 - (n - 1))
    assert_every_resource_in_one_place(master)


def test_an_agent_removed_midway_stops_the_adoption(master):
    conn = reregister(master, 5 * ADOPT_CHUNK)
    turn(master)
    agent = master.state.agents[AID]
    master.term.agents.remove(agent, "test")
    for _ in range(10):
        turn(master)
    assert AID not in master.state.agents and not agent.tasks
    assert not conn.called("reregistered") and conn.held == 0
    assert not master.term.agents.adopting
    assert not master.state.frameworks[FID].tasks
    assert_every_resource_in_one_place(master)


def test_a_framework_that_registers_midway_gets_all_its_tasks(master):
    n = 5 * ADOPT_CHUNK
    conn = reregister(master, n, frameworks=[])  # no FrameworkInfo: its tasks wait as orphans
    turn(master)
    sched = RecordingConnection("scheduler")
    master.service.register_framework(sched, FrameworkInfo(name="f", framework_id=FID))
    framework = master.state.frameworks[FID]
    assert 0 < len(framework.tasks) < n
    finish(master, conn)
    assert len(framework.tasks) == n
    assert_every_resource_in_one_place(master)


def test_a_framework_removed_midway_keeps_the_books_whole(master):
    n = 5 * ADOPT_CHUNK
    conn = reregister(master, n)
    turn(master)
    master.term.frameworks.remove(master.state.frameworks[FID], "test")
    assert conn.called("shutdown_framework") == [(FID,)]  # the agent ends the rest
    finish(master, conn)
    assert conn.called("reregistered") == [(AID,)]
    assert FID not in master.state.frameworks
    assert_every_resource_in_one_place(master)


def test_a_term_closed_midway_adopts_nothing_more(master):
    conn = reregister(master, 5 * ADOPT_CHUNK)
    turn(master)
    agent = master.state.agents[AID]
    adopted = len(agent.tasks)
    master.term.close()
    for _ in range(10):
        turn(master)
    assert len(agent.tasks) == adopted and not conn.called("reregistered")


def test_on_a_real_loop_other_peers_are_served_between_two_chunks():
    """Each chunk is a timer due now: a turn of the loop reads the I/O that is ready
    before it, and the answers queued then (call_soon, like a connection's flush) go
    out before the chunk after. Chunks asked for with call_soon ran before both: an
    answer waited behind up to three of them."""
    import asyncio
    import socket

    from mezzo.master.ports import LoopClock

    async def scenario() -> tuple[int, int, int]:
        loop = asyncio.get_running_loop()
        m = Master(
            MasterConfig(allocation_interval=0.01, recovery_hold_timeout=60, framework_recovery_timeout=60),
            load_plugins(),
            clock=LoopClock(),
        )
        m.lead()
        try:
            peer, ours = socket.socketpair()
            seen: dict[str, int] = {}
            conn = reregister(m, 8 * ADOPT_CHUNK)  # the first chunk is adopted in this call
            agent = m.state.agents[AID]
            first = len(agent.tasks)

            def answered() -> None:
                seen["answered"] = len(agent.tasks)

            def read() -> None:  # another peer's request: read, answered on the next turn
                ours.recv(1)
                loop.remove_reader(ours.fileno())
                seen["read"] = len(agent.tasks)
                loop.call_soon(answered)

            loop.add_reader(ours.fileno(), read)
            peer.send(b"?")
            while not conn.called("reregistered"):
                await asyncio.sleep(0)
            peer.close()
            ours.close()
            return first, seen["read"], seen["answered"]
        finally:
            m.term.close()

    first, read, answered = asyncio.run(scenario())
    assert first == ADOPT_CHUNK
    assert read == first, "a chunk ran before the ready I/O was read"
    assert answered <= first + ADOPT_CHUNK, "more than one chunk ran before the answer went out"
