"""The strategy builder of tests/thrift_strategies.py: what it draws is legal on the
wire, bounded, hostile, and takes in what is known."""

from __future__ import annotations

import math

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings
from thrift.protocol import fastbinary
from thrift.Thrift import TType
from thrift.TRecursive import fix_spec

from mezzo import Resources
from mezzo.services import AGENT, EXECUTOR, MASTER, SCHEDULER, TOOL
from mezzo.wire.ttypes import Offer, TaskInfo
from mezzo.wire.ttypes import Resources as WireResources

from ..thrift_strategies import (
    Known,
    WireMemory,
    as_received,
    call_args,
    calls,
    knowing,
    replace,
    struct_strategy,
)

SERVICES = (MASTER, AGENT, SCHEDULER, EXECUTOR, TOOL)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Leaf:
    """A struct of every scalar Thrift type (mezzo.thrift has no byte, i16 or set)."""

    def __init__(self, b=None, i8=None, i16=None, i32=None, i64=None, d=None, s=None, raw=None):
        self.b, self.i8, self.i16, self.i32, self.i64, self.d, self.s, self.raw = (
            b,
            i8,
            i16,
            i32,
            i64,
            d,
            s,
            raw,
        )


Leaf.thrift_spec = (
    None,
    (1, TType.BOOL, "b", None, None),
    (2, TType.BYTE, "i8", None, None),
    (3, TType.I16, "i16", None, None),
    (4, TType.I32, "i32", None, None),
    (5, TType.I64, "i64", None, None),
    (6, TType.DOUBLE, "d", None, None),
    (7, TType.STRING, "s", "UTF8", None),
    (8, TType.STRING, "raw", "BINARY", None),
)


class Tree:
    """Containers of every kind, and a struct nested in itself."""

    def __init__(self, leaves=None, tags=None, index=None, child=None):
        self.leaves, self.tags, self.index, self.child = leaves, tags, index, child


Tree.thrift_spec = (
    None,
    (1, TType.LIST, "leaves", (TType.STRUCT, [Leaf, None], False), None),
    (2, TType.SET, "tags", (TType.STRING, "UTF8", False), None),
    (3, TType.MAP, "index", (TType.STRING, "UTF8", TType.LIST, (TType.I64, None, False), False), None),
    (4, TType.STRUCT, "child", [Tree, None], None),
)


fix_spec([Leaf, Tree])  # as generated modules do: a struct's spec names its fields' specs


def _encodes(cls, value) -> bytes:
    return fastbinary.encode_binary(value, [cls, cls.thrift_spec])


@SETTINGS
@given(st.data())
def test_every_call_of_every_service_encodes_and_decodes(data):
    schema = data.draw(st.sampled_from(SERVICES))
    method, args = data.draw(calls(schema))
    assert len(schema.encode(method, args, {})) < 4 * 1024 * 1024  # bounded, far below a frame's limit
    as_received(schema, method, args)


@SETTINGS
@given(data=st.data(), in_character=st.booleans())
def test_what_is_known_is_mixed_in_and_stays_legal(data, in_character):
    memory = WireMemory()
    memory.record(
        SCHEDULER, "resource_offers", ([Offer(offer_id="o1", agent_id="a1", resources=Resources(cpus=1))],)
    )
    known = Known(
        caller={"framework_id": ("f1",), "offer_id": ("o1",)}, strings=("a1", "cpus"), seen=memory.snapshot()
    )
    schema = data.draw(st.sampled_from(SERVICES))
    method = data.draw(st.sampled_from(sorted(schema.methods)))
    with knowing(known):
        args = data.draw(call_args(schema, method, in_character=in_character))
    as_received(schema, method, args)


def test_every_scalar_type_is_drawn_within_its_range_and_hostile():
    leaves = []

    # Derandomized: "hostile values turn up" is a property of the strategy's odds, and
    # 300 fresh random draws missed the i64 extremes once in a fresh clone's CI (no
    # example database there). One fixed sample checks the odds without flaking.
    @settings(max_examples=300, deadline=None, derandomize=True)
    @given(struct_strategy(Leaf))
    def draw(leaf):
        _encodes(Leaf, leaf)
        leaves.append(leaf)

    draw()
    assert all(-(2**7) <= x.i8 < 2**7 for x in leaves if x.i8 is not None)
    assert all(-(2**15) <= x.i16 < 2**15 for x in leaves if x.i16 is not None)
    assert all(isinstance(x.raw, bytes) for x in leaves if x.raw is not None)
    # Hostile values turn up: extremes, negatives, NaN, the empty string, fields left out.
    assert any(x.i64 in (-(2**63), 2**63 - 1) for x in leaves)
    assert any(x.i32 is not None and x.i32 < 0 for x in leaves)
    # NaN is checked by the doubles' own strategy, not in this sample.
    assert any(x.s == "" for x in leaves) and any(x.s is None for x in leaves)


def test_containers_and_recursive_structs_are_drawn_bounded():
    @settings(max_examples=100, deadline=None)
    @given(struct_strategy(Tree))
    def draw(tree):
        assert len(_encodes(Tree, tree)) < 4 * 1024 * 1024
        depth = 0
        while tree is not None:
            assert isinstance(tree.tags, (set, type(None)))
            tree, depth = tree.child, depth + 1
        assert depth <= 8

    draw()


def test_what_is_seen_is_remembered_by_field_name_and_struct():
    memory = WireMemory(keep=2)
    offer = Offer(offer_id="o1", agent_id="a1", resources=Resources(cpus=1), executor_ids=["e1"])
    memory.record(SCHEDULER, "resource_offers", ([offer],))
    for n in range(3):
        memory.record(SCHEDULER, "offer_rescinded", (f"r{n}",))
    seen = memory.snapshot()
    assert seen.values["agent_id"] == ("a1",)
    assert seen.values["executor_id"] == ("e1",)  # a list's elements go by its name, singular
    assert seen.values["scalars.key"] == ("cpus",)  # a map's keys by its name
    assert seen.values["offer_id"] == ("r1", "r2")  # the latest `keep`
    assert seen.structs[Offer] == (offer,)
    # Under the generated class of its field, whatever the subclass (mezzo's Resources).
    assert [type(r) for r in seen.structs[WireResources]] == [Resources]


def test_replace_copies_as_the_generated_class_and_leaves_the_original():
    task = TaskInfo(task_id="t", resources=Resources(cpus=1))
    changed = replace(task, "task_id", "")
    assert (task.task_id, changed.task_id) == ("t", "")
    no_ranges = replace(Resources(cpus=1), "ranges", None)
    assert type(no_ranges) is WireResources  # not mezzo's Resources, whose ranges are never None


def test_a_map_keyed_by_structs_is_refused_loudly():
    class Odd:
        thrift_spec = (None, (1, TType.MAP, "m", (TType.STRUCT, [Leaf, None], TType.I32, None, False), None))

    with pytest.raises(NotImplementedError):
        struct_strategy(Odd).example()
