"""mezzo.v1.translate and mezzo.v1.recordio: Mesos v1 JSON <-> mezzo's kernel types.

The call bodies below are those pymesos 0.3.15 sends, as captured on the wire
(/work/shared/reference/pymesos.md; the elided framework ids filled in).
"""

from __future__ import annotations

import base64
import json
import math
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mezzo.resources import Resources
from mezzo.v1 import translate
from mezzo.v1.recordio import RecordReader, frame
from mezzo.v1.translate import BadCall
from mezzo.wire.ttypes import (
    CommandInfo,
    ExecutorInfo,
    Filters,
    FrameworkInfo,
    Offer,
    Range,
    TaskInfo,
    TaskState,
    TaskStatus,
)
from mezzo.wire.ttypes import Resources as WireResources

# -- pymesos' calls, verbatim ---------------------------------------------------------------

SUBSCRIBE = (
    b'{"type": "SUBSCRIBE", "subscribe": {"framework_info": {"user": "u", "name": "probe", "hostname": "h",'
    b' "roles": ["r1"], "capabilities": [{"type": "MULTI_ROLE"}, {"type": "GPU_RESOURCES"}], "failover_timeout": 100}}}'
)
ACCEPT = (
    b'{"type":"ACCEPT","framework_id":{"value":"fw"},"accept":{"offer_ids":[{"value":"o1"}],"operations":[{"type":"LAUNCH",'
    b'"launch":{"task_infos":[{"task_id":{"value":"t1"},"agent_id":{"value":"a1"},"name":"t1","command":{"value":"echo hi","shell":true},'
    b'"resources":[{"name":"cpus","type":"SCALAR","scalar":{"value":0.1}},{"name":"mem","type":"SCALAR","scalar":{"value":32}}]}]}}],'
    b'"filters":{"refuse_seconds":5}}}'
)
DECLINE = b'{"type":"DECLINE","framework_id":{"value":"fw"},"decline":{"offer_ids":[{"value":"o2"}],"filters":{"refuse_seconds":60}}}'
KILL = b'{"type":"KILL","framework_id":{"value":"fw"},"kill":{"task_id":{"value":"t1"}}}'
RECONCILE = b'{"type":"RECONCILE","framework_id":{"value":"fw"},"reconcile":{"tasks":[]}}'
RECONCILE_EXPLICIT = (
    b'{"type":"RECONCILE","framework_id":{"value":"fw"},"reconcile":{"tasks":[{"task_id":{"value":"t1"}}]}}'
)
SUPPRESS = b'{"type":"SUPPRESS","framework_id":{"value":"fw"}}'
REVIVE = b'{"type":"REVIVE","framework_id":{"value":"fw"}}'
MESSAGE = (
    b'{"type":"MESSAGE","framework_id":{"value":"fw"},"message":{"agent_id":{"value":"a1"},"executor_id":{"value":"e1"},'
    b'"data":"aGVsbG8="}}'
)
REQUEST = b'{"type":"REQUEST","framework_id":{"value":"fw"},"request":{"requests":[]}}'
ACKNOWLEDGE = (
    b'{"type":"ACKNOWLEDGE","framework_id":{"value":"fw"},"acknowledge":{"agent_id":{"value":"a1"},"task_id":{"value":"t1"},'
    b'"uuid":"XD2ooRJDTFeKeMCBeOejXQ=="}}'
)
TEARDOWN = b'{"type":"TEARDOWN","framework_id":{"value":"fw"}}'

PYMESOS_CALLS = [
    SUBSCRIBE,
    ACCEPT,
    DECLINE,
    KILL,
    RECONCILE,
    RECONCILE_EXPLICIT,
    SUPPRESS,
    REVIVE,
    MESSAGE,
    REQUEST,
    ACKNOWLEDGE,
    TEARDOWN,
]


def bad_call(fn, *args) -> BadCall:
    with pytest.raises(BadCall) as caught:
        fn(*args)
    return caught.value


def scalar(name: str, value) -> dict:
    return {"name": name, "type": "SCALAR", "scalar": {"value": value}}


def ports(*spans: tuple[Any, Any], name: str = "ports") -> dict:
    return {"name": name, "type": "RANGES", "ranges": {"range": [{"begin": b, "end": e} for b, e in spans]}}


def launch(*task_infos, **accept) -> dict:
    """An ACCEPT payload launching ``task_infos`` on offer o1."""
    return {
        "offer_ids": [{"value": "o1"}],
        "operations": [{"type": "LAUNCH", "launch": {"task_infos": list(task_infos)}}],
        **accept,
    }


def command_task(task_id: str = "t1", **extra) -> dict:
    return {
        "task_id": {"value": task_id},
        "agent_id": {"value": "a1"},
        "name": task_id,
        "command": {"value": "true"},
        "resources": [scalar("cpus", 1)],
        **extra,
    }


# -- the calls pymesos sends ------------------------------------------------------------------


def test_subscribe_framework_info_and_capabilities():
    call = translate.parse_call(SUBSCRIBE)
    assert (call.type, call.framework_id) == ("SUBSCRIBE", "")
    info = translate.framework_info(call.body.get("framework_info"))
    assert info == FrameworkInfo(
        name="probe", user="u", framework_id="", role="r1", hostname="h", failover_timeout=100.0
    )
    assert translate.capabilities(call.body["framework_info"]) == {"MULTI_ROLE", "GPU_RESOURCES"}


def test_partition_aware_is_the_capability_passed_on():
    body = {"name": "p", "capabilities": [{"type": "MULTI_ROLE"}, {"type": "PARTITION_AWARE"}]}
    assert translate.framework_info(body).capabilities == ["PARTITION_AWARE"]
    assert translate.framework_info({"name": "q"}).capabilities == []


def test_accept_as_pymesos_sends_it():
    call = translate.parse_call(ACCEPT)
    assert (call.type, call.framework_id) == ("ACCEPT", "fw")
    accept = translate.task_infos_of_accept(call.body)
    assert accept.offer_ids == ["o1"]
    assert accept.filters == Filters(refuse_seconds=5.0)
    assert accept.invalid == [] and accept.refused_operations == []
    (task,) = accept.tasks
    assert task == TaskInfo(
        task_id="t1",
        name="t1",
        agent_id="a1",
        resources=Resources(cpus=0.1, mem=32),
        command=CommandInfo(value="echo hi", arguments=[], shell=True, environment={}, user=""),
        executor=None,
        data=None,
        labels={},
    )
    assert task.resources.scalars == {"cpus": 100, "mem": 32000}
    assert translate.accept is translate.task_infos_of_accept  # the façade's name for it


def test_decline_as_pymesos_sends_it():
    call = translate.parse_call(DECLINE)
    assert translate.decline(call.body) == (["o2"], Filters(refuse_seconds=60.0))


