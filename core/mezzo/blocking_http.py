"""HTTP/1.1 on one blocking socket: the command line's way to talk to a master.

``http.client`` would do, but it imports the ``email`` package to parse headers,
about a tenth of what ``mezzo ps`` may cost in all. The clients here speak to one
kind of server (a master's HTTP API, aiohttp) and need little: a request with a
small body, an answer framed by ``Content-Length``, ``chunked`` or the end of the
connection, and, for a v1 subscription, the chunks of an answer as they come.

    conn = HttpConnection("127.0.0.1", 5050, timeout=10)       # context=ssl_ctx for TLS
    answer = conn.request("GET", "/tasks", headers={"Accept": "application/json"})
    answer.status, answer.header("content-type"), answer.body
    stream = conn.open("POST", "/api/v1/scheduler", body, headers)  # body read as it comes:
    for piece in stream.pieces(): ...

Errors are the socket's own (``ConnectionRefusedError``, ``TimeoutError``,
``ssl.SSLError``, ...), and :class:`NotHttp` (a ``ConnectionError``) when the peer
answered something that is not HTTP/1.x or broke a bound: a status line or header
longer than :data:`LINE_MAX`, more than :data:`HEADERS_MAX` headers, or a body
longer than the caller's ``max_body`` (:class:`TooLarge`). A connection the server closed before answering (a
kept-alive one it timed out) raises :class:`ClosedBeforeAnswer`, so a caller may
ask again on a new one.
"""

from __future__ import annotations

import re
import socket

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ssl
    from collections.abc import Iterator
    from typing import BinaryIO

LINE_MAX = 64 * 1024
"""The longest status line, header line or chunk-size line read."""
HEADERS_MAX = 100
"""The most header lines in one answer."""
PIECE_MAX = 16 << 20
"""The largest chunk of a chunked answer read (a bigger one is refused, not allocated)."""
_DECIMAL = re.compile(rb"[0-9]{1,18}")
_HEX = re.compile(rb"[0-9a-fA-F]{1,15}")


class NotHttp(ConnectionError):
    """The peer's answer is not HTTP/1.x, or not within this client's bounds."""


class TooLarge(NotHttp):
    """The answer's body is longer than the caller reads."""


class ClosedBeforeAnswer(ConnectionResetError):
    """The server closed the connection before a status line came."""


class Answer:
    """A response's status line and headers; the body is read by :meth:`HttpConnection.request`
    (``body``) or piece by piece (:meth:`pieces`)."""

    def __init__(self, status: int, headers: dict[str, str], source: BinaryIO) -> None:
        self.status = status
        self.headers = headers
        """Header names lowercased; a repeated header keeps its last value."""
        self.body = b""
        self._source = source
        self.chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = headers.get("content-length")
        if length is not None and not self.chunked and not _DECIMAL.fullmatch(length.encode("latin-1")):
            raise NotHttp(f"bad Content-Length {length[:40]!r}")
        self.length = int(length) if length is not None and not self.chunked else None
        """The body's length when the server said it (None: chunked, or until the connection ends)."""
        self.will_close = headers.get("connection", "").lower() == "close" or (
            self.length is None and not self.chunked
        )

    def header(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name.lower(), default)

    def read_body(self, max_body: int) -> bytes:
        """The whole body (:class:`NotHttp` past ``max_body`` bytes)."""
        if self.length is not None:
            if self.length > max_body:
                raise TooLarge(f"an answer of {self.length} bytes, more than the {max_body} read")
            return _read_exactly(self._source, self.length)
        parts: list[bytes] = []
        size = 0
        for piece in self.pieces():
            size += len(piece)
            if size > max_body:
                raise TooLarge(f"an answer of more than the {max_body} bytes read")
            parts.append(piece)
        return b"".join(parts)

    def pieces(self) -> Iterator[bytes]:
        """The body as it arrives: each chunk of a chunked answer, else what each read
        brings; ends with the body (the connection's end for an unframed one)."""
        source = self._source
        if self.chunked:
            while True:
                line = source.readline(LINE_MAX)
                if not line.endswith(b"\n"):
                    raise ClosedBeforeAnswer("the connection ended inside a chunked answer")
                digits = line.split(b";", 1)[0].strip()
                if not _HEX.fullmatch(digits):
                    raise NotHttp(f"bad chunk size line {line[:40]!r}")
                size = int(digits, 16)
                if size > PIECE_MAX:
                    raise TooLarge(f"a chunk of {size} bytes, more than the {PIECE_MAX} read at once")
                if size == 0:
                    while source.readline(LINE_MAX) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return
                piece = _read_exactly(source, size)
                source.readline(LINE_MAX)  # the CRLF ending the chunk
                yield piece
        elif self.length is not None:
            left = self.length
            while left:
                piece = source.read1(min(left, 1 << 16))  # type: ignore[attr-defined]
                if not piece:
                    raise ClosedBeforeAnswer("the connection ended inside an answer")
                left -= len(piece)
                yield piece
        else:
            while piece := source.read1(1 << 16):  # type: ignore[attr-defined]
                yield piece


