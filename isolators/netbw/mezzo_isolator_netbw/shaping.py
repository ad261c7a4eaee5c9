"""Egress shaping of one link with an HTB qdisc, over pyroute2's AsyncIPRoute.

Usage::

    await shape(ipr, index, 10.0)    # at most 10 Mbit/s leave the link
    await shape(ipr, index, 25.0)    # changed live (HTB change-class, no packet lost)
    await shape(ipr, index, 0)       # unlimited: the qdisc is removed
    await rate_mbps(ipr, index)      # what the kernel enforces now (0.0: nothing)

One HTB root (``1:``, default class ``1:10``) with one class whose rate and ceil
are the limit: every packet goes through that class. HTB rather than TBF because
its class can be resized in place, while a TBF replace drops what was queued.

Shaping only works on what leaves a link. The isolator shapes the container's
egress on ``eth0`` inside its namespace and, optionally, its ingress on the
host side of the veth (what the host sends to the container leaves there).

tc quirks (pyroute2 0.9): the root qdisc is deleted with ``parent=0xFFFFFFFF``;
``replace`` cannot change a qdisc's kind, so a foreign root is deleted first;
HTB needs ``default`` or unclassified packets bypass the class.
"""

from __future__ import annotations

from pyroute2 import AsyncIPRoute
from pyroute2.netlink.exceptions import NetlinkError

ROOT = 0xFFFFFFFF
HTB_HANDLE = 0x10000  # 1:
CLASS_HANDLE = 0x10010  # 1:10
DEFAULT_CLASS = 0x10

BURST_SECONDS = 0.002
"""The class may send this much above its rate in one go (2 ms of its rate)..."""
MIN_BURST = 16 * 1024
"""... but at least this many bytes: the veth hands HTB segments of up to 64 KB
(GSO), and a bucket smaller than a segment makes the rate jerky."""

ENOENT = 2
EINVAL = 22


def rate_bytes(mbps: float) -> int:
    """Mbit/s (10^6 bit/s, as tc's ``mbit``) to bytes/s."""
    return max(1, round(mbps * 1_000_000 / 8))


def burst_bytes(rate: int) -> int:
    return max(MIN_BURST, round(rate * BURST_SECONDS))


async def _root(ipr: AsyncIPRoute, index: int) -> str | None:
    """The kind of the link's root qdisc, None when it has none of its own."""
    async for msg in await ipr.tc("dump", index=index):
        if msg.get("index") == index and msg["parent"] == ROOT:
            return msg.get("kind")
    return None


async def shape(ipr: AsyncIPRoute, index: int, mbps: float) -> None:
    """Limit what leaves link ``index`` to ``mbps`` Mbit/s; 0 or less removes the limit."""
    root = await _root(ipr, index)
    if mbps <= 0:
        if root not in (None, "noqueue"):
            await _delete_root(ipr, index)
        return
    rate = rate_bytes(mbps)
    params = {"rate": rate, "ceil": rate, "burst": burst_bytes(rate), "cburst": burst_bytes(rate)}
    if root == "htb":
        await ipr.tc("change-class", "htb", index=index, handle=CLASS_HANDLE, parent=HTB_HANDLE, **params)
        return
    if root not in (None, "noqueue"):
        await _delete_root(ipr, index)
    await ipr.tc("add", "htb", index=index, handle=HTB_HANDLE, default=DEFAULT_CLASS)
    await ipr.tc("add-class", "htb", index=index, handle=CLASS_HANDLE, parent=HTB_HANDLE, **params)


async def _delete_root(ipr: AsyncIPRoute, index: int) -> None:
    try:
        await ipr.tc("del", index=index, parent=ROOT)
    except NetlinkError as exc:
        if exc.code not in (ENOENT, EINVAL):  # already gone
            raise


async def rate_mbps(ipr: AsyncIPRoute, index: int) -> float:
    """The rate of the link's shaping class in Mbit/s; 0.0 when it is not shaped."""
    if await _root(ipr, index) != "htb":
        return 0.0
    async for msg in await ipr.tc("dump-class", index=index):
        if msg["handle"] == CLASS_HANDLE:
            options = msg.get("options") or msg.get_attr("TCA_OPTIONS")
            params = options.get("TCA_HTB_PARMS") if options is not None else None
            if params is not None:
                rate = options.get("TCA_HTB_RATE64") or params["rate"]
                return rate * 8 / 1_000_000
    return 0.0