def test_kill_without_agent_id():
    assert translate.kill(translate.parse_call(KILL).body) == ("t1", "")
    assert translate.kill({"task_id": {"value": "t1"}, "agent_id": {"value": "a1"}}) == ("t1", "a1")


def test_reconcile_implicit_and_explicit():
    assert translate.reconcile(translate.parse_call(RECONCILE).body) == []
    assert translate.reconcile(translate.parse_call(RECONCILE_EXPLICIT).body) == [("t1", "")]
    body = {"tasks": [{"task_id": {"value": "t1"}, "agent_id": {"value": "a1"}}]}
    assert translate.reconcile(body) == [("t1", "a1")]


def test_suppress_and_revive_without_and_with_roles():
    for raw in (SUPPRESS, REVIVE):
        call = translate.parse_call(raw)
        assert call.body == {}
        assert translate.roles(call.body) == []
    assert translate.roles({"roles": ["r1", "r2"]}) == ["r1", "r2"]
    assert translate.roles({"role": "r1"}) == ["r1"]  # the docs' (deprecated) form


def test_message_data_is_base64():
    call = translate.parse_call(MESSAGE)
    assert translate.message(call.body) == ("a1", "e1", b"hello")


def test_acknowledge_decodes_the_uuid():
    call = translate.parse_call(ACKNOWLEDGE)
    assert translate.acknowledge(call.body) == ("a1", "t1", "5c3da8a112434c578a78c08178e7a35d")


def test_request_and_teardown_parse():
    assert translate.parse_call(REQUEST) == translate.Call("REQUEST", "fw", {"requests": []})
    assert translate.parse_call(TEARDOWN) == translate.Call("TEARDOWN", "fw", {})


def test_unknown_call_types_are_still_calls():
    call = translate.parse_call(b'{"type":"ACCEPT_INVERSE_OFFERS","accept_inverse_offers":{"x":1}}')
    assert call == translate.Call("ACCEPT_INVERSE_OFFERS", "", {"x": 1})
    # "type" cannot be a payload's key.
    assert translate.parse_call(b'{"type":"Type"}').body == {}


# -- parse_call's errors -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "path", "problem"),
    [
        (b"\xff\xfe", "", "not UTF-8"),
        (b"{not json", "", "not JSON"),
        (b"", "", "not JSON"),
        (b"[1, 2]", "", "got an array"),
        (b'"ACCEPT"', "", 'got "ACCEPT"'),
        (b"{}", "type", "is required"),
        (b'{"type": 3}', "type", "got 3"),
        (b'{"type": ""}', "type", 'got ""'),
        (b'{"type": "KILL", "framework_id": "fw"}', "framework_id", 'must be an object, got "fw"'),
        (b'{"type": "KILL", "framework_id": {"value": 1}}', "framework_id.value", "must be a string, got 1"),
        (b'{"type": "KILL", "framework_id": {}}', "framework_id.value", "is required"),
        (b'{"type": "KILL", "kill": [1]}', "kill", "must be an object, got an array"),
        (b'{"type": "DECLINE", "decline": "o1"}', "decline", 'must be an object, got "o1"'),
    ],
)
def test_parse_call_errors(body, path, problem):
    error = bad_call(translate.parse_call, body)
    assert error.path == path
    assert problem in error.problem
    assert str(error) == (f"{path}: {error.problem}" if path else error.problem)


def test_parse_call_nesting_limit():
    def nested(depth: int) -> bytes:
        return b'{"type":"KILL","kill":{"x":' + b"[" * (depth - 2) + b"]" * (depth - 2) + b"}}"

    assert translate.parse_call(nested(64)).type == "KILL"  # 64 levels, the two objects included
    assert "nested deeper than 64" in str(bad_call(translate.parse_call, nested(65)))
    # Far past the C parser's recursion: refused before json.loads sees it, and fast.
    start = time.perf_counter()
    assert "nested deeper" in str(bad_call(translate.parse_call, b"[" * 1_000_000))
    assert "nested deeper" in str(bad_call(translate.parse_call, b'{"a":' * 100_000))
    assert time.perf_counter() - start < 1.0
    # Brackets inside strings, escaped quotes included, are not nesting.
    deep_string = json.dumps({"type": "KILL", "kill": {"note": '\\"' + "[" * 500 + '"'}}).encode()
    assert translate.parse_call(deep_string).type == "KILL"


def test_parse_call_is_linear_on_hostile_strings():
    # Unterminated strings, escapes and lone backslashes: no quadratic rescans.
    for body in (b'"\\"' * 300_000, b'["\\' * 300_000, b'{"a":"' + b"x" * 2_000_000):
        start = time.perf_counter()
        bad_call(translate.parse_call, body)
        assert time.perf_counter() - start < 1.0


# -- framework_info -------------------------------------------------------------------------


def test_framework_info_round_trip():
    info = FrameworkInfo(
        name="fw", user="alice", framework_id="f-1", role="prod", hostname="h1", failover_timeout=3600.5
    )
    obj = {
        "name": info.name,
        "user": info.user,
        "id": {"value": info.framework_id},
        "role": info.role,
        "hostname": info.hostname,
        "failover_timeout": info.failover_timeout,
        # Accepted and ignored, as are keys the proto does not have.
        "principal": "p",
        "webui_url": "http://x",
        "checkpoint": True,
        "labels": {"labels": [{"key": "k", "value": "v"}]},
        "offer_filters": {},
        "command.environment": {"x": 1},
    }
    assert translate.framework_info(obj) == info


def test_framework_info_defaults():
    assert translate.framework_info({"name": "n"}) == FrameworkInfo(
        name="n", user="", framework_id="", role="*", hostname="", failover_timeout=0.0
    )


@pytest.mark.parametrize(
    ("fields", "role"),
    [
        ({"roles": ["a"]}, "a"),
        ({"roles": ["a", "a"]}, "a"),
        ({"role": "b"}, "b"),
        ({"roles": [], "role": "b"}, "b"),
    ],
)
def test_framework_info_one_role(fields, role):
    assert translate.framework_info({"name": "n", **fields}).role == role


@pytest.mark.parametrize(
    ("fields", "path", "problem"),
    [
        ({"roles": ["a", "b"]}, "subscribe.framework_info.roles", "mezzo frameworks have one role"),
        ({"roles": [""]}, "subscribe.framework_info.roles", "must not be empty"),
        ({"roles": "a"}, "subscribe.framework_info.roles", 'must be an array, got "a"'),
        ({"roles": ["a", 1]}, "subscribe.framework_info.roles[1]", "must be a string, got 1"),
        ({"name": None}, "subscribe.framework_info.name", "is required"),
        ({"name": ""}, "subscribe.framework_info.name", "must not be empty"),
        ({"name": 5}, "subscribe.framework_info.name", "must be a string, got 5"),
        ({"failover_timeout": -1}, "subscribe.framework_info.failover_timeout", "finite number >= 0, got -1"),
        ({"failover_timeout": "x"}, "subscribe.framework_info.failover_timeout", 'must be a number, got "x"'),
        ({"failover_timeout": "Infinity"}, "subscribe.framework_info.failover_timeout", "finite number >= 0"),
        ({"id": "fw"}, "subscribe.framework_info.id", 'must be an object, got "fw"'),
        ({"user": ["u"]}, "subscribe.framework_info.user", "must be a string, got an array"),
    ],
)
def test_framework_info_errors(fields, path, problem):
    error = bad_call(translate.framework_info, {"name": "n", **fields})
    assert (error.path, problem in error.problem) == (path, True), str(error)


