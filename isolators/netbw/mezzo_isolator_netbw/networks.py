"""Container networks on this host: made, resized, measured, removed and swept.

Usage::

    problem = check_host(subnet)                     # None, or why this host cannot do it
    networks = ContainerNetworks(subnet, ingress=False)
    net = await networks.create(container_id, 10)    # namespace, veth, addresses, 10 Mbit/s
    launch.preexec.append(networks.entering(net.fd)) # the child joins the namespace
    await networks.set_limit(container_id, 20)       # resized in place
    await networks.counters(container_id)            # (sent, received) by the container
    await networks.remove(container_id)              # idempotent
    await networks.sweep(keep=[...])                 # after a crash: the rest goes

The pieces are in :mod:`.netns` (namespaces), :mod:`.links` (the veth pair),
:mod:`.shaping` (HTB) and :mod:`.addressing` (one /30 each); this module puts
them together in the right order and undoes them in the reverse one.

Ownership: every host link is labelled with the agent process that made it
(``<pid>:<start time>``), and so is every namespace, by a file in
:data:`OWNERS_DIR`. :meth:`ContainerNetworks.sweep` removes everything of ours
that is not kept, except what belongs to another agent process that is still
alive, so that several agents may share a host. The files are needed because
namespace names are host-wide while links are not: an agent in a network
namespace of its own (a simulated host of ``mezzo.testing.netsim``, a container)
sees only its own veths, and would take another agent's namespaces for leftovers.

Error handling: :meth:`~ContainerNetworks.create` raises
:class:`~.errors.NetworkSetupError` naming the step that failed and the kernel's
reason, after undoing the steps already done. :meth:`~ContainerNetworks.remove`
tolerates whatever is already gone.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import structlog
from pyroute2 import AsyncIPRoute
from pyroute2.netlink.exceptions import NetlinkError

from . import links, netns, shaping
from .addressing import AllocationLock, Block, Subnet, SubnetFull
from .errors import NetworkSetupError
from .links import Alias, Names

log = structlog.get_logger("mezzo.agent", component="network/bandwidth")

OWNERS_DIR = "/run/mezzo-netbw/owners"
"""A file per container namespace, named like it, holding its owner (see the module docstring)."""


@dataclass
class ContainerNetwork:
    names: Names
    block: Block
    fd: int
    """An open descriptor on the namespace, for :meth:`ContainerNetworks.entering`."""

    @property
    def address(self) -> str:
        return self.block.address

    @property
    def gateway(self) -> str:
        return self.block.gateway


class ContainerNetworks:
    """The networks of one agent's containers. See the module docstring."""

    def __init__(self, subnet: Subnet, *, ingress: bool) -> None:
        self.subnet = subnet
        self.ingress = ingress
        self.owner = owner_id()
        self._lock = AllocationLock()

    async def create(self, container_id: str, mbps: float) -> ContainerNetwork:
        """Make the container's namespace and veth, address both ends, route, shape
        its egress (and ingress if asked) to ``mbps`` (0: unlimited)."""
        names = Names.of(container_id)
        alias = Alias(container=container_id, netns=names.netns, owner=self.owner)
        try:
            # Under the host-wide lock from choosing the block until its gateway
            # address is on the host side: from then on the kernel shows it taken.
            async with self._lock, AsyncIPRoute() as host:
                used = self.subnet.blocks_in_use(a for _i, a, _p in await links.host_addresses(host))
                try:
                    block = self.subnet.block(self.subnet.first_free(used))
                except SubnetFull as exc:
                    raise NetworkSetupError(f"no address left for the container: {exc}") from None
                await _step(f"create network namespace {names.netns}", netns.create(names.netns))
                await _step(f"record the owner of {names.netns}", _record_owner(names.netns, self.owner))
                host_index = await _step(
                    f"create veth {names.host_if} (gateway {block.gateway})",
                    links.create_pair(host, names, block, alias),
                )
                if self.ingress:
                    await _step(
                        f"limit ingress on {names.host_if} to {mbps:g} Mbit/s",
                        shaping.shape(host, host_index, mbps),
                    )
            async with links.inside(names.netns) as inside:
                eth = await _step(
                    f"configure eth0 ({block.address}) in {names.netns}",
                    links.configure_inside(inside, block),
                )
                await _step(f"limit egress of eth0 to {mbps:g} Mbit/s", shaping.shape(inside, eth, mbps))
            fd = netns.open_fd(names.netns)
        except BaseException:
            await self.remove(container_id)
            raise
        return ContainerNetwork(names, block, fd)

    @staticmethod
    def entering(fd: int) -> Callable[[], None]:
        """The ``preexec`` function joining the namespace ``fd`` (see :func:`.netns.entering`)."""
        return netns.entering(fd)

    @staticmethod
    def in_namespace(container_id: str, pid: int) -> bool | None:
        """Whether process ``pid`` is in the container's namespace; None when either
        cannot be read (the process ended, the namespace is gone)."""
        want = netns.inode(Names.of(container_id).netns)
        have = netns.inode_of_process(pid)
        return None if want is None or have is None else want == have

    async def set_limit(self, container_id: str, mbps: float) -> None:
        """Resize the container's limit (0: unlimited) without disturbing its traffic."""
        names = Names.of(container_id)
        async with links.inside(names.netns) as inside:
            eth = await links.index_of(inside, links.CONTAINER_IF)
            if eth is not None:
                await shaping.shape(inside, eth, mbps)
        if self.ingress:
            async with AsyncIPRoute() as host:
                index = await links.index_of(host, names.host_if)
                if index is not None:
                    await shaping.shape(host, index, mbps)

    async def counters(self, container_id: str) -> tuple[int, int] | None:
        """(bytes sent, bytes received) by the container, None when its veth is gone.
        The host side's counters, mirrored: what the host side received, the container sent."""
        async with AsyncIPRoute() as host:
            found = await links.counters(host, Names.of(container_id).host_if)
        if found is None:
            return None
        received_by_host, sent_by_host = found
        return received_by_host, sent_by_host

    async def remove(self, container_id: str) -> None:
        """Delete the veth (both ends, with their qdiscs), then the namespace.
        Idempotent. The veth goes first: removing the namespace frees its end only
        once the kernel gets to it, and the host side would linger until then."""
        names = Names.of(container_id)
        async with AsyncIPRoute() as host:
            await links.delete_link(host, names.host_if)
        await netns.remove(names.netns)
        await _forget_owner(names.netns)

    async def sweep(self, keep: Iterable[str]) -> None:
        """Remove every namespace and veth of ours except those of the containers in
        ``keep`` (which this agent now owns) and those of other live agents."""
        kept = {Names.of(cid) for cid in keep}
        kept_netns = {n.netns for n in kept}
        kept_links = {n.host_if for n in kept}
        async with self._lock, AsyncIPRoute() as host:
            elsewhere: set[str] = set()
            for link in await links.host_links(host):
                alias = link.alias
                if link.ifname in kept_links:
                    if alias is not None and alias.owner != self.owner:
                        await links.set_alias(
                            host, link.ifname, Alias(alias.container, alias.netns, self.owner)
                        )
                    continue
                if alias is not None and alias.owner != self.owner and owner_alive(alias.owner):
                    elsewhere.add(alias.netns)
                    continue
                await links.delete_link(host, link.ifname)
                log.info(
                    "removed a leftover veth", link=link.ifname, container=alias.container if alias else None
                )
            for name in netns.names(links.NETNS_PREFIX):
                owner = _owner_of_netns(name)
                if name in kept_netns:
                    if owner != self.owner:
                        await _record_owner(name, self.owner)
                    continue
                if name in elsewhere or (owner not in (None, self.owner) and owner_alive(owner)):
                    continue  # another live agent's (its veth may be in another namespace)
                await netns.remove(name)
                await _forget_owner(name)
                log.info("removed a leftover network namespace", netns=name)
            for name in _recorded_owners():
                if not netns.exists(name) and not owner_alive(_owner_of_netns(name) or ""):
                    await _forget_owner(name)


