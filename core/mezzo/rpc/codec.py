"""Encode and decode oneway calls of a generated Thrift service.

A message is ``writeMessageBegin(name, ONEWAY, 0)`` followed by the call's
``<name>_args`` struct, exactly what a generated ``Client`` would send. We build
the bytes ourselves because the generated client is neither thread-safe nor cheap:
the message header of each method is precomputed once and the struct is encoded
in one call into the C accelerator.
"""

from __future__ import annotations

import struct
from types import ModuleType
from typing import Any, Callable

from thrift.protocol import fastbinary
from thrift.protocol.TBinaryProtocol import TBinaryProtocol, TBinaryProtocolAccelerated
from thrift.Thrift import TMessageType
from thrift.transport.TTransport import TMemoryBuffer

from .framing import DEFAULT_MAX_FRAME, frame


class MalformedMessage(Exception):
    """A frame that is not a well-formed oneway call of the expected service."""


class _Method:
    __slots__ = ("name", "args_cls", "spec", "fields", "header")

    def __init__(self, name: str, args_cls: type) -> None:
        self.name = name
        self.args_cls = args_cls
        self.spec = [args_cls, args_cls.thrift_spec]
        self.fields = tuple(f[2] for f in args_cls.thrift_spec if f is not None)
        encoded = name.encode("utf-8")
        self.header = struct.pack(
            "!iI", TBinaryProtocol.VERSION_1 | TMessageType.ONEWAY, len(encoded)
        ) + encoded + struct.pack("!i", 0)


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

    def encode(self, method: str, args: tuple, kwargs: dict) -> bytes:
        """One framed message calling ``method`` with the given arguments."""
        m = self.methods[method]
        payload = fastbinary.encode_binary(m.args_cls(*args, **kwargs), m.spec)
        return frame(m.header + payload)

    def decode(self, payload: bytes, max_frame: int = DEFAULT_MAX_FRAME) -> tuple[str, tuple]:
        """Split one frame's payload into ``(method, positional args)``.

        Raises :class:`MalformedMessage` naming what is wrong; never anything else.
        """
        try:
            proto = TBinaryProtocolAccelerated(
                TMemoryBuffer(payload),
                string_length_limit=max_frame,
                container_length_limit=max_frame,
            )
            name, mtype, _seqid = proto.readMessageBegin()
        except Exception as exc:  # any decoding failure of hostile bytes
            raise MalformedMessage(f"unreadable message header: {exc!r}") from None
        if mtype not in (TMessageType.ONEWAY, TMessageType.CALL):
            raise MalformedMessage(f"message type {mtype} for {name!r} is not a call")
        m = self.methods.get(name)
        if m is None:
            raise MalformedMessage(f"unknown method {name!r} for service {self.name}")
        args = m.args_cls()
        try:
            args.read(proto)
        except Exception as exc:
            raise MalformedMessage(f"undecodable arguments of {name!r}: {exc!r}") from None
        return name, tuple(getattr(args, f) for f in m.fields)


class Remote:
    """Typed stub for calling a peer: ``Remote(send, schema).resource_offers(offers)``.

    ``send`` takes one framed message. Calling a method not in the schema raises
    :class:`AttributeError` at once, so typos fail where they are made.
    """

    __slots__ = ("_send", "_schema")

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

        return call
