"""Which unix user a task runs as: one rule, applied alike by the master and the agents.

The master checks the user against the ``run_tasks`` ACL (:mod:`mezzo.acls`)
and an agent running as root switches to it (``agent.switch_user``); both must
reach the same name from the same messages, hence this one function.
"""

from __future__ import annotations

from .wire.ttypes import CommandInfo, FrameworkInfo, TaskInfo

DEFAULT_USER = "nobody"
"""The user of a task whose command and framework name none: the one with least rights."""


def task_user(framework: FrameworkInfo | None, task: TaskInfo) -> str:
    """The user ``task`` of ``framework`` runs as: its command's ``user`` (the executor's
    command for a task with its own executor), else ``FrameworkInfo.user``, else
    :data:`DEFAULT_USER`."""
    command: CommandInfo | None = task.command
    if command is None and task.executor is not None:
        command = task.executor.command
    named = command.user if command is not None and isinstance(command.user, str) else ""
    if named:
        return named
    framework_user = framework.user if framework is not None and isinstance(framework.user, str) else ""
    return framework_user or DEFAULT_USER
