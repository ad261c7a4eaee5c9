"""Port-range arithmetic is one sweep over both sides (a peer may send thousands of
one-port ranges), and agrees with plain set arithmetic on every case Hypothesis finds.

The cost is shown by counting reads, not with a clock: a sweep reads each range a
bounded number of times, where the old nested loops read n*m.
"""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given, settings
import pytest
from mezzo import Resources
from mezzo.resources import _contains, _intersect, _subtract

PORTS = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 8)), max_size=12).map(
    lambda spans: [(b, b + n) for b, n in spans]
)


def ports(spans) -> Resources:
    return Resources(ranges={"ports": spans}) if spans else Resources()


def as_set(r: Resources) -> set[int]:
    return {p for b, e in r.range_pairs("ports") for p in range(b, e + 1)}


def normal(r: Resources) -> bool:
    """Sorted, disjoint and merged: what every Resources keeps."""
    pairs = r.range_pairs("ports")
    return all(e1 + 1 < b2 for (_, e1), (b2, _) in zip(pairs, pairs[1:])) and all(b <= e for b, e in pairs)


@settings(max_examples=500)
@given(PORTS, PORTS)
def test_subtract_intersect_and_contains_agree_with_sets(a, b):
    x, y = ports(a), ports(b)
    assert as_set(x - y) == as_set(x) - as_set(y) and normal(x - y)
    assert as_set(x.intersection(y)) == as_set(x) & as_set(y) and normal(x.intersection(y))
    assert y.fits_in(x) == (as_set(y) <= as_set(x))
    assert as_set(x + y) == as_set(x) | as_set(y) and normal(x + y)


class Counted(list):
    """A list that counts the reads of its items, by index or by iteration."""

    reads = 0

    def __getitem__(self, i):
        Counted.reads += 1
        return super().__getitem__(i)

    def __iter__(self):
        for item in super().__iter__():
            Counted.reads += 1
            yield item


@pytest.mark.parametrize("op", [_subtract, _contains, _intersect])
def test_each_range_operation_reads_each_range_a_bounded_number_of_times(op):
    """A peer may send thousands of one-port ranges (a launch asking for all of an
    agent's ports): the nested loops this replaced read n*m items, one sweep reads a
    few per range. Counted reads, not a clock, so it holds on a busy machine."""
    n = 5_000
    have = Counted((2 * i, 2 * i) for i in range(n))
    want = Counted((2 * i, 2 * i) for i in range(n))
    Counted.reads = 0
    op(have, want)
    assert Counted.reads <= 12 * (len(have) + len(want)), Counted.reads


def test_one_port_ranges_by_the_hundred_thousand_agree():
    agent = Resources(ranges={"ports": [(2 * i, 2 * i) for i in range(100_000)]})
    assert agent.fits_in(agent)
    assert (agent - agent).is_empty()
    assert agent.intersection(agent) == agent
