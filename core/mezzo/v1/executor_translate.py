"""The v1 executor API's messages <-> mezzo's kernel types (the agent's side).

:mod:`.translate` maps the scheduler API, and its rules hold here too (keys are the
proto's field names, ids ``{"value": ...}``, bytes base64, resources in user units,
unknown keys ignored, decoding raises :class:`~.translate.BadCall` naming the JSON
path and is linear in its input). What is particular to executors:

- **Events** (agent -> executor): ``SUBSCRIBED`` carries the ``ExecutorInfo``, the
  ``FrameworkInfo`` and the ``AgentInfo`` as an executor that checks its own ids reads
  them (pymesos asserts ``executor_info.executor_id`` and ``framework_info.id``);
  ``LAUNCH`` the ``TaskInfo`` as the scheduler gave it, ``KILL``, ``ACKNOWLEDGED`` (the
  uuid the executor sent, as it sent it), ``MESSAGE``, ``SHUTDOWN``, ``ERROR``.
- **Calls** (executor -> agent): ``UPDATE`` (a ``TaskStatus``: the state by name, a
  ``uuid`` of the executor's making, required as in Mesos; the executor's ``reason``
  kept as it wrote it), ``MESSAGE`` (``data``), and ``SUBSCRIBE``, whose
  ``unacknowledged_updates`` a re-subscribing executor sends again.
"""

from __future__ import annotations

import base64
from typing import Any

from ..wire.ttypes import AgentInfo, CommandInfo, ExecutorInfo, FrameworkInfo, TaskInfo, TaskState, TaskStatus
from .translate import (
    BadCall,
    _double,
    _expected,
    _id,
    _list,
    _object,
    _string,
    decode_bytes,
    decode_uuid,
    encode_uuid,
    resources_json,
)

MAX_REASON_LENGTH = 200
"""The longest ``reason`` an executor may give (Mesos' are ``REASON_*`` names)."""


# -- events: kernel -> JSON -----------------------------------------------------------------


def subscribed(
    info: ExecutorInfo, framework: FrameworkInfo, agent: AgentInfo, container_id: str
) -> dict[str, Any]:
    """``SUBSCRIBED``'s payload."""
    role = framework.role or "*"
    return {
        "executor_info": executor_info_json(info, role),
        "framework_info": framework_info_json(framework),
        "agent_info": agent_info_json(agent),
        "container_id": {"value": container_id},
    }


def launch(task: TaskInfo, role: str) -> dict[str, Any]:
    """``LAUNCH``'s payload."""
    return {"task": task_info_json(task, role)}


def kill(task_id: str) -> dict[str, Any]:
    """``KILL``'s payload."""
    return {"task_id": {"value": task_id}}


def acknowledged(task_id: str, uuid: str) -> dict[str, Any]:
    """``ACKNOWLEDGED``'s payload: the update's uuid as the executor made it (see
    :func:`update_status`)."""
    return {"task_id": {"value": task_id}, "uuid": encode_uuid(uuid)}


def message(data: bytes) -> dict[str, Any]:
    """``MESSAGE``'s payload."""
    return {"data": base64.b64encode(data).decode("ascii")}


def framework_info_json(framework: FrameworkInfo) -> dict[str, Any]:
    """A ``FrameworkInfo`` (one role: mezzo frameworks have one)."""
    role = framework.role or "*"
    return {
        "id": {"value": framework.framework_id},
        "name": framework.name or "",
        "user": framework.user or "",
        "role": role,
        "roles": [role],
        "hostname": framework.hostname or "",
        "failover_timeout": float(framework.failover_timeout or 0.0),
    }


def agent_info_json(agent: AgentInfo) -> dict[str, Any]:
    """An ``AgentInfo``; mezzo's attributes as ``TEXT`` attributes."""
    return {
        "id": {"value": agent.agent_id},
        "hostname": agent.hostname,
        "port": agent.port,
        "resources": resources_json(agent.resources),
        "attributes": [
            {"name": name, "type": "TEXT", "text": {"value": text}}
            for name, text in sorted((agent.attributes or {}).items())
        ],
    }


