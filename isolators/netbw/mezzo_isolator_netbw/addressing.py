"""Container addresses: a private IPv4 subnet cut into one /30 per container.

Usage::

    subnet = Subnet("10.213.0.0/16")
    async with AllocationLock():                 # across every agent on the host
        used = subnet.blocks_in_use(host_addresses)
        block = subnet.block(subnet.first_free(used))
        ...                                     # put block.gateway on the host side before unlocking
    block.gateway, block.address, block.prefixlen   # 10.213.0.1, 10.213.0.2, 30

Block *i* is ``network + 4i``: ``.1`` is the host side of the veth (the
container's gateway), ``.2`` the container's ``eth0``.

There is no allocation table to lose: the kernel is the record. A block is in
use when any address of the host lies in it, which is true from the moment the
gateway address is added until the veth is deleted, so what an agent restarted
after a crash keeps, and what other agents on the host hold, is never handed out
twice. :class:`AllocationLock` makes "find a free block, claim it" atomic across
processes (an ``flock``, released by the kernel if the holder dies).
"""

from __future__ import annotations

import asyncio
import fcntl
import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Self

BLOCK_PREFIX = 30
BLOCK_SIZE = 4

LOCK_PATH = "/run/mezzo-netbw.lock"
LOCK_POLL = 0.005
"""Seconds between attempts to take the host-wide lock held by another process."""


class SubnetFull(Exception):
    """Every /30 of the subnet is in use."""


@dataclass(frozen=True)
class Block:
    index: int
    network: ipaddress.IPv4Network
    gateway: str
    """The host side of the veth."""
    address: str
    """The container's ``eth0``."""
    prefixlen: int = BLOCK_PREFIX


class Subnet:
    def __init__(self, cidr: str) -> None:
        """Raises ValueError (with the reason) unless ``cidr`` is an IPv4 network of
        at least one /30, written with its host bits zero."""
        network = ipaddress.ip_network(cidr, strict=True)
        if not isinstance(network, ipaddress.IPv4Network):
            raise ValueError(f"{cidr!r} is not an IPv4 network")  # noqa: TRY004 (a bad value)
        if network.prefixlen > BLOCK_PREFIX:
            raise ValueError(
                f"{cidr!r} is smaller than one /{BLOCK_PREFIX} (a container needs a /{BLOCK_PREFIX})"
            )
        self.network = network
        self.size = network.num_addresses // BLOCK_SIZE
        """How many containers fit."""

    def __str__(self) -> str:
        return str(self.network)

    def block(self, index: int) -> Block:
        if not 0 <= index < self.size:
            raise IndexError(index)
        base = int(self.network.network_address) + BLOCK_SIZE * index
        return Block(
            index=index,
            network=ipaddress.IPv4Network((base, BLOCK_PREFIX)),
            gateway=str(ipaddress.IPv4Address(base + 1)),
            address=str(ipaddress.IPv4Address(base + 2)),
        )

    def index_of(self, address: str) -> int | None:
        """The block holding ``address``, None when outside the subnet (or not IPv4)."""
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return None
        if not isinstance(ip, ipaddress.IPv4Address) or ip not in self.network:
            return None
        return (int(ip) - int(self.network.network_address)) // BLOCK_SIZE

    def blocks_in_use(self, addresses: Iterable[str]) -> set[int]:
        return {i for i in map(self.index_of, addresses) if i is not None}

    def first_free(self, used: set[int]) -> int:
        for index in range(self.size):
            if index not in used:
                return index
        raise SubnetFull(f"all {self.size} /{BLOCK_PREFIX} blocks of {self} are in use")

    def overlaps(self, address: str, prefixlen: int) -> bool:
        """Whether the network of ``address/prefixlen`` overlaps this subnet."""
        try:
            other = ipaddress.ip_interface(f"{address}/{prefixlen}").network
        except ValueError:
            return False
        return isinstance(other, ipaddress.IPv4Network) and other.overlaps(self.network)


class AllocationLock:
    """Serialises "choose a block, claim it" and clean-up sweeps: within this
    process through an asyncio lock, across processes (several agents on one host)
    through ``flock`` on :data:`LOCK_PATH`. Waiting never blocks the event loop."""

    def __init__(self, path: str = LOCK_PATH) -> None:
        self.path = path
        self._local = asyncio.Lock()
        self._fd: int | None = None

    async def __aenter__(self) -> Self:
        await self._local.acquire()
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        await asyncio.sleep(LOCK_POLL)
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
        except BaseException:
            self._local.release()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # releases the flock
        self._local.release()
