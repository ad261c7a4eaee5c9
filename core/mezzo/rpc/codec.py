"""Encode and decode oneway calls of a generated Thrift service.

A message is ``writeMessageBegin(name, ONEWAY, 0)`` followed by the call's
``<name>_args`` struct, exactly what a generated ``Client`` would send. We build
the bytes ourselves because the generated client is neither thread-safe nor cheap:
the message header of each method is precomputed once and the struct is encoded
in one call into the C accelerator.

Decoding mirrors it: the header is parsed with one ``struct`` call and the method
found by its name's bytes, then the struct is decoded by one call into the C
accelerator. An argument the sender left out arrives as its type's empty value
(``""``, ``b""``, ``0``, ``False``, an empty list, set or map), so handlers need no
structural checks of their own; only a struct argument left out arrives as None,
since "absent" may mean something there (no filters, no kill policy). Going through ``TBinaryProtocol.readMessageBegin`` instead cost
twice as much per message (5.8 µs against 2.7 µs for a status update), and the
scale benchmark handles tens of thousands of messages a second.
"""

from __future__ import annotations

import mmap
import operator
import struct
from collections.abc import Callable
from types import ModuleType
from typing import Any

from thrift.protocol import fastbinary
from thrift.protocol.TBinaryProtocol import TBinaryProtocol
from thrift.Thrift import TMessageType, TType
from thrift.transport.TTransport import TMemoryBuffer

from .framing import DEFAULT_MAX_FRAME, frame
from .spec_reader import SpecReader


class MalformedMessage(Exception):
    """A frame that is not a well-formed oneway call of the expected service."""


_HEADER = struct.Struct("!iI")
"""Version and message type, then the length of the method name."""
_VERSION_MASK = TBinaryProtocol.VERSION_MASK
_VERSION_1 = TBinaryProtocol.VERSION_1
_CALLS = (TMessageType.ONEWAY, TMessageType.CALL)


class _Limits:
    """What the C decoder reads from a protocol object: its transport and bounds."""

    __slots__ = ("container_length_limit", "string_length_limit", "trans")

    def __init__(self, limit: int) -> None:
        self.trans: TMemoryBuffer | None = None
        self.string_length_limit = limit
        self.container_length_limit = limit


_BLANKS: dict[int, Callable[[Any], Any]] = {
    TType.BOOL: lambda args: False,
    TType.BYTE: lambda args: 0,
    TType.I16: lambda args: 0,
    TType.I32: lambda args: 0,
    TType.I64: lambda args: 0,
    TType.DOUBLE: lambda args: 0.0,
    TType.STRING: lambda args: b"" if args == "BINARY" else "",
}
"""The value a left-out argument of each immutable Thrift type gets (given the field's type arguments)."""

_CONTAINERS: dict[int, Callable[[], Any]] = {TType.LIST: list, TType.SET: set, TType.MAP: dict}
"""The same for containers: a fresh one each time, since a handler may keep it."""


class _Method:
    __slots__ = ("args_cls", "blanks", "containers", "fields", "header", "name", "spec", "values")

    # args_cls is a Thrift-generated struct class: untyped, with a class attribute
    # thrift_spec that describes its fields.
    def __init__(self, name: str, args_cls: type[Any]) -> None:
        self.name = name
        self.args_cls = args_cls
        self.spec = [args_cls, args_cls.thrift_spec]
        self.fields = tuple(f[2] for f in args_cls.thrift_spec if f is not None)
        spec = [f for f in args_cls.thrift_spec if f is not None]
        self.blanks = tuple((f[2], _BLANKS[f[1]](f[3])) for f in spec if f[1] in _BLANKS)
        """(name, value) of the arguments of immutable types, for when they are left out."""
        self.containers = tuple((f[2], _CONTAINERS[f[1]]) for f in spec if f[1] in _CONTAINERS)
        """(name, factory) of the container arguments, likewise."""
        # The positional arguments of a decoded call, in one C call.
        if len(self.fields) == 1:
            only = self.fields[0]
            self.values: Callable[[Any], tuple] = lambda args: (getattr(args, only),)
        elif self.fields:
            self.values = operator.attrgetter(*self.fields)
        else:
            self.values = lambda args: ()
        encoded = name.encode("utf-8")
        self.header = (
            struct.pack("!iI", TBinaryProtocol.VERSION_1 | TMessageType.ONEWAY, len(encoded))
            + encoded
            + struct.pack("!i", 0)
        )


