"""``mezzo local``: a master and N agents in one process, on loopback.

Agents bind free ports and get their own work directories under the configured
``agent.work_dir`` (``agent-1``, ``agent-2``, ...), so their sandboxes do not mix.
"""

from __future__ import annotations

import copy
import os

import structlog

from ..config import Config
from ..plugins import Plugins

log = structlog.get_logger("mezzo.local")


class LocalCluster:
    """Starts the master, then the agents; stops in reverse."""

    def __init__(self, config: Config, agents: int, plugins: Plugins) -> None:
        from ..agent import Agent
        from ..master import Master

        self.master = Master(config.master, plugins)
        self._agent_cls = Agent
        self._config = config
        self._plugins = plugins
        self._count = agents
        self.agents: list = []

    async def start(self) -> None:
        await self.master.start()
        for i in range(1, self._count + 1):
            cfg = copy.deepcopy(self._config.agent)
            cfg.master = self.master.address
            host = cfg.listen.rpartition(":")[0] or "127.0.0.1"
            cfg.listen = f"{host}:0"
            cfg.work_dir = os.path.join(cfg.work_dir, f"agent-{i}")
            cfg.hostname = cfg.hostname or f"localhost-{i}"
            agent = self._agent_cls(cfg, self._plugins)
            await agent.start()
            self.agents.append(agent)
        log.info("local cluster running", master=self.master.address, agents=len(self.agents))

    def daemons(self) -> list:
        """The master and the agents, for callers watching them."""
        return [self.master, *self.agents]

    async def stop(self) -> None:
        for agent in reversed(self.agents):
            await agent.stop()
        await self.master.stop()
