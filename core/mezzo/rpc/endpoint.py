"""Binding servers and dialling peers.

``serve`` binds a listening socket whose every accepted connection dispatches to
one shared handler; ``connect`` dials a peer and returns the connection. Both set
TCP_NODELAY (Apache Thrift's TSocket never does, and pipelined messages then stall
on Nagle's algorithm). A server's connections are bounded by the
:class:`~mezzo.rpc.limits.ConnectionLimiter` it is given (the daemons always give
one); a dialled connection has no bounds but ``max_frame``, and TCP keepalive on
(a peer lost behind a partition is found by the kernel: see
:func:`~mezzo.rpc.connection._set_keepalive`). With TLS (:mod:`.tls`)
both sides run the handshake before the connection is made: a server's peer is
refused if it fails it, a client's dial raises :class:`OSError` saying why.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Any

from .address import parse_address as parse_address  # callers and tests import it from here too
from .codec import ServiceSchema
from .connection import Connection
from .framing import DEFAULT_MAX_FRAME
from .limits import ConnectionLimiter
from .listener import Listener, bind
from .offload import OFFLOAD
from .tls import ClientTls, ServerTls, dial_failure
from .tls_stream import dial_tls

LISTEN_BACKLOG = 4096
"""Pending connections a listening socket queues (the kernel caps it at somaxconn)."""


async def serve(
    host: str,
    port: int,
    schema: ServiceSchema,
    handler: Any,
    *,
    max_frame: int = DEFAULT_MAX_FRAME,
    limiter: ConnectionLimiter | None = None,
    tls: ServerTls | None = None,
    handoff: Callable[[Connection], asyncio.Protocol] | None = None,
) -> Listener:
    """Listen on ``host:port`` (port 0 picks a free one) dispatching to ``handler``.

    Every accepted socket is admitted or refused by ``limiter`` as it is accepted,
    and its connection bounded by it (None: unbounded, for tests of the layers
    below). With ``tls``, every peer first completes a TLS handshake, within
    ``tls.handshake_timeout`` (the limiter counts it meanwhile). Frames too big to
    decode without holding the loop are decoded on the
    process's worker thread (:mod:`.offload`). The result stands in for an
    ``asyncio.Server``: ``sockets``, ``close()``, ``wait_closed()``. With ``handoff``, a
    connection whose first byte is a letter is given to the protocol it makes (the
    HTTP API sharing the port, :mod:`mezzo.http`), within the same bounds.
    """
    loop = asyncio.get_running_loop()
    # After a master failover every agent and scheduler dials the new leader at
    # once; with asyncio's default backlog of 100, connections beyond the queue are
    # dropped and the kernel retries them a second later (bench/failover.py).
    sockets = await bind(host, port, LISTEN_BACKLOG)
    return Listener(
        sockets,
        lambda address: Connection(
            schema,
            handler,
            max_frame=max_frame,
            loop=loop,
            limiter=limiter,
            address=address,
            offload=OFFLOAD,
            handoff=handoff,
        ),
        limiter,
        tls,
    )


async def connect(
    host: str,
    port: int,
    schema: ServiceSchema,
    handler: Any,
    *,
    max_frame: int = DEFAULT_MAX_FRAME,
    tls: ClientTls | None = None,
) -> Connection:
    """Dial ``host:port``; incoming calls of ``schema`` go to ``handler``.

    With ``tls`` the server's certificate is checked (and the host dialled against
    it); a failed handshake raises :class:`OSError` naming what to check."""
    loop = asyncio.get_running_loop()

    def make() -> Connection:
        return Connection(schema, handler, max_frame=max_frame, loop=loop, keepalive=True)

    if tls is None:
        _transport, conn = await loop.create_connection(make, host, port)
        return conn
    try:
        conn = await dial_tls(loop, make, host, port, tls.context, tls.handshake_timeout)
    except (ssl.SSLError, ConnectionResetError, ConnectionAbortedError, TimeoutError) as exc:
        raise dial_failure(exc, host, port) from None
    return conn
