"""Where the agent is, seen from inside a container: ``MEZZO_AGENT_ENDPOINT`` for custom executors.

Usage (in ``prepare``)::

    check_agent_reachable(endpoint)                      # raises NetworkSetupError with the fix
    env["MEZZO_AGENT_ENDPOINT"] = agent_endpoint_inside(endpoint, block.gateway)

Loopback inside a container is the container's own, so an agent endpoint on
loopback is reachable only through the gateway (a host address), and only when
the agent listens on every address (``agent.listen = "0.0.0.0:PORT"``). Any other
host address is reachable as it is, through the default route.
"""

from __future__ import annotations

import ipaddress

from .errors import NetworkSetupError


def check_agent_reachable(endpoint: str) -> None:
    """Raise unless a custom executor inside a container can reach the agent at
    ``endpoint``. Failing the launch now, with the fix in the message, beats an
    executor that times out registering."""
    port = _loopback_port(endpoint)
    if port is not None and not _listening_on_every_address(port):
        raise NetworkSetupError(
            f"a custom executor in its own network namespace cannot reach the agent at {endpoint}: "
            f'the agent listens on loopback only; set agent.listen to "0.0.0.0:{port}"'
        )


def agent_endpoint_inside(endpoint: str, gateway: str) -> str:
    """The endpoint as a container must dial it: one on loopback becomes the
    container's gateway with the same port; any other stays as it is."""
    port = _loopback_port(endpoint)
    return endpoint if port is None else f"{gateway}:{port}"


def _loopback_port(endpoint: str) -> int | None:
    """The port of a ``host:port`` endpoint on loopback, None for any other host."""
    host, sep, port = endpoint.rpartition(":")
    try:
        loopback = ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        loopback = host == "localhost"
    return int(port) if sep and loopback and port.isdigit() else None


def _listening_on_every_address(port: int) -> bool:
    """Whether a TCP socket of this namespace listens on ``port`` at 0.0.0.0 or ::."""
    for table, wildcard in (("/proc/net/tcp", "00000000"), ("/proc/net/tcp6", "0" * 32)):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    address, _, hexport = fields[1].partition(":")
                    if fields[3] == "0A" and address == wildcard and int(hexport, 16) == port:
                        return True
        except (OSError, StopIteration, IndexError, ValueError):
            continue
    return False