def test_framework_info_is_required():
    assert str(bad_call(translate.framework_info, None)) == "subscribe.framework_info: is required"
    assert bad_call(translate.framework_info, [], "info").path == "info"


# -- resources ------------------------------------------------------------------------------


def test_resources_round_trip_with_ranges_and_fractional_cpus():
    mezzo = Resources(cpus=0.3, mem=1536.5, gpus=1, ranges={"ports": [(31000, 31005), (32000, 32000)]})
    encoded = translate.resources_json(mezzo, "r1")
    assert encoded == [
        {
            "name": "cpus",
            "type": "SCALAR",
            "scalar": {"value": 0.3},
            "role": "*",
            "allocation_info": {"role": "r1"},
        },
        {
            "name": "gpus",
            "type": "SCALAR",
            "scalar": {"value": 1.0},
            "role": "*",
            "allocation_info": {"role": "r1"},
        },
        {
            "name": "mem",
            "type": "SCALAR",
            "scalar": {"value": 1536.5},
            "role": "*",
            "allocation_info": {"role": "r1"},
        },
        {
            "name": "ports",
            "type": "RANGES",
            "ranges": {"range": [{"begin": 31000, "end": 31005}, {"begin": 32000, "end": 32000}]},
            "role": "*",
            "allocation_info": {"role": "r1"},
        },
    ]
    # What a framework echoes back from its offer (allocated to its role) decodes as it was.
    assert translate.resources(json.loads(json.dumps(encoded)), "r", framework_role="r1") == mezzo


def test_resources_same_name_twice_is_summed_or_merged():
    decoded = translate.resources(
        [scalar("cpus", 0.1), scalar("cpus", 0.2), ports((31000, 31005)), ports((31006, 31010), (40, 41))],
        "r",
    )
    assert decoded.scalars == {"cpus": 300}  # exact: thousandths
    assert decoded.range_pairs("ports") == [(40, 41), (31000, 31010)]
    # Rounded to the nearest thousandth, as mezzo.Resources does; zero is no resource.
    assert translate.resources([scalar("cpus", 0.0004), scalar("mem", 1.2346)], "r").scalars == {"mem": 1235}
    assert translate.resources(None, "r") == Resources()
    assert translate.resources([ports((1, 2)), ports()], "r").range_pairs("ports") == [(1, 2)]
    assert translate.resources([ports((5, 5.0))], "r").range_pairs("ports") == [(5, 5)]


def test_resources_roles_of_the_framework_or_unreserved():
    ok = [
        {**scalar("cpus", 1), "role": "*"},
        {**scalar("mem", 1), "role": "r1", "allocation_info": {"role": "r1"}},
        {
            **scalar("disk", 1),
            "reservations": [{"type": "STATIC", "role": "r1"}],
            "disk": {},
            "revocable": {},
        },
    ]
    assert translate.resources(ok, "r", framework_role="r1").scalars == {
        "cpus": 1000,
        "mem": 1000,
        "disk": 1000,
    }


@pytest.mark.parametrize(
    ("resource", "path", "problem"),
    [
        (
            {"name": "disks", "type": "SET", "set": {"item": ["sda1"]}},
            "r[0].type",
            "mezzo has no SET resources",
        ),
        ({**scalar("cpus", 1), "role": "other"}, "r[0].role", "mezzo has no reservations"),
        ({**scalar("cpus", 1), "allocation_info": {"role": "other"}}, "r[0].allocation_info.role", "'other'"),
        (
            {**scalar("cpus", 1), "reservations": [{"role": "*"}, {"type": "DYNAMIC", "role": "other"}]},
            "r[0].reservations[1].role",
            "is not this framework's role",
        ),
        ({**scalar("cpus", 1), "reservation": {"role": "other"}}, "r[0].reservation.role", "reservations"),
        (scalar("cpus", -1), "r[0].scalar.value", "must be a finite number >= 0, got -1"),
        (scalar("cpus", math.nan), "r[0].scalar.value", "must be a finite number >= 0, got NaN"),
        (scalar("cpus", math.inf), "r[0].scalar.value", "must be a finite number >= 0, got Infinity"),
        (scalar("cpus", "x"), "r[0].scalar.value", 'must be a finite number >= 0, got "x"'),
        (scalar("cpus", True), "r[0].scalar.value", "got true"),
        (scalar("cpus", None), "r[0].scalar.value", "is required"),
        (scalar("cpus", 1e300), "r[0].scalar.value", "must be at most"),
        ({"name": "cpus", "type": "SCALAR"}, "r[0].scalar", "is required"),
        ({"name": "cpus", "scalar": {"value": 1}}, "r[0].type", "is required"),
        ({"name": "cpus", "type": "TEXT"}, "r[0].type", 'must be "SCALAR" or "RANGES", got "TEXT"'),
        ({"type": "SCALAR", "scalar": {"value": 1}}, "r[0].name", "is required"),
        (ports((5, 4)), "r[0].ranges.range[0]", "end 4 is before begin 5"),
        (ports((-1, 4)), "r[0].ranges.range[0].begin", "got -1"),
        (ports((1, 2**63)), "r[0].ranges.range[0].end", "an integer from 0 to"),
        (ports((1, 2.5)), "r[0].ranges.range[0].end", "got 2.5"),
        (
            {"name": "ports", "type": "RANGES", "ranges": {"range": {}}},
            "r[0].ranges.range",
            "must be an array",
        ),
        ("cpus:1", "r[0]", 'must be an object, got "cpus:1"'),
    ],
)
def test_resource_errors_name_the_path(resource, path, problem):
    error = bad_call(translate.resources, [resource], "r")
    assert error.path == path, str(error)
    assert problem in error.problem, str(error)


def test_resources_one_name_one_type_and_bounded_sums():
    error = bad_call(translate.resources, [scalar("ports", 1), ports((1, 2))], "r")
    assert error.path == "r[1].type" and "SCALAR elsewhere" in error.problem
    error = bad_call(translate.resources, [scalar("x", 9e15), scalar("x", 9e15)], "r")
    assert error.path == "r[1].scalar.value" and "add up" in error.problem
    assert bad_call(translate.resources, {"name": "cpus"}, "r").problem == "must be an array, got an object"


