"""The mezzo agent daemon: runs tasks in containers and reports their status.

``Agent`` is the daemon (:mod:`.agent`); the pieces it is built from are usable
on their own: :class:`Containerizer` (isolators around a process),
:class:`StatusUpdateStream` (reliable ordered updates), :class:`Sandbox` (the
directory layout), :class:`PosixIsolator` (the default isolator) and
:class:`Checkpoint` (the journal a restarted agent recovers from).

Names load on first use, so that ``mezzo.builtin`` importing the ``posix``
isolator does not pull the daemon into every process that loads plugins.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Agent": ".agent",
    "AgentService": ".service",
    "Checkpoint": ".checkpoint",
    "Containerizer": ".containerizer",
    "LaunchError": ".containerizer",
    "RunningContainer": ".containerizer",
    "PosixIsolator": ".posix",
    "kill_tree": ".posix",
    "InvalidId": ".sandbox",
    "Sandbox": ".sandbox",
    "StatusUpdateManager": ".status_updates",
    "StatusUpdateStream": ".status_updates",
}

__all__ = [
    "Agent",
    "AgentService",
    "Checkpoint",
    "Containerizer",
    "InvalidId",
    "LaunchError",
    "PosixIsolator",
    "RunningContainer",
    "Sandbox",
    "StatusUpdateManager",
    "StatusUpdateStream",
    "kill_tree",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mezzo.agent' has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)
