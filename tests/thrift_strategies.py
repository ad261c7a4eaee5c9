"""Hypothesis strategies for any Thrift call or struct, derived from the generated specs.

Every generated struct class (``mezzo.wire.ttypes.*``, and each service's
``<method>_args``) carries a ``thrift_spec``: one ``(id, ttype, name, type_args,
default)`` tuple per field. This module turns a spec into a strategy, recursively,
so a fuzzer written against it covers a new method or field as soon as
``make thrift`` regenerates the code: nothing here names a method or a field.

Contract of what is drawn:

- Every value is *legal on the wire*: it encodes with the codec
  (:meth:`mezzo.rpc.codec.ServiceSchema.encode`). Integers stay in their type's range,
  UTF8 strings hold no lone surrogates, BINARY fields are ``bytes``. What is not
  legal (bytes that do not decode at all) is ``tests/test_fuzz.py``'s business.
- Within that, values are *hostile*: empty and very long strings, the extreme
  integers of each type and negative ones, NaN, infinities and -0.0, duplicates in
  lists (a long list is one element repeated), struct fields left out (None).
- Sizes are bounded (:class:`Bounds`), so a draw is cheap and an encoded call stays
  far below the frame limit.
- What the test knows of a running cluster (:class:`Known`) is mixed in, so calls
  name things that exist and carry values that fit, and get past a handler's
  "who is calling", "is this yours" and "does it fit" checks into what lies behind
  them: what the calling peer would name, every id the test knows, and what a
  :class:`WireMemory` saw on the wire. Values go by field name: a field
  ``offer_ids`` gets the caller's ``offer_id`` values and ids seen in fields
  ``offer_id``, a map ``scalars`` keys seen as keys of ``scalars``. Whole structs go
  by class, sent as they were seen or with one field changed.

Usage::

    from mezzo.services import MASTER
    memory = WireMemory()
    memory.record(SCHEDULER, "resource_offers", (offers,))   # what the master sent
    known = Known(caller={"framework_id": ("fw-1",)}, strings=("fw-1", "fw-2"), seen=memory.snapshot())
    with knowing(known):
        args = data.draw(call_args(MASTER, "launch_tasks"))
    frame = MASTER.encode("launch_tasks", args, {})
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import hypothesis.strategies as st
from thrift.Thrift import TType

from mezzo.rpc.codec import ServiceSchema

_INT_RANGES = {
    TType.BYTE: (-(2**7), 2**7 - 1),
    TType.I16: (-(2**15), 2**15 - 1),
    TType.I32: (-(2**31), 2**31 - 1),
    TType.I64: (-(2**63), 2**63 - 1),
}

_ODD_TEXT = (
    " ",
    "*",
    "\x00",
    "\n",
    "é☃𝄞",  # multi-byte UTF-8, one character outside the BMP
    "-1",
    "0",
    "nan",
    "../..",
    "{}",
    "[]",
    "[NaN]",  # JSON to Python's json module, not to RFC 8259
    "[1e999]",
    '[{"tasks": null}]',
    "[" * 5000,  # deeper than any recursion limit Python runs with, Hypothesis' included
)
"""Strings with a meaning somewhere (a role wildcard, JSON, a path, a number)."""


@dataclass(frozen=True)
class Bounds:
    """How big a drawn value may get.

    ``max_items``: elements of an ordinary list, set or map; ``long_items``: of a long
    list (one element repeated); ``max_text``: characters of ordinary text;
    ``long_text``: of a long string; ``max_depth``: nested structs and containers
    below a call's arguments (deeper struct fields are left out, deeper containers
    are empty).
    """

    max_items: int = 4
    long_items: int = 300
    max_text: int = 16
    long_text: int = 5000
    max_depth: int = 6


DEFAULT_BOUNDS = Bounds()


@dataclass(frozen=True)
class Seen:
    """What a :class:`WireMemory` saw, frozen for drawing: ``values`` by field name
    (``"name"`` for a field or its elements, ``"name.key"`` and ``"name.value"`` for a
    map's), ``structs`` by generated class."""

    values: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    structs: Mapping[type, tuple[Any, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Known:
    """What the fuzzer knows of the cluster it calls; every part may be empty.

    ``caller``: what the calling peer would name, by wire field name (for a
    framework's scheduler ``{"framework_id": (its id,), "offer_id": its offers,
    ...}``); ``strings``: every id or name the test knows; ``seen``: what went over
    the wire. A call naming someone else's id stops at a handler's first check, so a
    string field is most often what the caller would put there.
    """

    caller: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    strings: tuple[str, ...] = ()
    seen: Seen = field(default_factory=Seen)


NOTHING_KNOWN = Known()


# -- values seen on the wire --------------------------------------------------------


def _fields(cls: type) -> list[tuple[int, int, str, Any, Any]]:
    return [f for f in cls.thrift_spec if f is not None]


def _singular(name: str) -> str:
    """The name an element of a list field goes by: ``offer_ids`` -> ``offer_id``."""
    return name[:-1] if name.endswith("s") else name


class WireMemory:
    """Values seen in calls, by field name and by struct class, ``keep`` latest of each.

    :meth:`record` takes a call as it went over the wire (the schema tells the names
    of its arguments); :meth:`snapshot` freezes what was seen for :class:`Known`.
    """

    def __init__(self, keep: int = 16) -> None:
        self.keep = keep
        self._values: dict[str, list[Any]] = {}
        self._structs: dict[type, list[Any]] = {}

    def record(self, schema: ServiceSchema, method: str, args: Sequence[Any]) -> None:
        spec = _fields(schema.methods[method].args_cls)
        for (_, ttype, name, type_args, _), value in zip(spec, args, strict=False):
            self._walk(ttype, type_args, name, value)

    def snapshot(self) -> Seen:
        return Seen(
            values={k: tuple(v) for k, v in self._values.items()},
            structs={k: tuple(v) for k, v in self._structs.items()},
        )

    def _walk(self, ttype: int, type_args: Any, name: str, value: Any) -> None:
        if value is None:
            return
        if ttype == TType.STRUCT:
            cls = type_args[0]
            self._keep(self._structs.setdefault(cls, []), value)
            for _, f_type, f_name, f_args, _ in _fields(cls):
                self._walk(f_type, f_args, f_name, getattr(value, f_name, None))
        elif ttype in (TType.LIST, TType.SET):
            for item in value:
                self._walk(type_args[0], type_args[1], _singular(name), item)
        elif ttype == TType.MAP:
            for k, v in value.items():
                self._walk(type_args[0], type_args[1], f"{name}.key", k)
                self._walk(type_args[2], type_args[3], f"{name}.value", v)
        elif _fits(ttype, type_args, value):
            self._keep(self._values.setdefault(name, []), value)

    def _keep(self, pool: list[Any], value: Any) -> None:
        # Repeats are kept (more weight to what is sent often), not looked for: how
        # many values a pool holds must not depend on values that differ from run to
        # run (timestamps), or Hypothesis could not replay an example.
        pool.append(value)
        del pool[: -self.keep]


def _fits(ttype: int, type_args: Any, value: Any) -> bool:
    """Whether ``value`` is legal on the wire in a field of this type."""
    if ttype == TType.BOOL:
        return isinstance(value, bool)
    if ttype in _INT_RANGES:
        lo, hi = _INT_RANGES[ttype]
        return isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi
    if ttype == TType.DOUBLE:
        return isinstance(value, float)
    if ttype == TType.STRING:
        return isinstance(value, bytes if type_args == "BINARY" else str)
    return False


# -- strategies -----------------------------------------------------------------------
#
# Strategies are built once per method and struct (building one walks the whole spec
# and costs more than drawing from it), so what is known is not built into them: it
# is read when a value is drawn, from the Known that :func:`knowing` makes current.

_KNOWN: ContextVar[Known] = ContextVar("thrift_strategies_known", default=NOTHING_KNOWN)


@contextmanager
def knowing(known: Known) -> Iterator[None]:
    """Draws made inside take their known values from ``known``."""
    token = _KNOWN.set(known)
    try:
        yield
    finally:
        _KNOWN.reset(token)


def _pool(
    pick: Callable[[Known], Sequence[Any]], otherwise: st.SearchStrategy[Any] | None = None, blank: Any = None
) -> st.SearchStrategy[Any]:
    """A value of the pool ``pick`` takes from the current :class:`Known`; while that
    pool is empty, a draw of ``otherwise`` (if given) or else ``blank``.

    What is drawn has the same shape whatever is known (an index, and the
    ``otherwise`` value, drawn every time): Hypothesis then never sees a test case
    draw differently from an earlier one with the same choices (it reports that as a
    flaky strategy), even when what is known changes between them (a real daemon's
    state). So ``otherwise`` should be cheap to draw; a struct pool has a ``blank``."""

    fallback = otherwise if otherwise is not None else st.just(blank)

    # A composite, not a map: Hypothesis reports a failing example with the value
    # drawn here, where a map would show as the function applied to the index.
    @st.composite
    def from_pool(draw: st.DrawFn) -> Any:
        index, value = draw(st.integers(0, 1023)), draw(fallback)
        pool = pick(_KNOWN.get())
        return pool[index % len(pool)] if pool else value

    return from_pool()


def _weighted(*branches: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """A draw from one of ``branches`` with probability proportional to its weight.

    ``st.one_of`` picks among its branches evenly, after flattening nested ``one_of``
    and dropping repeats of one strategy object; so each branch is flattened here and
    listed as many times as it weighs, each time as a strategy object of its own (a
    ``map`` of it). Like ``one_of`` (no ``flatmap``), it shrinks toward the first branch.
    """
    return st.one_of(
        [part.map(_itself) for weight, branch in branches for part in branch.branches for _ in range(weight)]
    )


def _itself(value: Any) -> Any:
    return value


def _present(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``value`` three times in four, else None (the field left out). Shrinks toward None."""
    return _weighted((1, st.none()), (3, value))


def _integers(ttype: int) -> st.SearchStrategy[int]:
    lo, hi = _INT_RANGES[ttype]
    return st.one_of(
        st.integers(-1, 16),  # small values: enum members, counts, ids, ports near 0
        st.sampled_from((lo, hi, lo + 1, hi - 1, 0)),  # the type's edges
        st.integers(lo, hi),
    )


def _doubles() -> st.SearchStrategy[float]:
    return st.one_of(
        st.sampled_from((0.0, -0.0, float("nan"), float("inf"), float("-inf"), 1e308, -1e308, 5e-324)),
        st.floats(-1e6, 1e6),
        st.floats(),  # anything, NaN and infinities included
    )


def _text(bounds: Bounds) -> st.SearchStrategy[str]:
    # Surrogates cannot be encoded as UTF-8, so they are not legal in a UTF8 field.
    chars = st.characters(blacklist_categories=("Cs",))
    return st.one_of(
        st.just(""),
        st.sampled_from(_ODD_TEXT),
        st.text(chars, max_size=bounds.max_text),
        st.integers(bounds.max_text, bounds.long_text).map(lambda n: "x" * n),
    )


def _binary(bounds: Bounds) -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.just(b""),
        st.binary(max_size=bounds.max_text),
        st.integers(bounds.max_text, bounds.long_text).map(lambda n: b"\xff" * n),
    )


def _hashable(ttype: int) -> bool:
    """Whether values of ``ttype`` can be set members or map keys in Python (generated
    structs define ``__eq__`` without ``__hash__``; containers are unhashable)."""
    return ttype not in (TType.STRUCT, TType.LIST, TType.SET, TType.MAP)


def _seen_as(name: str, ttype: int, type_args: Any) -> Callable[[Known], list[Any]]:
    """Picks the values seen in fields called ``name`` that are legal in this one."""
    return lambda known: [v for v in known.seen.values.get(name, ()) if _fits(ttype, type_args, v)]


def value_strategy(
    ttype: int, type_args: Any, *, name: str = "", bounds: Bounds = DEFAULT_BOUNDS, depth: int = 0
) -> st.SearchStrategy[Any]:
    """Values of one Thrift type, as a field called ``name`` of ``ttype`` with
    ``type_args`` (the fourth element of its spec tuple) holds them. See the module
    docstring."""
    if ttype == TType.BOOL:
        return st.booleans()
    if ttype in _INT_RANGES or ttype == TType.DOUBLE or (ttype == TType.STRING and type_args == "BINARY"):
        if ttype in _INT_RANGES:
            fresh = _integers(ttype)
        else:
            fresh = _doubles() if ttype == TType.DOUBLE else _binary(bounds)
        return _weighted((1, _pool(_seen_as(name, ttype, type_args), fresh)), (3, fresh))
    if ttype == TType.STRING:
        # What the caller would put there most (a handler checks it first), made-up
        # text nearly as often.
        text = _text(bounds)
        return _weighted(
            (4, _pool(lambda known: known.caller.get(name, ()), text)),
            (2, _pool(_seen_as(name, ttype, type_args), text)),
            (1, _pool(lambda known: known.strings, text)),
            (3, text),
        )
    if ttype == TType.STRUCT:
        return struct_strategy(type_args[0], bounds=bounds, depth=depth + 1)
    deeper = depth + 1
    if ttype in (TType.LIST, TType.SET):
        elem_type, elem_args, *_ = type_args
        if deeper > bounds.max_depth:
            return st.builds(set if ttype == TType.SET and _hashable(elem_type) else list)
        elem = value_strategy(elem_type, elem_args, name=_singular(name), bounds=bounds, depth=deeper)
        if ttype == TType.SET and _hashable(elem_type):
            return st.sets(elem, max_size=bounds.max_items)
        # Lists, and sets of unhashable elements (the encoder takes any iterable for a
        # set): short ones, and long ones of one element repeated (duplicate ids).
        long = st.builds(_repeated, elem, st.integers(bounds.max_items, bounds.long_items))
        return _weighted((4, st.lists(elem, max_size=bounds.max_items)), (1, long))
    if ttype == TType.MAP:
        key_type, key_args, value_type, value_args, *_ = type_args
        if not _hashable(key_type):
            # Not in mezzo.thrift; fail loudly rather than fuzz such a map badly.
            raise NotImplementedError(f"map keys of Thrift type {key_type} are not supported")
        if deeper > bounds.max_depth:
            return st.builds(dict)
        keys = value_strategy(key_type, key_args, name=f"{name}.key", bounds=bounds, depth=deeper)
        values = value_strategy(value_type, value_args, name=f"{name}.value", bounds=bounds, depth=deeper)
        return st.dictionaries(keys, values, max_size=bounds.max_items)
    raise NotImplementedError(f"Thrift type {ttype} is not supported")


def _repeated(item: Any, times: int) -> list[Any]:
    """``[item] * times`` (named for Hypothesis' report of a failing example)."""
    return [item] * times


@functools.cache
def struct_strategy(cls: type, *, bounds: Bounds = DEFAULT_BOUNDS, depth: int = 0) -> st.SearchStrategy[Any]:
    """Instances of the generated struct ``cls``: built, every field drawn from its
    spec or left out (None); or, when the current :class:`Known` has seen values of
    ``cls``, one of them as it was or with one field drawn anew. Past
    ``bounds.max_depth`` every field is left out."""
    fields = _fields(cls)
    if depth > bounds.max_depth:
        return st.builds(cls, **{f[2]: st.none() for f in fields})

    def field_value(f: tuple) -> st.SearchStrategy[Any]:
        _, ttype, name, args, _ = f
        return _present(value_strategy(ttype, args, name=name, bounds=bounds, depth=depth))

    built = st.builds(cls, **{f[2]: field_value(f) for f in fields})
    if not fields:
        return built
    # Nothing seen yet: the struct with every field left out.
    seen = _pool(lambda known: known.seen.structs.get(cls, ()), blank=cls())
    # A value that went over the wire with one field changed gets past every check
    # of the others: the likeliest way to reach the one check that field meets.
    mutant = st.one_of([st.builds(replace, seen, st.just(f[2]), field_value(f)) for f in fields])
    return _weighted((1, seen), (2, mutant), (1, built))


def replace(struct: Any, name: str, value: Any) -> Any:
    """A copy of ``struct`` with field ``name`` set to ``value``, as an instance of
    its generated class: a subclass (:class:`mezzo.Resources`) may keep invariants
    the new value breaks. ``struct`` itself may be a daemon's own object and is never
    changed; fields are shared, not copied. Named for Hypothesis' report of a
    failing example: ``replace(TaskInfo(...), 'agent_id', '')``."""
    generated = next(c for c in type(struct).__mro__ if "thrift_spec" in vars(c))
    out = generated(**{f[2]: getattr(struct, f[2]) for f in _fields(generated)})
    setattr(out, name, value)
    return out


@functools.cache
def call_args(
    schema: ServiceSchema, method: str, bounds: Bounds = DEFAULT_BOUNDS, *, in_character: bool = False
) -> st.SearchStrategy[tuple]:
    """The positional arguments of ``schema.method``, each drawn from its field in
    ``<method>_args.thrift_spec`` (and the current :class:`Known`: see :func:`knowing`).
    A struct argument may be left out (None: it arrives as None); others are always
    drawn, since one left out arrives as its type's blank (``""``, 0, empty), which
    their strategies draw anyway.

    ``in_character``: an argument (or the elements of a list argument) named like
    something the caller would name (``Known.caller``) is always one of those, so
    the call gets past the handler's "who is calling" check; the rest is fuzzed.
    """

    def argument(ttype: int, name: str, type_args: Any) -> st.SearchStrategy[Any]:
        value = value_strategy(ttype, type_args, name=name, bounds=bounds)
        if in_character and ttype == TType.STRING and type_args != "BINARY":
            value = _pool(lambda known: known.caller.get(name, ()), value)
        elif in_character and ttype == TType.LIST and type_args[:2] == (TType.STRING, "UTF8"):
            mine = _pool(lambda known: known.caller.get(_singular(name), ()), _text(bounds))
            value = st.lists(mine, max_size=bounds.max_items)
        return _present(value) if ttype == TType.STRUCT else value

    fields = _fields(schema.methods[method].args_cls)
    return st.tuples(*(argument(ttype, name, args) for _, ttype, name, args, _ in fields))


def calls(schema: ServiceSchema, bounds: Bounds = DEFAULT_BOUNDS) -> st.SearchStrategy[tuple[str, tuple]]:
    """``(method, args)`` for any method of ``schema``."""
    return st.one_of(
        [call_args(schema, m, bounds).map(functools.partial(_call, m)) for m in sorted(schema.methods)]
    )


def _call(method: str, args: tuple) -> tuple[str, tuple]:
    return method, args


def as_received(schema: ServiceSchema, method: str, args: tuple) -> tuple:
    """``args`` as a handler receives them: encoded into a frame and decoded again by
    the codec, exactly as a connection does (left-out arguments become their type's
    blank; every struct is a fresh object, so nothing is shared between arguments)."""
    frame = schema.encode(method, args, {})
    name, received = schema.decode(frame[4:])
    assert name == method
    return received


def unique(strings: Iterable[Any]) -> tuple[str, ...]:
    """The non-empty strings of ``strings``, first occurrence first: a stable order,
    so that a failing example replays."""
    return tuple(dict.fromkeys(s for s in strings if isinstance(s, str) and s))