# -- filters --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "seconds"),
    [
        (None, 5.0),
        ({}, 5.0),
        ({"refuse_seconds": 60}, 60.0),
        ({"refuse_seconds": 0}, 0.0),
        ({"refuse_seconds": 0.25}, 0.25),
        ({"refuse_seconds": 10**12}, 31536000.0),  # capped at a year, as Mesos does
        ({"refuse_seconds": "Infinity"}, 31536000.0),  # stout reads the string for a double
        ({"refuse_seconds": -1}, 5.0),  # Mesos: "a negative number ... the default value"
    ],
)
def test_filters(obj, seconds):
    assert translate.filters(obj, "f") == Filters(refuse_seconds=seconds)


@pytest.mark.parametrize("value", ["x", math.nan, True, [5]])
def test_filters_errors(value):
    error = bad_call(translate.filters, {"refuse_seconds": value}, "decline.filters")
    assert error.path == "decline.filters.refuse_seconds"
    assert bad_call(translate.filters, [1], "decline.filters").path == "decline.filters"


# -- task_info ------------------------------------------------------------------------------


def test_task_info_with_command_round_trip():
    task = TaskInfo(
        task_id="t1",
        name="sleeper",
        agent_id="a1",
        resources=Resources(cpus=0.5, mem=64, ranges={"ports": [(31000, 31001)]}),
        command=CommandInfo(
            value="/bin/sleep",
            arguments=["sleep", "10"],
            shell=False,
            environment={"A": "1", "B": ""},
            user="alice",
        ),
        executor=None,
        data=b"\x00payload\xff",
        labels={"team": "x", "empty": ""},
    )
    obj = {
        "task_id": {"value": "t1"},
        "agent_id": {"value": "a1"},
        "name": "sleeper",
        "resources": translate.resources_json(task.resources),
        "command": {
            "value": "/bin/sleep",
            "arguments": ["sleep", "10"],
            "shell": False,
            "environment": {"variables": [{"name": "A", "value": "1"}, {"name": "B", "type": "VALUE"}]},
            "user": "alice",
            "uris": [],
        },
        "data": base64.b64encode(task.data).decode(),
        "labels": {"labels": [{"key": "team", "value": "x"}, {"key": "empty"}]},
        # Accepted and ignored.
        "container": {"type": "MESOS", "mesos": {}},
        "health_check": {"type": "COMMAND", "command": {"value": "true"}},
        "check": {},
        "kill_policy": {"grace_period": {"nanoseconds": 5}},
        "discovery": {"visibility": "FRAMEWORK"},
        "max_completion_time": {"nanoseconds": 1},
        "limits": {"cpus": {"value": "Infinity"}},
    }
    assert translate.task_info(obj, "t") == task


def test_task_info_with_executor_round_trip():
    executor = ExecutorInfo(
        executor_id="e1",
        command=CommandInfo(value="./executor", arguments=[], shell=True, environment={}, user=""),
        resources=Resources(cpus=0.1, mem=32),
        name="my executor",
        framework_id="fw",
    )
    task = TaskInfo(
        task_id="t2", name="", agent_id="a1", resources=Resources(cpus=1), executor=executor, labels={}
    )
    obj = {
        "task_id": {"value": "t2"},
        "agent_id": {"value": "a1"},
        "resources": [scalar("cpus", 1)],
        "executor": {
            "type": "CUSTOM",
            "executor_id": {"value": "e1"},
            "framework_id": {"value": "fw"},
            "name": "my executor",
            "command": {"value": "./executor"},
            "resources": [scalar("cpus", 0.1), scalar("mem", 32)],
            "data": "ignored",
            "shutdown_grace_period": {"nanoseconds": 1},
        },
    }
    assert translate.task_info(obj, "t") == task


@pytest.mark.parametrize(
    ("change", "path", "problem"),
    [
        ({"task_id": None}, "t.task_id", "is required"),
        ({"task_id": {"value": ""}}, "t.task_id.value", "must not be empty"),
        ({"task_id": "t1"}, "t.task_id", 'must be an object, got "t1"'),
        ({"agent_id": None}, "t.agent_id", "is required"),
        ({"command": None}, "t", "exactly one of 'command' and 'executor'"),
        ({"executor": {"executor_id": {"value": "e"}}}, "t", "exactly one of"),
        (
            {"command": {"value": "x", "uris": [{"value": "http://x/y.tgz"}]}},
            "t.command.uris",
            "mezzo does not fetch URIs",
        ),
        ({"command": {"value": "x", "shell": "yes"}}, "t.command.shell", 'must be true or false, got "yes"'),
        ({"command": {"arguments": ["a", None]}}, "t.command.arguments[1]", "is required"),
        (
            {"command": {"environment": {"variables": [{"name": "S", "type": "SECRET", "secret": {}}]}}},
            "t.command.environment.variables[0]",
            "mezzo has no secrets",
        ),
        (
            {"command": {"environment": {"variables": [{"value": "v"}]}}},
            "t.command.environment.variables[0].name",
            "is required",
        ),
        ({"container": {"type": "DOCKER", "docker": {"image": "x"}}}, "t.container.type", 'got "DOCKER"'),
        (
            {"container": {"type": "MESOS", "mesos": {"image": {"type": "DOCKER"}}}},
            "t.container.mesos.image",
            "images",
        ),
        ({"container": {"type": "MESOS", "docker": {}}}, "t.container.docker", "Docker"),
        ({"data": "not base64!"}, "t.data", "not valid base64"),
        ({"data": 5}, "t.data", "must be base64 text, got 5"),
        ({"labels": {"labels": [{"value": "v"}]}}, "t.labels.labels[0].key", "is required"),
        ({"labels": [{"key": "k"}]}, "t.labels", "must be an object, got an array"),
        ({"name": 1}, "t.name", "must be a string, got 1"),
        ({"resources": [scalar("cpus", "x")]}, "t.resources[0].scalar.value", 'got "x"'),
    ],
)
def test_task_info_errors(change, path, problem):
    obj = {k: v for k, v in {**command_task(), **change}.items() if v is not None}
    error = bad_call(translate.task_info, obj, "t")
    assert error.path == path, str(error)
    assert problem in error.problem, str(error)


@pytest.mark.parametrize(
    ("executor", "path", "problem"),
    [
        ({"type": "DEFAULT", "executor_id": {"value": "e"}}, "t.executor.type", "no default executor"),
        ({"command": {"value": "x"}}, "t.executor.executor_id", "is required"),
        ({"executor_id": {"value": "e"}}, "t.executor.command", "is required"),
        (
            {"executor_id": {"value": "e"}, "command": {"value": "x"}, "framework_id": 3},
            "t.executor.framework_id",
            "got 3",
        ),
    ],
)
def test_executor_errors(executor, path, problem):
    obj = {**command_task(), "executor": executor}
    del obj["command"]
    error = bad_call(translate.task_info, obj, "t")
    assert (error.path, problem in error.problem) == (path, True), str(error)


