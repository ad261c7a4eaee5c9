"""mezzo.v1.executor_translate: the v1 executor API's JSON <-> mezzo's kernel types.

The calls below are what pymesos 0.3.15's ``MesosExecutorDriver`` sends (its
``sendStatusUpdate`` fills ``timestamp``, ``uuid`` and ``source``); the events are
checked the way it reads them (``pymesos/executor.py``).
"""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mezzo.resources import Resources
from mezzo.v1 import executor_translate as ex
from mezzo.v1 import translate
from mezzo.v1.executor_stream import ExecutorStream
from mezzo.v1.recordio import RecordReader
from mezzo.v1.translate import BadCall
from mezzo.wire.ttypes import AgentInfo, CommandInfo, ExecutorInfo, FrameworkInfo, TaskInfo, TaskState


def executor() -> ExecutorInfo:
    return ExecutorInfo(
        executor_id="exec-1",
        command=CommandInfo(
            value="python3 my_executor.py", arguments=[], environment={"A": "1"}, user="alice"
        ),
        resources=Resources(cpus=0.1, mem=32),
        name="mine",
        framework_id="fw-1",
    )


def task() -> TaskInfo:
    return TaskInfo(
        task_id="t-1",
        name="one",
        agent_id="agent-1",
        resources=Resources(cpus=0.5, mem=64),
        executor=executor(),
        data=b"\x00payload",
        labels={"k": "v"},
    )


def pymesos_update(**status: Any) -> dict[str, Any]:
    """An UPDATE call's payload as pymesos' sendStatusUpdate builds it."""
    body = {
        "task_id": {"value": "t-1"},
        "state": "TASK_RUNNING",
        "timestamp": 1764200000,
        "uuid": base64.b64encode(uuid.uuid4().bytes).decode(),
        "source": "SOURCE_EXECUTOR",
    }
    body.update(status)
    return {"status": body}


# -- events ----------------------------------------------------------------------------------


def test_launch_carries_the_task_as_the_scheduler_gave_it():
    sent = task()
    payload = json.loads(json.dumps(ex.launch(sent, "analytics")))
    again = translate.task_info(payload["task"], "task", "analytics")
    assert again == sent
    assert payload["task"]["resources"][0]["allocation_info"] == {"role": "analytics"}


def test_a_command_task_round_trips_too():
    sent = TaskInfo(
        task_id="t-2",
        name="",
        agent_id="a",
        resources=Resources(cpus=1),
        command=CommandInfo(value="echo", arguments=["echo", "hi"], shell=False, environment={}),
        labels={},
    )
    assert translate.task_info(ex.task_info_json(sent), "task") == sent


def test_subscribed_holds_the_ids_pymesos_asserts():
    framework = FrameworkInfo(
        name="fw", user="bob", framework_id="fw-1", role="analytics", failover_timeout=60
    )
    agent = AgentInfo(
        agent_id="agent-1", hostname="h1", port=5051, resources=Resources(cpus=4), attributes={"rack": "r1"}
    )
    payload = ex.subscribed(executor(), framework, agent, "c-1")
    # pymesos: assert executor_info['executor_id'] == self.executor_id (a dict compare)
    assert payload["executor_info"]["executor_id"] == {"value": "exec-1"}
    assert payload["framework_info"]["id"] == {"value": "fw-1"}
    assert payload["framework_info"]["roles"] == ["analytics"]
    assert payload["agent_info"]["id"] == {"value": "agent-1"}
    assert payload["agent_info"]["attributes"] == [{"name": "rack", "type": "TEXT", "text": {"value": "r1"}}]
    assert payload["container_id"] == {"value": "c-1"}
    assert translate.executor_info(payload["executor_info"], "e", "analytics") == ExecutorInfo(
        executor_id="exec-1",
        command=executor().command,
        resources=executor().resources,
        name="mine",
        framework_id="fw-1",
    )


def test_acknowledged_gives_back_the_executors_uuid_as_pymesos_decodes_it():
    made = uuid.uuid4()
    status = ex.update_status(pymesos_update(uuid=base64.b64encode(made.bytes).decode()))
    payload = ex.acknowledged(status.task_id, status.uuid)
    assert payload["task_id"] == {"value": "t-1"}
    assert uuid.UUID(bytes=base64.b64decode(payload["uuid"])) == made


