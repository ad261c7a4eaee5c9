"""Sandbox directories: where a container's files, stdout and stderr live.

Layout under the agent's ``work_dir`` (Apache Mesos' layout, so operators find
their way)::

    frameworks/<framework_id>/executors/<executor_id>/runs/<container_id>/
        stdout  stderr            the container's first process writes here
        tasks/<task_id>/          one per task of a custom executor

A command task is its own executor: its executor id is its task id.

Ids come off the wire, from schedulers we do not trust, and become path
components: :func:`check_id` refuses anything that could leave the tree
(``..``, ``/``, NUL) with :class:`InvalidId`, which the agent turns into a
TASK_ERROR rather than a crash. Sandboxes are kept after their container ends
so users can read the output; removing old ones is left to the operator.

Directories are created mode 0750, one at a time through directory fds, never
through a symlink (:func:`~.work_dir.make_dirs`): each one on the way, created or
found, must be a real directory of the agent's, or the launch fails with an
:class:`~.work_dir.UnsafePath` (an ``OSError``) saying which and why, instead of
writing wherever a planted symlink points.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .work_dir import SANDBOX_MODE, make_dirs

MAX_ID_LENGTH = 255


class InvalidId(ValueError):
    """An id that cannot safely name a directory. The message names the id."""


def check_id(kind: str, value: str) -> str:
    """Return ``value`` if it is a safe single path component, else raise :class:`InvalidId`."""
    if not isinstance(value, str) or not value:
        raise InvalidId(f"{kind} is empty")
    if value in (".", "..") or "/" in value or "\0" in value:
        raise InvalidId(f"{kind} {value!r} cannot be used as a directory name")
    if len(value.encode("utf-8", "surrogateescape")) > MAX_ID_LENGTH:
        raise InvalidId(f"{kind} is longer than {MAX_ID_LENGTH} bytes")
    return value


@dataclass(frozen=True)
class Sandbox:
    """The run directory of one container; created by :meth:`create`."""

    path: str

    @classmethod
    def create(cls, work_dir: str, framework_id: str, executor_id: str, container_id: str) -> Sandbox:
        """Create the sandbox (and the directories leading to it) under ``work_dir``, which
        must exist. Raises :class:`InvalidId`, or ``OSError`` (:class:`~.work_dir.UnsafePath`
        for a symlink or a directory not the agent's on the way)."""
        path = make_dirs(work_dir, _components(framework_id, executor_id, container_id), SANDBOX_MODE)
        # Tasks will run as other users: this is where the sandbox is to be chowned to them.
        return cls(path)

    @staticmethod
    def path_for(work_dir: str, framework_id: str, executor_id: str, container_id: str) -> str:
        """Where :meth:`create` puts that sandbox (nothing is created)."""
        return os.path.join(work_dir, *_components(framework_id, executor_id, container_id))

    @property
    def stdout(self) -> str:
        return os.path.join(self.path, "stdout")

    @property
    def stderr(self) -> str:
        return os.path.join(self.path, "stderr")

    def task_dir(self, task_id: str) -> str:
        """Create and return ``tasks/<task_id>/`` (custom executors' tasks)."""
        return make_dirs(self.path, ["tasks", check_id("task id", task_id)], SANDBOX_MODE)


def _components(framework_id: str, executor_id: str, container_id: str) -> list[str]:
    """The directories from the work dir down to a sandbox (ids checked)."""
    return [
        "frameworks",
        check_id("framework id", framework_id),
        "executors",
        check_id("executor id", executor_id),
        "runs",
        check_id("container id", container_id),
    ]