class HttpConnection:
    """One connection to ``host:port`` (TLS with ``context``), opened on first use,
    kept alive between requests; not thread-safe."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        timeout: float,
        context: ssl.SSLContext | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.timeout = timeout
        self._context = context
        self._sock: socket.socket | None = None
        self._file: BinaryIO | None = None

    def request(
        self,
        method: str,
        target: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        *,
        max_body: int = 1 << 30,
    ) -> Answer:
        """Send a request and read its whole answer (``Answer.body``)."""
        answer = self.open(method, target, body, headers)
        answer.body = answer.read_body(max_body)
        if answer.will_close:
            self.close()
        return answer

    def open(
        self, method: str, target: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> Answer:
        """Send a request and read its answer's head; the body is the caller's to read
        (:meth:`Answer.read_body` or :meth:`Answer.pieces`) before the next request."""
        if self._sock is None:
            self._connect()
        assert self._sock is not None and self._file is not None
        host = f"[{self.host}]" if ":" in self.host else self.host
        lines = [f"{method} {target} HTTP/1.1", f"Host: {host}:{self.port}"]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        if body is not None or method in ("POST", "PUT"):
            lines.append(f"Content-Length: {len(body or b'')}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        self._sock.sendall(head + body if body else head)
        return _read_head(self._file)

    def set_read_timeout(self, seconds: float | None) -> None:
        """From now on wait at most ``seconds`` (None: for ever) for each read: a stream
        that may be quiet for a while reads with a timeout longer than the requests'."""
        if self._sock is not None:
            self._sock.settimeout(seconds)

    def close(self) -> None:
        """Close the connection; a thread blocked reading it wakes up (end of stream)."""
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # close() alone leaves a reader blocked in recv
            except OSError:
                pass  # already gone
            sock.close()
        if self._file is not None:
            self._file.close()
            self._file = None

    def _connect(self) -> None:
        # An ASCII name given as bytes: a str host loads the IDNA codec (1 ms of a CLI
        # command's start-up) only to encode what is ASCII already.
        host = self.host.encode("ascii") if self.host.isascii() else self.host
        sock = socket.create_connection((host, self.port), timeout=self.timeout)  # type: ignore[arg-type]
        # One small request, then a wait for the answer: Nagle's algorithm would hold
        # a TLS record back for the server's delayed ACK (40 ms on Linux).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._context is not None:
            try:
                sock = self._context.wrap_socket(sock, server_hostname=self.host)
            except BaseException:
                sock.close()
                raise
        self._sock = sock
        self._file = sock.makefile("rb")


def _read_head(source: BinaryIO) -> Answer:
    line = source.readline(LINE_MAX)
    if not line:
        raise ClosedBeforeAnswer("the server closed the connection without answering")
    parts = line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise NotHttp(f"not an HTTP answer: {line[:40]!r}")
    headers: dict[str, str] = {}
    for _ in range(HEADERS_MAX + 1):
        line = source.readline(LINE_MAX)
        if line in (b"\r\n", b"\n"):
            return Answer(int(parts[1]), headers, source)
        if not line.endswith(b"\n"):
            raise NotHttp("the answer's head was cut off or has a header line too long")
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep:
            raise NotHttp(f"bad header line {line[:40]!r}")
        headers[name.strip().lower()] = value.strip()
    raise NotHttp(f"more than {HEADERS_MAX} header lines")


def _read_exactly(source: BinaryIO, size: int) -> bytes:
    data = source.read(size)
    if len(data) < size:
        raise ClosedBeforeAnswer("the connection ended inside an answer")
    return data
