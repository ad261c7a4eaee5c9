"""The ``network/bandwidth`` isolator: a network namespace per container, its bandwidth limited.

Enable it on the agent, and offer the bandwidth as a resource::

    [agent]
    isolation = ["posix", "network/bandwidth"]
    resources = "cpus:4;mem:4096;net_mbps:1000"

    [agent.isolators."network/bandwidth"]
    subnet = "10.213.0.0/16"   # one /30 per container: .1 host side, .2 the container
    default_mbps = 0           # limit when a task asks for no net_mbps; 0 = unlimited
    ingress = false            # also limit what the container receives

For each container, ``prepare`` creates the namespace ``mezzo-net-<container id>``,
a veth pair (``mz<hash>h`` on the host, ``eth0`` inside) with a /30 of
``subnet``, a default route through the host side, and an HTB qdisc on ``eth0``
limiting the container's egress to its ``net_mbps`` (and, with ``ingress``, one
on the host side limiting what it receives). The container's first process joins
the namespace between fork and exec. ``update`` resizes the limit in place,
``usage`` reads the veth's byte counters, ``cleanup`` deletes the veth and the
namespace, and ``recover`` removes what a crashed agent left behind. The work is
done by :class:`~.networks.ContainerNetworks`.

Error handling: the constructor tries the whole mechanism once (namespace,
veth, qdiscs) and raises :class:`~mezzo.errors.ConfigError` saying what failed
and why, so an agent that cannot enforce the isolation refuses to start instead
of running containers unisolated. A failing ``prepare`` undoes its own steps and
names the step that failed; ``cleanup`` tolerates whatever is already gone.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import structlog

from mezzo.errors import ConfigError
from mezzo.hookspecs import Container, Isolator
from mezzo.resources import Resources

from .addressing import Subnet
from .endpoint import agent_endpoint_inside, check_agent_reachable
from .errors import NetworkSetupError

if TYPE_CHECKING:
    from .networks import ContainerNetworks

log = structlog.get_logger("mezzo.agent", component="network/bandwidth")

RESOURCE = "net_mbps"
"""The scalar resource a task asks its bandwidth with, in Mbit/s."""

DEFAULT_SUBNET = "10.213.0.0/16"
SETTINGS = ("subnet", "default_mbps", "ingress")


class NetBandwidthIsolator(Isolator):
    name = "network/bandwidth"
    description = "own network namespace per container (veth to the host); bandwidth limited with tc HTB"
    known_settings = SETTINGS

    def __init__(self, settings: Mapping[str, Any], *, key: str) -> None:
        super().__init__(settings, key=key)
        try:
            self.subnet = Subnet(_expect(settings, "subnet", str, DEFAULT_SUBNET, key))
        except ValueError as exc:
            raise ConfigError(f"{key}.subnet", str(exc)) from None
        default = settings.get("default_mbps", 0)
        if (
            isinstance(default, bool)
            or not isinstance(default, (int, float))
            or not math.isfinite(default)
            or default < 0
        ):
            raise ConfigError(
                f"{key}.default_mbps", f"expected Mbit/s (a number >= 0, 0 = unlimited), got {default!r}"
            )
        self.default_mbps = float(default)
        self.ingress = _expect(settings, "ingress", bool, False, key)
        # pyroute2 takes ~0.13 s to import: only agents that enable this isolator pay
        # for it, not every mezzo command that loads the installed plugins.
        from . import networks

        problem = networks.check_host(self.subnet)
        if problem is not None:
            raise ConfigError(key, f"the {self.name} isolator cannot run on this host: {problem}")
        self.networks: ContainerNetworks = networks.ContainerNetworks(self.subnet, ingress=self.ingress)

    def limit_mbps(self, resources: Resources) -> float:
        """The container's limit: its ``net_mbps``, else ``default_mbps``; 0 = unlimited."""
        return resources.get(RESOURCE) or self.default_mbps

    # -- the Isolator contract -------------------------------------------

    async def prepare(self, container: Container) -> None:
        endpoint = container.launch.env.get("MEZZO_AGENT_ENDPOINT")  # set for custom executors
        if endpoint:
            check_agent_reachable(endpoint)  # before making anything
        mbps = self.limit_mbps(container.resources)
        net = await self.networks.create(container.container_id, mbps)
        container.state[self.name] = {
            "netns": net.names.netns,
            "host_if": net.names.host_if,
            "address": net.address,
            "gateway": net.gateway,
            "fd": net.fd,
        }
        container.launch.preexec.append(self.networks.entering(net.fd))
        if endpoint:
            inside = agent_endpoint_inside(endpoint, net.gateway)
            container.launch.env["MEZZO_AGENT_ENDPOINT"] = inside
            if "MESOS_AGENT_ENDPOINT" in container.launch.env:  # an executor written for Mesos reads this one
                container.launch.env["MESOS_AGENT_ENDPOINT"] = inside
        log.debug(
            "container network ready",
            container=container.container_id,
            netns=net.names.netns,
            address=net.address,
            limit_mbps=mbps,
            ingress=self.ingress,
        )

    async def isolate(self, container: Container) -> None:
        self._close_fd(container)  # the child has joined the namespace and holds it now
        if container.pid and self.networks.in_namespace(container.container_id, container.pid) is False:
            raise NetworkSetupError(f"process {container.pid} is not in its network namespace")

    async def update(self, container: Container, resources: Resources) -> None:
        mbps = self.limit_mbps(resources)
        await self.networks.set_limit(container.container_id, mbps)
        log.info("container bandwidth changed", container=container.container_id, limit_mbps=mbps)

    async def usage(self, container: Container) -> dict[str, float]:
        """``net_tx_bytes``/``net_rx_bytes``: what the container sent and received;
        ``net_limit_mbps``: its limit (0 = unlimited). Empty once its veth is gone."""
        found = await self.networks.counters(container.container_id)
        if found is None:
            return {}
        sent, received = found
        return {
            "net_tx_bytes": float(sent),
            "net_rx_bytes": float(received),
            "net_limit_mbps": self.limit_mbps(container.resources),
        }

    async def cleanup(self, container: Container) -> None:
        self._close_fd(container)
        await self.networks.remove(container.container_id)

    async def recover(self, containers: list[Container]) -> None:
        """Keep the networks of ``containers`` (now this agent's); remove every other
        namespace and veth of ours, unless the agent process that made it is still
        alive (another agent on this host)."""
        await self.networks.sweep(keep=[c.container_id for c in containers])

    def _close_fd(self, container: Container) -> None:
        mine = container.state.get(self.name)
        if mine and mine.get("fd") is not None:
            fd, mine["fd"] = mine["fd"], None
            os.close(fd)


def _expect(settings: Mapping[str, Any], name: str, kind: type, default: Any, key: str) -> Any:
    value = settings.get(name, default)
    if not isinstance(value, kind):
        raise ConfigError(f"{key}.{name}", f"expected a {kind.__name__}, got {value!r}")
    return value
