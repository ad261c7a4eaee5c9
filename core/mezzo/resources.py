"""Resources: named scalars (cpus, mem, disk, gpus, ...) and ranges (ports), exactly.

Scalars are held as integer thousandths, like Apache Mesos' fixed-point values, so
``0.1 + 0.2`` cpus is exactly ``0.3`` and a thousand launches and recoveries never
drift. The class doubles as the wire struct: it subclasses the generated
``wire.ttypes.Resources`` and keeps its two fields (``scalars``: name to
thousandths, ``ranges``: name to sorted disjoint ``Range`` lists), so it encodes
directly; :meth:`Resources.of` lifts a decoded wire struct.

Usage::

    r = Resources(cpus=2, mem=1024)                  # user-facing units
    r = Resources.parse("cpus:4;mem:4096;ports:[31000-32000]")
    r.fits_in(offer.resources); free = total - used; r.get("cpus") -> 2.0

Resources are treated as immutable: operators return new objects.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping

from .wire.ttypes import Range
from .wire.ttypes import Resources as _WireResources

SCALE = 1000
"""Scalars are stored in thousandths of the user unit."""

MAX_WIRE = 2**63 - 1
"""Largest amount (in thousandths) or range bound the wire's i64 carries."""


class InvalidResources(ValueError):
    """Resources that are negative, not finite, or do not parse. The message names the resource."""


AGENT_SCALAR_LIMIT = 10**9
"""The most of one scalar resource an agent may have (a billion cpus, or MB of memory
or disk: a petabyte). Far above any machine, and low enough that the cluster's totals,
and any fraction of them the allocators compute, stay exact and within the wire's
64-bit integers for up to nine million agents."""

AGENT_RANGE_LIMIT = 4_096
"""The most ranges of one name (such as ``ports``) an agent may have, and so a task
may ask for. A machine's ports are one or a few ranges (Apache Mesos' default is
``[31000-32000]``). The bound keeps the range arithmetic of one message within a few
milliseconds of the master's loop: lifting 65,536 ranges from the wire alone took
130 ms."""


def wire_ranges_problem(wire: _WireResources | None, what: str) -> str | None:
    """Why a peer's resources have more ranges of a name than any agent may have, or
    None. O(number of names): checked before the ranges are read one by one, so a
    message with millions of them is refused at once."""
    for name, spans in ((wire.ranges or {}) if wire is not None else {}).items():
        if spans is not None and len(spans) > AGENT_RANGE_LIMIT:
            return f"{what}: {name}: {len(spans):,} ranges are more than an agent may have (at most {AGENT_RANGE_LIMIT:,})"
    return None


def agent_resources_problem(total: Resources) -> str | None:
    """Why ``total`` is not a sane resource set for one agent, or None. O(its size)."""
    for name, milli in total.scalars.items():
        if milli > AGENT_SCALAR_LIMIT * SCALE:
            return (
                f"{name} {milli / SCALE:.6g} is more than an agent may have (at most {AGENT_SCALAR_LIMIT:,})"
            )
    for name, ranges in total.ranges.items():
        if len(ranges) > AGENT_RANGE_LIMIT:
            return f"{name}: {len(ranges):,} ranges are more than an agent may have (at most {AGENT_RANGE_LIMIT:,})"
    return None


def _to_milli(name: str, value: float) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidResources(f"resource {name!r}: {value!r} is not a number")
    if not math.isfinite(value):
        raise InvalidResources(f"resource {name!r}: {value!r} is not finite")
    if value < 0:
        raise InvalidResources(f"resource {name!r}: {value!r} is negative")
    if value * SCALE > MAX_WIRE:
        raise InvalidResources(f"resource {name!r}: {value!r} is too large (at most {MAX_WIRE // SCALE})")
    return round(value * SCALE)


