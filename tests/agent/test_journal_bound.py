"""The checkpoint journal is bounded (``agent.max_journal_bytes``): compacted as it grows,
so it stays proportional to what the agent runs now rather than what it ran, and a task
that would take its live state past half of the bound is refused (``journal_full``).

First the journal alone, then real agents: one running thousands of short tasks, one
refusing a task it has no room for, and an agent process SIGKILLed after compactions
that takes its live tasks back from the compacted journal.
"""

from __future__ import annotations

import asyncio
import signal
import uuid
from pathlib import Path

import pytest
from agent_harness import (
    FRAMEWORK,
    ScriptedMaster,
    agent_config,
    command_task,
    name,
    run,
    running_agent,
    wait_until,
)
from test_agent_recovery import AgentProcess

import mezzo
from mezzo.agent import checkpoint
from mezzo.agent.agent import JOURNAL_FULL
from mezzo.agent.checkpoint import Checkpoint
from mezzo.agent.checkpoint.replay import SEEN_KEPT
from mezzo.agent.status_updates import StatusUpdateStream
from mezzo.config import DEFAULT_MAX_JOURNAL_BYTES, load
from mezzo.errors import ConfigError
from mezzo.testing import to_toml
from mezzo.wire.ttypes import CommandInfo, FrameworkInfo, TaskInfo, TaskState, TaskStatus

FW = FrameworkInfo(name="fw", framework_id="fw-1")
KIB = 1024


def _info(tid: str, data: bytes = b"") -> TaskInfo:
    return TaskInfo(
        task_id=tid,
        name=tid,
        agent_id="a1",
        resources=mezzo.Resources(cpus=0.1, mem=16),
        command=CommandInfo(value="true"),
        data=data,
    )


def _status(tid: str, state: int, uuid_: str) -> TaskStatus:
    return TaskStatus(
        task_id=tid,
        framework_id="fw-1",
        state=state,
        uuid=uuid_,
        source="agent",
        agent_id="a1",
        timestamp=1.5,
    )


def _short_task(cp: Checkpoint, tid: str) -> None:
    """The records of a command task launched and finished, as the agent writes them."""
    cid = uuid.uuid4().hex
    cp.task("fw-1", _info(tid), container_id=cid, sandbox=f"/work/frameworks/fw-1/executors/{tid}/runs/{cid}")
    cp.pid("fw-1", tid, checkpoint.TASK, 4242, 777)
    for state in (TaskState.TASK_STARTING, TaskState.TASK_RUNNING, TaskState.TASK_FINISHED):
        u = uuid.uuid4().hex
        cp.update(_status(tid, state, u))
        cp.ack("fw-1", tid, u)


# -- the journal alone ---------------------------------------------------------------------


def test_live_bytes_is_what_a_compaction_writes(tmp_path):
    cp = Checkpoint(str(tmp_path))
    cp.begin(31234, "a1")
    cp.framework(FW)
    for i in range(40):
        tid = f"t{i}"
        cp.task("fw-1", _info(tid, b"x" * (100 * i)), container_id=f"c{i}", sandbox=f"/box/{i}")
        for j in range(i):  # some acknowledged, some not
            cp.update(_status(tid, TaskState.TASK_RUNNING, f"{tid}-u{j}"))
            if j < i // 2:
                cp.ack("fw-1", tid, f"{tid}-u{j}")
    for i in range(0, 40, 3):
        cp.task_gone("fw-1", f"t{i}")
    estimate = cp.live_bytes
    cp.compact()
    written = (tmp_path / "meta" / "journal").stat().st_size
    assert abs(written - estimate) < 200, (written, estimate)  # the boot record, pids' digits
    cp.close()


def test_thousands_of_tasks_leave_a_journal_within_its_bound(tmp_path):
    bound = 256 * KIB
    cp = Checkpoint(str(tmp_path), max_bytes=bound)
    cp.begin(31234, "a1")
    cp.framework(FW)
    path = tmp_path / "meta" / "journal"
    sizes = []
    for i in range(5000):  # 6.4 MB of records written in all
        _short_task(cp, f"t{i}")
        cp.flush()
        sizes.append(path.stat().st_size)
    assert max(sizes) <= bound, max(sizes)
    assert max(sizes) > bound // 8  # the floor: compaction is not every few records
    assert cp.live_bytes < 200  # nothing live but the framework
    cp.close()
    state = Checkpoint(str(tmp_path)).load()
    assert not state.tasks and state.frameworks == {"fw-1": FW} and not state.problems


def test_a_task_past_half_the_bound_is_refused_naming_the_setting(tmp_path):
    cp = Checkpoint(str(tmp_path), max_bytes=64 * KIB)
    cp.begin(31234, "a1")
    cp.framework(FW)
    fits = _info("fits", b"x" * (20 * KIB))
    assert cp.room_for(FW, fits) is None
    cp.task("fw-1", fits, container_id="c1", sandbox="/box/1")
    big = _info("big", b"y" * (12 * KIB))
    why = cp.room_for(FW, big)
    assert why is not None and "agent.max_journal_bytes (65536)" in why
    assert f"live state ({cp.live_bytes} bytes)" in why
    cp.task_gone("fw-1", "fits")  # it ended: room again
    assert cp.room_for(FW, big) is None
    assert (
        Checkpoint(str(tmp_path), enabled=False, max_bytes=1).room_for(FW, _info("x", b"z" * 10**6)) is None
    )


