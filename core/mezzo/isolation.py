"""Helpers for isolator authors: what an isolator may use of the host besides its own code.

An isolator (:class:`mezzo.hookspecs.Isolator`) is a plugin: it should import the plugin
contract (:mod:`mezzo.hookspecs`), :mod:`mezzo.errors`, :mod:`mezzo.resources`,
:mod:`mezzo.setting_checks` and this module, and nothing of :mod:`mezzo.agent`, whose
internals change with the agent. What isolators shipped with mezzo need of the host is
here, as stable functions::

    from mezzo.isolation import process_alive, process_start_time, program_problem

    problem = program_problem(launch.argv[0], launch.env, launch.cwd)   # in prepare()
    if problem is not None:
        raise RuntimeError(f"cannot start {launch.argv[0]!r}: {problem}")

    owner = (os.getpid(), process_start_time(os.getpid()))   # names this process for good
    ...
    process_alive(*owner)   # False once it exited, even if its pid was reused since

A process is named by its pid *and* its start time (clock ticks after boot, from
``/proc/<pid>/stat``): a pid alone may name a later process once the first one exited.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from .agent import posix

__all__ = ["process_alive", "process_start_time", "program_problem"]


def program_problem(program: str, env: Mapping[str, str], cwd: str) -> str | None:
    """Why exec would not find ``program`` (as :mod:`subprocess` searches: the ``PATH`` of
    ``env``, relative names from ``cwd``), or None if it would.

    For isolators that wrap the command (``lxc``): under a wrapper, a missing program
    would be the wrapper's exit status; checking in ``prepare`` fails the launch with the
    reason instead."""
    if "/" in program:
        candidates = [os.path.join(cwd, program)]
    else:
        candidates = [os.path.join(cwd, d, program) for d in os.get_exec_path(dict(env))]
    problem = "No such file or directory"
    for path in candidates:
        if os.path.isfile(path):
            if os.access(path, os.X_OK):
                return None
            problem = "Permission denied"
    return problem


def process_start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot), or None if there is none."""
    entry = posix.read_stat(pid)
    return entry.start_time if entry is not None else None


def process_alive(pid: int, start_time: int) -> bool:
    """True while the process that started at ``start_time`` as ``pid`` is alive (a zombie
    counts as exited; a later process reusing the pid is not it)."""
    return posix.identify(pid, start_time) == posix.SAME
