"""Per-container resource usage, as the isolators measure it (Mesos' /monitor/statistics).

Each running container (a command task, or a custom executor with its tasks) is
asked for its usage through :meth:`Containerizer.usage`, which merges what every
isolator reports (cgroups: cpu time and memory; network: bytes sent and received).
The result is a JSON-ready list, one entry per container::

    [{"framework_id": "...", "executor_id": "...", "container_id": "...",
      "tasks": ["t1", "t2"],
      "statistics": {"timestamp": 1763850000.1, "cpu_seconds": 1.5, "mem_bytes": 1.2e7}}]

The agent answers ``Agent.request_statistics`` (``mezzo state --agent HOST:PORT``)
with it, measured on the spot, and sends it to the master every
``agent.statistics_interval`` seconds (``Master.container_statistics``), so that
``mezzo state`` shows each agent's containers. Containers no isolator measures
(the ``posix`` isolator measures nothing) are left out, and an agent with nothing
measured sends nothing: a cluster without resource isolators pays nothing for this.
A measurement that is not a finite number (NaN, an infinity) is dropped where the
isolators' measurements are merged (:meth:`Containerizer.usage`, which logs it once per
isolator and key): the report is strict JSON, as the master requires.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any

import structlog

if TYPE_CHECKING:
    from .agent import Agent

log = structlog.get_logger("mezzo.agent", component="agent")


async def collect(agent: Agent) -> list[dict[str, Any]]:
    """The usage of every running container that some isolator measures."""
    out = []
    for fid, fw in list(agent.frameworks.items()):
        units: list[tuple[str, list[str], Any]] = [
            (task.task_id, [task.task_id], task) for task in fw.command_tasks.values()
        ]
        units += [(run.executor_id, sorted(run.tasks), run) for run in fw.executors.values()]
        for executor_id, tasks, runner in units:
            container = runner.container
            if container is None or runner.running is None or runner.running.returncode is not None:
                continue  # not started yet, or ended
            usage = await agent.containerizer.usage(container)
            if not usage:
                continue
            out.append(
                {
                    "framework_id": fid,
                    "executor_id": executor_id,
                    "container_id": container.container_id,
                    "tasks": tasks,
                    "statistics": {"timestamp": round(time.time(), 3), **usage},
                }
            )
    return out


class StatisticsReporter:
    """Sends the agent's container statistics to the master every ``interval`` seconds."""

    def __init__(self, agent: Agent, interval: float) -> None:
        self._agent = agent
        self._interval = interval
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        if self._interval > 0:
            self._task = self._agent.background(self._run(), what="statistics reporter")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            master = self._agent._master()
            if master is None:
                continue
            try:
                stats = await collect(self._agent)
            except Exception:  # a measuring bug must not end the reports for good
                log.exception("collecting container statistics failed")
                continue
            if stats:
                master.container_statistics(self._agent.agent_id, json.dumps(stats))

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