def test_a_chatty_task_keeps_only_its_recent_uuids(tmp_path):
    cp = Checkpoint(str(tmp_path))
    cp.begin(31234, "a1")
    cp.framework(FW)
    cp.task("fw-1", _info("chatty"), container_id="c1", sandbox="/box/1")
    uuids = [f"{i:032x}" for i in range(5 * SEEN_KEPT)]
    for u in uuids:
        cp.update(_status("chatty", TaskState.TASK_RUNNING, u))
        cp.ack("fw-1", "chatty", u)
    entry = cp.state.tasks[("fw-1", "chatty")]
    assert entry.seen == set(uuids[-SEEN_KEPT:])
    live = cp.live_bytes
    assert live < 40 * SEEN_KEPT + 2 * KIB, live  # not 35 bytes for each of its 5,120 updates
    cp.compact()
    cp.close()
    state = Checkpoint(str(tmp_path)).load()
    assert state.tasks[("fw-1", "chatty")].seen == set(uuids[-SEEN_KEPT:])
    assert list(state.tasks[("fw-1", "chatty")].seen_order) == uuids[-SEEN_KEPT:]  # oldest go first


def test_a_stream_recognises_recent_and_unacknowledged_uuids_only():
    async def main():
        stream = StatusUpdateStream(("fw-1", "t"), send=lambda status: True, retry=60)
        for i in range(2 * SEEN_KEPT):
            assert stream.add(_status("t", TaskState.TASK_RUNNING, f"a{i}"))
        # Nothing acknowledged: every one is still recognised (an executor retrying it).
        assert all(stream.has_seen(f"a{i}") for i in range(2 * SEEN_KEPT))
        for i in range(2 * SEEN_KEPT):
            assert stream.acknowledge(f"a{i}")
        assert not stream.has_seen("a0") and stream.has_seen(f"a{2 * SEEN_KEPT - 1}")
        assert not stream.add(_status("t", TaskState.TASK_RUNNING, f"a{2 * SEEN_KEPT - 1}"))
        stream.close()

    run(main())


def test_the_setting_is_checked_and_has_a_default(tmp_path):
    assert load().agent.max_journal_bytes == DEFAULT_MAX_JOURNAL_BYTES == 1024**3
    path = tmp_path / "mezzo.toml"
    path.write_text(to_toml({"agent": {"max_journal_bytes": 1000}}))
    with pytest.raises(ConfigError) as err:
        load(path)
    assert "agent.max_journal_bytes" in str(err.value) and "at least 65536" in str(err.value)
    path.write_text(to_toml({"agent": {"max_journal_bytes": 4 * 1024 * 1024}}))
    assert load(path).agent.max_journal_bytes == 4 * 1024 * 1024


# -- real agents -------------------------------------------------------------------------


def test_an_agent_running_thousands_of_tasks_keeps_its_journal_small(tmp_path):
    bound = 256 * KIB

    async def main():
        master = await ScriptedMaster().start()
        config = agent_config(tmp_path, master.address, max_journal_bytes=bound, statistics_interval=0)
        async with running_agent(config) as agent:
            path = Path(agent.checkpoint.path)
            sizes: list[int] = []

            async def watch() -> None:
                while True:
                    sizes.append(path.stat().st_size)
                    await asyncio.sleep(0.005)

            watcher = asyncio.ensure_future(watch())
            # One long task stays live throughout, with 20 KB of data.
            master.agent.run_task(FRAMEWORK, command_task("long", "sleep 60"))
            master.agent.run_task(FRAMEWORK, _data_task("long-data", 20 * KIB))
            n = 2000
            for start in range(0, n, 100):
                for i in range(start, start + 100):
                    master.agent.run_task(FRAMEWORK, command_task(f"t{i}", "true"))
                await master.wait_final(f"t{start + 99}", timeout=60)
                await wait_until(lambda: len(agent.tasks) == 2, 60, "the batch to be forgotten")
            watcher.cancel()
            finished = [t for t in range(n) if name(master.final(f"t{t}").state) == "TASK_FINISHED"]
            assert len(finished) == n
            written = 1280 * n  # about 1.3 KB of records a task (see checkpoint.journal)
            assert max(sizes) <= bound < written // 8, (max(sizes), written)
            assert {k[1] for k in agent.checkpoint.state.tasks} == {"long", "long-data"}
            assert 20 * KIB < agent.checkpoint.live_bytes < 24 * KIB
            master.agent.kill_task(FRAMEWORK.framework_id, "long")
            master.agent.kill_task(FRAMEWORK.framework_id, "long-data")
            await master.wait_final("long")
            await master.wait_final("long-data")
        await master.close()

    run(main(), timeout=240)


def _data_task(tid: str, size: int, command: str = "sleep 60") -> TaskInfo:
    task = command_task(tid, command)
    task.data = b"d" * size
    return task


