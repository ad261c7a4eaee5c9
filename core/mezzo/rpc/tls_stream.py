"""TLS over a plain asyncio transport, through the :mod:`ssl` module's memory BIOs.

A :class:`TlsStream` sits between a TCP transport and a protocol (a
:class:`~mezzo.rpc.connection.Connection`): it is the TCP transport's protocol,
and the protocol's transport. Bytes from the socket go into the incoming BIO;
every complete record in them is decrypted at once and handed up as one chunk.
Bytes written come back out of the outgoing BIO as records, one write to the
socket per call.

Why not ``loop.create_connection(..., ssl=context)``: mezzo's master runs on
uvloop, and uvloop's TLS layer (like asyncio's) is a general state machine with
several Python-level calls and an exception per record read. Records here are
small and many (a status update, an acknowledgement), so that overhead, not the
cipher, is what TLS cost: measured on a loopback echo of 120-byte messages, uvloop's
layer added about 60 µs of server CPU per message and this one about 15 µs
(``docs/benchmarks.md``, "What TLS costs"). What this leaves out is what mezzo
does not need: renegotiation (TLS 1.3 has none; TLS 1.2 peers' requests are
refused by OpenSSL's defaults) and half-closed connections (a framed protocol has
no use for them).

Contract with the protocol above, as asyncio's own transports have it:
``connection_made`` once the handshake has succeeded (never before, so the
protocol only ever sees authenticated peers), ``data_received`` with plaintext,
``connection_lost`` once; ``pause_writing``/``resume_writing`` as the socket's
buffer crosses its marks. ``get_extra_info("peercert")`` is the peer's verified
certificate and ``"ssl_object"`` the :class:`ssl.SSLObject`; other names are the
socket's.

A handshake that fails (or takes longer than its timeout) fails the future of
:func:`accept_tls` / :func:`dial_tls` with the :class:`ssl.SSLError` OpenSSL
raised (or :class:`TimeoutError`, or :class:`ConnectionResetError` when the peer
left), so :func:`~mezzo.rpc.tls.handshake_refusal` and
:func:`~mezzo.rpc.tls.dial_failure` can say what went wrong. A failed handshake's
alert is sent to the peer before the socket closes, so it learns why too.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable
from typing import Any, TypeVar, cast

import structlog

log = structlog.get_logger(component="rpc")

P = TypeVar("P", bound=asyncio.Protocol)

_PLAINTEXT_HTTP_BODY = (
    b'{"error":"this port speaks HTTPS (TLS is on): ask https:// with a certificate of the cluster\'s CA",'
    b'"status":400}'
)
PLAINTEXT_HTTP_ANSWER = (
    b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nConnection: close\r\n"
    b"Content-Length: " + str(len(_PLAINTEXT_HTTP_BODY)).encode() + b"\r\n\r\n" + _PLAINTEXT_HTTP_BODY
)
"""What a plaintext HTTP request at a TLS port is answered (OpenSSL recognises one:
``HTTP_REQUEST``), instead of a TLS alert the client could not read."""

RECORD_MAX = 16_384
"""Most plaintext one TLS record carries, so the most one ``SSLObject.read`` returns:
asking for more would only allocate (and shrink) a bigger buffer per record."""


class TlsStream(asyncio.Protocol):
    """One TLS session over one TCP transport; see the module's docstring.

    ``factory`` makes the protocol above once the handshake has succeeded.
    """

    def __init__(
        self,
        context: ssl.SSLContext,
        factory: Callable[[], asyncio.Protocol],
        *,
        server_side: bool,
        server_hostname: str | None = None,
        handshake_timeout: float,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(
            self._incoming, self._outgoing, server_side=server_side, server_hostname=server_hostname
        )
        self._sslobj: Any = getattr(self._ssl, "_sslobj", self._ssl)
        """The C object under :class:`ssl.SSLObject`'s Python methods (the same ``read``,
        ``write``): a Python call less per record, which is what TLS costs at the master;
        the public object, should a Python version not have it."""
        self._factory = factory
        self._loop = loop
        self._handshake_timeout = handshake_timeout
        self._timer: asyncio.TimerHandle | None = None
        self._raw: asyncio.Transport | None = None
        self._app: asyncio.Protocol | None = None
        self._closing = False
        self._lost = False
        self._error: ssl.SSLError | None = None
        """Why the session ended, when a record could not be read: told to the protocol above."""
        self.handshake: asyncio.Future[asyncio.Protocol] = loop.create_future()
        """Done with the protocol above once the handshake succeeds; failed with why it did not."""

    # -- the TCP transport's protocol --------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._raw = transport  # type: ignore[assignment]
        self._timer = self._loop.call_later(self._handshake_timeout, self._handshake_timed_out)
        if not self._ssl.server_side:
            self._shake()  # the client speaks first

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        self._incoming.write(data)
        if self._app is None and (not self._shake() or self._closing):
            return  # mid-handshake, failed, or closed by the protocol just made
        # Every complete record now, one chunk up: the protocol decodes frames from a
        # chunk in one pass, and a record split across reads stays in the BIO. A read
        # takes a whole record (RECORD_MAX), so nothing decrypted is left behind once
        # the BIO is empty.
        read, incoming = self._sslobj.read, self._incoming
        chunks: list[bytes] = []
        try:
            while incoming.pending:
                chunk = read(RECORD_MAX)
                if not chunk:
                    break
                chunks.append(chunk)
        except ssl.SSLWantReadError:
            pass  # a partial record: the rest comes with a later read
        except ssl.SSLZeroReturnError:
            self._deliver(chunks)  # close_notify: the peer is done, as a TCP EOF
            self.close()
            return
        except ssl.SSLError as exc:
            self._deliver(chunks)
            self._fail(exc)
            return
        if self._outgoing.pending:
            self._send_records()  # a post-handshake message's answer (a TLS 1.3 key update)
        self._deliver(chunks)

    def eof_received(self) -> bool | None:
        if self._app is None:
            self._fail_handshake(
                ConnectionResetError("the peer closed the connection during the TLS handshake")
            )
        return False  # closes the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
        if self._app is None:
            self._fail_handshake(
                exc or ConnectionResetError("the peer closed the connection during the TLS handshake")
            )
            return
        self._app.connection_lost(exc or self._error)

    def pause_writing(self) -> None:
        if self._app is not None:
            self._app.pause_writing()

    def resume_writing(self) -> None:
        if self._app is not None:
            self._app.resume_writing()

    # -- the protocol's transport ---------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Encrypt ``data`` (split into records as TLS needs) and write it out, at once."""
        if self._closing or self._raw is None:
            return
        try:
            done = self._sslobj.write(data)
            if done < len(data):  # memory BIOs grow, so never, but SSL_write's contract allows it
                view = memoryview(data)[done:]
                while view:
                    view = view[self._sslobj.write(view) :]
        except ssl.SSLError as exc:
            self._fail(exc)
            return
        self._send_records()

    def get_write_buffer_size(self) -> int:
        return self._raw.get_write_buffer_size() if self._raw is not None else 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if self._raw is not None:
            self._raw.set_write_buffer_limits(high, low)

    def pause_reading(self) -> None:
        if self._raw is not None and not self._lost:
            self._raw.pause_reading()

    def resume_reading(self) -> None:
        if self._raw is not None and not self._lost:
            self._raw.resume_reading()

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Say close_notify, write out what is buffered, then close the socket."""
        if self._closing:
            return
        self._closing = True
        if self._raw is None:
            return
        if self._app is not None:
            try:
                self._ssl.unwrap()
            except ssl.SSLError:
                pass  # the peer's close_notify is not awaited: the socket closes now
            self._send_records()
        self._raw.close()

    def abort(self) -> None:
        """Close the socket at once; buffered bytes are lost."""
        self._closing = True
        if self._raw is not None:
            self._raw.abort()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        """Hand the session to another protocol above (the port's HTTP server)."""
        self._app = protocol  # type: ignore[assignment]

    def get_protocol(self) -> asyncio.BaseProtocol | None:
        return self._app

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "sslcontext":
            return self._ssl.context
        if name == "peercert":
            return self._ssl.getpeercert() if self._app is not None else default
        if name == "ssl_object":
            return self._ssl
        if name == "cipher":
            return self._ssl.cipher()
        return self._raw.get_extra_info(name, default) if self._raw is not None else default

    # -- internals ------------------------------------------------------------------------

    def _shake(self) -> bool:
        """Advance the handshake; True once it is done and the protocol above is made."""
        try:
            self._ssl.do_handshake()
        except ssl.SSLWantReadError:
            self._send_records()
            return False
        except (ssl.SSLError, OSError) as exc:
            if getattr(exc, "reason", None) == "HTTP_REQUEST" and self._raw is not None:
                # A browser or curl at http://: an alert would be noise to it; say it in HTTP.
                self._outgoing.read()
                self._raw.write(PLAINTEXT_HTTP_ANSWER)
            else:
                self._send_records()  # the alert, so the peer learns why
            self._fail_handshake(exc)
            return False
        self._send_records()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        app = self._app = self._factory()
        app.connection_made(self)  # type: ignore[arg-type]
        if not self.handshake.done():
            self.handshake.set_result(app)
        return True

    def _handshake_timed_out(self) -> None:
        self._timer = None
        if self._app is None:
            self._fail_handshake(
                TimeoutError(f"TLS handshake took longer than {self._handshake_timeout:g} s"), abort=True
            )

    def _fail_handshake(self, exc: BaseException, *, abort: bool = False) -> None:
        if not self.handshake.done():
            self.handshake.set_exception(exc)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._closing = True
        if self._raw is not None and not self._lost:
            if abort:
                self._raw.abort()
            else:
                self._raw.close()

    def _fail(self, exc: ssl.SSLError) -> None:
        """A bad record after the handshake (tampered, or not TLS): the session is over."""
        log.info("closing connection: TLS error", error=exc.reason or str(exc))
        self._error = exc
        self._closing = True
        if self._raw is not None:
            self._raw.abort()  # connection_lost follows, and tells the protocol above

    def _send_records(self) -> None:
        if self._outgoing.pending and self._raw is not None and not self._lost:
            self._raw.write(self._outgoing.read())

    def _deliver(self, chunks: list[bytes]) -> None:
        if chunks and self._app is not None:
            self._app.data_received(chunks[0] if len(chunks) == 1 else b"".join(chunks))


async def accept_tls(
    loop: asyncio.AbstractEventLoop,
    factory: Callable[[], P],
    sock: socket.socket,
    context: ssl.SSLContext,
    handshake_timeout: float,
) -> P:
    """Serve an accepted ``sock`` with TLS; the protocol ``factory`` made once the
    handshake succeeded. On failure raises why, with the socket closed."""
    try:
        _, stream = await loop.connect_accepted_socket(
            lambda: TlsStream(
                context, factory, server_side=True, handshake_timeout=handshake_timeout, loop=loop
            ),
            sock,
        )
    except BaseException:
        sock.close()
        raise
    try:
        return cast(P, await stream.handshake)
    except asyncio.CancelledError:
        stream.abort()
        raise


async def dial_tls(
    loop: asyncio.AbstractEventLoop,
    factory: Callable[[], P],
    host: str,
    port: int,
    context: ssl.SSLContext,
    handshake_timeout: float,
) -> P:
    """Dial ``host:port`` with TLS, the server's name checked against ``host``; the
    protocol ``factory`` made once the handshake succeeded. On failure raises why."""
    _, stream = await loop.create_connection(
        lambda: TlsStream(
            context,
            factory,
            server_side=False,
            server_hostname=host,
            handshake_timeout=handshake_timeout,
            loop=loop,
        ),
        host,
        port,
    )
    try:
        return cast(P, await stream.handshake)
    except asyncio.CancelledError:
        stream.abort()  # the dialler gave up: neither a handshake nor a connection is left behind
        raise
