"""EventBuffer's contract: events wait until pushed, a turn's events leave in one HTTP
chunk, heartbeats only after a silent interval, the bound counts what the connection
has not sent, and a connection found closed ends the stream. (The HTTP tests in
tests/v1 run it against real sockets; this pins the logic down with a recording
transport.)"""

from __future__ import annotations

import asyncio
import json

import pytest

from mezzo.v1.event_buffer import EventBuffer
from mezzo.v1.recordio import RecordReader


class RecordingTransport:
    """What EventBuffer uses of a transport, with its writes kept."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.unsent = 0
        self.closing = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def get_write_buffer_size(self) -> int:
        return self.unsent

    def is_closing(self) -> bool:
        return self.closing


def chunk_payload(chunk: bytes) -> bytes:
    """The payload of one HTTP chunk, checking its framing."""
    size, _, rest = chunk.partition(b"\r\n")
    assert rest.endswith(b"\r\n")
    payload = rest[:-2]
    assert int(size, 16) == len(payload)
    return payload


def types_in(chunk: bytes) -> list[str]:
    return [json.loads(r)["type"] for r in RecordReader().feed(chunk_payload(chunk))]


def test_events_wait_until_pushed_then_leave_once_per_turn() -> None:
    async def main() -> None:
        buffer = EventBuffer(1 << 20)
        buffer.send("SUBSCRIBED", {"framework_id": {"value": "f"}})
        first = buffer.take()
        assert [json.loads(r)["type"] for r in RecordReader().feed(first)] == ["SUBSCRIBED"]
        assert buffer.take() == b""
        buffer.send("HEARTBEAT", None)  # before the head is out: held
        transport = RecordingTransport()
        buffer.push_to(transport)  # type: ignore[arg-type]
        assert [types_in(w) for w in transport.writes] == [["HEARTBEAT"]]
        buffer.send("OFFERS", {"offers": []})
        buffer.send("UPDATE", {"status": {}})
        assert len(transport.writes) == 1  # not yet: at the turn's end
        await asyncio.sleep(0)
        assert [types_in(w) for w in transport.writes] == [["HEARTBEAT"], ["OFFERS", "UPDATE"]]

    asyncio.run(main())


def test_idle_returns_after_a_silent_interval_and_at_close() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        buffer = EventBuffer(1 << 20)
        transport = RecordingTransport()
        buffer.push_to(transport)  # type: ignore[arg-type]
        started = loop.time()
        waiting = asyncio.ensure_future(buffer.idle(0.2))
        await asyncio.sleep(0.1)
        buffer.send("UPDATE", {"status": {}})  # an event restarts the interval
        assert await waiting is False
        assert loop.time() - started >= 0.29
        buffer.heartbeat()  # written at once, restarting it again
        assert types_in(transport.writes[-1]) == ["HEARTBEAT"]
        waiting = asyncio.ensure_future(buffer.idle(10))
        await asyncio.sleep(0)
        buffer.close("done")
        assert await asyncio.wait_for(waiting, 1) is True
        assert buffer.end_reason == "done"

    asyncio.run(main())


def test_the_bound_counts_what_the_connection_has_not_sent() -> None:
    async def main() -> None:
        aborted: list[bool] = []
        buffer = EventBuffer(1000, abort=lambda: aborted.append(True))
        transport = RecordingTransport()
        buffer.push_to(transport)  # type: ignore[arg-type]
        buffer.send("UPDATE", {"status": {"message": "x" * 100}})
        await asyncio.sleep(0)
        transport.unsent = 900  # the peer reads nothing
        buffer.send("UPDATE", {"status": {"message": "x" * 100}})
        assert buffer.closing and aborted == [True]
        assert "not reading" in buffer.end_reason
        writes = len(transport.writes)
        buffer.send("UPDATE", {"status": {}})  # nothing more once closing
        await asyncio.sleep(0)
        assert len(transport.writes) == writes

    asyncio.run(main())


@pytest.mark.parametrize("when", ["flush", "heartbeat"])
def test_a_connection_found_closing_ends_the_stream_as_the_peer_leaving(when: str) -> None:
    async def main() -> None:
        buffer = EventBuffer(1 << 20)
        transport = RecordingTransport()
        buffer.push_to(transport)  # type: ignore[arg-type]
        transport.closing = True
        if when == "flush":
            buffer.send("UPDATE", {"status": {}})
            await asyncio.sleep(0)
        else:
            buffer.heartbeat()
        assert buffer.closing and buffer.end_reason == ""
        assert transport.writes == []
        assert await asyncio.wait_for(buffer.idle(10), 1) is True

    asyncio.run(main())


def test_closing_writes_what_is_buffered_and_nothing_after() -> None:
    async def main() -> None:
        buffer = EventBuffer(1 << 20)
        transport = RecordingTransport()
        buffer.push_to(transport)  # type: ignore[arg-type]
        buffer.send("UPDATE", {"status": {}})
        buffer.close("torn down")
        assert await buffer.idle(10) is True
        buffer.flush()  # the handler's last flush, before the response's end
        assert [types_in(w) for w in transport.writes] == [["UPDATE"]]
        await asyncio.sleep(0)  # the flush scheduled by send() finds nothing to write
        buffer.heartbeat()
        buffer.flush()
        assert len(transport.writes) == 1

    asyncio.run(main())