def test_an_agent_refuses_a_task_its_journal_has_no_room_for(tmp_path):
    async def main():
        master = await ScriptedMaster().start()
        config = agent_config(tmp_path, master.address, max_journal_bytes=64 * KIB, statistics_interval=0)
        async with running_agent(config) as agent:
            for tid in ("a", "b"):
                master.agent.run_task(FRAMEWORK, _data_task(tid, 12 * KIB))
                await master.wait_state(tid, "TASK_RUNNING")
            master.agent.run_task(FRAMEWORK, _data_task("c", 12 * KIB))
            refused = await master.wait_final("c")
            assert (name(refused.state), refused.reason) == ("TASK_DROPPED", JOURNAL_FULL)
            assert "agent.max_journal_bytes (65536)" in refused.message, refused.message
            entry = agent.checkpoint.state.tasks.get(("fw-1", "c"))
            assert entry is None or entry.info is None  # only its refusal, until acknowledged
            # Once a task ends there is room again.
            master.agent.kill_task(FRAMEWORK.framework_id, "a")
            await master.wait_final("a")
            await wait_until(
                lambda: ("fw-1", "a") not in agent.checkpoint.state.tasks, 10, "a to be forgotten"
            )
            master.agent.run_task(FRAMEWORK, _data_task("d", 12 * KIB))
            await master.wait_state("d", "TASK_RUNNING")
            for tid in ("b", "d"):
                master.agent.kill_task(FRAMEWORK.framework_id, tid)
                await master.wait_final(tid)
        await master.close()

    run(main(), timeout=60)


def test_an_agent_restarted_after_compactions_takes_back_its_live_tasks(tmp_path):
    async def main():
        master = await ScriptedMaster().start()
        work = tmp_path / "work"
        toml = tmp_path / "mezzo.toml"
        toml.write_text(
            to_toml(
                {
                    "agent": {
                        "master": master.address,
                        "listen": "127.0.0.1:0",
                        "hostname": "test-host",
                        "work_dir": str(work),
                        "resources": "cpus:4;mem:4096;disk:1000",
                        "kill_grace_period": 0.5,
                        "status_update_retry": 0.2,
                        "reconnect_interval": 0.05,
                        "statistics_interval": 0,
                        "max_journal_bytes": 128 * KIB,  # compacted every 32 KB: every 25 short tasks
                    },
                    "log": {"level": "info"},
                }
            )
        )
        agent = AgentProcess(toml, tmp_path / "agent.log")
        agent.start()
        journal = work / "meta" / "journal"
        live = ("w1", "w2", "w3")
        try:
            await wait_until(lambda: master.called("register_agent"), 20, "the agent to register")
            for tid in live:
                # Waits for "go" in its sandbox (where its user, nobody, can see it).
                task = _data_task(tid, 4 * KIB, f"while [ ! -e go ]; do sleep 0.05; done; echo {tid}")
                master.agent.run_task(FRAMEWORK, task)
            for tid in live:
                await wait_until(lambda t=tid: "TASK_RUNNING" in master.states(t), 20, f"{tid} to run")
            inodes = {journal.stat().st_ino}
            for start in range(0, 300, 50):
                for i in range(start, start + 50):
                    master.agent.run_task(FRAMEWORK, command_task(f"s{i}", "true"))
                for i in range(start, start + 50):
                    await wait_until(lambda t=f"s{i}": master.final(t), 30, f"s{i} to end")
                inodes.add(journal.stat().st_ino)
            assert len(inodes) > 1, "never compacted"  # each compaction replaces the file
            await asyncio.sleep(0.3)  # the last acknowledgements journaled
            assert journal.stat().st_size <= 128 * KIB < 300 * 1280  # what the short tasks wrote

            agent.kill(signal.SIGKILL)
            await wait_until(
                lambda: master.agent_conn is None or master.agent_conn.closed.done(), 10, "the agent to go"
            )
            agent.start()
            await wait_until(lambda: master.called("reregister_agent"), 20, "the agent to re-register")
            info, tasks, executors, frameworks = master.called("reregister_agent")[0]
            assert info.agent_id == "agent-1"
            assert {r.task.task_id: name(r.latest.state) for r in tasks} == dict.fromkeys(
                live, "TASK_RUNNING"
            )
            assert all(r.task.data == b"d" * 4 * KIB for r in tasks)
            for tid in live:
                (box,) = (p for p in work.glob(f"frameworks/fw-1/executors/{tid}/runs/*") if p.is_dir())
                (box / "go").touch()
            for tid in live:
                final = await wait_until(lambda t=tid: master.final(t), 20, f"{tid} to finish")
                assert name(final.state) == "TASK_FINISHED" and final.data == f"{tid}\n".encode(), final
            await asyncio.sleep(0.3)
            for tid in live:
                assert len({s.uuid for s in master.updates(tid) if mezzo.is_terminal(s.state)}) == 1
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- agent log:\n{agent.tail()}") from None
        finally:
            agent.close()
            await master.close()

    run(main(), timeout=120)