# -- ACCEPT -------------------------------------------------------------------------------


def test_accept_answers_unreadable_tasks_and_launches_the_others():
    body = launch(
        command_task("good"),
        command_task("bad", resources=[scalar("cpus", 1), scalar("mem", "x")]),
        command_task("set", resources=[{"name": "disks", "type": "SET", "set": {"item": ["a"]}}]),
        {"name": "no id"},
        "not a task",
        filters={"refuse_seconds": 30},
    )
    accept = translate.task_infos_of_accept(body)
    assert [t.task_id for t in accept.tasks] == ["good"]
    assert accept.invalid == [
        (
            "bad",
            'accept.operations[0].launch.task_infos[1].resources[1].scalar.value: must be a finite number >= 0, got "x"',
        ),
        (
            "set",
            "accept.operations[0].launch.task_infos[2].resources[0].type: 'disks': mezzo has no SET resources"
            " (use SCALAR or RANGES)",
        ),
        ("", "accept.operations[0].launch.task_infos[3].task_id: is required"),
        ("", 'accept.operations[0].launch.task_infos[4]: must be an object, got "not a task"'),
    ]
    assert accept.filters == Filters(refuse_seconds=30.0)
    assert accept.offer_ids == ["o1"] and accept.refused_operations == []


def test_accept_role_checks_use_the_framework_role():
    body = launch(command_task(resources=[{**scalar("cpus", 1), "allocation_info": {"role": "r1"}}]))
    assert len(translate.task_infos_of_accept(body, "r1").tasks) == 1
    accept = translate.task_infos_of_accept(body, "r2")
    assert accept.tasks == [] and "allocation_info.role" in accept.invalid[0][1]


def test_accept_launch_group_runs_its_tasks_with_the_group_executor():
    executor = {
        "type": "CUSTOM",
        "executor_id": {"value": "e1"},
        "command": {"value": "./run-group"},
        "resources": [scalar("cpus", 0.1)],
    }
    group: dict[str, Any] = {
        "type": "LAUNCH_GROUP",
        "launch_group": {
            "executor": executor,
            "task_group": {
                "tasks": [
                    command_task("g1"),
                    command_task("g2"),
                    {**command_task("g3"), "executor": executor},
                ]
            },
        },
    }
    # A group is launched whole or not at all: g3 cannot be read, so g1 and g2 fail with it.
    accept = translate.task_infos_of_accept({"offer_ids": [{"value": "o1"}], "operations": [group]})
    assert accept.tasks == []
    g3_problem = (
        "accept.operations[0].launch_group.task_group.tasks[2].executor: a task of a group names no "
        "executor: the group's runs it"
    )
    assert accept.invalid == [
        ("g3", g3_problem),
        ("g1", f"another task of its group cannot be launched (g3: {g3_problem})"),
        ("g2", f"another task of its group cannot be launched (g3: {g3_problem})"),
    ]
    group["launch_group"]["task_group"]["tasks"].pop()
    accept = translate.task_infos_of_accept({"offer_ids": [{"value": "o1"}], "operations": [group]})
    assert [t.task_id for t in accept.tasks] == ["g1", "g2"] and accept.invalid == []
    assert accept.groups == [(0, 2)]  # the master launches them whole or not at all
    launch = {"type": "LAUNCH", "launch": {"task_infos": [command_task("solo")]}}
    twice = translate.task_infos_of_accept({"operations": [group, launch, group]})
    assert [t.task_id for t in twice.tasks] == ["g1", "g2", "solo", "g1", "g2"]
    assert twice.groups == [(0, 2), (3, 5)]  # by position: repeated ids are the master's to refuse
    for task in accept.tasks:
        assert task.command is None  # a mezzo task has a command or an executor
        assert task.executor == ExecutorInfo(
            executor_id="e1",
            command=CommandInfo(value="./run-group", arguments=[], shell=True, environment={}, user=""),
            resources=Resources(cpus=0.1),
            name="",
            framework_id="",
        )
    # A group whose executor mezzo cannot run (Mesos' default one): each task says why.
    group["launch_group"]["executor"] = {"type": "DEFAULT", "executor_id": {"value": "e1"}}
    accept = translate.task_infos_of_accept({"operations": [group]})
    assert accept.tasks == []
    assert [task_id for task_id, _ in accept.invalid] == ["g1", "g2"]
    assert all("launch_group.executor.type: mezzo has no default executor" in m for _, m in accept.invalid)


def test_accept_refuses_other_operations_by_index_and_type():
    body = {
        "offer_ids": [{"value": "o1"}],
        "operations": [
            {"type": "RESERVE", "reserve": {"resources": []}},
            {"type": "LAUNCH", "launch": {"task_infos": [command_task()]}},
            {"type": "CREATE_DISK"},
        ],
    }
    accept = translate.task_infos_of_accept(body)
    assert [t.task_id for t in accept.tasks] == ["t1"]
    assert accept.refused_operations == [
        "accept.operations[0]: mezzo does not do 'RESERVE' operations (only LAUNCH, LAUNCH_GROUP)",
        "accept.operations[2]: mezzo does not do 'CREATE_DISK' operations (only LAUNCH, LAUNCH_GROUP)",
    ]


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"offer_ids": "o1"}, "accept.offer_ids"),
        ({"offer_ids": ["o1"]}, "accept.offer_ids[0]"),
        ({"offer_ids": [{"value": ""}]}, "accept.offer_ids[0].value"),
        ({"operations": {"type": "LAUNCH"}}, "accept.operations"),
        ({"operations": [7]}, "accept.operations[0]"),
        ({"operations": [{}]}, "accept.operations[0].type"),
        ({"operations": [{"type": "LAUNCH"}]}, "accept.operations[0].launch"),
        (
            {"operations": [{"type": "LAUNCH", "launch": {"task_infos": {}}}]},
            "accept.operations[0].launch.task_infos",
        ),
        (
            {"operations": [{"type": "LAUNCH_GROUP", "launch_group": {}}]},
            "accept.operations[0].launch_group.task_group",
        ),
        ({"filters": {"refuse_seconds": "soon"}}, "accept.filters.refuse_seconds"),
        ([], "accept"),
    ],
)
def test_accept_structure_errors_refuse_the_call(body, path):
    assert bad_call(translate.task_infos_of_accept, body).path == path


# -- the other decoders' errors -------------------------------------------------------------


