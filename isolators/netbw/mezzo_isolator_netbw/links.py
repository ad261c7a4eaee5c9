"""The veth pair joining a container's namespace to the host, over pyroute2's AsyncIPRoute.

Usage::

    names = Names.of(container_id)        # netns "mezzo-net-<id>", host link "mz<hash>h"
    async with AsyncIPRoute() as host:
        index = await create_pair(host, names, block, alias=Alias(...))
    async with inside(names.netns) as ns:  # rtnetlink inside the container's namespace
        await configure_inside(ns, block)
    ...
    await delete_link(host, names.host_if)  # removes both ends (and their qdiscs)

Layout of one container::

    host namespace                          container namespace (mezzo-net-<id>)
    mz<hash>h  10.213.0.1/30  <-- veth -->  eth0  10.213.0.2/30, default via 10.213.0.1
    (forwarding on)                         lo up

The host side forwards (per interface, ``net/ipv4/conf/<link>/forwarding``; the
host-wide ``ip_forward`` is left alone), which is what lets containers reach
each other through the host. Reaching the host itself needs nothing more: every
host address is local to the host side.

Every host link carries an alias (``ip link`` shows it) naming the container,
its namespace and the agent process that owns it; recovery after a crash reads
it to tell leftovers from another live agent's containers.

Error handling: pyroute2 raises ``NetlinkError`` (``.code`` is the errno);
:func:`delete_link` turns "no such device" into False, everything else
propagates to the isolator, which names the step in its error.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

from pyroute2 import AsyncIPRoute
from pyroute2.netlink.exceptions import NetlinkError

from . import netns
from .addressing import Block

NETNS_PREFIX = "mezzo-net-"
HOST_LINK = re.compile(r"mz[0-9a-f]{12}h")
"""Host-side names this isolator makes (15 characters: the kernel's limit)."""
CONTAINER_IF = "eth0"
_SAFE_ID = re.compile(r"[A-Za-z0-9_.-]{1,100}")

ENODEV = 19
ESRCH = 3


@dataclass(frozen=True)
class Names:
    """What a container's network is called, derived from its id alone, so that a
    restarted agent (whose containers come back with empty ``state``) finds it."""

    netns: str
    host_if: str

    @classmethod
    def of(cls, container_id: str) -> Names:
        digest = hashlib.sha1(container_id.encode()).hexdigest()
        tag = container_id if _SAFE_ID.fullmatch(container_id) else digest[:16]
        return cls(netns=f"{NETNS_PREFIX}{tag}", host_if=f"mz{digest[:12]}h")


@dataclass(frozen=True)
class Alias:
    """The ownership note on a host link: ``mezzo network/bandwidth container=...
    netns=... owner=<pid>:<start time>``."""

    container: str
    netns: str
    owner: str

    MARK = "mezzo network/bandwidth"

    def __str__(self) -> str:
        return f"{self.MARK} container={self.container} netns={self.netns} owner={self.owner}"

    @classmethod
    def parse(cls, text: str | None) -> Alias | None:
        if not text or not text.startswith(cls.MARK + " "):
            return None
        fields = dict(part.partition("=")[::2] for part in text[len(cls.MARK) + 1 :].split())
        try:
            return cls(container=fields["container"], netns=fields["netns"], owner=fields["owner"])
        except KeyError:
            return None


@dataclass(frozen=True)
class HostLink:
    ifname: str
    index: int
    alias: Alias | None


@contextlib.asynccontextmanager
async def inside(name: str) -> AsyncIterator[AsyncIPRoute]:
    """An AsyncIPRoute whose socket lives in namespace ``name``."""
    sock = await netns.route_socket(name)
    try:
        async with AsyncIPRoute(use_socket=sock) as ipr:
            yield ipr
    finally:
        sock.close()  # AsyncIPRoute leaves a socket it was given open


async def host_addresses(ipr: AsyncIPRoute) -> list[tuple[int, str, int]]:
    """Every IPv4 address of the namespace as (link index, address, prefix length)."""
    out = []
    async for msg in await ipr.addr("dump"):
        if msg.get("family") == 2:  # AF_INET
            out.append((msg.get("index"), msg.get("address"), msg.get("prefixlen")))
    return out


async def create_pair(ipr: AsyncIPRoute, names: Names, block: Block, alias: Alias) -> int:
    """Create the veth pair with ``eth0`` in the container's (existing) namespace,
    label and address the host side, bring it up and let it forward. Returns the
    host side's index."""
    fd = netns.open_fd(names.netns)
    try:
        await ipr.link(
            "add", ifname=names.host_if, kind="veth", peer={"ifname": CONTAINER_IF, "net_ns_fd": fd}
        )
    finally:
        os.close(fd)
    (link,) = await ipr.link("get", ifname=names.host_if)
    index = link["index"]
    await ipr.link("set", index=index, ifalias=str(alias))
    await ipr.addr("add", index=index, address=block.gateway, prefixlen=block.prefixlen)
    set_forwarding(names.host_if)
    await ipr.link("set", index=index, state="up")
    return index


async def configure_inside(ipr: AsyncIPRoute, block: Block) -> int:
    """In the container's namespace: loopback up, ``eth0`` addressed and up, the
    default route through the host side. Returns ``eth0``'s index."""
    (lo,) = await ipr.link_lookup(ifname="lo")
    await ipr.link("set", index=lo, state="up")
    (eth,) = await ipr.link_lookup(ifname=CONTAINER_IF)
    await ipr.addr("add", index=eth, address=block.address, prefixlen=block.prefixlen)
    await ipr.link("set", index=eth, state="up")
    await ipr.route("add", dst="0.0.0.0/0", gateway=block.gateway)
    return eth


def set_forwarding(ifname: str) -> None:
    with open(f"/proc/sys/net/ipv4/conf/{ifname}/forwarding", "w") as f:
        f.write("1")


async def index_of(ipr: AsyncIPRoute, ifname: str) -> int | None:
    found = await ipr.link_lookup(ifname=ifname)
    return found[0] if found else None


async def delete_link(ipr: AsyncIPRoute, ifname: str) -> bool:
    """Delete a link (for a veth: both ends, with their qdiscs). False if it was gone."""
    try:
        await ipr.link("del", ifname=ifname)
    except NetlinkError as exc:
        if exc.code == ENODEV:
            return False
        raise
    return True


async def set_alias(ipr: AsyncIPRoute, ifname: str, alias: Alias) -> None:
    await ipr.link("set", ifname=ifname, ifalias=str(alias))


async def host_links(ipr: AsyncIPRoute) -> list[HostLink]:
    """The host-side links this isolator makes (by name), with their ownership notes."""
    out = []
    async for msg in await ipr.link("dump"):
        name = msg.get("ifname")
        if name and HOST_LINK.fullmatch(name):
            out.append(HostLink(ifname=name, index=msg["index"], alias=Alias.parse(msg.get("ifalias"))))
    return out


async def counters(ipr: AsyncIPRoute, ifname: str) -> tuple[int, int] | None:
    """(bytes received, bytes sent) by the host side, None when the link is gone."""
    try:
        (link,) = await ipr.link("get", ifname=ifname)
    except NetlinkError as exc:
        if exc.code == ENODEV:
            return None
        raise
    stats = link.get("stats64") or link.get("stats")
    if stats is None:
        return None
    return int(stats.get("rx_bytes")), int(stats.get("tx_bytes"))
