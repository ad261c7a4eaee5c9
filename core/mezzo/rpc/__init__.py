"""Thrift messaging over asyncio: framing, codec, connections, endpoints.

Layers, bottom up (each testable without the next):

- :mod:`.framing` splits a byte stream into length-prefixed frames, bounded in size.
- :mod:`.codec` turns a frame into ``(method, args)`` of a generated Thrift service
  and back, with the accelerated binary protocol.
- :mod:`.offload` decodes a server's big frames on a worker thread, so that no
  message holds its event loop.
- :mod:`.connection` is the asyncio protocol: it feeds frames to a handler object,
  coalesces outgoing frames, and maps every bad input to a logged, closed connection.
- :mod:`.limits` bounds what a server's peers can make it hold: connections,
  silent and half-sent ones, unread replies.
- :mod:`.listener` accepts a server's connections, each admitted or refused by the
  limiter as it is accepted.
- :mod:`.tls` builds TLS contexts from ``[tls]``, names a peer by its certificate and
  says why a handshake failed.
- :mod:`.endpoint` binds servers and dials clients (TCP_NODELAY on every socket),
  with TLS when given; :mod:`.address` parses the ``HOST:PORT`` they take.
"""

from .. import _lazy_exports

TYPE_CHECKING = False  # not typing's: its import is 2-3 ms of a command's start-up

if TYPE_CHECKING:
    from .address import parse_address
    from .codec import MalformedMessage, Remote, ServiceSchema
    from .connection import TRAFFIC, Connection, Traffic
    from .endpoint import connect, serve
    from .framing import DEFAULT_MAX_FRAME, FrameDecoder, FrameTooLarge
    from .limits import ConnectionLimiter
    from .listener import Listener
    from .tls import ClientTls, ServerTls, client_tls, server_tls

# Imported on first use: a client needing only :mod:`.tls` or :func:`parse_address` (the
# operator's commands) would otherwise load asyncio and the Thrift codec too, 50 ms or more.
__getattr__, __dir__ = _lazy_exports(
    globals(),
    {
        "address": ("parse_address",),
        "codec": ("MalformedMessage", "Remote", "ServiceSchema"),
        "connection": ("TRAFFIC", "Connection", "Traffic"),
        "endpoint": ("connect", "serve"),
        "framing": ("DEFAULT_MAX_FRAME", "FrameDecoder", "FrameTooLarge"),
        "limits": ("ConnectionLimiter",),
        "listener": ("Listener",),
        "tls": ("ClientTls", "ServerTls", "client_tls", "server_tls"),
    },
)

__all__ = [
    "DEFAULT_MAX_FRAME",
    "TRAFFIC",
    "ClientTls",
    "Connection",
    "ConnectionLimiter",
    "FrameDecoder",
    "FrameTooLarge",
    "Listener",
    "MalformedMessage",
    "Remote",
    "ServerTls",
    "ServiceSchema",
    "Traffic",
    "client_tls",
    "connect",
    "parse_address",
    "serve",
    "server_tls",
]
