"""Resources: exact milli arithmetic, ranges, parsing, validation, wire encoding."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mezzo.resources import SCALE, InvalidResources, Resources
from mezzo.wire import ttypes
from mezzo.wire.ttypes import Range
from thrift.protocol import fastbinary
from thrift.protocol.TBinaryProtocol import TBinaryProtocolAccelerated
from thrift.transport.TTransport import TMemoryBuffer

SPEC = [ttypes.Resources, ttypes.Resources.thrift_spec]


def wire_round_trip(r: Resources) -> ttypes.Resources:
    data = fastbinary.encode_binary(r, SPEC)
    out = ttypes.Resources()
    fastbinary.decode_binary(out, TBinaryProtocolAccelerated(TMemoryBuffer(data)), SPEC)
    return out


# ----------------------------------------------------------- scalars


def test_point_one_plus_point_two_is_exactly_point_three():
    r = Resources(cpus=0.1) + Resources(cpus=0.2)
    assert r == Resources(cpus=0.3)
    assert r.milli("cpus") == 300
    assert r.get("cpus") == 0.3


def test_thousand_launches_and_recoveries_do_not_drift():
    total = Resources(cpus=4, mem=1024)
    free = total
    task = Resources(cpus=0.1, mem=0.3)
    for _ in range(1000):
        free = free - task
        free = free + task
    assert free == total
    used = Resources()
    for _ in range(10):
        used = used + task
    assert used == Resources(cpus=1, mem=3)


def test_stored_in_thousandths():
    r = Resources(cpus=1.5, mem=256)
    assert SCALE == 1000
    assert r.scalars == {"cpus": 1500, "mem": 256000}
    assert r.get("cpus") == 1.5 and r.milli("mem") == 256000
    assert r.get("gpus") == 0.0 and r.milli("gpus") == 0


def test_scalars_mapping_and_keywords_combine():
    assert Resources({"cpus": 1, "disk": 10}, mem=2) == Resources(cpus=1, mem=2, disk=10)


def test_zero_amounts_are_dropped():
    r = Resources(cpus=0, mem=0.0)
    assert r.is_empty() and not r and r.scalars == {}
    assert Resources() == Resources(cpus=0)


def test_subtraction_floors_at_zero_and_drops_the_name():
    r = Resources(cpus=1, mem=100) - Resources(cpus=2, mem=40, gpus=1)
    assert r == Resources(mem=60)
    assert "cpus" not in r.scalars and "gpus" not in r.scalars
    assert r.get("cpus") == 0.0


def test_subtraction_to_exactly_zero_is_empty():
    r = Resources(cpus=0.3) - (Resources(cpus=0.1) + Resources(cpus=0.2))
    assert r.is_empty()


def test_operators_do_not_mutate_operands():
    a = Resources(cpus=2, ranges={"ports": [(1, 10)]})
    b = Resources(cpus=1, ranges={"ports": [(5, 6)]})
    a_before, b_before = a.to_dict(), b.to_dict()
    _ = a + b
    _ = a - b
    _ = b - a
    assert a.to_dict() == a_before and b.to_dict() == b_before


@pytest.mark.parametrize("bad", [-1, -0.001, math.nan, math.inf, -math.inf, "4", None, True])
def test_constructor_rejects_bad_scalars_naming_the_resource(bad):
    with pytest.raises(InvalidResources, match="'cpus'"):
        Resources(cpus=bad)


def test_invalid_resources_is_a_value_error():
    assert issubclass(InvalidResources, ValueError)


# ----------------------------------------------------------- ranges


def test_ranges_are_sorted_and_merged_including_adjacent():
    r = Resources(ranges={"ports": [(20, 30), (1, 5), (6, 10), (25, 40), (50, 50)]})
    assert r.range_pairs("ports") == [(1, 10), (20, 40), (50, 50)]
    assert all(isinstance(x, Range) for x in r.ranges["ports"])


def test_range_addition_merges():
    r = Resources(ranges={"ports": [(1, 10)]}) + Resources(ranges={"ports": [(11, 20), (30, 31)]})
    assert r.range_pairs("ports") == [(1, 20), (30, 31)]


def test_range_subtraction_splits_and_trims():
    have = Resources(ranges={"ports": [(1, 100)]})
    left = have - Resources(ranges={"ports": [(1, 10), (50, 59), (100, 100)]})
    assert left.range_pairs("ports") == [(11, 49), (60, 99)]


def test_range_subtraction_of_everything_drops_the_name():
    left = Resources(ranges={"ports": [(1, 5)]}) - Resources(ranges={"ports": [(0, 10)]})
    assert left.is_empty() and "ports" not in left.ranges


def test_range_subtraction_of_absent_name_is_noop():
    r = Resources(cpus=1) - Resources(ranges={"ports": [(1, 5)]})
    assert r == Resources(cpus=1)


def test_fits_in_requires_ranges_to_be_contained():
    have = Resources(cpus=2, ranges={"ports": [(31000, 31010), (31020, 31030)]})
    assert Resources(ranges={"ports": [(31000, 31010)]}).fits_in(have)
    assert Resources(ranges={"ports": [(31005, 31005), (31025, 31030)]}).fits_in(have)
    assert not Resources(ranges={"ports": [(31009, 31021)]}).fits_in(have)  # spans the gap
    assert not Resources(ranges={"ports": [(30999, 31000)]}).fits_in(have)
    assert not Resources(ranges={"disks": [(1, 1)]}).fits_in(have)


def test_fits_in_scalars():
    have = Resources(cpus=2, mem=1024)
    assert Resources(cpus=2, mem=1024).fits_in(have)
    assert Resources(cpus=0.5).fits_in(have)
    assert Resources().fits_in(have) and Resources().fits_in(Resources())
    assert not Resources(cpus=2.001).fits_in(have)
    assert not Resources(gpus=1).fits_in(have)


@pytest.mark.parametrize("spans", [[(5, 4)], [(-1, 3)], [(1, 2), (10, 9)]])
def test_constructor_rejects_bad_ranges_naming_the_resource(spans):
    with pytest.raises(InvalidResources, match="'ports'"):
        Resources(ranges={"ports": spans})


spans = st.lists(st.tuples(st.integers(0, 200), st.integers(0, 30)).map(lambda t: (t[0], t[0] + t[1])),
                 max_size=8)


def as_set(pairs) -> set[int]:
    return {i for b, e in pairs for i in range(b, e + 1)}


@settings(max_examples=300, deadline=None)
@given(a=spans, b=spans)
def test_range_arithmetic_matches_set_semantics(a, b):
    ra = Resources(ranges={"p": a})
    rb = Resources(ranges={"p": b})
    assert as_set(ra.range_pairs("p")) == as_set(a)
    # normalised: sorted, disjoint, not adjacent
    pairs = ra.range_pairs("p")
    assert all(pairs[i][1] + 1 < pairs[i + 1][0] for i in range(len(pairs) - 1))
    assert as_set((ra + rb).range_pairs("p")) == as_set(a) | as_set(b)
    assert as_set((ra - rb).range_pairs("p")) == as_set(a) - as_set(b)
    assert rb.fits_in(ra) == (as_set(b) <= as_set(a))


milli_amounts = st.integers(0, 10**9)
scalar_maps = st.dictionaries(st.sampled_from(["cpus", "mem", "disk", "gpus"]), milli_amounts, max_size=4)


@settings(max_examples=300, deadline=None)
@given(a=scalar_maps, b=scalar_maps)
def test_scalar_arithmetic_is_exact(a, b):
    ra = Resources({k: v / SCALE for k, v in a.items()})
    rb = Resources({k: v / SCALE for k, v in b.items()})
    assert ra.scalars == {k: v for k, v in a.items() if v}
    s = ra + rb
    for k in set(a) | set(b):
        assert s.milli(k) == a.get(k, 0) + b.get(k, 0)
        assert (s - rb).milli(k) == a.get(k, 0)
        assert (ra - rb).milli(k) == max(0, a.get(k, 0) - b.get(k, 0))
    assert rb.fits_in(ra) == all(a.get(k, 0) >= v for k, v in b.items())
    assert (rb.shortfall(ra) == []) == rb.fits_in(ra)


# ----------------------------------------------------------- parse


def test_parse_mesos_syntax():
    r = Resources.parse("cpus:4;mem:4096;ports:[31000-32000]")
    assert r == Resources(cpus=4, mem=4096, ranges={"ports": [(31000, 32000)]})


def test_parse_multiple_ranges_single_ports_and_whitespace():
    r = Resources.parse(" cpus : 0.5 ; ports:[ 33000-33010 , 31000-31005,40000 ] ; ")
    assert r.get("cpus") == 0.5
    assert r.range_pairs("ports") == [(31000, 31005), (33000, 33010), (40000, 40000)]


def test_parse_empty_string_is_empty():
    assert Resources.parse("").is_empty()
    assert Resources.parse(" ; ;").is_empty()


@pytest.mark.parametrize(
    "text,name",
    [
        ("cpus:four", "cpus"),
        ("mem:-5", "mem"),
        ("gpus:nan", "gpus"),
        ("disk:inf", "disk"),
        ("ports:[1-x]", "ports"),
        ("ports:[31000-32000", "ports"),
        ("ports:[10-5]", "ports"),
        ("ports:[-5-10]", "ports"),
        ("cpus:1;mem:lots", "mem"),
    ],
)
def test_parse_errors_name_the_resource(text, name):
    with pytest.raises(InvalidResources, match=repr(name)):
        Resources.parse(text)


@pytest.mark.parametrize("text", ["cpus", "cpus:", ":4", "cpus:4;mem"])
def test_parse_errors_for_missing_parts_quote_the_part(text):
    with pytest.raises(InvalidResources, match="NAME:VALUE"):
        Resources.parse(text)


@pytest.mark.parametrize("text", ["cpus:1e306", "mem:1e300", "disk:1e17"])
def test_parse_of_an_amount_too_large_for_the_wire_names_the_resource(text):
    """Scalars travel as i64 thousandths: an amount that cannot be encoded must be
    refused as InvalidResources naming the resource, not crash later (or now) with
    OverflowError."""
    name = text.split(":")[0]
    with pytest.raises(InvalidResources, match=repr(name)):
        Resources.parse(text)


def test_str_parses_back():
    r = Resources.parse("cpus:2.5;mem:512;ports:[1-3,7-9]")
    assert str(r) == "cpus:2.5;mem:512;ports:[1-3,7-9]"
    assert Resources.parse(str(r)) == r
    assert repr(r) == "Resources('cpus:2.5;mem:512;ports:[1-3,7-9]')"


# ----------------------------------------------------------- of()


def test_of_lifts_a_wire_struct():
    wire = ttypes.Resources(scalars={"cpus": 1500, "mem": 0}, ranges={"ports": [Range(5, 9), Range(1, 4)]})
    r = Resources.of(wire)
    assert isinstance(r, Resources)
    assert r.get("cpus") == 1.5 and "mem" not in r.scalars
    assert r.range_pairs("ports") == [(1, 9)]


def test_of_none_and_empty():
    assert Resources.of(None).is_empty()
    assert Resources.of(ttypes.Resources()).is_empty()
    assert Resources.of(ttypes.Resources(scalars=None, ranges=None)).is_empty()


def test_of_resources_is_identity():
    r = Resources(cpus=1)
    assert Resources.of(r) is r


def test_of_rejects_negative_scalars():
    with pytest.raises(InvalidResources, match="'cpus'"):
        Resources.of(ttypes.Resources(scalars={"cpus": -1}))


@pytest.mark.parametrize(
    "rng", [Range(10, 5), Range(-1, 5), Range(None, 5), Range(1, None), None]
)
def test_of_rejects_inverted_or_incomplete_ranges(rng):
    with pytest.raises(InvalidResources, match="'ports'"):
        Resources.of(ttypes.Resources(ranges={"ports": [Range(1, 2), rng]}))


def test_of_does_not_alias_the_wire_struct():
    wire = ttypes.Resources(scalars={"cpus": 1000}, ranges={"ports": [Range(1, 2)]})
    r = Resources.of(wire)
    wire.scalars["cpus"] = 5
    wire.ranges["ports"].append(Range(3, 3))
    assert r.milli("cpus") == 1000 and r.range_pairs("ports") == [(1, 2)]


# ----------------------------------------------------------- wire


def test_is_a_wire_struct():
    assert isinstance(Resources(cpus=1), ttypes.Resources)
    assert Resources(cpus=1) == ttypes.Resources(scalars={"cpus": 1000}, ranges={})
    assert ttypes.Resources(scalars={"cpus": 1000}, ranges={}) == Resources(cpus=1)


@settings(max_examples=200, deadline=None)
@given(a=scalar_maps, r=spans)
def test_fastbinary_round_trip(a, r):
    res = Resources({k: v / SCALE for k, v in a.items()}, ranges={"ports": r})
    decoded = wire_round_trip(res)
    assert type(decoded) is ttypes.Resources
    lifted = Resources.of(decoded)
    assert lifted == res
    assert lifted.scalars == res.scalars
    assert lifted.range_pairs("ports") == res.range_pairs("ports")


def test_fastbinary_round_trip_of_a_typical_agent():
    res = Resources.parse("cpus:7.25;mem:15872.5;disk:100000;ports:[31000-32000,33000-33999]")
    assert Resources.of(wire_round_trip(res)) == res
    assert Resources.of(wire_round_trip(res)).to_dict() == res.to_dict()


def test_to_dict_is_json_friendly():
    import json

    r = Resources.parse("mem:512.5;cpus:0.1;ports:[2-3,1-1]")
    d = r.to_dict()
    assert d == {"cpus": 0.1, "mem": 512.5, "ports": [[1, 3]]}
    assert list(d) == ["cpus", "mem", "ports"]
    assert json.loads(json.dumps(d)) == d


def test_shortfall_names_what_is_missing():
    need = Resources(cpus=2, mem=100, ranges={"ports": [(80, 80)]})
    have = Resources(cpus=1.5, mem=100, ranges={"ports": [(8080, 8081)]})
    lines = need.shortfall(have)
    assert lines == ["cpus 2 > 1.5 available", "ports [80-80] not within [8080-8081]"]
    assert need.shortfall(need) == []


def test_names_and_bool():
    r = Resources(cpus=1, ranges={"ports": [(1, 1)]})
    assert list(r.names()) == ["cpus", "ports"]
    assert bool(r) and not r.is_empty()
