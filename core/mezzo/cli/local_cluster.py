"""``mezzo local``: a master and N agents in one process, on loopback.

Agents bind free ports and get their own work directories under the configured
``agent.work_dir`` (``agent-1``, ``agent-2``, ...), so their sandboxes do not mix.

TLS is on by default, so that the secure path is the one everybody runs: unless the
configuration has a ``[tls]`` of its own (or ``--no-tls`` is given), the cluster
makes throw-away certificates in ``<agent.work_dir>/tls`` each time it starts (a
new CA, one certificate each for the master, the agents and an ``operator``) and
writes ``<agent.work_dir>/client.toml``, a ``[tls]`` with the operator's: clients
use it as ``MEZZO_CONFIG=<work_dir>/client.toml mezzo state`` (or ``--config``).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import structlog

from ..config import Config, TlsConfig
from ..plugins import Plugins

log = structlog.get_logger("mezzo.local")


class LocalCluster:
    """Starts the master, then the agents; stops in reverse."""

    def __init__(
        self,
        config: Config,
        agents: int,
        plugins: Plugins,
        *,
        agent_tls: TlsConfig | None = None,
        queue: Any = None,
        queue_tls: TlsConfig | None = None,
    ) -> None:
        """The master uses ``config.tls``, the agents ``agent_tls`` (default: the same).
        With ``queue`` (:class:`~mezzo.queue.daemon.QueueSettings`) the batch queue runs
        too, registered with this master, with ``queue_tls`` (default: ``config.tls``)."""
        from ..agent import Agent
        from ..master import Master

        self.master = Master(config.master, plugins, tls=config.tls)
        self._agent_tls = agent_tls if agent_tls is not None else config.tls
        self._agent_cls = Agent
        self._config = config
        self._plugins = plugins
        self._count = agents
        self.agents: list = []
        self._queue_settings = queue
        self._queue_tls = queue_tls if queue_tls is not None else config.tls
        self.queue: Any = None

    async def start(self) -> None:
        await self.master.start()
        for i in range(1, self._count + 1):
            cfg = copy.deepcopy(self._config.agent)
            cfg.master = self.master.address
            host = cfg.listen.rpartition(":")[0] or "127.0.0.1"
            cfg.listen = f"{host}:0"
            cfg.work_dir = os.path.join(cfg.work_dir, f"agent-{i}")
            cfg.hostname = cfg.hostname or f"localhost-{i}"
            agent = self._agent_cls(cfg, self._plugins, tls=self._agent_tls)
            await agent.start()
            self.agents.append(agent)
        if self._queue_settings is not None:
            from ..queue.daemon import QueueDaemon

            self._queue_settings.master = self.master.address
            self.queue = QueueDaemon(self._queue_settings, tls=self._queue_tls)
            await self.queue.start()
        log.info(
            "local cluster running",
            master=self.master.address,
            agents=len(self.agents),
            tls=self.master.tls is not None,
            queue=self.queue.socket_path if self.queue is not None else None,
        )

    def daemons(self) -> list:
        """The master, the agents and the queue, for callers watching them."""
        return [self.master, *self.agents, *([self.queue] if self.queue is not None else [])]

    async def stop(self) -> None:
        if self.queue is not None:
            await self.queue.stop()
        for agent in reversed(self.agents):
            await agent.stop()
        await self.master.stop()


def throwaway_tls(work_dir: str) -> tuple[TlsConfig, TlsConfig, str]:
    """New certificates for a local cluster in ``<work_dir>/tls``: the master's and the
    agents' ``[tls]``, and the path of ``<work_dir>/client.toml`` (the operator's
    ``[tls]``, for clients). Earlier ones are replaced: a new CA each start."""
    from ..certs import issue, tls_toml

    directory = Path(work_dir) / "tls"
    hosts = ["127.0.0.1", "localhost"]
    for name in ("ca.crt", "ca.key"):  # a new CA: certificates of an old run stop working
        (directory / name).unlink(missing_ok=True)
    made = {p: issue(directory, p, hosts, overwrite=True) for p in ("master", "agent", "operator")}
    ca = str(directory / "ca.crt")

    def table(principal: str) -> TlsConfig:
        return TlsConfig(enabled=True, ca=ca, cert=str(made[principal].cert), key=str(made[principal].key))

    client = Path(work_dir) / "client.toml"
    operator = table("operator")
    client.write_text(
        "# [tls] for clients of the local cluster (mezzo state, mezzo run, frameworks):\n"
        f"#   MEZZO_CONFIG={client} mezzo state\n" + tls_toml(operator)
    )
    return table("master"), table("agent"), str(client)