def test_the_stream_frames_each_event_for_the_reader():
    stream = ExecutorStream(peer="127.0.0.1:1", role="*", container_id="c")
    stream.kill_task("t-1")
    stream.framework_message(b"hi")
    stream.status_update_acknowledged("t-1", uuid.uuid4().hex)
    stream.status_update_acknowledged("t-1", "")  # nothing to acknowledge: no event
    stream.shutdown()
    reader = RecordReader()
    events = [json.loads(r) for r in reader.feed(b"".join(stream._chunks))]
    assert [e["type"] for e in events] == ["KILL", "MESSAGE", "ACKNOWLEDGED", "SHUTDOWN"]
    assert events[0]["kill"] == {"task_id": {"value": "t-1"}}
    assert base64.b64decode(events[1]["message"]["data"]) == b"hi"
    assert events[3] == {"type": "SHUTDOWN"}


def test_an_executor_that_does_not_read_is_cut_off_at_the_bound():
    aborted = []
    stream = ExecutorStream(peer="p", role="*", container_id="c", abort=lambda: aborted.append(True))
    stream.max_bytes = 10_000
    for _ in range(100):
        stream.framework_message(b"x" * 500)
    assert stream.closing and aborted == [True]
    assert "unread" in stream.end_reason


# -- calls -----------------------------------------------------------------------------------


def test_update_as_pymesos_sends_it():
    status = ex.update_status(
        pymesos_update(
            state="TASK_FAILED", message="boom", reason="REASON_COMMAND_EXECUTOR_FAILED", data="aGk="
        )
    )
    assert status.task_id == "t-1"
    assert status.state == TaskState.TASK_FAILED
    assert status.message == "boom"
    assert status.reason == "REASON_COMMAND_EXECUTOR_FAILED"
    assert status.data == b"hi"
    assert status.timestamp == 1764200000.0
    assert len(status.uuid) == 32  # mezzo's form of a 16-byte uuid
    assert translate.reason_name(status.reason) == "REASON_COMMAND_EXECUTOR_FAILED"


@pytest.mark.parametrize(
    ("change", "path", "problem"),
    [
        ({"state": "TASK_BORED"}, "update.status.state", "task state"),
        ({"state": 2}, "update.status.state", "task state"),
        ({"uuid": None}, "update.status.uuid", "is required"),
        ({"uuid": "%%%"}, "update.status.uuid", "base64"),
        ({"task_id": {"value": ""}}, "update.status.task_id.value", "must not be empty"),
        ({"reason": "R" * 201}, "update.status.reason", "longer than 200"),
        ({"data": 5}, "update.status.data", "base64"),
        ({"timestamp": "soon"}, "update.status.timestamp", "number"),
    ],
)
def test_update_errors_name_the_field(change, path, problem):
    body = pymesos_update()
    body["status"].update(change)
    if change.get("uuid", 0) is None:
        del body["status"]["uuid"]
    with pytest.raises(BadCall) as caught:
        ex.update_status(body)
    assert caught.value.path == path
    assert problem in str(caught.value)


def test_update_without_a_status():
    with pytest.raises(BadCall, match=r"update\.status: is required"):
        ex.update_status({})


def test_message_and_unacknowledged_updates():
    assert ex.message_data({"data": base64.b64encode(b"\x01\x02").decode()}) == b"\x01\x02"
    with pytest.raises(BadCall, match=r"message\.data: is required"):
        ex.message_data({})
    assert ex.unacknowledged_updates({"unacknowledged_tasks": [], "unacknowledged_updates": []}) == []
    again = ex.unacknowledged_updates({"unacknowledged_updates": [pymesos_update(state="TASK_FINISHED")]})
    assert [s.state for s in again] == [TaskState.TASK_FINISHED]
    with pytest.raises(BadCall) as caught:
        ex.unacknowledged_updates({"unacknowledged_updates": [pymesos_update(state="NOPE")]})
    assert caught.value.path == "subscribe.unacknowledged_updates[0].status.state"


def test_an_executor_call_names_its_executor():
    call = translate.parse_call(
        json.dumps(
            {
                "type": "UPDATE",
                "framework_id": {"value": "fw-1"},
                "executor_id": {"value": "exec-1"},
                "update": pymesos_update(),
            }
        ).encode()
    )
    assert (call.type, call.framework_id, call.executor_id) == ("UPDATE", "fw-1", "exec-1")
    with pytest.raises(BadCall, match="executor_id"):
        translate.parse_call(b'{"type": "UPDATE", "executor_id": 5}')


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        json_values,
        st.fixed_dictionaries(
            {"status": st.dictionaries(st.sampled_from(list(pymesos_update()["status"])), json_values)}
        ),
    )
)
def test_decoders_raise_only_bad_call(value):
    for decode in (ex.update_status, ex.message_data, ex.unacknowledged_updates):
        try:
            decode(value)
        except BadCall:
            pass
