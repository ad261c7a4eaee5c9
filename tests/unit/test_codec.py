"""ServiceSchema encode/decode of every oneway method, hostile bytes, Remote stubs."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mezzo.resources import Resources
from mezzo.rpc.codec import MalformedMessage, Remote, Utf8Text
from mezzo.rpc.framing import FrameDecoder, frame
from mezzo.services import AGENT, EXECUTOR, MASTER, SCHEDULER, TOOL
from mezzo.wire import Agent, Executor, Master, Scheduler, Tool
from mezzo.wire.ttypes import (
    AgentInfo,
    CommandInfo,
    ExecutorInfo,
    Filters,
    FrameworkFilters,
    FrameworkInfo,
    KillPolicy,
    Offer,
    RunningTask,
    TaskInfo,
    TaskState,
    TaskStatus,
)
from thrift.protocol.TBinaryProtocol import TBinaryProtocol, TBinaryProtocolAccelerated
from thrift.Thrift import TMessageType
from thrift.transport.TTransport import TMemoryBuffer


def test_fastbinary_accelerator_is_importable():
    from thrift.protocol import fastbinary

    assert hasattr(fastbinary, "encode_binary") and hasattr(fastbinary, "decode_binary")


# ----------------------------------------------------------- realistic args

RES = Resources.parse("cpus:1.5;mem:512;disk:1024;ports:[31000-31009,31100-31100]")
FW = FrameworkInfo(name="spark", user="alice", framework_id="fw-7", role="analytics",
                   hostname="sched.example", failover_timeout=60.0)
AGENT_INFO = AgentInfo(agent_id="ag-3", hostname="node3.example", port=5051,
                       resources=Resources.parse("cpus:8;mem:16384;ports:[31000-32000]"),
                       attributes={"rack": "r1", "zone": "eu-1"})
CMD = CommandInfo(value="python -m worker", arguments=["--threads", "4"], shell=False,
                  environment={"PYTHONUNBUFFERED": "1"})
EXEC = ExecutorInfo(executor_id="ex-1", command=CommandInfo(value="./executor"),
                    resources=Resources(cpus=0.1, mem=32), name="custom", framework_id="fw-7")
TASK_CMD = TaskInfo(task_id="t-1", name="word count", agent_id="ag-3", resources=RES,
                    command=CMD, labels={"owner": "alice"})
TASK_EXEC = TaskInfo(task_id="t-2", agent_id="ag-3", resources=Resources(cpus=0.25, mem=64),
                     executor=EXEC, data=b"\x00\x01binary\xff", long=True)
STATUS = TaskStatus(task_id="t-1", state=TaskState.TASK_FAILED, message="exit 3",
                    reason="command_failed", source="agent", agent_id="ag-3",
                    executor_id="", framework_id="fw-7", uuid="u-9f", timestamp=1712.5,
                    exit_code=3, data=b"tail")
OFFER = Offer(offer_id="m-O1", framework_id="fw-7", agent_id="ag-3", hostname="node3.example",
              resources=RES, attributes={"rack": "r1"}, executor_ids=["ex-1"],
              long_task_room=Resources(cpus=1, mem=512))
BLOB = bytes(range(256))

SAMPLES: dict[str, dict[str, tuple]] = {
    "Master": {
        "register_framework": (FW,),
        "unregister_framework": ("fw-7",),
        "launch_tasks": ("fw-7", ["m-O1", "m-O2"], [TASK_CMD, TASK_EXEC], Filters(refuse_seconds=2.5)),
        "decline_offer": ("fw-7", ["m-O3"], Filters(refuse_seconds=30.0)),
        "set_needs_offers": ("fw-7", False),
        "set_filters": ("fw-7", FrameworkFilters(agents=["ag-1", "node2.example"],
                                                 min_free=Resources(cpus=2, mem=1024))),
        "kill_task": ("fw-7", "t-1"),
        "acknowledge_status_update": ("fw-7", "ag-3", "t-1", "u-9f"),
        "reconcile_tasks": ("fw-7", [STATUS, TaskStatus(task_id="t-2", state=TaskState.TASK_RUNNING)]),
        "framework_to_executor": ("fw-7", "ag-3", "ex-1", BLOB),
        "request_guaranteed_share": ("fw-7", 2**40 + 5),
        "register_agent": (AGENT_INFO,),
        "reregister_agent": (AGENT_INFO, [RunningTask(framework_id="fw-7", task=TASK_CMD, latest=STATUS),
                                          RunningTask(framework_id="fw-7", task=TASK_EXEC)], [EXEC], [FW]),
        "status_update": (STATUS,),
        "executor_exited": ("ag-3", "fw-7", "ex-1", -9, "killed by SIGKILL"),
        "executor_to_framework": ("ag-3", "fw-7", "ex-1", b""),
        "pong": (),
        "container_statistics": ("ag-3", '[{"container_id": "c1", "statistics": {"cpu_seconds": 1.5}}]'),
        "files_reply": (7, 200, b'{"offset": 12, "data": ""}'),
        "request_state": (-1,),
        "request_metrics": (7,),
        "teardown_framework": (97, "fw-7"),
    },
    "Scheduler": {
        "registered": ("fw-7", "127.0.0.1:5050"),
        "reregistered": ("fw-7", "10.0.0.1:5050"),
        "resource_offers": ([OFFER, Offer(offer_id="m-O2", framework_id="fw-7", agent_id="ag-4",
                                          hostname="h4", resources=Resources(cpus=1))],),
        "offer_rescinded": ("m-O1",),
        "status_update": (STATUS,),
        "framework_message": ("ag-3", "ex-1", BLOB),
        "agent_lost": ("ag-3",),
        "executor_lost": ("ag-3", "ex-1", 137),
        "guaranteed_share": (12, Resources(cpus=0.3, mem=100.125)),
        "error": ("framework removed: failover timeout — ünïcode",),
        "not_leader": ("10.0.0.2:5050",),
        "ping": (),
    },
    "Agent": {
        "registered": ("ag-3",),
        "reregistered": ("ag-3",),
        "run_task": (FW, TASK_EXEC),
        "kill_task": ("fw-7", "t-1", KillPolicy(grace_seconds=1.5, reason="revoked",
                                                message="framework fw-2 above its guarantee")),
        "status_update_acknowledged": ("fw-7", "t-1", "u-9f"),
        "framework_to_executor": ("fw-7", "ex-1", b"\xff" * 1000),
        "shutdown_framework": ("fw-7",),
        "error": ("resources 'cpus': -1 is negative",),
        "ping": (),
        "request_statistics": (5,),
        "files_request": (7, "read", "/frameworks/fw-7/executors/t-1/runs/latest/stdout", -1, 65536),
        "not_leader": ("",),
        "reregistration_refused": ("ag-3", "agent ag-3 was declared lost"),
        "register_executor": ("fw-7", "ex-1", "a-token"),
        "executor_status_update": (STATUS,),
        "executor_to_framework": ("fw-7", "ex-1", b"result"),
    },
    "Executor": {
        "registered": (EXEC, FW, AGENT_INFO),
        "launch_task": (TASK_EXEC,),
        "kill_task": ("t-2",),
        "framework_message": (b"ping",),
        "status_update_acknowledged": ("t-2", "u-1"),
        "shutdown": (),
    },
    "Tool": {
        "state": (99, '{"frameworks": [], "agents": [{"id": "ag-3"}]}'),
        "metrics": (98, '{"messages_received": 12}'),
        "statistics": (97, '[]'),
        "error": (96, "request_state: principal x may not view the cluster"),
        "done": (95, "framework fw-7 torn down; 2 task(s) killed"),
    },
}

SCHEMAS = {"Master": MASTER, "Scheduler": SCHEDULER, "Agent": AGENT, "Executor": EXECUTOR, "Tool": TOOL}
MODULES = {"Master": Master, "Scheduler": Scheduler, "Agent": Agent, "Executor": Executor, "Tool": Tool}
CASES = [(svc, m) for svc, methods in SAMPLES.items() for m in methods]


@pytest.mark.parametrize("service", sorted(SCHEMAS))
def test_samples_cover_every_method(service):
    iface = {n for n in dir(MODULES[service].Iface) if not n.startswith("_")}
    assert set(SCHEMAS[service].methods) == iface
    assert set(SAMPLES[service]) == iface


def test_schema_names():
    assert [SCHEMAS[s].name for s in sorted(SCHEMAS)] == sorted(SCHEMAS)


def _payload(message: bytes) -> bytes:
    (size,) = struct.unpack("!I", message[:4])
    assert size == len(message) - 4
    return message[4:]


@pytest.mark.parametrize("service,method", CASES)
def test_round_trip_every_method(service, method):
    schema = SCHEMAS[service]
    args = SAMPLES[service][method]
    message = schema.encode(method, args, {})
    name, decoded = schema.decode(_payload(message))
    assert name == method
    assert decoded == args
    assert len(decoded) == len(schema.methods[method].fields)


@pytest.mark.parametrize("service,method", CASES)
def test_bytes_match_a_stock_thrift_client(service, method):
    """The encoding is exactly what the generated Client sends (TFramedTransport-compatible).

    The accelerated protocol is used because the generated pure-Python ``write`` of
    enum fields (``py:enum``) expects member names, not the ints mezzo carries."""
    buf = TMemoryBuffer()
    client = MODULES[service].Client(TBinaryProtocolAccelerated(buf))
    getattr(client, f"send_{method}")(*SAMPLES[service][method])
    assert SCHEMAS[service].encode(method, SAMPLES[service][method], {}) == frame(buf.getvalue())


@pytest.mark.parametrize("service,method", CASES)
def test_kwargs_encode_like_positionals(service, method):
    schema = SCHEMAS[service]
    args = SAMPLES[service][method]
    kwargs = dict(zip(schema.methods[method].fields, args))
    assert schema.encode(method, (), kwargs) == schema.encode(method, args, {})


def test_decoded_resources_lift_back_to_equal_resources():
    _name, (offers,) = SCHEDULER.decode(_payload(SCHEDULER.encode("resource_offers", ([OFFER],), {})))
    assert Resources.of(offers[0].resources) == RES
    assert Resources.of(offers[0].resources).get("cpus") == 1.5
    assert Resources.of(offers[0].resources).range_pairs("ports") == [(31000, 31009), (31100, 31100)]


def test_binary_fields_decode_as_bytes_and_strings_as_str():
    _, (fid, _aid, eid, data) = MASTER.decode(
        _payload(MASTER.encode("framework_to_executor", ("fw", "ag", "ex", BLOB), {})))
    assert type(data) is bytes and data == BLOB
    assert type(fid) is str


def test_left_out_arguments_decode_as_empty_values_and_structs_as_none():
    name, args = MASTER.decode(_payload(MASTER.encode("launch_tasks", (), {})))
    assert name == "launch_tasks"
    assert args == ("", [], [], None)  # framework id, offer ids, tasks, filters
    _, args = MASTER.decode(_payload(MASTER.encode("framework_to_executor", (), {})))
    assert args == ("", "", "", b"")  # the data is binary
    _, (request_id,) = MASTER.decode(_payload(MASTER.encode("request_state", (), {})))
    assert request_id == 0
    _, args = MASTER.decode(_payload(MASTER.encode("set_needs_offers", (), {})))
    assert args == ("", False)
    first, second = (MASTER.decode(_payload(MASTER.encode("reconcile_tasks", (), {})))[1] for _ in range(2))
    assert first == ("", []) and first[1] is not second[1]  # a fresh list each time: a handler may keep it


def test_several_encoded_messages_split_by_the_decoder():
    stream = b"".join(MASTER.encode(m, SAMPLES["Master"][m], {}) for m in SAMPLES["Master"])
    frames = FrameDecoder().feed(stream)
    assert [MASTER.decode(f)[0] for f in frames] == list(SAMPLES["Master"])


def test_call_message_type_is_accepted():
    buf = TMemoryBuffer()
    proto = TBinaryProtocol(buf)
    proto.writeMessageBegin("kill_task", TMessageType.CALL, 17)
    Master.kill_task_args(framework_id="fw", task_id="t").write(proto)
    assert MASTER.decode(buf.getvalue()) == ("kill_task", ("fw", "t"))


@pytest.mark.parametrize("mtype", [TMessageType.REPLY, TMessageType.EXCEPTION])
def test_non_call_message_types_are_malformed(mtype):
    buf = TMemoryBuffer()
    proto = TBinaryProtocol(buf)
    proto.writeMessageBegin("kill_task", mtype, 0)
    Master.kill_task_args(framework_id="fw", task_id="t").write(proto)
    with pytest.raises(MalformedMessage, match="kill_task"):
        MASTER.decode(buf.getvalue())


def test_unknown_method_is_malformed_and_named():
    msg = SCHEDULER.encode("resource_offers", ([OFFER],), {})
    with pytest.raises(MalformedMessage, match="resource_offers") as ei:
        MASTER.decode(_payload(msg))
    assert "Master" in str(ei.value)


def test_empty_payload_is_malformed():
    with pytest.raises(MalformedMessage):
        MASTER.decode(b"")


def test_truncated_arguments_are_malformed():
    payload = _payload(MASTER.encode("launch_tasks", SAMPLES["Master"]["launch_tasks"], {}))
    with pytest.raises(MalformedMessage, match="launch_tasks"):
        MASTER.decode(payload[: len(payload) - 20])


def test_string_longer_than_max_frame_is_malformed():
    payload = _payload(AGENT.encode("error", ("x" * 5000,), {}))
    assert AGENT.decode(payload) == ("error", ("x" * 5000,))
    with pytest.raises(MalformedMessage):
        AGENT.decode(payload, max_frame=1000)


def test_encode_of_unknown_method_fails_loudly():
    with pytest.raises(KeyError):
        MASTER.encode("no_such_method", (), {})


# ----------------------------------------------------------- hostile bytes


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes_raise_only_malformed(data):
    for schema in SCHEMAS.values():
        try:
            name, args = schema.decode(data)
        except MalformedMessage:
            continue
        assert name in schema.methods  # decoding successfully is allowed; anything else is not


def _valid_payloads() -> list[bytes]:
    return [_payload(SCHEMAS[s].encode(m, SAMPLES[s][m], {})) for s, m in CASES]


VALID = _valid_payloads()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    index=st.integers(0, len(VALID) - 1),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6),
    cut=st.one_of(st.none(), st.integers(0, 10_000)),
)
def test_mutated_valid_messages_raise_only_malformed(index, edits, cut):
    data = bytearray(VALID[index])
    for pos, value in edits:
        data[pos % len(data)] = value
    if cut is not None:
        data = data[: cut % (len(data) + 1)]
    for schema in SCHEMAS.values():
        try:
            schema.decode(bytes(data))
        except MalformedMessage:
            pass


@settings(max_examples=200, deadline=None)
@given(method=st.sampled_from(sorted(MASTER.methods)), body=st.binary(max_size=200))
def test_valid_header_with_random_body_raises_only_malformed(method, body):
    header = MASTER.methods[method].header
    try:
        name, _ = MASTER.decode(header + body)
    except MalformedMessage:
        return
    assert name == method


def test_huge_container_length_in_small_message_is_malformed():
    # list<string> offer_ids announcing 2**31-1 elements with no bytes behind them
    header = MASTER.methods["decline_offer"].header
    body = struct.pack("!bh", 15, 2) + struct.pack("!bi", 11, 0x7FFFFFFF)
    with pytest.raises(MalformedMessage):
        MASTER.decode(header + body)


# ----------------------------------------------------------- Remote


def test_remote_sends_encoded_message():
    sent: list[bytes] = []
    remote = Remote(sent.append, SCHEDULER)
    remote.offer_rescinded("m-O1")
    remote.registered(framework_id="fw-1", master="m:1")
    assert sent == [
        SCHEDULER.encode("offer_rescinded", ("m-O1",), {}),
        SCHEDULER.encode("registered", ("fw-1", "m:1"), {}),
    ]
    assert SCHEDULER.decode(_payload(sent[1])) == ("registered", ("fw-1", "m:1"))


def test_remote_typo_raises_attribute_error_without_sending():
    sent: list[bytes] = []
    remote = Remote(sent.append, SCHEDULER)
    with pytest.raises(AttributeError, match="resource_offer"):
        remote.resource_offer([])
    with pytest.raises(AttributeError):
        _ = remote.launch_tasks  # a Master method, not a Scheduler one
    assert sent == []
    assert not hasattr(remote, "_private")


@pytest.mark.parametrize("text", ["", '{"agents": []}', "ünïcödé " * 500])
@pytest.mark.parametrize("method", ["state", "metrics", "statistics"])
def test_a_call_encoded_with_its_text_spliced_in_is_the_call_encoded_whole(method, text):
    assert TOOL.encode_with_text(method, (42,), text.encode()) == TOOL.encode(method, (42, text), {})


@pytest.mark.parametrize("text", ["", '{"agents": []}', "ünïcödé " * 500])
@pytest.mark.parametrize("method", ["state", "metrics", "statistics"])
def test_a_utf8_text_is_framed_in_place_once_then_copied(method, text):
    whole = TOOL.encode(method, (42, text), {})
    buffered = Utf8Text.of(text.encode())
    first = TOOL.encode_with_text(method, (42,), buffered)
    assert isinstance(first, memoryview), "the first framing copied the text"
    assert first == whole
    # A second framing (another requester, another id) must not touch the first message,
    # which may still wait to be sent.
    second = TOOL.encode_with_text(method, (7,), buffered)
    assert isinstance(second, bytes)
    assert second == TOOL.encode(method, (7, text), {})
    assert first == whole
    assert buffered.decode() == text


def test_a_utf8_text_is_filled_through_its_view():
    data = "état ☃".encode()
    text = Utf8Text(len(data))
    text.view()[:] = data
    assert text.size == len(data) and text.decode() == "état ☃"
    assert bytes(TOOL.encode_with_text("state", (1,), text)) == TOOL.encode("state", (1, "état ☃"), {})


def test_only_a_call_ending_in_a_string_takes_a_spliced_text():
    with pytest.raises(TypeError):
        MASTER.encode_with_text("kill_task", ("f", "t"), b"t")  # ends in a string, but one argument too many
    with pytest.raises(TypeError):
        MASTER.encode_with_text("set_needs_offers", ("f",), b"x")  # ends in a bool
