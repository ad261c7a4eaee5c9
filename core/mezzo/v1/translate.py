"""Mesos v1 JSON <-> mezzo's kernel types: the one place where the two models meet.

The v1 API speaks protobuf messages in JSON as Apache Mesos writes them (stout's
``protobuf.hpp``): keys are the proto's snake_case field names, enums are written
by name, ``bytes`` are standard base64, every id is an object ``{"value": ...}``,
and unknown keys are ignored. mezzo's types are the Thrift structs of
``thrift/mezzo.thrift``. Where the models differ:

- **Resources.** Mesos scalars are doubles; mezzo's are exact thousandths, and a
  value is rounded to the nearest thousandth as :class:`mezzo.Resources` does
  (``cpus`` 0.1 is 100). Negative, NaN and infinite values are refused. ``RANGES``
  are ranges. mezzo has no ``SET`` resources, so a task asking for one is refused.
- **Roles.** A mezzo framework has one role: ``roles`` (one distinct entry), else the
  deprecated ``role``, else ``"*"``. Offered resources are unreserved (``role: "*"``)
  and allocated to the framework's role (``allocation_info``, which MULTI_ROLE
  frameworks read). A resource reserved or allocated to another role is refused.
- **Attributes.** mezzo's ``map<string, string>`` are ``TEXT`` attributes.
- **Status updates.** mezzo's lower-case reason codes become the nearest
  ``REASON_*`` (:data:`REASONS`), its sources ``SOURCE_*``. An exit code travels in
  the message, as Mesos' command executor writes it. The uuid of an update to
  acknowledge is base64 of 16 bytes, as in Mesos (:func:`encode_uuid`).

Decoding never trusts its input. Whatever JSON value a decoder is given, it returns
the kernel type or raises :class:`BadCall` naming the JSON path of the first thing
wrong, never another exception, and its cost is linear in the input.

Imports only the standard library's light modules and mezzo's wire types: a
command-line client imports this module and must start fast.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from ..resources import MAX_WIRE, SCALE, InvalidResources, Resources
from ..wire.ttypes import (
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
from ..wire.ttypes import Resources as WireResources

MAX_DEPTH = 64
"""The deepest nesting of arrays and objects a call may have. The deepest real call
(an ACCEPT's LAUNCH_GROUP with a resource's ranges) is about 12 levels."""

DEFAULT_REFUSE_SECONDS = 5.0
"""``Filters.refuse_seconds`` when absent (Mesos' default)."""

MAX_REFUSE_SECONDS = 31536000.0
"""A year: Mesos' cap on ``Filters.refuse_seconds``."""

SOURCES = {"master": "SOURCE_MASTER", "agent": "SOURCE_AGENT", "executor": "SOURCE_EXECUTOR"}
"""mezzo's ``TaskStatus.source`` -> Mesos' ``TaskStatus.Source``."""

MESOS_REASONS = frozenset(
    {
        "REASON_COMMAND_EXECUTOR_FAILED",
        "REASON_CONTAINER_LAUNCH_FAILED",
        "REASON_CONTAINER_LIMITATION",
        "REASON_CONTAINER_LIMITATION_DISK",
        "REASON_CONTAINER_LIMITATION_MEMORY",
        "REASON_CONTAINER_PREEMPTED",
        "REASON_CONTAINER_UPDATE_FAILED",
        "REASON_MAX_COMPLETION_TIME_REACHED",
        "REASON_EXECUTOR_REGISTRATION_TIMEOUT",
        "REASON_EXECUTOR_REREGISTRATION_TIMEOUT",
        "REASON_EXECUTOR_TERMINATED",
        "REASON_EXECUTOR_UNREGISTERED",
        "REASON_FRAMEWORK_REMOVED",
        "REASON_GC_ERROR",
        "REASON_INVALID_FRAMEWORKID",
        "REASON_INVALID_OFFERS",
        "REASON_IO_SWITCHBOARD_EXITED",
        "REASON_MASTER_DISCONNECTED",
        "REASON_RECONCILIATION",
        "REASON_RESOURCES_UNKNOWN",
        "REASON_AGENT_DISCONNECTED",
        "REASON_AGENT_DRAINING",
        "REASON_AGENT_REMOVED",
        "REASON_AGENT_REMOVED_BY_OPERATOR",
        "REASON_AGENT_REREGISTERED",
        "REASON_AGENT_RESTARTED",
        "REASON_AGENT_UNKNOWN",
        "REASON_TASK_KILLED_DURING_LAUNCH",
        "REASON_TASK_CHECK_STATUS_UPDATED",
        "REASON_TASK_HEALTH_CHECK_STATUS_UPDATED",
        "REASON_TASK_GROUP_INVALID",
        "REASON_TASK_GROUP_UNAUTHORIZED",
        "REASON_TASK_INVALID",
        "REASON_TASK_UNAUTHORIZED",
        "REASON_TASK_UNKNOWN",
    }
)
"""Every ``TaskStatus.Reason`` of ``include/mesos/v1/mesos.proto`` (Mesos 1.11)."""

_TASK_INVALID = (
    # The master's launch checks (mezzo.master.launch, mezzo.master.long_tasks): TASK_ERROR.
    "invalid_task_id",
    "duplicate_task_id",
    "wrong_agent",
    "invalid_resources",
    "insufficient_resources",
    "insufficient_long_task_room",
    "invalid_command",
    "invalid_executor",
    "task_data_too_large",
    "task_metadata_too_large",
    # The façade's TASK_ERROR for a task it cannot read (mezzo.http.scheduler_api).
    "task_invalid",
    # The agent's checks of a task it is handed (mezzo.agent.agent): TASK_ERROR.
    "invalid_task",
    "executor_user_mismatch",
)

_LAUNCH_FAILED = (
    # The agent could not start the task's container (mezzo.agent.container_run, and
    # mezzo.agent.agent's journal_full: TASK_DROPPED, no room to checkpoint it).
    "user_unknown",
    "sandbox_creation_failed",
    "container_launch_failed",
    "agent_error",
    "journal_full",
)

REASONS: dict[str, str | None] = {
    **dict.fromkeys(_TASK_INVALID, "REASON_TASK_INVALID"),
    **dict.fromkeys(_LAUNCH_FAILED, "REASON_CONTAINER_LAUNCH_FAILED"),
    # -- the master
    "reconciliation": "REASON_RECONCILIATION",
    "task_unauthorized": "REASON_TASK_UNAUTHORIZED",
    "task_group_invalid": "REASON_TASK_GROUP_INVALID",  # another task of its group was refused
    # Offers unknown, rescinded or spanning agents: Mesos' "accepted offer that didn't
    # pass validation checks".
    "offer_unknown": "REASON_INVALID_OFFERS",
    "offers_on_several_agents": "REASON_INVALID_OFFERS",
    # A launch on an agent that is gone or disconnected. A removed agent's offers are
    # rescinded (offer_unknown), so what is left is Mesos' disconnected case.
    "agent_gone": "REASON_AGENT_DISCONNECTED",
    "agent_removed": "REASON_AGENT_REMOVED",
    # TASK_UNREACHABLE (partition-aware frameworks), and the task's state again when its
    # agent comes back: Mesos gives these reasons in those two cases.
    "agent_unreachable": "REASON_AGENT_REMOVED",
    "agent_reregistered": "REASON_AGENT_REREGISTERED",
    # An unreachable agent dropped from the bounded list: it is refused should it return.
    "agent_forgotten": "REASON_AGENT_REMOVED",
    # A task the master (a kill of an unknown task) or the agent does not know, or a
    # re-registered agent does not report.
    "task_unknown": "REASON_TASK_UNKNOWN",
    "task_missing_on_agent": "REASON_TASK_UNKNOWN",
    # Revocation (the paper's §3.3) is Mesos' preemption.
    "revoked": "REASON_CONTAINER_PREEMPTED",
    # Killed because its agent re-registered holding more than it has.
    "agent_overcommitted": "REASON_AGENT_REREGISTERED",
    "agent_drained": "REASON_AGENT_DRAINING",
    # An operator's kill of one task: Mesos has no such reason. Left out, the update
    # reads as an ordinary TASK_KILLED; its message says who killed it.
    "killed_by_operator": None,
    # -- the scheduler driver (a local TASK_DROPPED when its master link is down)
    "master_disconnected": "REASON_MASTER_DISCONNECTED",
    # -- the agent and its executors
    "command_failed": "REASON_COMMAND_EXECUTOR_FAILED",
    "memory_limit": "REASON_CONTAINER_LIMITATION_MEMORY",  # the cgroups and lxc isolators
    "executor_exited": "REASON_EXECUTOR_TERMINATED",
    "executor_terminated": "REASON_EXECUTOR_TERMINATED",
    "executor_terminating": "REASON_EXECUTOR_TERMINATED",
    "executor_register_timeout": "REASON_EXECUTOR_REGISTRATION_TIMEOUT",
    "executor_reregister_timeout": "REASON_EXECUTOR_REREGISTRATION_TIMEOUT",
    # The agent restarted and cannot tell how the task ended, or cannot read it back.
    "container_lost": "REASON_AGENT_RESTARTED",
    "checkpoint_unreadable": "REASON_AGENT_RESTARTED",
}
"""Every reason code mezzo's master, agent, isolators and drivers put in a
``TaskStatus`` -> the nearest Mesos ``TaskStatus.Reason``; None: no counterpart
(the reason is left out of the update)."""


class BadCall(ValueError):
    """A call that cannot be served as sent. ``str()`` names the field by its JSON
    path, e.g. ``accept.operations[0].launch.task_infos[1].resources[0].scalar.value:
    must be a finite number >= 0, got "x"``; ``path`` is "" for the body as a whole."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}" if path else problem)
        self.path = path
        self.problem = problem


# -- the call ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """A v1 ``scheduler::Call`` (or ``executor::Call``): its ``type`` (not checked against
    the known ones: the server refuses those it does not serve), the top-level
    ``framework_id.value`` ("" if absent), the payload under the type's lower-cased key
    (``{}`` if absent) and, for an executor's call, the top-level ``executor_id.value``."""

    type: str
    framework_id: str
    body: dict[str, Any]
    executor_id: str = ""


def parse_call(data: bytes) -> Call:
    """The call in a request's body; :class:`BadCall` if it is not UTF-8 JSON, nested
    deeper than :data:`MAX_DEPTH`, not an object, or its ``type``, ``framework_id`` or
    payload have the wrong shape."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise BadCall("", _expected("the body's bytes", data))
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        raise BadCall("", "the body is not UTF-8 JSON") from None
    # A body with no more brackets than the limit cannot nest past it: most calls (an
    # ACCEPT of one task has about twenty) skip the scan.
    if text.count("[") + text.count("{") > MAX_DEPTH and _too_deep(text):
        raise BadCall("", f"the body is nested deeper than {MAX_DEPTH} levels")
    try:
        call = json.loads(text)
    except RecursionError:  # cannot happen after _too_deep; kept as a second line
        raise BadCall("", f"the body is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # JSONDecodeError, or an integer of over 4300 digits
        raise BadCall("", f"the body is not JSON: {exc}") from None
    if not isinstance(call, dict):
        raise BadCall("", f"a call is a JSON object, got {_show(call)}")
    kind = call.get("type")
    if not isinstance(kind, str) or not kind:
        raise BadCall("type", _expected('a call type such as "SUBSCRIBE"', kind))
    key = kind.lower()
    # The payload's key is the type's; "type" itself cannot be one (a type "Type").
    payload = _object(call.get(key), key) if key != "type" else {}
    return Call(
        kind,
        _id(call.get("framework_id"), "framework_id", required=False),
        payload,
        _id(call.get("executor_id"), "executor_id", required=False),
    )


# Strings are skipped whole (an unterminated one runs to the end, so that a failed match
# never leads to another scan of the same bytes); then what is outside them but the
# brackets (all ASCII in JSON) is deleted, and the brackets are counted.
_STRING = re.compile(r'"[^"\\]*(?:\\[\s\S]?[^"\\]*)*(?:"|\Z)')
_BRACKETS_ONLY = {c: None for c in range(128) if chr(c) not in "[]{}"}


def _too_deep(text: str) -> bool:
    """Whether ``text`` nests arrays and objects deeper than :data:`MAX_DEPTH`. Checked
    before json.loads, whose C parser recurses (past the recursion limit it raises
    RecursionError, past the C stack it would crash). Linear, and a few times faster
    than json.loads itself: the brackets are counted 32 at a time by ``str.count``, and
    only a run of 32 that could go past the limit is walked one by one."""
    brackets = _STRING.sub("", text).translate(_BRACKETS_ONLY)
    depth = 0
    for start in range(0, len(brackets), 32):
        run = brackets[start : start + 32]
        opening = run.count("[") + run.count("{")
        if depth + opening <= MAX_DEPTH:
            depth += opening - run.count("]") - run.count("}")
            continue
        for bracket in run:
            if bracket in "[{":
                depth += 1
                if depth > MAX_DEPTH:
                    return True
            elif bracket in "]}":
                depth -= 1
    return False


# -- decoding: client JSON -> kernel -------------------------------------------------------


ACTED_ON_CAPABILITIES = frozenset({"PARTITION_AWARE"})
"""The ``FrameworkInfo.capabilities`` mezzo acts on (passed to the master; others dropped)."""


def framework_info(obj: Any, path: str = "subscribe.framework_info") -> FrameworkInfo:
    """A ``FrameworkInfo``: ``name`` (required, non-empty), ``user``, ``id``,
    ``failover_timeout`` (seconds, finite >= 0, default 0), ``hostname`` and the
    framework's one role (``roles``, else ``role``, else ``"*"``), and of its
    ``capabilities`` the one mezzo acts on, ``PARTITION_AWARE`` (TASK_UNREACHABLE for
    its tasks on an agent that falls silent; the others, ``labels``, ``principal``,
    ``webui_url``, ``checkpoint`` and unknown keys are accepted and ignored; see
    :func:`capabilities`)."""
    info = _object(obj, path, required=True)
    name = _string(info.get("name"), _at(path, "name"), required=True)
    if not name:
        raise BadCall(_at(path, "name"), "must not be empty")
    return FrameworkInfo(
        name=name,
        user=_string(info.get("user"), _at(path, "user")),
        framework_id=_id(info.get("id"), _at(path, "id"), required=False),
        role=_role(info, path),
        hostname=_string(info.get("hostname"), _at(path, "hostname")),
        failover_timeout=_seconds(info.get("failover_timeout"), _at(path, "failover_timeout"), 0.0),
        capabilities=sorted(capabilities(obj, path) & ACTED_ON_CAPABILITIES),
    )


def _role(info: dict[str, Any], path: str) -> str:
    roles = _strings(info.get("roles"), _at(path, "roles"))
    distinct = sorted(set(roles))
    if len(distinct) > 1:
        shown = ", ".join(repr(r[:40]) for r in distinct[:4])
        raise BadCall(_at(path, "roles"), f"mezzo frameworks have one role, got {shown}")
    role = distinct[0] if distinct else _string(info.get("role"), _at(path, "role"), default="*")
    if not role:
        raise BadCall(_at(path, "roles" if distinct else "role"), "must not be empty")
    return role


def capabilities(obj: Any, path: str = "subscribe.framework_info") -> set[str]:
    """The type names of a ``FrameworkInfo``'s ``capabilities``, e.g. ``{"MULTI_ROLE"}``."""
    info = _object(obj, path, required=True)
    where = _at(path, "capabilities")
    names = set()
    for i, item in enumerate(_list(info.get("capabilities"), where)):
        at = f"{where}[{i}]"
        names.add(_string(_object(item, at, required=True).get("type"), f"{at}.type", required=True))
    return names


def resources(items: Any, path: str, framework_role: str = "*") -> Resources:
    """A list of ``Resource`` as :class:`mezzo.Resources`. ``SCALAR`` values are
    finite numbers >= 0 and ``RANGES`` are integers ``0 <= begin <= end``; a name
    given twice is summed (scalars) or merged (ranges). mezzo has no ``SET``
    resources and no reservations: a resource reserved or allocated to a role other
    than ``"*"`` and ``framework_role`` is refused; ``disk``, ``revocable`` and the
    like are ignored."""
    scalars: dict[str, int] = {}
    ranges: dict[str, list[Range]] = {}
    for i, item in enumerate(_list(items, path)):
        at = f"{path}[{i}]"
        resource = _object(item, at, required=True)
        name = _string(resource.get("name"), f"{at}.name", required=True)
        if not name:
            raise BadCall(f"{at}.name", "must not be empty")
        _check_roles(resource, at, framework_role)
        kind = resource.get("type")
        if kind == "SCALAR":
            if name in ranges:
                raise BadCall(f"{at}.type", f"{_clip(name)!r} is RANGES elsewhere in this list")
            scalar = _object(resource.get("scalar"), f"{at}.scalar", required=True)
            total = scalars.get(name, 0) + _milli(scalar.get("value"), f"{at}.scalar.value")
            if total > MAX_WIRE:
                raise BadCall(f"{at}.scalar.value", f"the {_clip(name)!r} add up to over {MAX_WIRE // SCALE}")
            scalars[name] = total
        elif kind == "RANGES":
            if name in scalars:
                raise BadCall(f"{at}.type", f"{_clip(name)!r} is SCALAR elsewhere in this list")
            spans = ranges.setdefault(name, [])
            ranges_obj = _object(resource.get("ranges"), f"{at}.ranges", required=True)
            for j, span in enumerate(_list(ranges_obj.get("range"), f"{at}.ranges.range")):
                spans.append(_range(span, f"{at}.ranges.range[{j}]"))
        elif kind == "SET":
            raise BadCall(f"{at}.type", f"{_clip(name)!r}: mezzo has no SET resources (use SCALAR or RANGES)")
        else:
            raise BadCall(f"{at}.type", _expected('"SCALAR" or "RANGES"', kind))
    try:
        # Resources.of validates once more and merges each name's ranges (sorted, joined).
        return Resources.of(WireResources(scalars=scalars, ranges=ranges))
    except InvalidResources as exc:  # pragma: no cover - everything was checked above
        raise BadCall(path, str(exc)) from None


def _check_roles(resource: dict[str, Any], at: str, framework_role: str) -> None:
    """Refuse a resource reserved or allocated to another role; for ``"*"`` and the
    framework's own role (what its offers carry) these fields mean nothing to mezzo."""
    named: list[tuple[str, Any]] = [(f"{at}.role", resource.get("role"))]
    allocation = resource.get("allocation_info")
    if allocation is not None:
        named.append((f"{at}.allocation_info.role", _object(allocation, f"{at}.allocation_info").get("role")))
    reservation = resource.get("reservation")
    if reservation is not None:
        named.append((f"{at}.reservation.role", _object(reservation, f"{at}.reservation").get("role")))
    for j, item in enumerate(_list(resource.get("reservations"), f"{at}.reservations")):
        named.append((f"{at}.reservations[{j}].role", _object(item, f"{at}.reservations[{j}]").get("role")))
    for where, role in named:
        role = _string(role, where, default="*")
        if role not in ("*", framework_role):
            raise BadCall(
                where,
                f"{_clip(role)!r} is not this framework's role ({_clip(framework_role)!r}): "
                "mezzo has no reservations",
            )


def _range(value: Any, at: str) -> Range:
    span = _object(value, at, required=True)
    begin = _bound(span.get("begin"), f"{at}.begin")
    end = _bound(span.get("end"), f"{at}.end")
    if end < begin:
        raise BadCall(at, f"end {end} is before begin {begin}")
    return Range(begin, end)


def filters(obj: Any, path: str) -> Filters:
    """``Filters``: ``refuse_seconds`` defaults to 5 and is capped at a year, as in
    Mesos; a negative value means the default (Mesos' rule, in ``mesos.proto``)."""
    seconds = _object(obj, path).get("refuse_seconds")
    if seconds is None:
        return Filters(refuse_seconds=DEFAULT_REFUSE_SECONDS)
    number = _double(seconds, f"{path}.refuse_seconds")
    if math.isnan(number):
        raise BadCall(f"{path}.refuse_seconds", _expected("a number", seconds))
    if number < 0:
        return Filters(refuse_seconds=DEFAULT_REFUSE_SECONDS)
    return Filters(refuse_seconds=min(number, MAX_REFUSE_SECONDS))


def command_info(obj: Any, path: str) -> CommandInfo:
    """A ``CommandInfo``: ``value``, ``arguments``, ``shell`` (default true),
    ``environment`` and ``user``. mezzo fetches nothing, so ``uris`` are refused."""
    command = _object(obj, path, required=True)
    if _list(command.get("uris"), f"{path}.uris"):
        raise BadCall(
            f"{path}.uris",
            "mezzo does not fetch URIs; put the files on the agents or fetch them in the command",
        )
    return CommandInfo(
        value=_string(command.get("value"), f"{path}.value"),
        arguments=_strings(command.get("arguments"), f"{path}.arguments"),
        shell=_bool(command.get("shell"), f"{path}.shell", default=True),
        environment=_environment(command.get("environment"), f"{path}.environment"),
        user=_string(command.get("user"), f"{path}.user"),
    )


def _environment(obj: Any, path: str) -> dict[str, str]:
    variables: dict[str, str] = {}
    where = f"{path}.variables"
    for i, item in enumerate(_list(_object(obj, path).get("variables"), where)):
        at = f"{where}[{i}]"
        variable = _object(item, at, required=True)
        name = _string(variable.get("name"), f"{at}.name", required=True)
        if not name:
            raise BadCall(f"{at}.name", "must not be empty")
        if variable.get("type") == "SECRET" or variable.get("secret") is not None:
            raise BadCall(at, "mezzo has no secrets: give the variable's value")
        variables[name] = _string(variable.get("value"), f"{at}.value")
    return variables


def executor_info(obj: Any, path: str, framework_role: str = "*") -> ExecutorInfo:
    """An ``ExecutorInfo`` of a custom executor: ``executor_id``, ``command``,
    ``resources``, ``name``, ``framework_id``. mezzo has no counterpart of Mesos'
    default executor (which runs task groups), so ``type: DEFAULT`` is refused."""
    executor = _object(obj, path, required=True)
    if executor.get("type") == "DEFAULT":
        raise BadCall(f"{path}.type", "mezzo has no default executor: give a CUSTOM executor and its command")
    _check_container(executor.get("container"), f"{path}.container")
    return ExecutorInfo(
        executor_id=_id(executor.get("executor_id"), f"{path}.executor_id"),
        command=command_info(executor.get("command"), f"{path}.command"),
        resources=resources(executor.get("resources"), f"{path}.resources", framework_role),
        name=_string(executor.get("name"), f"{path}.name"),
        framework_id=_id(executor.get("framework_id"), f"{path}.framework_id", required=False),
    )


def _check_container(obj: Any, path: str) -> None:
    """mezzo runs every task in its own kind of container, from the agent's filesystem:
    a ``ContainerInfo`` is accepted only as the Mesos containerizer's, with no image."""
    if obj is None:
        return
    container = _object(obj, path)
    kind = container.get("type")
    if kind != "MESOS":
        raise BadCall(f"{path}.type", _expected('"MESOS" (mezzo runs no Docker containers)', kind))
    if container.get("docker") is not None:
        raise BadCall(f"{path}.docker", "mezzo runs no Docker containers")
    mesos = _object(container.get("mesos"), f"{path}.mesos")
    if mesos.get("image") is not None:
        raise BadCall(f"{path}.mesos.image", "mezzo runs tasks on the agent's filesystem, not in images")


def task_info(obj: Any, path: str, framework_role: str = "*") -> TaskInfo:
    """A ``TaskInfo``: ``task_id`` and ``agent_id`` (non-empty), ``name``,
    ``resources``, exactly one of ``command`` (mezzo's command executor) and
    ``executor``, ``data`` (base64) and ``labels``. ``container`` must be the Mesos
    containerizer's without an image; health checks, checks, kill policies,
    discovery, ``max_completion_time`` and ``limits`` are ignored."""
    return _task_info(obj, path, framework_role, None)


def _task_info(obj: Any, path: str, framework_role: str, group_executor: ExecutorInfo | None) -> TaskInfo:
    """:func:`task_info`, or a task of a task group run by ``group_executor``: such a
    task names no executor of its own, and its command (what Mesos' default executor
    would run) is checked but not kept, as a mezzo task has a command or an executor."""
    task = _object(obj, path, required=True)
    task_id = _id(task.get("task_id"), f"{path}.task_id")
    agent_id = _id(task.get("agent_id"), f"{path}.agent_id")
    has_command = task.get("command") is not None
    has_executor = task.get("executor") is not None
    if group_executor is not None:
        if has_executor:
            raise BadCall(f"{path}.executor", "a task of a group names no executor: the group's runs it")
    elif has_command == has_executor:
        raise BadCall(path, "a task must have exactly one of 'command' and 'executor'")
    _check_container(task.get("container"), f"{path}.container")
    command = command_info(task["command"], f"{path}.command") if has_command else None
    executor = executor_info(task["executor"], f"{path}.executor", framework_role) if has_executor else None
    data = task.get("data")
    return TaskInfo(
        task_id=task_id,
        name=_string(task.get("name"), f"{path}.name"),
        agent_id=agent_id,
        resources=resources(task.get("resources"), f"{path}.resources", framework_role),
        command=None if group_executor is not None else command,
        executor=group_executor if group_executor is not None else executor,
        data=None if data is None else decode_bytes(data, f"{path}.data"),
        labels=_labels(task.get("labels"), f"{path}.labels"),
    )


def _labels(obj: Any, path: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    where = f"{path}.labels"
    for i, item in enumerate(_list(_object(obj, path).get("labels"), where)):
        at = f"{where}[{i}]"
        label = _object(item, at, required=True)
        key = _string(label.get("key"), f"{at}.key", required=True)
        labels[key] = _string(label.get("value"), f"{at}.value")
    return labels


@dataclass(frozen=True)
class Accept:
    """An ``ACCEPT`` decoded: the offers, the tasks to launch on them and the filters
    for what is left. ``invalid``: (task id or "", message) of each task that could not
    be decoded, to answer ``TASK_ERROR`` while the others launch. ``refused_operations``:
    a message for each operation mezzo does not have (anything but ``LAUNCH`` and
    ``LAUNCH_GROUP``), naming its index and type. ``groups``: where each ``LAUNCH_GROUP``'s
    tasks are in ``tasks``, as ``(start, end)`` (a slice), which the master launches all
    or none."""

    offer_ids: list[str]
    tasks: list[TaskInfo]
    invalid: list[tuple[str, str]]
    refused_operations: list[str]
    filters: Filters
    groups: list[tuple[int, int]] = field(default_factory=list)


def task_infos_of_accept(body: Any, framework_role: str = "*") -> Accept:
    """An ``ACCEPT``'s payload as an :class:`Accept`. :class:`BadCall` only for the
    call's own structure (``offer_ids``, ``operations``, an operation's ``type``,
    ``launch``, ``task_group``, ``filters``); a task that cannot be decoded is
    ``invalid`` instead. The tasks of a ``LAUNCH_GROUP`` each carry the group's executor
    and are kept only if every one of them can be read (else all of them are
    ``invalid``, as Mesos refuses the whole group); ``groups`` tells the master which
    tasks make a group, which it then launches whole or not at all."""
    accept_ = _object(body, "accept")
    offer_ids = _ids(accept_.get("offer_ids"), "accept.offer_ids")
    tasks: list[TaskInfo] = []
    invalid: list[tuple[str, str]] = []
    refused: list[str] = []
    groups: list[tuple[int, int]] = []
    for i, item in enumerate(_list(accept_.get("operations"), "accept.operations")):
        at = f"accept.operations[{i}]"
        operation = _object(item, at, required=True)
        kind = _string(operation.get("type"), f"{at}.type", required=True)
        if kind == "LAUNCH":
            launch = _object(operation.get("launch"), f"{at}.launch", required=True)
            for j, task in enumerate(_list(launch.get("task_infos"), f"{at}.launch.task_infos")):
                _decode_task(task, f"{at}.launch.task_infos[{j}]", framework_role, None, tasks, invalid)
        elif kind == "LAUNCH_GROUP":
            _launch_group(operation, at, framework_role, tasks, invalid, groups)
        else:
            refused.append(f"{at}: mezzo does not do {_clip(kind)!r} operations (only LAUNCH, LAUNCH_GROUP)")
    return Accept(
        offer_ids, tasks, invalid, refused, filters(accept_.get("filters"), "accept.filters"), groups
    )


accept = task_infos_of_accept
"""The name the façade calls it by."""


def _launch_group(
    operation: dict[str, Any],
    at: str,
    framework_role: str,
    tasks: list[TaskInfo],
    invalid: list[tuple[str, str]],
    groups: list[tuple[int, int]],
) -> None:
    group = _object(operation.get("launch_group"), f"{at}.launch_group", required=True)
    task_group = _object(group.get("task_group"), f"{at}.launch_group.task_group", required=True)
    members = _list(task_group.get("tasks"), f"{at}.launch_group.task_group.tasks")
    try:
        executor: ExecutorInfo | BadCall = executor_info(
            group.get("executor"), f"{at}.launch_group.executor", framework_role
        )
    except BadCall as exc:
        executor = exc  # every task of the group is invalid with it, as in Mesos
    where = f"{at}.launch_group.task_group.tasks"
    decoded: list[TaskInfo] = []
    failed: list[tuple[str, str]] = []
    for j, task in enumerate(members):
        _decode_task(task, f"{where}[{j}]", framework_role, executor, decoded, failed)
    if failed:
        # A group is launched whole or not at all (Mesos): one unreadable member fails all.
        first_id, first_problem = failed[0]
        why = f"another task of its group cannot be launched ({first_id or 'no task_id'}: {first_problem})"
        failed += [(t.task_id, why) for t in decoded]
        invalid += failed
    else:
        groups.append((len(tasks), len(tasks) + len(decoded)))
        tasks += decoded


def _decode_task(
    obj: Any,
    path: str,
    framework_role: str,
    group_executor: ExecutorInfo | BadCall | None,
    tasks: list[TaskInfo],
    invalid: list[tuple[str, str]],
) -> None:
    """Append the task to ``tasks``, or (its id if readable, why) to ``invalid``."""
    if isinstance(group_executor, BadCall):
        invalid.append((_task_id_of(obj), str(group_executor)))
        return
    try:
        tasks.append(_task_info(obj, path, framework_role, group_executor))
    except BadCall as exc:
        invalid.append((_task_id_of(obj), str(exc)))


def _task_id_of(obj: Any) -> str:
    """The ``task_id`` of a task that failed to decode, if it can be read ("" if not)."""
    task_id = obj.get("task_id") if isinstance(obj, dict) else None
    value = task_id.get("value") if isinstance(task_id, dict) else None
    return value if isinstance(value, str) else ""


def decline(body: Any) -> tuple[list[str], Filters]:
    """A ``DECLINE``'s payload: (offer ids, filters)."""
    payload = _object(body, "decline")
    offer_ids = _ids(payload.get("offer_ids"), "decline.offer_ids")
    return offer_ids, filters(payload.get("filters"), "decline.filters")


def kill(body: Any) -> tuple[str, str]:
    """A ``KILL``'s payload: (task id, agent id or ""). ``kill_policy`` is ignored."""
    payload = _object(body, "kill")
    return (
        _id(payload.get("task_id"), "kill.task_id"),
        _id(payload.get("agent_id"), "kill.agent_id", required=False),
    )


def acknowledge(body: Any) -> tuple[str, str, str]:
    """An ``ACKNOWLEDGE``'s payload: (agent id, task id, uuid in mezzo's form)."""
    payload = _object(body, "acknowledge")
    return (
        _id(payload.get("agent_id"), "acknowledge.agent_id"),
        _id(payload.get("task_id"), "acknowledge.task_id"),
        decode_uuid(payload.get("uuid"), "acknowledge.uuid"),
    )


def reconcile(body: Any) -> list[tuple[str, str]]:
    """A ``RECONCILE``'s payload: (task id, agent id or "") of each task asked about;
    empty for implicit reconciliation (every task of the framework)."""
    payload = _object(body, "reconcile")
    asked = []
    for i, item in enumerate(_list(payload.get("tasks"), "reconcile.tasks")):
        at = f"reconcile.tasks[{i}]"
        task = _object(item, at, required=True)
        task_id = _id(task.get("task_id"), f"{at}.task_id")
        asked.append((task_id, _id(task.get("agent_id"), f"{at}.agent_id", required=False)))
    return asked


def message(body: Any) -> tuple[str, str, bytes]:
    """A ``MESSAGE``'s payload: (agent id, executor id, data)."""
    payload = _object(body, "message")
    data = payload.get("data")
    if data is None:
        raise BadCall("message.data", "is required")
    return (
        _id(payload.get("agent_id"), "message.agent_id"),
        _id(payload.get("executor_id"), "message.executor_id"),
        decode_bytes(data, "message.data"),
    )


def roles(body: Any, path: str = "") -> list[str]:
    """The ``roles`` of a ``REVIVE`` or ``SUPPRESS`` payload (``path`` its key, for
    messages); empty means every role. The deprecated single ``role`` is read too."""
    payload = _object(body, path)
    listed = _strings(payload.get("roles"), _at(path, "roles"))
    if not listed and payload.get("role") is not None:
        return [_string(payload["role"], _at(path, "role"))]
    return listed


# -- encoding: kernel -> JSON ------------------------------------------------------------


def resources_json(wire: WireResources | None, framework_role: str = "*") -> list[dict[str, Any]]:
    """mezzo resources as a list of ``Resource``: unreserved (``role: "*"``) and
    allocated to ``framework_role``; scalars in user units (thousandths / 1000)."""
    if wire is None:
        return []
    out: list[dict[str, Any]] = []
    for name, milli in sorted((wire.scalars or {}).items()):
        out.append(_resource(name, "SCALAR", "scalar", {"value": milli / SCALE}, framework_role))
    for name, spans in sorted((wire.ranges or {}).items()):
        ranges = {"range": [{"begin": r.begin, "end": r.end} for r in spans or ()]}
        out.append(_resource(name, "RANGES", "ranges", ranges, framework_role))
    return out


def _resource(name: str, kind: str, key: str, value: dict[str, Any], role: str) -> dict[str, Any]:
    return {"name": name, "type": kind, key: value, "role": "*", "allocation_info": {"role": role}}


def offer(o: Offer, framework_role: str = "*") -> dict[str, Any]:
    """An ``Offer``: ids, ``hostname``, ``resources`` (see :func:`resources_json`),
    mezzo's attributes as ``TEXT`` attributes, ``executor_ids`` and the
    ``allocation_info`` of the framework's role."""
    return {
        "id": {"value": o.offer_id},
        "framework_id": {"value": o.framework_id},
        "agent_id": {"value": o.agent_id},
        "hostname": o.hostname,
        "resources": resources_json(o.resources, framework_role),
        "attributes": [
            {"name": name, "type": "TEXT", "text": {"value": text}}
            for name, text in sorted((o.attributes or {}).items())
        ],
        "executor_ids": [{"value": e} for e in o.executor_ids or ()],
        "allocation_info": {"role": framework_role},
    }


def task_status(s: TaskStatus) -> dict[str, Any]:
    """A ``TaskStatus``, with the proto's keys only. ``uuid`` is there only when mezzo's
    update has one: Mesos clients acknowledge exactly the updates that carry one. An
    exit code with no message becomes Mesos' "Command exited with status N"."""
    status: dict[str, Any] = {"task_id": {"value": s.task_id}, "state": _state_name(s.state)}
    text = s.message or ""
    if not text and s.exit_code is not None:
        text = f"Command exited with status {s.exit_code}"
    if text:
        status["message"] = text
    source = SOURCES.get(s.source or "")
    if source is not None:
        status["source"] = source
    reason = reason_name(s.reason or "")
    if reason is not None:
        status["reason"] = reason
    if s.agent_id:
        status["agent_id"] = {"value": s.agent_id}
    if s.executor_id:
        status["executor_id"] = {"value": s.executor_id}
    status["timestamp"] = float(s.timestamp or 0.0)
    if s.uuid:
        status["uuid"] = encode_uuid(s.uuid)
    if s.data is not None:
        status["data"] = base64.b64encode(s.data).decode("ascii")
    return status


def _state_name(state: Any) -> str:
    # mezzo's TaskState names are Mesos' (mezzo lacks TASK_GONE_BY_OPERATOR only). A
    # number mezzo does not define cannot come from its master; say "unknown" anyway
    # rather than fail a whole stream of events.
    try:
        return TaskState(state).name
    except ValueError:
        return "TASK_UNKNOWN"


def reason_name(mezzo_reason: str) -> str | None:
    """The Mesos ``REASON_*`` name for a mezzo reason code (:data:`REASONS`); a code that
    already is a Mesos name (a custom executor's) as it is; None for "" and for codes
    with no counterpart, which updates then leave out."""
    if mezzo_reason in MESOS_REASONS:
        return mezzo_reason
    return REASONS.get(mezzo_reason)


def master_info(master_id: str, host: str, port: int, version: str) -> dict[str, Any]:
    """A ``MasterInfo``. ``ip`` is the IPv4 address packed as Mesos packs it, a uint32
    in network byte order (127.0.0.1 is 16777343), or 0 when ``host`` is not a dotted
    IPv4 address; ``address.ip`` is ``host`` either way (what a client connects to)."""
    return {
        "id": master_id,
        "ip": _packed_ipv4(host),
        "port": port,
        "pid": f"master@{host}:{port}",
        "hostname": host,
        "version": version,
        "address": {"hostname": host, "ip": host, "port": port},
    }


def _packed_ipv4(host: str) -> int:
    parts = host.split(".")
    if len(parts) != 4 or not all(_octet(p) for p in parts):
        return 0
    # The address's bytes in network order, read as the little-endian uint32 Mesos
    # keeps them in (its JSON shows that number).
    return int.from_bytes(bytes(int(p) for p in parts), "little")


def _octet(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 3 and int(text) < 256


def event(kind: str, payload: dict[str, Any] | None) -> bytes:
    """An event's JSON: ``{"type": kind, kind.lower(): payload}``, or ``{"type": kind}``
    without a payload (``HEARTBEAT``); compact, as one RecordIO record."""
    message_: dict[str, Any] = {"type": kind}
    if payload is not None:
        message_[kind.lower()] = payload
    return _compact(message_).encode()


_compact = json.JSONEncoder(separators=(",", ":")).encode
"""``json.dumps(value, separators=(",", ":"))`` without a new encoder per call (what
json.dumps makes whenever it is given an argument): this runs once per event."""


# -- uuids and bytes ------------------------------------------------------------------------

_HEX = frozenset("0123456789abcdef")


def encode_uuid(mezzo_uuid: str) -> str:
    """A mezzo update uuid as the base64 ``bytes`` a Mesos client acknowledges.

    mezzo's own uuids are ``uuid4().hex``: they travel as base64 of their 16 bytes,
    as Mesos' do. Any other string (a custom executor's) travels as ``~`` and its
    UTF-8, which is never 16 bytes long except for a 15-byte string; that one is
    ``~``, the byte 0xFF (which UTF-8 never has) and its UTF-8, 17 bytes. So
    :func:`decode_uuid` tells all of them apart and gives back the same string.
    """
    if len(mezzo_uuid) == 32 and _HEX.issuperset(mezzo_uuid):
        raw = bytes.fromhex(mezzo_uuid)
    else:
        text = mezzo_uuid.encode("utf-8")
        raw = b"~\xff" + text if len(text) == 15 else b"~" + text
    return base64.b64encode(raw).decode("ascii")


def decode_uuid(b64: Any, path: str) -> str:
    """The mezzo uuid a client echoes back (see :func:`encode_uuid`); :class:`BadCall`
    naming ``path`` for bad base64 or bytes no mezzo uuid encodes to."""
    raw = decode_bytes(b64, path)
    if len(raw) == 16:
        return raw.hex()
    if raw[:1] == b"~":
        text = raw[2:] if len(raw) == 17 and raw[1:2] == b"\xff" else raw[1:]
        try:
            return text.decode("utf-8")
        except UnicodeDecodeError:
            pass
    raise BadCall(path, f"{len(raw)} bytes are not the uuid of an update this master sent")


def decode_bytes(b64: Any, path: str) -> bytes:
    """Standard base64 (a missing ``=`` padding is tolerated); :class:`BadCall` naming
    ``path`` for anything else."""
    if not isinstance(b64, str):
        raise BadCall(path, _expected("base64 text", b64))
    try:
        return base64.b64decode(b64 + "=" * (-len(b64) % 4), validate=True)
    except (binascii.Error, ValueError):  # bad characters or length; non-ASCII text
        raise BadCall(path, f"not valid base64: {_show(b64)}") from None


# -- checked access: every read of client JSON goes through these -------------------------


def _at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _clip(text: str) -> str:
    """A client's string, short enough for a message."""
    return text if len(text) <= 60 else text[:57] + "..."


def _show(value: Any) -> str:
    """A JSON value for a message: scalars as JSON (clipped), containers by kind."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return json.dumps(_clip(value))
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return "an integer of more than 64 bits"  # str() of a huge int is slow, even refused
    if isinstance(value, (int, float, bool)) or value is None:
        return json.dumps(value)
    return type(value).__name__  # not from JSON; a caller's mistake


def _expected(what: str, value: Any) -> str:
    return "is required" if value is None else f"must be {what}, got {_show(value)}"


def _object(value: Any, path: str, *, required: bool = False) -> dict[str, Any]:
    """A JSON object; absent (None) is ``{}`` unless ``required``."""
    if isinstance(value, dict):
        return value
    if value is None and not required:
        return {}
    raise BadCall(path, _expected("an object", value))


def _list(value: Any, path: str) -> list[Any]:
    """A JSON array; absent (None) is ``[]``."""
    if isinstance(value, list):
        return value
    if value is None:
        return []
    raise BadCall(path, _expected("an array", value))


def _string(value: Any, path: str, *, required: bool = False, default: str = "") -> str:
    if isinstance(value, str):
        return value
    if value is None and not required:
        return default
    raise BadCall(path, _expected("a string", value))


def _strings(value: Any, path: str) -> list[str]:
    items = _list(value, path)
    for i, item in enumerate(items):
        if not isinstance(item, str):  # the path is made only for the one that is wrong
            raise BadCall(f"{path}[{i}]", _expected("a string", item))
    return list(items)


def _bool(value: Any, path: str, *, default: bool) -> bool:
    if isinstance(value, bool):
        return value
    if value is None:
        return default
    raise BadCall(path, _expected("true or false", value))


def _id(value: Any, path: str, *, required: bool = True) -> str:
    """An id, ``{"value": "..."}``: non-empty when ``required``, "" when absent if not."""
    if value is None and not required:
        return ""
    text = _object(value, path, required=True).get("value")
    if not isinstance(text, str):
        raise BadCall(f"{path}.value", _expected("a string", text))
    if required and not text:
        raise BadCall(f"{path}.value", "must not be empty")
    return text


def _ids(value: Any, path: str) -> list[str]:
    return [_id(item, f"{path}[{i}]") for i, item in enumerate(_list(value, path))]


def _double(value: Any, path: str) -> float:
    """A proto ``double``: a JSON number, or the strings stout also reads for doubles."""
    if isinstance(value, str) and value in ("Infinity", "-Infinity"):
        return float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadCall(path, _expected("a number", value))
    try:
        return float(value)
    except OverflowError:  # an integer beyond any double
        return math.inf if value > 0 else -math.inf


def _seconds(value: Any, path: str, default: float) -> float:
    if value is None:
        return default
    number = _double(value, path)
    if not math.isfinite(number) or number < 0:
        raise BadCall(path, _expected("a finite number >= 0", value))
    return number


def _milli(value: Any, path: str) -> int:
    """A scalar amount in thousandths, as :class:`mezzo.Resources` converts it."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (isinstance(value, float) and not math.isfinite(value))
        or value < 0
    ):
        raise BadCall(path, _expected("a finite number >= 0", value))
    if value * SCALE > MAX_WIRE:
        raise BadCall(path, f"must be at most {MAX_WIRE // SCALE}, got {_show(value)}")
    return round(value * SCALE)


def _bound(value: Any, path: str) -> int:
    """A range bound: an integer 0 <= n <= 2**63 - 1 (written ``31000`` or ``31000.0``)."""
    number = int(value) if isinstance(value, float) and value.is_integer() else value
    if isinstance(number, bool) or not isinstance(number, int) or not 0 <= number <= MAX_WIRE:
        raise BadCall(path, _expected(f"an integer from 0 to {MAX_WIRE}", value))
    return number