@pytest.mark.parametrize(
    ("decoder", "body", "path", "problem"),
    [
        (translate.decline, {"offer_ids": [{"value": 1}]}, "decline.offer_ids[0].value", "got 1"),
        (translate.decline, {"filters": 5}, "decline.filters", "got 5"),
        (translate.kill, {}, "kill.task_id", "is required"),
        (
            translate.kill,
            {"task_id": {"value": "t"}, "agent_id": {"value": 2}},
            "kill.agent_id.value",
            "got 2",
        ),
        (
            translate.acknowledge,
            {"task_id": {"value": "t"}, "uuid": "AAAA"},
            "acknowledge.agent_id",
            "is required",
        ),
        (
            translate.acknowledge,
            {"agent_id": {"value": "a"}, "task_id": {"value": "t"}, "uuid": "@@@"},
            "acknowledge.uuid",
            "not valid base64",
        ),
        (
            translate.acknowledge,
            {"agent_id": {"value": "a"}, "task_id": {"value": "t"}},
            "acknowledge.uuid",
            "is required",
        ),
        (translate.reconcile, {"tasks": [{}]}, "reconcile.tasks[0].task_id", "is required"),
        (translate.reconcile, {"tasks": {}}, "reconcile.tasks", "must be an array"),
        (
            translate.message,
            {"agent_id": {"value": "a"}, "executor_id": {"value": "e"}},
            "message.data",
            "is required",
        ),
        (
            translate.message,
            {"agent_id": {"value": "a"}, "executor_id": {"value": "e"}, "data": "a=b"},
            "message.data",
            "not valid base64",
        ),
        (translate.roles, {"roles": "r1"}, "roles", 'got "r1"'),
        (translate.roles, {"roles": [None]}, "roles[0]", "is required"),
        (translate.kill, "t1", "kill", 'must be an object, got "t1"'),
    ],
)
def test_call_decoder_errors(decoder, body, path, problem):
    error = bad_call(decoder, body)
    assert error.path == path, str(error)
    assert problem in error.problem, str(error)


def test_capabilities_errors():
    info = {"name": "n", "capabilities": [{"type": "MULTI_ROLE"}, {"kind": "X"}]}
    assert bad_call(translate.capabilities, info).path == "subscribe.framework_info.capabilities[1].type"
    assert translate.capabilities({"name": "n"}) == set()


# -- encoding: offers, statuses, master info, events -------------------------------------------


def test_offer_round_trip():
    resources = Resources(cpus=3.25, mem=2048, ranges={"ports": [(31000, 32000)]})
    o = Offer(
        offer_id="o1",
        framework_id="fw",
        agent_id="a1",
        hostname="node-1",
        resources=resources,
        attributes={"rack": "r7", "pool": "gpu"},
        executor_ids=["e1"],
        long_task_room=Resources(cpus=1),
    )
    encoded = translate.offer(o, "r1")
    assert json.loads(json.dumps(encoded, allow_nan=False)) == encoded
    assert encoded == {
        "id": {"value": "o1"},
        "framework_id": {"value": "fw"},
        "agent_id": {"value": "a1"},
        "hostname": "node-1",
        "resources": translate.resources_json(resources, "r1"),
        "attributes": [
            {"name": "pool", "type": "TEXT", "text": {"value": "gpu"}},
            {"name": "rack", "type": "TEXT", "text": {"value": "r7"}},
        ],
        "executor_ids": [{"value": "e1"}],
        "allocation_info": {"role": "r1"},
    }
    assert [r["scalar"]["value"] for r in encoded["resources"][:2]] == [3.25, 2048.0]
    assert all(r["role"] == "*" and r["allocation_info"] == {"role": "r1"} for r in encoded["resources"])
    # Back, as a framework launching on all of it sends it.
    assert translate.resources(encoded["resources"], "r", framework_role="r1") == resources
    assert {a["name"]: a["text"]["value"] for a in encoded["attributes"]} == o.attributes


def test_offer_of_a_bare_wire_struct():
    o = Offer(
        offer_id="o",
        framework_id="f",
        agent_id="a",
        hostname="h",
        resources=WireResources(scalars={"cpus": 1500}),
    )
    encoded = translate.offer(o)
    assert encoded["resources"] == [
        {
            "name": "cpus",
            "type": "SCALAR",
            "scalar": {"value": 1.5},
            "role": "*",
            "allocation_info": {"role": "*"},
        }
    ]
    assert encoded["attributes"] == [] and encoded["executor_ids"] == []


def test_task_status_round_trip():
    status = TaskStatus(
        task_id="t1",
        state=TaskState.TASK_FAILED,
        message="",
        reason="command_failed",
        source="executor",
        agent_id="a1",
        executor_id="t1",
        framework_id="fw",
        uuid="0123456789abcdef0123456789abcdef",
        timestamp=1700000000.25,
        exit_code=3,
        data=b"tail of stdout",
    )
    encoded = translate.task_status(status)
    assert encoded == {
        "task_id": {"value": "t1"},
        "state": "TASK_FAILED",
        "message": "Command exited with status 3",
        "source": "SOURCE_EXECUTOR",
        "reason": "REASON_COMMAND_EXECUTOR_FAILED",
        "agent_id": {"value": "a1"},
        "executor_id": {"value": "t1"},
        "timestamp": 1700000000.25,
        "uuid": "ASNFZ4mrze8BI0VniavN7w==",
        "data": "dGFpbCBvZiBzdGRvdXQ=",
    }
    assert len(base64.b64decode(encoded["uuid"])) == 16
    # The framework acknowledges with what it got: back to mezzo's uuid.
    ack = {"agent_id": encoded["agent_id"], "task_id": encoded["task_id"], "uuid": encoded["uuid"]}
    assert translate.acknowledge(ack) == ("a1", "t1", status.uuid)


def test_task_status_without_uuid_reason_or_source():
    status = TaskStatus(task_id="t", state=TaskState.TASK_RUNNING, reason="no_such_code", source="moon")
    assert translate.task_status(status) == {
        "task_id": {"value": "t"},
        "state": "TASK_RUNNING",
        "timestamp": 0.0,
    }
    # A message of mezzo's wins over the exit code; a master's reconciliation answer has no uuid.
    status = TaskStatus(
        task_id="t",
        state=TaskState.TASK_LOST,
        message="agent a1 lost",
        reason="reconciliation",
        source="master",
        exit_code=1,
    )
    encoded = translate.task_status(status)
    assert encoded["message"] == "agent a1 lost"
    assert (encoded["reason"], encoded["source"]) == ("REASON_RECONCILIATION", "SOURCE_MASTER")
    assert "uuid" not in encoded and "data" not in encoded and "agent_id" not in encoded


@pytest.mark.parametrize("state", list(TaskState))
def test_task_states_have_mesos_names(state):
    assert translate.task_status(TaskStatus(task_id="t", state=state))["state"] == state.name