class ServiceSchema:
    """The oneway methods of one generated service module (e.g. ``wire.Master``).

    Built once per service; shared by every connection that speaks it.
    """

    def __init__(self, service: ModuleType) -> None:
        self.name = service.__name__.rsplit(".", 1)[-1]
        self.methods: dict[str, _Method] = {}
        for name in dir(service.Iface):
            if name.startswith("_"):
                continue
            args_cls = getattr(service, f"{name}_args", None)
            if args_cls is not None:
                self.methods[name] = _Method(name, args_cls)
        self._by_wire_name = {name.encode("utf-8"): m for name, m in self.methods.items()}
        self._limits: dict[int, _Limits] = {}

    def encode(self, method: str, args: tuple, kwargs: dict) -> bytes:
        """One framed message calling ``method`` with the given arguments."""
        m = self.methods[method]
        payload = fastbinary.encode_binary(m.args_cls(*args, **kwargs), m.spec)
        return frame(m.header + payload)

    def encode_with_text(self, method: str, args: tuple, text: bytes | Utf8Text) -> bytes | memoryview:
        """:meth:`encode` of ``method(*args, text)`` whose last argument is a string,
        already UTF-8: the C encoder copies a long string several times (18 MiB of
        ``mezzo state`` took 90 ms of the master's loop). The call is encoded with an
        empty last argument, whose length and the struct's end are the last five
        bytes, and ``text`` is spliced in there.

        ``bytes`` are copied once (5 ms for 18 MiB). A :class:`Utf8Text` is framed
        in place the first time, without copying it (the answer is a view of its
        buffer, which must not change until sent), and copied once the times after."""
        m = self.methods[method]
        last = m.args_cls.thrift_spec[-1]
        if last is None or last[1] != TType.STRING or len(args) != len(m.fields) - 1:
            raise TypeError(f"{method}: its last argument is not a string, or the others do not match")
        payload = fastbinary.encode_binary(m.args_cls(*args, ""), m.spec)
        head = m.header + payload[:-5]  # without the empty string's length and the stop byte
        if isinstance(text, Utf8Text):
            framed = text.frame_in_place(head)
            if framed is not None:
                return framed
            body: bytes | memoryview = text.view()
        else:
            body = text
        size = len(head) + 4 + len(body) + 1
        return b"".join((struct.pack("!I", size), head, struct.pack("!i", len(body)), body, b"\x00"))

    def decode(self, payload: bytes, max_frame: int = DEFAULT_MAX_FRAME) -> tuple[str, tuple]:
        """Split one frame's payload into ``(method, positional args)``, in one call
        into the C accelerator. It holds the interpreter throughout: about 3 ms per MiB
        of small structs, so a server hands frames above :data:`.offload.INLINE_DECODE_MAX`
        to :meth:`decode_yielding` on another thread instead (:mod:`.offload`).

        Raises :class:`MalformedMessage` naming what is wrong; never anything else.
        """
        m, body = self._header(payload)
        limits = self._limits.get(max_frame)
        if limits is None:
            limits = self._limits[max_frame] = _Limits(max_frame)
        buffer = TMemoryBuffer(payload)
        buffer._buffer.seek(body)
        limits.trans = buffer
        args = m.args_cls()
        try:
            fastbinary.decode_binary(args, limits, m.spec)
        except Exception as exc:
            raise MalformedMessage(f"undecodable arguments of {m.name!r}: {exc!r}") from None
        finally:
            limits.trans = None
        return m.name, self._complete(m, args)

    def decode_yielding(self, payload: bytes, max_frame: int = DEFAULT_MAX_FRAME) -> tuple[str, tuple]:
        """:meth:`decode` in pure Python (:mod:`.spec_reader`): the same result, about
        ten times slower, but Python code gives up the interpreter every switch
        interval (5 ms), so an event loop on another thread keeps running while this
        decodes. Thread-safe (nothing shared is written).

        Raises :class:`MalformedMessage` as :meth:`decode` does, though not always with
        the same words."""
        m, body = self._header(payload)
        args = m.args_cls()
        try:
            SpecReader(payload, body, max_frame).read_into(args, m.args_cls.thrift_spec)
        except Exception as exc:  # noqa: BLE001 - any failure to read is the sender's
            raise MalformedMessage(f"undecodable arguments of {m.name!r}: {exc!r}") from None
        return m.name, self._complete(m, args)

    def _header(self, payload: bytes) -> tuple[_Method, int]:
        """The method a payload calls and the offset of its arguments."""
        try:
            head, name_len = _HEADER.unpack_from(payload, 0)
        except struct.error:
            raise MalformedMessage(f"unreadable message header: {len(payload)} bytes") from None
        if head >= 0 or head & _VERSION_MASK != _VERSION_1:
            raise MalformedMessage(f"not a binary-protocol message (header {head & 0xFFFFFFFF:#010x})")
        mtype = head & 0xFF
        body = 12 + name_len  # past the name and the sequence id
        if body > len(payload):
            # Checked here, not left to the C decoder: it crashes the process when
            # told to start reading past the end of its buffer.
            raise MalformedMessage(f"message header of {len(payload)} bytes is cut short")
        wire_name = payload[8 : 8 + name_len]
        m = self._by_wire_name.get(wire_name)
        if m is None:
            shown = wire_name[:80].decode("utf-8", "replace")
            raise MalformedMessage(f"unknown method {shown!r} for service {self.name}")
        if mtype not in _CALLS:
            raise MalformedMessage(f"message type {mtype} for {m.name!r} is not a call")
        return m, body

    @staticmethod
    def _complete(m: _Method, args: Any) -> tuple:
        """The positional arguments, left-out ones as their type's empty value."""
        for field, blank in m.blanks:
            if getattr(args, field) is None:
                setattr(args, field, blank)
        for field, empty in m.containers:
            if getattr(args, field) is None:
                setattr(args, field, empty())
        return m.values(args)


