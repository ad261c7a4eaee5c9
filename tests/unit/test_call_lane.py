"""The v1 calls' fast lane parser (mezzo.http.call_lane): exactly one strict shape is
the lane's, every prefix of it waits for more, and anything else goes to aiohttp."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mezzo.http import call_lane
from mezzo.http.call_lane import MAX_BODY, MAX_HEAD, NEED_MORE, NOT_MINE, LaneRequest, parse

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


def test_every_prefix_of_a_lane_call_waits_for_the_rest() -> None:
    raw = request()
    for cut in range(1, len(raw)):
        assert parse(raw[:cut]) == NEED_MORE, raw[:cut]


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


def test_answers_are_http_1_1_with_a_length() -> None:
    assert call_lane.response(202, "") == b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n"
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


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300), st.integers(min_value=0, max_value=len(request())))
def test_fuzz_parse_never_raises(noise: bytes, cut: int) -> None:
    for raw in (noise, request()[:cut] + noise, request(noise)):
        got = parse(raw)
        assert got in (NEED_MORE, NOT_MINE) or isinstance(got, LaneRequest)
        if isinstance(got, LaneRequest):
            assert got.end <= len(raw)