def command_info_json(command: CommandInfo) -> dict[str, Any]:
    """A ``CommandInfo``."""
    out: dict[str, Any] = {"value": command.value or "", "shell": bool(command.shell)}
    if command.arguments:
        out["arguments"] = list(command.arguments)
    if command.environment:
        out["environment"] = {
            "variables": [
                {"name": name, "type": "VALUE", "value": value}
                for name, value in sorted(command.environment.items())
            ]
        }
    if command.user:
        out["user"] = command.user
    return out


def executor_info_json(info: ExecutorInfo, role: str = "*") -> dict[str, Any]:
    """An ``ExecutorInfo`` of a ``CUSTOM`` executor."""
    out: dict[str, Any] = {
        "type": "CUSTOM",
        "executor_id": {"value": info.executor_id},
        "framework_id": {"value": info.framework_id or ""},
        "resources": resources_json(info.resources, role),
    }
    if info.command is not None:
        out["command"] = command_info_json(info.command)
    if info.name:
        out["name"] = info.name
    return out


def task_info_json(task: TaskInfo, role: str = "*") -> dict[str, Any]:
    """A ``TaskInfo``: what :func:`.translate.task_info` reads, written back."""
    out: dict[str, Any] = {
        "task_id": {"value": task.task_id},
        "name": task.name or "",
        "agent_id": {"value": task.agent_id or ""},
        "resources": resources_json(task.resources, role),
    }
    if task.executor is not None:
        out["executor"] = executor_info_json(task.executor, role)
    if task.command is not None:
        out["command"] = command_info_json(task.command)
    if task.data is not None:
        out["data"] = base64.b64encode(task.data).decode("ascii")
    if task.labels:
        out["labels"] = {"labels": [{"key": k, "value": v} for k, v in sorted(task.labels.items())]}
    return out


# -- calls: JSON -> kernel ------------------------------------------------------------------


def update_status(body: Any, path: str = "update") -> TaskStatus:
    """The ``TaskStatus`` of an ``UPDATE`` payload (``path`` names it in messages).

    ``task_id``, ``state`` (a ``TASK_*`` name) and ``uuid`` (base64, of 16 bytes as
    Mesos' executors make it) are required; ``message``, ``reason`` (at most
    :data:`MAX_REASON_LENGTH` characters), ``data`` and ``timestamp`` are read; the
    status's own ``agent_id``, ``executor_id`` and ``source`` are the agent's to set."""
    at = f"{path}.status"
    status = _object(_object(body, path).get("status"), at, required=True)
    state_name = status.get("state")
    state = TaskState.__members__.get(state_name) if isinstance(state_name, str) else None
    if state is None:
        raise BadCall(f"{at}.state", _expected('a task state such as "TASK_RUNNING"', state_name))
    if status.get("uuid") is None:
        raise BadCall(f"{at}.uuid", "is required: an executor's update is acknowledged by its uuid")
    reason = _string(status.get("reason"), f"{at}.reason")
    if len(reason) > MAX_REASON_LENGTH:
        raise BadCall(f"{at}.reason", f"is longer than {MAX_REASON_LENGTH} characters")
    data = status.get("data")
    timestamp = status.get("timestamp")
    return TaskStatus(
        task_id=_id(status.get("task_id"), f"{at}.task_id"),
        state=state,
        message=_string(status.get("message"), f"{at}.message"),
        reason=reason,
        uuid=decode_uuid(status["uuid"], f"{at}.uuid"),
        timestamp=0.0 if timestamp is None else _double(timestamp, f"{at}.timestamp"),
        data=None if data is None else decode_bytes(data, f"{at}.data"),
    )


def message_data(body: Any) -> bytes:
    """The ``data`` of an executor's ``MESSAGE`` payload."""
    payload = _object(body, "message")
    if payload.get("data") is None:
        raise BadCall("message.data", "is required")
    return decode_bytes(payload["data"], "message.data")


def unacknowledged_updates(body: Any) -> list[TaskStatus]:
    """The updates a re-subscribing executor sends again (``subscribe.unacknowledged_updates``,
    each a ``Call.Update``); its ``unacknowledged_tasks`` are not needed: the agent knows
    its tasks from its own records."""
    where = "subscribe.unacknowledged_updates"
    items = _list(_object(body, "subscribe").get("unacknowledged_updates"), where)
    return [update_status(item, f"{where}[{i}]") for i, item in enumerate(items)]
