"""A pure-Python reader of Thrift binary structs, driven by their ``thrift_spec``.

It reads what the C accelerator (``fastbinary.decode_binary``) reads, to the same
values: enums as plain ints, left-out fields as their constructor's defaults, nested
structs built by their constructors, element types checked against the spec. It
exists for one property the C reader lacks: Python code gives up the interpreter
every switch interval, so a big frame can be read on a worker thread while the event
loop keeps running (:mod:`.offload`). The generated ``read()`` methods cannot stand
in: they turn enum values into their names and refuse unknown ones.

Bounded like the C reader: strings and containers longer than the limit are
refused, and unknown fields are skipped to a fixed depth.
"""

from __future__ import annotations

import struct
from typing import Any

from thrift.Thrift import TType

_I8 = struct.Struct("!b")
_I16 = struct.Struct("!h")
_I32 = struct.Struct("!i")
_I64 = struct.Struct("!q")
_DOUBLE = struct.Struct("!d")
_LIST = struct.Struct("!bi")
_MAP = struct.Struct("!bbi")

SKIP_DEPTH = 64
"""How deep unknown nested structs and containers are skipped before the message is refused."""


class ReadError(Exception):
    """The bytes are not a struct of the spec (cut short, wrong types, over a limit)."""


class SpecReader:
    """Reads structs from one buffer, from a position on. Not shared between threads."""

    __slots__ = ("_buf", "_limit", "_pos")

    def __init__(self, buf: bytes, pos: int, limit: int) -> None:
        self._buf = buf
        self._pos = pos
        self._limit = limit

    def read_into(self, obj: Any, spec: tuple) -> None:
        """Read one struct of ``spec`` into ``obj``'s attributes (the top level of a call)."""
        for name, value in self._fields(spec):
            setattr(obj, name, value)

    # -- structs -------------------------------------------------------------

    def _fields(self, spec: tuple) -> list[tuple[str, Any]]:
        got: list[tuple[str, Any]] = []
        read = self._unpack
        while True:
            (ttype,) = read(_I8, 1)
            if ttype == TType.STOP:
                return got
            (fid,) = read(_I16, 2)
            field = spec[fid] if 0 <= fid < len(spec) else None
            if field is None or field[1] != ttype:
                self._skip(ttype, SKIP_DEPTH)
                continue
            got.append((field[2], self._value(ttype, field[3])))

    def _struct(self, type_args: Any) -> Any:
        cls, spec = type_args
        return cls(**dict(self._fields(spec)))

    # -- values --------------------------------------------------------------

    def _value(self, ttype: int, type_args: Any) -> Any:
        if ttype == TType.STRING:
            raw = self._bytes()
            if type_args == "BINARY":
                return raw
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ReadError(f"a string is not UTF-8: {exc}") from None
        if ttype == TType.I64:
            return self._unpack(_I64, 8)[0]
        if ttype == TType.I32:
            return self._unpack(_I32, 4)[0]
        if ttype == TType.STRUCT:
            return self._struct(type_args)
        if ttype == TType.LIST or ttype == TType.SET:
            etype, eargs = type_args[0], type_args[1]
            found, size = self._unpack(_LIST, 5)
            self._check_size(size)
            if size and found != etype:
                raise ReadError(f"list of type {found} where {etype} is declared")
            value = self._value
            items = [value(etype, eargs) for _ in range(size)]
            return items if ttype == TType.LIST else set(items)
        if ttype == TType.MAP:
            ktype, kargs, vtype, vargs = type_args[:4]
            fk, fv, size = self._unpack(_MAP, 6)
            self._check_size(size)
            if size and (fk != ktype or fv != vtype):
                raise ReadError(f"map of {fk}->{fv} where {ktype}->{vtype} is declared")
            value = self._value
            out = {}
            for _ in range(size):
                key = value(ktype, kargs)
                out[key] = value(vtype, vargs)
            return out
        if ttype == TType.BOOL:
            return self._unpack(_I8, 1)[0] != 0
        if ttype == TType.DOUBLE:
            return self._unpack(_DOUBLE, 8)[0]
        if ttype == TType.BYTE:
            return self._unpack(_I8, 1)[0]
        if ttype == TType.I16:
            return self._unpack(_I16, 2)[0]
        raise ReadError(f"unknown type {ttype}")

    def _bytes(self) -> bytes:
        (size,) = self._unpack(_I32, 4)
        if size < 0 or size > self._limit:
            raise ReadError(f"string of {size} bytes (limit {self._limit})")
        start = self._pos
        end = start + size
        if end > len(self._buf):
            raise ReadError("cut short")
        self._pos = end
        return self._buf[start:end]

    def _check_size(self, size: int) -> None:
        if size < 0 or size > self._limit:
            raise ReadError(f"container of {size} elements (limit {self._limit})")

    def _unpack(self, fmt: struct.Struct, size: int) -> tuple:
        pos = self._pos
        if pos + size > len(self._buf):
            raise ReadError("cut short")
        self._pos = pos + size
        return fmt.unpack_from(self._buf, pos)

    # -- what the spec does not know ------------------------------------------

    def _skip(self, ttype: int, depth: int) -> None:
        if depth <= 0:
            raise ReadError("nested too deep")
        fixed = _FIXED.get(ttype)
        if fixed is not None:
            self._unpack(_BYTES[fixed], fixed)
        elif ttype == TType.STRING:
            self._bytes()
        elif ttype == TType.STRUCT:
            while True:
                (inner,) = self._unpack(_I8, 1)
                if inner == TType.STOP:
                    return
                self._unpack(_I16, 2)
                self._skip(inner, depth - 1)
        elif ttype == TType.LIST or ttype == TType.SET:
            etype, size = self._unpack(_LIST, 5)
            self._check_size(size)
            for _ in range(size):
                self._skip(etype, depth - 1)
        elif ttype == TType.MAP:
            ktype, vtype, size = self._unpack(_MAP, 6)
            self._check_size(size)
            for _ in range(size):
                self._skip(ktype, depth - 1)
                self._skip(vtype, depth - 1)
        else:
            raise ReadError(f"unknown type {ttype}")


_FIXED = {TType.BOOL: 1, TType.BYTE: 1, TType.I16: 2, TType.I32: 4, TType.I64: 8, TType.DOUBLE: 8}
_BYTES = {n: struct.Struct(f"!{n}s") for n in set(_FIXED.values())}