def _merge(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for b, e in sorted(ranges):
        if out and b <= out[-1][1] + 1:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((b, e))
    return out


def _subtract(have: list[tuple[int, int]], take: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``have`` without ``take``; both sorted and disjoint (as every ``Resources`` keeps
    its ranges). One sweep over both: O(len(have) + len(take) + len(result)).

    A peer may send thousands of one-port ranges (a launch asking for all of an
    agent's ports), so nothing here may be quadratic: it ran on the master's loop
    and 8,000 ranges took 7 s when it was."""
    out: list[tuple[int, int]] = []
    j, n = 0, len(take)
    for b, e in have:
        while j < n and take[j][1] < b:
            j += 1  # wholly before this range, and so before every later one
        cur = b
        k = j
        while k < n and take[k][0] <= e:
            tb, te = take[k]
            if tb > cur:
                out.append((cur, tb - 1))
            if te >= e:
                cur = e + 1
                break  # it may reach into the next range of ``have`` too: keep it (k stays)
            cur = te + 1
            k += 1
        if cur <= e:
            out.append((cur, e))
        j = k
    return out


def _contains(have: list[tuple[int, int]], want: list[tuple[int, int]]) -> bool:
    """Whether every range of ``want`` lies within ``have``; both sorted and disjoint,
    ``have`` merged (adjacent ranges joined), so each wanted range must lie within
    one range of ``have``. One sweep: O(len(have) + len(want))."""
    i, n = 0, len(have)
    for b, e in want:
        while i < n and have[i][1] < b:
            i += 1
        if i == n or have[i][0] > b or have[i][1] < e:
            return False
    return True


def _intersect(mine: list[tuple[int, int]], theirs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ranges both hold; both sorted and disjoint. One sweep: O(len(mine) + len(theirs))."""
    out: list[tuple[int, int]] = []
    i = j = 0
    while i < len(mine) and j < len(theirs):
        b = max(mine[i][0], theirs[j][0])
        e = min(mine[i][1], theirs[j][1])
        if b <= e:
            out.append((b, e))
        if mine[i][1] < theirs[j][1]:
            i += 1
        else:
            j += 1
    return out


class Resources(_WireResources):
    """A bundle of resources with exact arithmetic. See the module docstring."""

    __slots__ = ()

    def __init__(
        self,
        scalars: Mapping[str, float] | None = None,
        ranges: Mapping[str, Iterable[tuple[int, int]]] | None = None,
        **named: float,
    ) -> None:
        if not scalars and not ranges and not named:
            # Nothing: the master makes empty bundles all the time (plans, pools).
            super().__init__(scalars={}, ranges={})
            return
        milli: dict[str, int] = {}
        for name, value in {**(scalars or {}), **named}.items():
            m = _to_milli(name, value)
            if m:
                milli[name] = m
        rs: dict[str, list[Range]] = {}
        for name, spans in (ranges or {}).items():
            pairs = []
            for b, e in spans:
                if b < 0 or e < b or e > MAX_WIRE:
                    raise InvalidResources(f"resource {name!r}: bad range [{b}-{e}]")
                pairs.append((int(b), int(e)))
            merged = _merge(pairs)
            if merged:
                rs[name] = [Range(b, e) for b, e in merged]
        super().__init__(scalars=milli, ranges=rs)

    # -- construction -----------------------------------------------------

    @classmethod
    def _raw(cls, milli: dict[str, int], ranges: dict[str, list[Range]]) -> Resources:
        obj = cls.__new__(cls)
        obj.scalars = milli
        obj.ranges = ranges
        return obj

    @classmethod
    def of(cls, wire: _WireResources | None) -> Resources:
        """Validate a decoded wire struct (from any peer) and lift it.

        Raises :class:`InvalidResources` for negative amounts or inverted ranges.
        """
        if wire is None:
            return cls._raw({}, {})
        if isinstance(wire, Resources):
            return wire
        milli: dict[str, int] = {}
        for name, m in (wire.scalars or {}).items():
            if not isinstance(m, int) or m < 0:
                raise InvalidResources(f"resource {name!r}: {m!r} thousandths is negative")
            if m:
                milli[name] = m
        pairs: dict[str, list[tuple[int, int]]] = {}
        for name, spans in (wire.ranges or {}).items():
            ps = []
            for r in spans or ():
                if r is None or r.begin is None or r.end is None or r.begin < 0 or r.end < r.begin:
                    raise InvalidResources(f"resource {name!r}: bad range {r!r}")
                ps.append((r.begin, r.end))
            pairs[name] = ps
        return cls(ranges=pairs)._with_scalars(milli)

    def _with_scalars(self, milli: dict[str, int]) -> Resources:
        self.scalars = milli
        return self

    @classmethod
    def parse(cls, text: str) -> Resources:
        """Parse Mesos' syntax: ``"cpus:4;mem:4096;ports:[31000-32000,33000-33010]"``."""
        scalars: dict[str, float] = {}
        ranges: dict[str, list[tuple[int, int]]] = {}
        for part in filter(None, (p.strip() for p in text.split(";"))):
            name, sep, value = part.partition(":")
            name, value = name.strip(), value.strip()
            if not sep or not name or not value:
                raise InvalidResources(f"cannot parse {part!r}: expected NAME:VALUE")
            if value.startswith("["):
                if not value.endswith("]"):
                    raise InvalidResources(f"resource {name!r}: unterminated range {value!r}")
                spans = []
                for span in filter(None, (s.strip() for s in value[1:-1].split(","))):
                    b, dash, e = span.partition("-")
                    try:
                        spans.append((int(b), int(e if dash else b)))
                    except ValueError:
                        raise InvalidResources(f"resource {name!r}: bad range {span!r}") from None
                ranges[name] = spans
            else:
                try:
                    scalars[name] = float(value)
                except ValueError:
                    raise InvalidResources(f"resource {name!r}: {value!r} is not a number") from None
        return cls(scalars, ranges)

    # -- reading ----------------------------------------------------------

    def get(self, name: str) -> float:
        """The scalar ``name`` in user units (0.0 when absent)."""
        return self.scalars.get(name, 0) / SCALE

    def milli(self, name: str) -> int:
        return self.scalars.get(name, 0)

    def range_pairs(self, name: str) -> list[tuple[int, int]]:
        return [(r.begin, r.end) for r in self.ranges.get(name, ())]

    def names(self) -> Iterator[str]:
        yield from self.scalars
        yield from self.ranges

    def is_empty(self) -> bool:
        return not self.scalars and not self.ranges

    def __bool__(self) -> bool:
        return not self.is_empty()

    def fits_in(self, other: Resources) -> bool:
        """True when every amount here is available in ``other``."""
        if other is self:
            return True
        osc = other.scalars
        for name, m in self.scalars.items():
            if osc.get(name, 0) < m:
                return False
        for name, rs in self.ranges.items():
            if not _contains(other.range_pairs(name), [(r.begin, r.end) for r in rs]):
                return False
        return True

    def shortfall(self, other: Resources) -> list[str]:
        """Human-readable lines naming what here exceeds ``other`` (empty when it fits)."""
        out = []
        for name, m in sorted(self.scalars.items()):
            have = other.scalars.get(name, 0)
            if have < m:
                out.append(f"{name} {m / SCALE:g} > {have / SCALE:g} available")
        for name, rs in sorted(self.ranges.items()):
            want = [(r.begin, r.end) for r in rs]
            if not _contains(other.range_pairs(name), want):
                out.append(f"{name} {_fmt_ranges(want)} not within {_fmt_ranges(other.range_pairs(name))}")
        return out

    # -- arithmetic -------------------------------------------------------

    def __add__(self, other: Resources) -> Resources:
        # Resources are never mutated after construction, so an empty side can
        # hand back the other one: the master adds to empty pools all the time.
        if not other.scalars and not other.ranges:
            return self
        if not self.scalars and not self.ranges and isinstance(other, Resources):
            return other
        milli = dict(self.scalars)
        for name, m in other.scalars.items():
            milli[name] = milli.get(name, 0) + m
        ranges = dict(self.ranges)
        for name, rs in other.ranges.items():
            merged = _merge(self.range_pairs(name) + [(r.begin, r.end) for r in rs])
            ranges[name] = [Range(b, e) for b, e in merged]
        return Resources._raw(milli, ranges)

    def __sub__(self, other: Resources) -> Resources:
        """Subtract, flooring each scalar at zero (callers check ``fits_in`` first)."""
        if not other.scalars and not other.ranges:
            return self
        milli = dict(self.scalars)
        for name, m in other.scalars.items():
            left = milli.get(name, 0) - m
            if left > 0:
                milli[name] = left
            else:
                milli.pop(name, None)
        ranges = dict(self.ranges)
        for name, rs in other.ranges.items():
            if name in ranges:
                left_r = _subtract(self.range_pairs(name), [(r.begin, r.end) for r in rs])
                if left_r:
                    ranges[name] = [Range(b, e) for b, e in left_r]
                else:
                    del ranges[name]
        return Resources._raw(milli, ranges)

    def intersection(self, other: Resources) -> Resources:
        """What both hold: the smaller amount of each scalar, the common ranges."""
        if other is self:
            return self
        osc = other.scalars
        milli = {n: min(m, osc[n]) for n, m in self.scalars.items() if osc.get(n, 0) > 0}
        ranges: dict[str, list[Range]] = {}
        for name, rs in self.ranges.items():
            theirs = other.range_pairs(name)
            if not theirs:
                continue
            # Sorted, disjoint and merged already: two pieces of the result could only
            # touch across a gap in one of the two merged lists, which leaves a gap.
            common = _intersect([(r.begin, r.end) for r in rs], theirs)
            if common:
                ranges[name] = [Range(b, e) for b, e in common]
        return Resources._raw(milli, ranges)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _WireResources):
            return NotImplemented
        return (self.scalars or {}) == (other.scalars or {}) and _norm(self.ranges) == _norm(other.ranges)

    def __hash__(self) -> int:  # pragma: no cover - mutable wire base; identity hash suffices
        return id(self)

    # -- presentation -----------------------------------------------------

    def to_dict(self) -> dict:
        """JSON-friendly: scalars in user units, ranges as ``[[begin, end], ...]``."""
        out: dict = {name: m / SCALE for name, m in sorted(self.scalars.items())}
        for name, rs in sorted(self.ranges.items()):
            out[name] = [[r.begin, r.end] for r in rs]
        return out

    def __str__(self) -> str:
        parts = [f"{name}:{m / SCALE:g}" for name, m in sorted(self.scalars.items())]
        parts += [f"{name}:{_fmt_ranges(self.range_pairs(name))}" for name in sorted(self.ranges)]
        return ";".join(parts)

    def __repr__(self) -> str:
        return f"Resources({str(self)!r})"


def _fmt_ranges(pairs: list[tuple[int, int]]) -> str:
    return "[" + ",".join(f"{b}-{e}" for b, e in pairs) + "]"


def _norm(ranges: Mapping[str, list[Range]] | None) -> dict:
    return {k: [(r.begin, r.end) for r in v] for k, v in (ranges or {}).items() if v}