async def _step(what: str, awaitable: Any) -> Any:
    try:
        return await awaitable
    except (OSError, NetlinkError) as exc:
        raise NetworkSetupError(f"cannot {what}: {_reason(exc)}") from exc


def _reason(exc: BaseException) -> str:
    if isinstance(exc, NetlinkError):
        return f"{os.strerror(exc.code)} (netlink error {exc.code})"
    return str(exc)


# -- who owns a link ------------------------------------------------------------


def owner_id() -> str:
    """This process as an owner."""
    return owner_of(os.getpid())


def owner_of(pid: int) -> str:
    """Process ``pid`` as an owner: ``<pid>:<start time>`` (a later process reusing
    the pid has another start time)."""
    return f"{pid}:{_start_time(pid)}"


async def _record_owner(netns_name: str, owner: str) -> None:
    def write() -> None:
        os.makedirs(OWNERS_DIR, exist_ok=True)
        tmp = os.path.join(OWNERS_DIR, f".{netns_name}.{os.getpid()}")
        with open(tmp, "w") as f:
            f.write(owner)
        os.replace(tmp, os.path.join(OWNERS_DIR, netns_name))  # never half-written

    await asyncio.to_thread(write)


async def _forget_owner(netns_name: str) -> None:
    try:
        await asyncio.to_thread(os.unlink, os.path.join(OWNERS_DIR, netns_name))
    except FileNotFoundError:
        pass


