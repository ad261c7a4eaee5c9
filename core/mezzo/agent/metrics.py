"""The agent's counters as a flat snapshot under Apache Mesos' agent metric names.

What the agent knows cheaply (one pass over the tasks it holds):
``slave/registered``, ``slave/uptime_secs``, ``slave/tasks_{staging,starting,running,killing}``
(its tasks by their latest state), ``slave/tasks_{finished,failed,killed,lost,error,dropped}``
(tasks that reached that end since the agent started), ``slave/{cpus,mem,disk,gpus}_{total,used}``
(``used``: the resources of the tasks and executors it holds), ``slave/executors_running``
(command tasks count as executors, as in Mesos), ``slave/frameworks_active``, plus
``mezzo/plugin_failures`` and the update streams awaiting acknowledgement
(``mezzo/status_updates_pending``). Values are floats; :mod:`mezzo.http.metrics` writes
them as Prometheus text.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .. import is_terminal, state_name
from ..resources import Resources

if TYPE_CHECKING:
    from .agent import Agent

SCALARS = ("cpus", "mem", "disk", "gpus")
LIVE_STATES = ("TASK_STAGING", "TASK_STARTING", "TASK_RUNNING", "TASK_KILLING")
ENDS = ("TASK_FINISHED", "TASK_FAILED", "TASK_KILLED", "TASK_LOST", "TASK_ERROR", "TASK_DROPPED")


def snapshot(agent: Agent, started: float) -> dict[str, float]:
    """``agent``'s metrics now; ``started``: its ``time.monotonic()`` at start."""
    out: dict[str, float] = {
        "slave/registered": 1.0 if agent.registered.is_set() else 0.0,
        "slave/uptime_secs": round(time.monotonic() - started, 3),
    }
    live = dict.fromkeys(LIVE_STATES, 0)
    used = Resources()
    for key, record in agent.tasks.items():
        latest = agent.updates.latest(*key)
        name = state_name(latest.state) if latest is not None else "TASK_STAGING"
        if latest is None or not is_terminal(latest.state):
            live[name] = live.get(name, 0) + 1
            used = used + Resources.of(record.info.resources)
    executors = 0
    for fw in agent.frameworks.values():
        executors += len(fw.command_tasks) + len(fw.executors)
        for run in fw.executors.values():
            used = used + Resources.of(run.info.resources)
    for name in LIVE_STATES:
        out[f"slave/{_short(name)}"] = float(live[name])
    ended: Mapping[str, int] = getattr(agent, "task_ends", {})
    for name in ENDS:
        out[f"slave/{_short(name)}"] = float(ended.get(name, 0))
    for name in SCALARS:
        total = agent.resources.get(name)
        if total or name != "gpus":
            out[f"slave/{name}_total"] = float(total)
            out[f"slave/{name}_used"] = float(used.get(name))
    out["slave/executors_running"] = float(executors)
    out["slave/frameworks_active"] = float(len(agent.frameworks))
    out["mezzo/status_updates_pending"] = float(sum(len(s) for s in agent.updates.streams.values()))
    for name, count in agent.plugin_failures.items():
        out[f"mezzo/plugin_failures/{name}"] = float(count)
    return out


def _short(state: str) -> str:
    """``TASK_RUNNING`` -> ``tasks_running``."""
    return "tasks_" + state.removeprefix("TASK_").lower()
