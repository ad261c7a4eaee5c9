"""The agent's parts on their own: sandbox ids, status update streams, process trees, resources."""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import time

import pytest
from agent_harness import pid_alive, run
from mezzo.agent import posix
from mezzo.agent.host import agent_resources, detect_resources
from mezzo.agent.sandbox import InvalidId, Sandbox, check_id
from mezzo.agent.status_updates import MAX_RETRY_INTERVAL, StatusUpdateManager
from mezzo.errors import ConfigError
from mezzo.wire.ttypes import TaskState, TaskStatus


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "../x", "a\0b", "x" * 300])
def test_unsafe_ids_are_refused(bad):
    with pytest.raises(InvalidId):
        check_id("task id", bad)


def test_sandbox_layout(tmp_path):
    box = Sandbox.create(str(tmp_path), "fw", "ex", "c1")
    assert box.path == str(tmp_path / "frameworks/fw/executors/ex/runs/c1")
    assert os.path.isdir(box.path)
    assert os.path.isdir(box.task_dir("t1"))
    assert box.stdout.endswith("c1/stdout")


def _status(task_id: str, state: int) -> TaskStatus:
    return TaskStatus(task_id=task_id, state=state, framework_id="fw")


def test_stream_sends_one_update_at_a_time_and_retries_with_backoff():
    async def main():
        sent: list[tuple[float, TaskStatus]] = []
        ended = []
        t0 = time.monotonic()
        mgr = StatusUpdateManager(
            send=lambda s: sent.append((time.monotonic() - t0, s)) or True,
            agent_id=lambda: "a1", retry=0.05, on_stream_end=ended.append,
        )
        first = mgr.update(_status("t", TaskState.TASK_RUNNING))
        second = mgr.update(_status("t", TaskState.TASK_FINISHED))
        assert first.uuid and first.agent_id == "a1" and first.source == "agent" and first.timestamp
        await asyncio.sleep(0.5)
        # Sent at 0, then retried after 0.05, 0.1, 0.2, ... (timers never fire early;
        # a loaded machine only stretches them). The second update waits its turn.
        assert len(sent) >= 3 and {s.uuid for _, s in sent} == {first.uuid}
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(sent)]
        for i, gap in enumerate(gaps):
            assert gap >= 0.05 * 2**i * 0.9, gaps
        assert not mgr.acknowledge("fw", "t", "not-this-one")
        assert mgr.acknowledge("fw", "t", first.uuid)
        assert sent[-1][1] is second
        assert not mgr.acknowledge("fw", "t", first.uuid)  # duplicate ack ignored
        assert mgr.acknowledge("fw", "t", second.uuid)
        assert ended == [("fw", "t")] and not mgr.streams
        n = len(sent)
        await asyncio.sleep(0.2)
        assert len(sent) == n  # nothing retried after the ack

    run(main())


def test_stream_keeps_executor_uuid_drops_duplicates_and_updates_after_terminal():
    async def main():
        sent = []
        mgr = StatusUpdateManager(send=lambda s: sent.append(s) or True, agent_id=lambda: "a1", retry=10)
        s = _status("t", TaskState.TASK_FINISHED)
        s.uuid = "from-executor"
        assert mgr.update(s, source="executor").uuid == "from-executor"
        dup = _status("t", TaskState.TASK_FINISHED)
        dup.uuid = "from-executor"
        assert mgr.update(dup) is None
        assert mgr.update(_status("t", TaskState.TASK_RUNNING)) is None
        assert len(sent) == 1
        mgr.resend_all()
        assert len(sent) == 2 and sent[1].uuid == "from-executor"
        mgr.close()

    run(main())


def test_retry_interval_is_capped():
    assert MAX_RETRY_INTERVAL == 30.0


def test_kill_tree_finds_escaped_and_background_descendants():
    # The shell starts a background child in its group and one that left the session.
    proc = subprocess.Popen(
        ["/bin/sh", "-c", "sleep 60 & setsid sleep 61 & sleep 62"],
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(posix.container_processes(proc.pid)) < 4:
            time.sleep(0.01)
        members = posix.container_processes(proc.pid)
        assert len(members) == 4, members
        assert any(m.session != proc.pid for m in members)  # the setsid one
        assert posix.kill_tree(proc.pid) == 4
        proc.wait(timeout=5)
        time.sleep(0.05)
        assert not any(pid_alive(m.pid) for m in members)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_describe_exit():
    assert posix.describe_exit(0) == (0, "exited with status 0")
    assert posix.describe_exit(3) == (3, "exited with status 3")
    assert posix.describe_exit(-9) == (137, "killed by signal SIGKILL")


def test_resources_detected_when_not_configured(tmp_path):
    r = detect_resources(str(tmp_path))
    assert r.get("cpus") == os.cpu_count()
    assert r.get("mem") >= 256
    assert r.get("disk") > 0
    assert r.range_pairs("ports") == [(31000, 32000)]
    partial = agent_resources("cpus:2;gpus:1", str(tmp_path))
    assert partial.get("cpus") == 2 and partial.get("gpus") == 1
    assert partial.get("mem") == r.get("mem") and partial.range_pairs("ports") == [(31000, 32000)]
    with pytest.raises(ConfigError, match="agent.resources"):
        agent_resources("cpus:lots", str(tmp_path))
    # Named as zero is zero, not "detect it": an agent of cpus:0;mem:0 offers no cpus or memory.
    zero = agent_resources("cpus:0;mem:0", str(tmp_path))
    assert zero.get("cpus") == 0 and zero.get("mem") == 0 and zero.get("disk") == r.get("disk")


def test_agent_resources_beyond_what_any_agent_may_have_stop_the_agent_naming_the_key(tmp_path):
    from mezzo.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        agent_resources("cpus:2000000000;mem:1024", str(tmp_path))
    assert e.value.key == "agent.resources" and "at most 1,000,000,000" in e.value.problem
    assert agent_resources("cpus:1000000000;mem:1024", str(tmp_path)).get("cpus") == 1e9
