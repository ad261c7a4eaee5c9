"""FrameDecoder / frame: length-prefixed framing, bounded frame size."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mezzo.rpc.framing import DEFAULT_MAX_FRAME, FrameDecoder, FrameTooLarge, frame


def test_frame_prefixes_big_endian_length():
    assert frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert frame(b"") == b"\x00\x00\x00\x00"
    payload = bytes(range(256)) * 3
    assert frame(payload)[:4] == struct.pack("!I", 768)
    assert frame(payload)[4:] == payload


def test_default_max_frame_is_16_mib():
    assert DEFAULT_MAX_FRAME == 16 * 1024 * 1024


def test_single_frame_in_one_chunk():
    d = FrameDecoder()
    assert d.feed(frame(b"hello")) == [b"hello"]
    assert d.pending == 0


def test_several_frames_in_one_chunk_keep_order():
    d = FrameDecoder()
    data = frame(b"one") + frame(b"") + frame(b"three")
    assert d.feed(data) == [b"one", b"", b"three"]
    assert d.pending == 0


def test_partial_header_and_partial_payload_are_kept():
    d = FrameDecoder()
    data = frame(b"payload")
    assert d.feed(data[:2]) == []
    assert d.pending == 2
    assert d.feed(data[2:6]) == []
    assert d.pending == 6
    assert d.feed(data[6:]) == [b"payload"]
    assert d.pending == 0


def test_trailing_partial_frame_is_kept_after_complete_ones():
    d = FrameDecoder()
    tail = frame(b"second")
    assert d.feed(frame(b"first") + tail[:7]) == [b"first"]
    assert d.pending == 7
    assert d.feed(tail[7:]) == [b"second"]


def test_empty_feed_returns_nothing():
    d = FrameDecoder()
    assert d.feed(b"") == []
    assert d.pending == 0


def test_frames_are_bytes_not_views_of_the_buffer():
    d = FrameDecoder()
    (f,) = d.feed(frame(b"abc") + b"\x00\x00")
    assert type(f) is bytes
    d.feed(b"\x00\x01z")  # buffer compaction must not change the returned frame
    assert f == b"abc"


def test_frame_of_exactly_max_size_is_accepted():
    d = FrameDecoder(max_frame=8)
    assert d.feed(frame(b"x" * 8)) == [b"x" * 8]


def test_oversized_header_raises_before_payload_arrives():
    d = FrameDecoder(max_frame=8)
    with pytest.raises(FrameTooLarge) as ei:
        d.feed(struct.pack("!I", 9))  # only the header: nothing of the payload was sent
    assert ei.value.size == 9
    assert ei.value.limit == 8
    assert "9" in str(ei.value) and "8" in str(ei.value)


def test_oversized_header_split_across_chunks_raises_when_complete():
    d = FrameDecoder(max_frame=1024)
    header = struct.pack("!I", 0xFFFFFFFF)
    assert d.feed(header[:3]) == []
    with pytest.raises(FrameTooLarge) as ei:
        d.feed(header[3:])
    assert ei.value.size == 0xFFFFFFFF


def test_huge_announced_frame_raises_with_default_limit():
    d = FrameDecoder()
    with pytest.raises(FrameTooLarge):
        d.feed(struct.pack("!I", DEFAULT_MAX_FRAME + 1) + b"x" * 100)


def test_oversized_frame_after_a_valid_frame_in_same_chunk_raises():
    d = FrameDecoder(max_frame=16)
    with pytest.raises(FrameTooLarge):
        d.feed(frame(b"ok") + struct.pack("!I", 17))


payloads = st.lists(st.binary(max_size=300), max_size=20)


@settings(max_examples=200, deadline=None)
@given(payloads=payloads, data=st.data())
def test_any_chunking_yields_the_same_frames(payloads, data):
    stream = b"".join(frame(p) for p in payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=30)))
    d = FrameDecoder(max_frame=300)
    out: list[bytes] = []
    prev = 0
    for cut in cuts + [len(stream)]:
        out += d.feed(stream[prev:cut])
        prev = cut
    assert out == payloads
    assert d.pending == 0


@settings(max_examples=100, deadline=None)
@given(payloads=st.lists(st.binary(max_size=50), min_size=1, max_size=10))
def test_byte_at_a_time(payloads):
    stream = b"".join(frame(p) for p in payloads)
    d = FrameDecoder()
    out: list[bytes] = []
    for i in range(len(stream)):
        out += d.feed(stream[i : i + 1])
    assert out == payloads


@settings(max_examples=100, deadline=None)
@given(size=st.integers(min_value=65, max_value=2**32 - 1), split=st.integers(0, 3))
def test_any_oversized_header_raises_however_split(size, split):
    d = FrameDecoder(max_frame=64)
    header = struct.pack("!I", size)
    assert d.feed(header[:split]) == []
    with pytest.raises(FrameTooLarge):
        d.feed(header[split:])
