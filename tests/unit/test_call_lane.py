"""The v1 calls' fast lane parser (mezzo.http.call_lane): exactly one strict shape is
the lane's, every prefix of it waits for more, and anything else goes to aiohttp."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mezzo.http import call_lane
from mezzo.http.call_lane import MAX_BODY, MAX_HEAD, NEED_MORE, NOT_MINE, LaneRequest, NeedMore, parse
from mezzo.http.link import HttpLink

BODY = json.dumps({"type": "REVIVE", "framework_id": {"value": "f-1"}}).encode()


def request(
    body: bytes = BODY, *, path: str = "/api/v1/scheduler", extra: str = "", drop: str = "", version: str = "1.1"
) -> bytes:
    """A call as http.client sends it (pymesos' client), with ``extra`` header lines
    added and the header named ``drop`` left out."""
    headers = {
        "Host": "127.0.0.1:5050",
        "Accept-Encoding": "identity",
        "Content-Length": str(len(body)),
        "Content-Type": "application/json",
        "Accept": "application/json",
        "Mesos-Stream-Id": "0123456789abcdef",
        "Authorization": "Basic Tm9uZTpOb25l",
    }
    headers.pop(drop, None)
    head = f"POST {path} HTTP/{version}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + extra
    return head.encode("latin-1") + b"\r\n" + body


def test_a_call_of_the_common_shape_is_the_lanes() -> None:
    raw = request()
    got = parse(raw)
    basic = "Basic Tm9uZTpOb25l"
    assert got == LaneRequest("0123456789abcdef", BODY, len(raw), basic)
    longer = parse(request(path="/master/api/v1/scheduler"))
    assert longer == LaneRequest("0123456789abcdef", BODY, len(raw) + 7, basic)
    assert parse(request(drop="Authorization")) == LaneRequest("0123456789abcdef", BODY, len(raw) - 35)


def test_pipelined_calls_are_read_one_after_the_other_from_an_offset() -> None:
    first, second = request(), request(b'{"type":"SUPPRESS"}')
    buf = first + second
    one = parse(buf)
    assert isinstance(one, LaneRequest) and one.end == len(first)
    two = parse(buf, one.end)
    assert isinstance(two, LaneRequest) and two.body == b'{"type":"SUPPRESS"}' and two.end == len(buf)


def test_every_prefix_of_a_lane_call_waits_for_the_rest_and_says_how_long_it_is() -> None:
    raw = request()
    head_end = raw.index(b"\r\n\r\n") + 4
    for cut in range(1, len(raw)):
        # Once the head is in, how long the whole request is (nothing to read before then).
        assert parse(raw[:cut]) == (NEED_MORE if cut < head_end else NeedMore(len(raw))), raw[:cut]


@pytest.mark.parametrize(
    "raw",
    [
        b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n",
        b"G",
        b"POST /api/v1/schedulerX HTTP/1.1\r\n",
        b"POST /state HTTP/1.1\r\n",
        request(version="1.0"),
        request(path="/api/v1/executor"),
        request(drop="Mesos-Stream-Id"),  # a SUBSCRIBE: its answer is a stream
        request(drop="Content-Length"),
        request(drop="Content-Type"),
        request(extra="Transfer-Encoding: chunked\r\n"),
        request(extra="Expect: 100-continue\r\n"),
        request(extra="Origin: http://elsewhere.example\r\n"),
        request(extra="Sec-Fetch-Site: cross-site\r\n"),
        request(extra="Connection: close\r\n"),
        request(extra="Upgrade: websocket\r\n"),
        request(extra="Content-Length: 3\r\n"),  # a repeat
        request(extra="X-Folded: a\r\n  b\r\n"),
        request(extra="X-Space : a\r\n"),
        request(extra="X-Utf8: \u00e9\r\n"),
        request(extra="X-Control: a\x01b\r\n"),
        request(b" " * (MAX_BODY + 1)),
        request().replace(b"Content-Length: ", b"Content-Length: +"),
        request().replace(b"application/json", b"text/plain"),
        b"POST /api/v1/scheduler HTTP/1.1\r\n" + b"X-Long: " + b"a" * MAX_HEAD,
    ],
)
def test_anything_else_is_aiohttps(raw: bytes) -> None:
    assert parse(raw) == NOT_MINE


def test_a_content_type_with_parameters_and_keep_alive_are_still_the_lanes() -> None:
    raw = request().replace(b"application/json", b"application/json; charset=utf-8")
    assert isinstance(parse(raw), LaneRequest)
    assert isinstance(parse(request(extra="Connection: keep-alive\r\n")), LaneRequest)


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def test_answers_are_http_1_1_with_a_length_and_a_date() -> None:
    import email.utils
    import time

    raw = call_lane.response(202, "")
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.1 202 Accepted" and "Content-Length: 0" in lines and body == b""
    date = next(line for line in lines if line.startswith("Date: "))[6:]
    assert abs(email.utils.parsedate_to_datetime(date).timestamp() - time.time()) < 5
    text = "Failed to validate scheduler::Call: type: é"
    raw = call_lane.response(400, text)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert f"Content-Length: {len(body)}".encode() in head and body.decode() == text


def test_a_failure_of_the_masters_code_is_a_500_not_an_exception() -> None:
    def broken(stream_id, principal, body, authorization):
        raise RuntimeError("boom")

    raw = call_lane.answer(broken, LaneRequest("s", b"{}", 0), None)
    assert raw is not None and raw.startswith(b"HTTP/1.1 500 ")
    head, _, body = raw.partition(b"\r\n\r\n")
    # As the aiohttp route's json_errors answers it.
    assert b"Content-Type: application/json" in head
    assert json.loads(body) == {"error": "internal error (logged by the daemon)", "status": 500}


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300), st.integers(min_value=0, max_value=len(request())))
def test_fuzz_parse_never_raises(noise: bytes, cut: int) -> None:
    for raw in (noise, request()[:cut] + noise, request(noise)):
        got = parse(raw)
        assert got == NOT_MINE or isinstance(got, (LaneRequest, NeedMore))
        if isinstance(got, LaneRequest):
            assert got.end <= len(raw)
        if isinstance(got, NeedMore) and got.until:
            assert got.until > len(raw)


# -- the link's side: HttpLink._through_lane --------------------------------------------


class Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data) -> None:
        self.written.append(bytes(data))

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name, default=None):
        return default

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass


class Aiohttp:
    """What aiohttp's handler would be given."""

    def __init__(self) -> None:
        self.received = bytearray()

    def connection_made(self, transport) -> None:
        pass

    def data_received(self, data) -> None:
        self.received += data


class Limiter:
    """Records what the link tells the port's limiter."""

    class Settings:
        write_buffer_high = 1 << 20

    settings = Settings()

    def __init__(self) -> None:
        self.held: list[int] = []

    def received(self, conn, frames, now) -> None:
        self.held.append(conn.pending_input)


def link(lane=None) -> tuple[HttpLink, Transport, Aiohttp, Limiter]:
    import asyncio

    handler, transport, limiter = Aiohttp(), Transport(), Limiter()
    lk = HttpLink(handler, limiter, asyncio.new_event_loop(), lane=lane or (lambda *a: (202, "")))  # type: ignore[arg-type]
    lk.connection_made(transport)  # type: ignore[arg-type]
    return lk, transport, handler, limiter


def test_a_request_trickled_byte_by_byte_is_parsed_a_bounded_number_of_times(monkeypatch) -> None:
    calls = []
    real = call_lane.parse
    monkeypatch.setattr(call_lane, "parse", lambda buf, start=0: calls.append(len(buf)) or real(buf, start))
    lk, transport, handler, _ = link()
    raw = request(b'{"type":"REVIVE"' + b" " * 5000 + b"}", extra="X-Pad: " + "a" * 4000 + "\r\n")
    for i in range(len(raw)):
        lk.data_received(raw[i : i + 1])
    assert [status_of(w) for w in transport.written] == [202] and not handler.received
    # The first byte, the head once whole, the request once whole: not once a byte.
    assert len(calls) == 3, calls


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=400), min_size=1, max_size=30))
def test_however_the_bytes_are_cut_the_answers_and_what_aiohttp_gets_are_the_same(cuts) -> None:
    tail = b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n"
    raw = request() + request(b'{"type":"SUPPRESS"}') + tail
    lk, transport, handler, _ = link()
    at = 0
    for size in cuts:
        lk.data_received(raw[at : at + size])
        at += size
    lk.data_received(raw[at:])
    assert [status_of(w) for w in transport.written] == [202, 202]
    assert bytes(handler.received) == tail


def test_the_start_of_a_request_after_an_answered_one_is_held_input_for_the_limiter() -> None:
    lk, transport, _, limiter = link()
    partial = request()[:60]
    lk.data_received(request() + partial)
    assert [status_of(w) for w in transport.written] == [202]
    # Its clock runs and its bytes count, as a frame begun in a read.
    assert lk.pending_input == len(partial) and limiter.held[-1] == len(partial)