class Utf8Text:
    """A long text, UTF-8, held with room before it for the head of the message that
    carries it as its last argument and after it for the message's end, so that
    :meth:`ServiceSchema.encode_with_text` frames it without copying it (``mezzo
    state``'s answer: a copy of 18 MiB is 15 to 30 ms of the master's loop here).

    Filled through :meth:`view` (the master reads its state snapshot from the
    rendering child straight into it), then framed in place once; later framings
    copy the text, since the first message may not be sent yet.

    The buffer is anonymous memory (``mmap``): made at once whatever its size, its
    pages zeroed by the kernel as they are first written. A ``bytearray`` of 19 MiB
    is zeroed when made, 15 ms here.
    """

    __slots__ = ("_buffer", "_framed", "size")

    ROOM = 256
    """Bytes kept before the text: more than the head of any message of ours ending in
    a string (frame length, method name, the other arguments, the string's length)."""

    def __init__(self, size: int) -> None:
        self.size = size
        """Bytes of UTF-8."""
        # Private: a child forked meanwhile (the next snapshot) gets a copy-on-write
        # view, not this memory shared. Zeroed: the stop byte is there already.
        self._buffer = mmap.mmap(-1, self.ROOM + size + 1, flags=_PRIVATE)
        self._framed = False

    @classmethod
    def of(cls, data: bytes) -> Utf8Text:
        """``data`` (UTF-8) copied into a new buffer."""
        text = cls(len(data))
        text.view()[:] = data
        return text

    def view(self) -> memoryview:
        """The text's bytes, writable: to fill them before the text is framed."""
        return memoryview(self._buffer)[self.ROOM : self.ROOM + self.size]

    def decode(self) -> str:
        """The text as a ``str`` (a copy)."""
        return str(self.view(), "utf-8")

    def frame_in_place(self, head: bytes) -> memoryview | None:
        """The framed message ``head`` + the text's length + the text + the stop byte,
        written around the text in its buffer (``head`` without the frame's length,
        which is written before it). None if it was framed before (that message may be
        unsent: its head must stay) or ``head`` does not fit in :data:`ROOM`."""
        start = self.ROOM - 4 - len(head) - 4
        if self._framed or start < 0:
            return None
        self._framed = True
        end = self.ROOM + self.size + 1
        buffer = self._buffer
        _FRAME_SIZE.pack_into(buffer, start, end - start - 4)
        buffer[start + 4 : self.ROOM - 4] = head
        _TEXT_SIZE.pack_into(buffer, self.ROOM - 4, self.size)
        return memoryview(buffer)[start:end]


_FRAME_SIZE = struct.Struct("!I")
_TEXT_SIZE = struct.Struct("!i")
_PRIVATE = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
"""Anonymous memory of this process alone (mmap's default is shared)."""


class Remote:
    """Typed stub for calling a peer: ``Remote(send, schema).resource_offers(offers)``.

    ``send`` takes one framed message. Calling a method not in the schema raises
    :class:`AttributeError` at once, so typos fail where they are made.
    """

    def __init__(self, send: Callable[[bytes], None], schema: ServiceSchema) -> None:
        self._send = send
        self._schema = schema

    def __getattr__(self, method: str) -> Callable[..., None]:
        if method not in self._schema.methods:
            raise AttributeError(f"service {self._schema.name} has no method {method!r}")
        encode = self._schema.encode
        send = self._send

        def call(*args: Any, **kwargs: Any) -> None:
            send(encode(method, args, kwargs))

        # Kept on the instance, so later calls of this method skip __getattr__.
        setattr(self, method, call)
        return call