def test_reason_table():
    expected = {
        "reconciliation": "REASON_RECONCILIATION",
        "agent_removed": "REASON_AGENT_REMOVED",
        "command_failed": "REASON_COMMAND_EXECUTOR_FAILED",
        "memory_limit": "REASON_CONTAINER_LIMITATION_MEMORY",
        "task_unauthorized": "REASON_TASK_UNAUTHORIZED",
        "invalid_resources": "REASON_TASK_INVALID",
        "task_invalid": "REASON_TASK_INVALID",
        "offer_unknown": "REASON_INVALID_OFFERS",
        "revoked": "REASON_CONTAINER_PREEMPTED",
        "executor_register_timeout": "REASON_EXECUTOR_REGISTRATION_TIMEOUT",
        "agent_drained": "REASON_AGENT_DRAINING",
        "killed_by_operator": None,
        "": None,
        "something new": None,
        # Already Mesos' (a custom executor's own): kept.
        "REASON_TASK_HEALTH_CHECK_STATUS_UPDATED": "REASON_TASK_HEALTH_CHECK_STATUS_UPDATED",
        "REASON_MADE_UP": None,
    }
    assert {code: translate.reason_name(code) for code in expected} == expected
    assert set(translate.REASONS.values()) - {None} <= translate.MESOS_REASONS
    assert all(code == code.lower() for code in translate.REASONS)


def test_master_info():
    assert translate.master_info("m1", "127.0.0.1", 5050, "0.1.0") == {
        "id": "m1",
        "ip": 16777343,  # what Apache Mesos shows for 127.0.0.1: network byte order
        "port": 5050,
        "pid": "master@127.0.0.1:5050",
        "hostname": "127.0.0.1",
        "version": "0.1.0",
        "address": {"hostname": "127.0.0.1", "ip": "127.0.0.1", "port": 5050},
    }
    assert translate.master_info("m1", "10.1.2.3", 1, "v")["ip"] == 0x0302010A
    for host in ("master.example.com", "::1", "1.2.3", "1.2.3.256", "1.2.3.4.5", "١.2.3.4"):
        assert translate.master_info("m1", host, 5050, "v")["ip"] == 0


def test_event_shapes():
    assert translate.event("HEARTBEAT", None) == b'{"type":"HEARTBEAT"}'
    assert translate.event("ERROR", {"message": "no"}) == b'{"type":"ERROR","error":{"message":"no"}}'
    assert json.loads(translate.event("OFFERS", {"offers": []})) == {
        "type": "OFFERS",
        "offers": {"offers": []},
    }


# -- uuids ------------------------------------------------------------------------------------


def test_mezzo_uuid_is_16_raw_bytes():
    hex_uuid = "5c3da8a112434c578a78c08178e7a35d"
    assert translate.encode_uuid(hex_uuid) == "XD2ooRJDTFeKeMCBeOejXQ=="
    assert translate.decode_uuid("XD2ooRJDTFeKeMCBeOejXQ==", "u") == hex_uuid


@pytest.mark.parametrize(
    "odd",
    [
        "",
        "x",
        "~",
        "~~",
        "~abc",
        "~~abc",
        "a" * 14,  # "~" + it: 15 bytes
        "a" * 15,  # "~" + it would be 16 bytes, a hex uuid's length
        "~" + "a" * 14,  # 15 bytes starting with "~"
        "~~" + "a" * 13,
        "a" * 16,
        "~" + "a" * 15,  # 16 bytes starting with "~"
        "é" * 7 + "a",  # 15 bytes of UTF-8
        "5C3DA8A112434C578A78C08178E7A35D",  # upper-case hex: not mezzo's form
        "5c3da8a1-1243-4c57-8a78-c08178e7a35d",  # str(uuid4())
        "5c3da8a112434c578a78c08178e7a35",  # 31 hex digits
        "z" * 32,
        "☃ unicode ✓",
    ],
)
def test_other_uuid_strings_round_trip(odd):
    encoded = translate.encode_uuid(odd)
    assert len(base64.b64decode(encoded)) != 16
    assert translate.decode_uuid(encoded, "u") == odd


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8")) | st.from_regex(r"\A[0-9a-f]{32}\Z"))
def test_uuid_round_trip_any_string(text):
    assert translate.decode_uuid(translate.encode_uuid(text), "u") == text


@pytest.mark.parametrize(
    ("b64", "problem"),
    [
        ("not base64!", "not valid base64"),
        ("é", "not valid base64"),
        ("A", "not valid base64"),
        (7, "must be base64 text, got 7"),
        (None, "is required"),
        (base64.b64encode(b"short").decode(), "5 bytes are not the uuid"),
        (base64.b64encode(b"").decode(), "0 bytes"),
        (base64.b64encode(b"~\xff\xfe").decode(), "3 bytes"),  # "~" and not UTF-8
        (base64.b64encode(b"~\xff" + b"a" * 16).decode(), "18 bytes"),  # the escape is for 15 bytes only
    ],
)
def test_decode_uuid_errors_name_the_path(b64, problem):
    error = bad_call(translate.decode_uuid, b64, "acknowledge.uuid")
    assert error.path == "acknowledge.uuid"
    assert problem in error.problem, str(error)


def test_base64_without_padding_is_read():
    assert translate.decode_bytes("aGVsbG8", "d") == b"hello"


# -- RecordIO ---------------------------------------------------------------------------------

RECORDS = [b'{"type":"SUBSCRIBED"}', b"", b'{"type":"HEARTBEAT"}', b"x" * 1000, b"\n\n12\n"]


def test_frame():
    assert frame(b'{"type":"HEARTBEAT"}') == b'20\n{"type":"HEARTBEAT"}'
    assert frame(b"") == b"0\n"


def test_record_reader_whole_stream_and_byte_by_byte():
    stream = b"".join(frame(r) for r in RECORDS)
    assert RecordReader().feed(stream) == RECORDS
    reader = RecordReader()
    got = []
    for i in range(len(stream)):
        got += reader.feed(stream[i : i + 1])
    assert got == RECORDS


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=8), st.lists(st.integers(0, 400), max_size=20))
def test_record_reader_any_chunks(records, cuts):
    stream = b"".join(frame(r) for r in records)
    points = sorted({min(c, len(stream)) for c in cuts})
    reader = RecordReader()
    got = []
    for start, end in zip([0, *points], [*points, len(stream)], strict=True):
        got += reader.feed(stream[start:end])
    assert got == records


def test_record_reader_is_linear_fed_byte_by_byte():
    stream = frame(b"y" * 200_000) + frame(b"z")
    reader = RecordReader()
    got = []
    start = time.perf_counter()
    for i in range(len(stream)):
        got += reader.feed(stream[i : i + 1])
    assert time.perf_counter() - start < 2.0  # quadratic: 2 * 10**10 byte copies
    assert got == [b"y" * 200_000, b"z"]


