"""mezzo.blocking_http against a real socket: framing, bounds and the errors callers rely on."""

from __future__ import annotations

import socket
import threading

import pytest

from mezzo.blocking_http import ClosedBeforeAnswer, HttpConnection, NotHttp, TooLarge


class OneShotServer:
    """Accepts connections on loopback; each is answered with the next of ``replies``
    (bytes sent in the pieces given, then the connection is left open or closed)."""

    def __init__(self, *replies: tuple[list[bytes], bool]) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.requests: list[bytes] = []
        self._replies = list(replies)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while self._replies:
            conn, _ = self.sock.accept()
            with conn:
                while self._replies:
                    request = conn.recv(65536)
                    if not request:
                        break
                    self.requests.append(request)
                    pieces, close = self._replies.pop(0)
                    for piece in pieces:
                        conn.sendall(piece)
                    if close:
                        break

    def connection(self) -> HttpConnection:
        return HttpConnection("127.0.0.1", self.port, timeout=5)


def test_content_length_answers_over_one_kept_alive_connection() -> None:
    body = b'{"tasks": []}'
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    server = OneShotServer(([head, body], False), ([head + body], False))
    conn = server.connection()
    first = conn.request("GET", "/tasks", headers={"Accept": "application/json"})
    second = conn.request("POST", "/kill", b"taskId=t")
    assert (first.status, first.body, first.header("Content-Type")) == (200, body, "application/json")
    assert second.body == body and not second.will_close
    assert server.requests[0].startswith(b"GET /tasks HTTP/1.1\r\nHost: 127.0.0.1:")
    assert server.requests[1].endswith(b"Content-Length: 8\r\n\r\ntaskId=t")
    conn.close()


def test_chunked_pieces_come_as_they_are_sent_and_the_body_is_whole() -> None:
    chunks = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"5\r\nhello\r\n", b"6;ext=1\r\n wor", b"ld\r\n",
              b"0\r\nTrailer: x\r\n\r\n"]
    server = OneShotServer((chunks, False), (chunks, False))
    conn = server.connection()
    answer = conn.open("POST", "/api/v1/scheduler", b"{}", {"Content-Type": "application/json"})
    assert answer.chunked and list(answer.pieces()) == [b"hello", b" world"]
    assert conn.request("GET", "/again").body == b"hello world"


def test_an_unframed_answer_ends_with_the_connection() -> None:
    server = OneShotServer(([b"HTTP/1.0 200 OK\r\n\r\n", b"all of it"], True))
    answer = server.connection().request("GET", "/")
    assert answer.body == b"all of it" and answer.will_close


@pytest.mark.parametrize(
    ("reply", "error", "words"),
    [
        (b"SSH-2.0-OpenSSH_9.2\r\n", NotHttp, "not an HTTP answer"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", NotHttp, "bad header"),
        (b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 101 + b"\r\n", NotHttp, "header lines"),
        (b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70000, NotHttp, "too long"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 100, TooLarge, "more than"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", NotHttp, "chunk size"),
        (b"", ClosedBeforeAnswer, "without answering"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", ClosedBeforeAnswer, "inside an answer"),
    ],
)
def test_what_is_not_http_or_too_big_is_refused_naming_why(reply, error, words) -> None:
    server = OneShotServer(([reply] if reply else [], True))
    with pytest.raises(error, match=words):
        server.connection().request("GET", "/", max_body=50)


def test_nothing_listening_is_connection_refused() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectionRefusedError):
        HttpConnection("127.0.0.1", port, timeout=2).request("GET", "/")


def test_close_wakes_a_thread_blocked_reading_a_stream() -> None:
    server = OneShotServer(([b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"3\r\nabc\r\n"], False))
    conn = server.connection()
    answer = conn.open("POST", "/stream", b"{}")
    got: list[bytes] = []
    done = threading.Event()

    def read() -> None:
        try:
            for piece in answer.pieces():
                got.append(piece)
        except (OSError, ValueError):
            pass
        done.set()

    threading.Thread(target=read, daemon=True).start()
    while not got:
        done.wait(0.01)
    conn.close()
    assert done.wait(5), "the reader stayed blocked after close()"
    assert got == [b"abc"]