def _owner_of_netns(netns_name: str) -> str | None:
    try:
        with open(os.path.join(OWNERS_DIR, netns_name)) as f:
            return f.read(64).strip() or None
    except OSError:
        return None


def _recorded_owners() -> list[str]:
    try:
        return [n for n in os.listdir(OWNERS_DIR) if n.startswith(links.NETNS_PREFIX)]
    except FileNotFoundError:
        return []


def owner_alive(owner: str) -> bool:
    pid, _, start = owner.partition(":")
    try:
        return str(_start_time(int(pid))) == start
    except ValueError:
        return False


def _start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rpartition(b")")[2].split()[19])
    except (OSError, ValueError, IndexError):
        return None


# -- can this host do it? -----------------------------------------------------------

CAP_NET_ADMIN = 12
CAP_SYS_ADMIN = 21


def check_host(subnet: Subnet) -> str | None:
    """Try the whole mechanism once: None if it works, else why not. Runs in a
    thread of its own, so it works whether or not the caller is in an event loop."""
    result: list[str | None] = [None]

    def run() -> None:
        try:
            result[0] = asyncio.run(probe(subnet))
        except Exception as exc:  # noqa: BLE001 (an unexpected failure is still a reason not to run)
            result[0] = f"the self-test failed: {exc!r}"

    thread = threading.Thread(target=run, name="mezzo-netbw-probe")
    thread.start()
    thread.join()
    return result[0]


async def probe(subnet: Subnet) -> str | None:
    """Check privileges, kernel support and the subnet, then create a namespace, a
    veth pair and HTB qdiscs on both ends, and remove them. None when all works."""
    if not os.path.exists("/proc/self/ns/net"):
        return "the kernel has no network namespaces (/proc/self/ns/net is missing)"
    missing = [
        name
        for bit, name in ((CAP_SYS_ADMIN, "CAP_SYS_ADMIN"), (CAP_NET_ADMIN, "CAP_NET_ADMIN"))
        if not _has_capability(bit)
    ]
    if missing:
        return (
            f"it needs {' and '.join(missing)} to create network namespaces and links "
            f"(run the agent as root); the agent runs as uid {os.geteuid()} without them"
        )
    async with AsyncIPRoute() as host:
        by_index = {link.get("index"): link.get("ifname") async for link in await host.link("dump")}
        for index, address, prefixlen in await links.host_addresses(host):
            ifname = by_index.get(index, "?")
            if subnet.overlaps(address, prefixlen) and not links.HOST_LINK.fullmatch(ifname):
                return (
                    f"subnet {subnet} overlaps {address}/{prefixlen} on {ifname}: choose a free private "
                    f'range for agent.isolators."network/bandwidth".subnet'
                )
    names = Names.of(f"probe-{os.getpid()}-{threading.get_native_id()}")
    async with AllocationLock():  # a sweep by another agent must not catch it half-made
        try:
            try:
                await netns.create(names.netns)
            except OSError as exc:
                return f"cannot create a network namespace in {netns.NETNS_DIR}: {exc}"
            async with AsyncIPRoute() as host:
                fd = netns.open_fd(names.netns)
                try:
                    await host.link(
                        "add",
                        ifname=names.host_if,
                        kind="veth",
                        peer={"ifname": links.CONTAINER_IF, "net_ns_fd": fd},
                    )
                except NetlinkError as exc:
                    return f"cannot create a veth pair ({_reason(exc)}; is the veth module available?)"
                finally:
                    os.close(fd)
                await links.set_alias(host, names.host_if, Alias("probe", names.netns, owner_id()))
                host_index = await links.index_of(host, names.host_if)
                if host_index is None:
                    return f"the veth {names.host_if} vanished right after it was made"
                try:
                    await shaping.shape(host, host_index, 10)
                    await shaping.shape(host, host_index, 20)
                except NetlinkError as exc:
                    return f"cannot add an HTB qdisc ({_reason(exc)}; is the sch_htb module available?)"
            async with links.inside(names.netns) as inside:
                eth = await links.index_of(inside, links.CONTAINER_IF)
                if eth is None:
                    return f"the veth's end {links.CONTAINER_IF} vanished from {names.netns}"
                await shaping.shape(inside, eth, 10)
        finally:
            async with AsyncIPRoute() as host:
                await links.delete_link(host, names.host_if)
            await netns.remove(names.netns)
    return None


def _has_capability(bit: int) -> bool:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> bit & 1)
    except (OSError, ValueError, IndexError):
        pass
    return os.geteuid() == 0
