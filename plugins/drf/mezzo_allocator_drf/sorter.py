"""DRFSorter: frameworks kept in weighted-dominant-share order, updated incrementally.

Usage::

    s = DRFSorter()
    s.add_total({"cpus": 8000, "mem": 16_000_000})     # thousandths, as Resources.scalars
    s.add("fw-1", weight=2.0)
    s.allocated("fw-1", {"cpus": 1000})
    for fid in s.order(): ...                        # lowest key first

Contract
--------
A client's *dominant share* is the largest ``allocated[r] / total[r]`` over the
scalar resources ``r`` with a non-zero cluster total (ranges such as ports are not
shares of anything a framework competes for, so they are ignored). Active clients
are ordered ascending by ``(tier, dominant share / weight, seq)``: ``tier`` lets a
caller put whole groups ahead of others (strict priority), ``seq`` is the order of
first registration and makes ties deterministic. Inactive clients keep their
allocation but are not in the order.

Cost
----
The order lives in two parallel lists (sort entries and framework ids) kept sorted
with :mod:`bisect`. A change of one client's allocation moves that client only:
O(log n) comparisons plus a memmove, instead of re-sorting every framework for
every offer. A change of the cluster total changes *every* share, so it only marks
the order stale; the next :meth:`order` re-sorts once. Thousands of agents
registering between two allocation cycles therefore cost one sort, not thousands.
While stale, allocation changes skip re-positioning: the coming re-sort redoes it.

The lists are sorted by the entries stored for each client, which is all that
``bisect`` needs to find and remove an entry, even while those entries are stale.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Mapping

Entry = tuple[int, float, int]
"""(tier, dominant share / weight, seq): the sort key of an active client."""


class _Client:
    __slots__ = ("alloc", "entry", "seq", "tier", "weight")

    def __init__(self, weight: float, tier: int, seq: int) -> None:
        self.weight = weight
        self.tier = tier
        self.seq = seq
        self.alloc: dict[str, int] = {}
        self.entry: Entry | None = None  # None while inactive


class DRFSorter:
    """Clients (framework ids) in weighted-DRF order. See the module docstring."""

    def __init__(self) -> None:
        self._clients: dict[str, _Client] = {}
        self._entries: list[Entry] = []
        self._order: list[str] = []
        self._total: dict[str, int] = {}
        self._seq = itertools.count()
        self._stale = False
        self.resorts = 0
        """Full re-sorts done so far (for tests and metrics)."""

    # -- membership -------------------------------------------------------

    def add(self, fid: str, *, weight: float = 1.0, tier: int = 0, active: bool = True) -> None:
        """Add a client, or change the weight and tier of a known one (keeping its
        allocation and registration order). ``weight`` must be positive."""
        c = self._clients.get(fid)
        if c is None:
            c = self._clients[fid] = _Client(weight, tier, next(self._seq))
        else:
            was_active = c.entry is not None
            if was_active:
                self._unlink(fid, c)
            c.weight, c.tier = weight, tier
            active = active or was_active
        if active:
            self._link(fid, c)

    def remove(self, fid: str) -> None:
        """Forget a client and its allocation; unknown ids are ignored."""
        c = self._clients.pop(fid, None)
        if c is not None and c.entry is not None:
            self._unlink(fid, c)

    def activate(self, fid: str) -> None:
        c = self._clients.get(fid)
        if c is not None and c.entry is None:
            self._link(fid, c)

    def deactivate(self, fid: str) -> None:
        c = self._clients.get(fid)
        if c is not None and c.entry is not None:
            self._unlink(fid, c)

    def __contains__(self, fid: object) -> bool:
        return fid in self._clients

    def __len__(self) -> int:
        return len(self._clients)

    def is_active(self, fid: str) -> bool:
        c = self._clients.get(fid)
        return c is not None and c.entry is not None

    # -- allocation -------------------------------------------------------

    def allocated(self, fid: str, scalars: Mapping[str, int]) -> None:
        """Add ``scalars`` (thousandths) to the client's allocation; unknown ids are ignored."""
        c = self._clients.get(fid)
        if c is None:
            return
        alloc = c.alloc
        for name, m in scalars.items():
            alloc[name] = alloc.get(name, 0) + m
        self._reposition(fid, c)

    def recovered(self, fid: str, scalars: Mapping[str, int]) -> None:
        """Subtract ``scalars`` from the allocation, flooring at zero; unknown ids are ignored."""
        c = self._clients.get(fid)
        if c is None:
            return
        alloc = c.alloc
        for name, m in scalars.items():
            left = alloc.get(name, 0) - m
            if left > 0:
                alloc[name] = left
            else:
                alloc.pop(name, None)
        self._reposition(fid, c)

    def allocation(self, fid: str) -> dict[str, int]:
        """A copy of the client's allocation in thousandths (empty when unknown)."""
        c = self._clients.get(fid)
        return dict(c.alloc) if c is not None else {}

    # -- cluster total ----------------------------------------------------

    def add_total(self, scalars: Mapping[str, int]) -> None:
        total = self._total
        for name, m in scalars.items():
            total[name] = total.get(name, 0) + m
        self._stale = True

    def remove_total(self, scalars: Mapping[str, int]) -> None:
        total = self._total
        for name, m in scalars.items():
            left = total.get(name, 0) - m
            if left > 0:
                total[name] = left
            else:
                total.pop(name, None)
        self._stale = True

    @property
    def total(self) -> Mapping[str, int]:
        """The cluster total in thousandths (read-only view)."""
        return self._total

    # -- reading ----------------------------------------------------------

    def dominant_share(self, fid: str) -> float:
        """Unweighted dominant share in [0, 1] (0.0 for unknown ids), always current."""
        c = self._clients.get(fid)
        return self._share(c.alloc) if c is not None else 0.0

    def order(self) -> list[str]:
        """Active clients, lowest key first, re-sorted first if the total changed.

        The returned list is the sorter's own and stays that same object for the
        sorter's life (re-sorts rewrite it in place): callers may hold it across
        :meth:`allocated` calls but must not mutate it, nor keep iterating it after
        such a call moved a client.
        """
        if self._stale:
            self._resort()
        return self._order

    def __iter__(self) -> Iterator[str]:
        return iter(self.order())

    # -- internals --------------------------------------------------------

    def _share(self, alloc: Mapping[str, int]) -> float:
        # Only the few resources the client holds: this runs once per offer in a cycle.
        total = self._total
        best = 0.0
        for name, m in alloc.items():
            t = total.get(name)
            if t:
                s = m / t
                best = max(best, s)
        return best

    def _entry(self, c: _Client) -> Entry:
        return (c.tier, self._share(c.alloc) / c.weight, c.seq)

    def _link(self, fid: str, c: _Client, entry: Entry | None = None) -> None:
        e = c.entry = entry if entry is not None else self._entry(c)
        i = bisect_right(self._entries, e)
        self._entries.insert(i, e)
        self._order.insert(i, fid)

    def _unlink(self, fid: str, c: _Client) -> None:
        # Entries are unique (seq), so bisect_left lands exactly on this client's.
        assert c.entry is not None, f"framework {fid} is not in the order"
        i = bisect_left(self._entries, c.entry)
        del self._entries[i]
        del self._order[i]
        c.entry = None

    def _reposition(self, fid: str, c: _Client) -> None:
        if c.entry is None or self._stale:
            return
        new = self._entry(c)
        if new == c.entry:
            return
        self._unlink(fid, c)
        self._link(fid, c, new)

    def _resort(self) -> None:
        pairs = []
        for fid, c in self._clients.items():
            if c.entry is not None:
                c.entry = self._entry(c)
                pairs.append((c.entry, fid))
        pairs.sort()  # entries are unique, so ids are never compared
        # In place: order() promises the list object never changes.
        self._entries[:] = [e for e, _ in pairs]
        self._order[:] = [fid for _, fid in pairs]
        self._stale = False
        self.resorts += 1