@pytest.mark.parametrize(
    ("stream", "problem"),
    [
        (b"12a\n", "is not decimal digits"),
        (b"-1\n", "is not decimal digits"),
        (b" 1\n", "is not decimal digits"),
        (b"\n", "empty length prefix"),
        (b"5\nhello\n5\nhello", "empty length prefix"),  # a line feed after a record
        (b"1" * 21, "longer than 20 digits"),
        (b"1" * 21 + b"\n", "longer than 20 digits"),
        (b"17\n", "larger than 16"),
    ],
)
def test_record_reader_errors(stream, problem):
    reader = RecordReader(max_record=16)
    with pytest.raises(ValueError, match=problem):
        for i in range(len(stream)):
            reader.feed(stream[i : i + 1])
    with pytest.raises(ValueError, match=problem):  # the stream cannot be read on
        reader.feed(b"1\nx")
    with pytest.raises(ValueError, match=problem):
        RecordReader(max_record=16).feed(stream)


def test_record_reader_refuses_a_junk_line_at_once():
    # No waiting for a line feed that may never come, nor buffering what follows.
    with pytest.raises(ValueError, match="not decimal digits"):
        RecordReader().feed(b"HTTP/1.1 200 OK\r\n" + b"x" * 1_000_000)


# -- fuzz: only BadCall, whatever the input ---------------------------------------------------

FIELD_NAMES = sorted(
    {
        *"type framework_id value subscribe framework_info accept offer_ids operations launch task_infos".split(),
        *"launch_group executor task_group tasks filters refuse_seconds task_id agent_id name resources".split(),
        *"scalar ranges range begin end set item role roles allocation_info reservations reservation".split(),
        *"command executor_id uris shell arguments environment variables secret user container mesos".split(),
        *"image docker data labels key uuid decline kill acknowledge reconcile message failover_timeout".split(),
        *"capabilities hostname id".split(),
    }
)
JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(
        ["SCALAR", "RANGES", "SET", "LAUNCH", "LAUNCH_GROUP", "MESOS", "DEFAULT", "SECRET", "Infinity"]
    )
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(FIELD_NAMES) | st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=25,
)


def decode_everything(value) -> None:
    """Every decoder on ``value``; only BadCall may come out."""
    decoders: list[Callable[[Any], object]] = [
        translate.framework_info,
        translate.capabilities,
        lambda v: translate.resources(v, "r", "r1"),
        lambda v: translate.filters(v, "f"),
        lambda v: translate.task_info(v, "t", "r1"),
        lambda v: translate.command_info(v, "c"),
        lambda v: translate.executor_info(v, "e"),
        translate.task_infos_of_accept,
        translate.decline,
        translate.kill,
        translate.acknowledge,
        translate.reconcile,
        translate.message,
        translate.roles,
        lambda v: translate.decode_uuid(v, "u"),
    ]
    for decode in decoders:
        try:
            decode(value)
        except BadCall:
            pass


def serve(body: bytes) -> None:
    """parse_call and the decoder of its type, as the façade runs them."""
    try:
        call = translate.parse_call(body)
        by_type: dict[str, Callable[[Any], object]] = {
            "SUBSCRIBE": lambda b: translate.framework_info(b.get("framework_info")),
            "ACCEPT": translate.task_infos_of_accept,
            "DECLINE": translate.decline,
            "KILL": translate.kill,
            "ACKNOWLEDGE": translate.acknowledge,
            "RECONCILE": translate.reconcile,
            "MESSAGE": translate.message,
            "REVIVE": translate.roles,
            "SUPPRESS": translate.roles,
        }
        decode = by_type.get(call.type)
        if decode is not None:
            decode(call.body)
    except BadCall:
        pass


def mutations(value, draw_value, path_choice: int):
    """``value`` with one subtree (chosen by ``path_choice``) replaced by ``draw_value``."""
    nodes = []

    def walk(node, setter):
        nodes.append(setter)
        if isinstance(node, dict):
            for k in list(node):
                walk(node[k], lambda new, node=node, k=k: node.__setitem__(k, new))
        elif isinstance(node, list):
            for i in range(len(node)):
                walk(node[i], lambda new, node=node, i=i: node.__setitem__(i, new))

    box = [value]
    walk(value, lambda new: box.__setitem__(0, new))
    nodes[path_choice % len(nodes)](draw_value)
    return box[0]


@settings(max_examples=150, deadline=None)
@given(JSON_VALUES)
def test_fuzz_decoders_raise_only_bad_call(value):
    decode_everything(value)
    serve(json.dumps({"type": "ACCEPT", "accept": value}).encode())


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(PYMESOS_CALLS), JSON_VALUES, st.integers(min_value=0))
def test_fuzz_pymesos_calls_with_one_part_replaced(raw, replacement, where):
    call = mutations(json.loads(raw), replacement, where)
    serve(json.dumps(call).encode())
    if isinstance(call, dict):
        for payload in call.values():
            decode_everything(payload)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200) | st.sampled_from(PYMESOS_CALLS).map(lambda b: b[: len(b) // 2]))
def test_fuzz_parse_call_on_any_bytes(body):
    serve(body)


def test_non_bytes_body_is_a_bad_call():
    assert bad_call(translate.parse_call, "{}").path == ""


MILLI = st.integers(min_value=0, max_value=10**15)
NAMES = st.sampled_from(["cpus", "mem", "disk", "gpus", "x"])
SPANS = st.lists(
    st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**20)).map(
        lambda t: (t[0], min(t[0] + t[1], 2**63 - 1))
    ),
    max_size=5,
)


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(NAMES, MILLI, max_size=5),
    st.dictionaries(st.sampled_from(["ports", "p2"]), SPANS, max_size=2),
)
def test_random_resources_round_trip(milli, spans):
    wire = WireResources(scalars=milli, ranges={n: [Range(b, e) for b, e in s] for n, s in spans.items()})
    mezzo = Resources.of(wire)
    encoded = json.loads(json.dumps(translate.resources_json(mezzo, "r1"), allow_nan=False))
    assert translate.resources(encoded, "r", framework_role="r1") == mezzo


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(NAMES, st.floats(min_value=0, max_value=1e9)), max_size=6))
def test_random_json_scalars_decode_like_mezzo_resources(items):
    decoded = translate.resources([scalar(n, v) for n, v in items], "r")
    expected: dict[str, int] = {}
    for name, value in items:
        expected[name] = expected.get(name, 0) + Resources(scalars={name: value}).milli(name)
    assert decoded.scalars == {n: m for n, m in expected.items() if m}
    # And back: encoding then decoding changes nothing.
    assert translate.resources(translate.resources_json(decoded), "r") == decoded


# -- what a command-line client pays to import these modules ---------------------------------


def test_imports_stay_light():
    code = (
        "import sys, mezzo.v1.translate, mezzo.v1.recordio; "
        "print(sorted(m for m in ('asyncio', 'aiohttp', 'structlog') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
