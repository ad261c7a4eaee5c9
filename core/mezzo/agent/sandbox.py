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

When the task runs as another user (``agent.switch_user``), :meth:`Sandbox.create` is
given that user as ``owner``: the directories leading to the sandbox stay the agent's
but are 0711 (passable, not listable), and the sandbox itself (and ``tasks/<id>/`` made
in it later) is given to that user, 0750. Everything else the agent does in a sandbox
assumes that user may have changed anything there (see :func:`~.work_dir.open_output`
and :func:`~.work_dir.read_tail`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .work_dir import SANDBOX_MODE, SHARED_DIR_MODE, Owner, make_dirs

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
    owner: Owner | None = None
    """``(uid, gid)`` of the user it was given to; None: it is the agent's."""

    @classmethod
    def create(
        cls,
        work_dir: str,
        framework_id: str,
        executor_id: str,
        container_id: str,
        owner: Owner | None = None,
    ) -> Sandbox:
        """Create the sandbox (and the directories leading to it) under ``work_dir``, which
        must exist. ``owner``: the user the task runs as, when not the agent's (see the
        module docstring). Raises :class:`InvalidId`, or ``OSError``
        (:class:`~.work_dir.UnsafePath` for a symlink or a directory not the agent's on the
        way)."""
        parts = _components(framework_id, executor_id, container_id)
        if owner is None:
            return cls(make_dirs(work_dir, parts, SANDBOX_MODE))
        runs = make_dirs(work_dir, parts[:-1], SHARED_DIR_MODE, traverse=True)
        return cls(make_dirs(runs, parts[-1:], SANDBOX_MODE, owner=owner), owner)

    @classmethod
    def existing(cls, path: str) -> Sandbox:
        """The sandbox an earlier agent made at ``path`` (after a restart), with its owner
        as the directory says (None: the agent's, or there is no such directory)."""
        try:
            st = os.lstat(path)
        except OSError:
            return cls(path)
        return cls(path, (st.st_uid, st.st_gid) if st.st_uid != os.geteuid() else None)

    @property
    def uid(self) -> int:
        """Whose files the agent expects in it (its owner's, else the agent's)."""
        return self.owner[0] if self.owner is not None else os.geteuid()

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
        """Create and return ``tasks/<task_id>/`` (custom executors' tasks), the sandbox
        owner's."""
        return make_dirs(self.path, ["tasks", check_id("task id", task_id)], SANDBOX_MODE, owner=self.owner)


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
