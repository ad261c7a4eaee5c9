"""Thrift messaging over asyncio: framing, codec, connections, endpoints.

Layers, bottom up (each testable without the next):

- :mod:`.framing` splits a byte stream into length-prefixed frames, bounded in size.
- :mod:`.codec` turns a frame into ``(method, args)`` of a generated Thrift service
  and back, with the accelerated binary protocol.
- :mod:`.connection` is the asyncio protocol: it feeds frames to a handler object,
  coalesces outgoing frames, and maps every bad input to a logged, closed connection.
- :mod:`.endpoint` binds servers and dials clients (TCP_NODELAY on every socket).
"""

from .codec import MalformedMessage, Remote, ServiceSchema
from .connection import TRAFFIC, Connection, Traffic
from .endpoint import connect, parse_address, serve
from .framing import DEFAULT_MAX_FRAME, FrameDecoder, FrameTooLarge

__all__ = [
    "DEFAULT_MAX_FRAME",
    "TRAFFIC",
    "Connection",
    "FrameDecoder",
    "FrameTooLarge",
    "MalformedMessage",
    "Remote",
    "ServiceSchema",
    "Traffic",
    "connect",
    "parse_address",
    "serve",
]
