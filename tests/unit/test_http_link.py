"""HttpLink's flow control and request clocks (pure logic: a transport and a handler
that record what they are told, a real ConnectionLimiter; the real thing end to end is
tests/test_http_api.py)."""

from __future__ import annotations

import asyncio

from mezzo.config import ConnectionsConfig
from mezzo.http.link import HttpLink
from mezzo.master.records import ENDED_MESSAGE_MAX, REASON_MAX, STATUS_MESSAGE_MAX, TaskRecord
from mezzo.rpc.limits import ConnectionLimiter
from mezzo.wire.ttypes import TaskInfo


class Transport:
    def __init__(self) -> None:
        self.reading = True
        self.closing = False
        self.aborted = False
        self.written = b""

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_closing(self) -> bool:
        return self.closing

    def abort(self) -> None:
        self.closing = self.aborted = True

    def close(self) -> None:
        self.closing = True

    def write(self, data) -> None:
        self.written += bytes(data)

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass

    def get_extra_info(self, name, default=None):
        return default


class Handler:
    def __init__(self) -> None:
        self.got = b""

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.got += data

    def pause_writing(self) -> None:
        pass

    def resume_writing(self) -> None:
        pass

    def connection_lost(self, exc) -> None:
        pass


def link_with(settings: ConnectionsConfig) -> tuple[HttpLink, Transport, Handler, ConnectionLimiter, asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    limiter = ConnectionLimiter(settings)
    handler, transport = Handler(), Transport()
    link = HttpLink(handler, limiter, loop)  # type: ignore[arg-type]
    address = limiter.admit(("127.0.0.1", 1), loop.time())
    limiter.made(link, address, loop.time())  # type: ignore[arg-type]
    link.connection_made(transport)  # type: ignore[arg-type]
    return link, transport, handler, limiter, loop


def test_a_client_catching_up_does_not_undo_the_pause_aiohttp_asked_for() -> None:
    link, transport, _, _, loop = link_with(ConnectionsConfig())
    try:
        link.pause_reading()  # aiohttp: 32 pipelined requests queued
        link.pause_writing()  # and the client stopped reading
        link.resume_writing()  # the client caught up
        assert transport.reading is False  # still aiohttp's pause
        link.resume_reading()
        assert transport.reading is True
        link.pause_writing()
        link.resume_reading()  # aiohttp has room, but the client's backlog holds reading
        assert transport.reading is False
        link.resume_writing()
        assert transport.reading is True
    finally:
        loop.close()


def test_the_time_a_handler_takes_is_not_held_against_the_client() -> None:
    link, transport, _, limiter, loop = link_with(ConnectionsConfig(first_frame_timeout=10, partial_frame_timeout=30))
    try:
        now = loop.time()
        link.data_received(b"GET /state HTTP/1.1\r\nHost: x\r\n\r\n")
        link.request_arrived()  # the handler started: a state that takes a minute to render
        limiter.sweep(now + 60)
        assert not transport.aborted
        link.data_received(b"GET /state HTTP/1.1\r\n")  # the next request, never finished
        limiter.sweep(loop.time() + 31)
        assert transport.aborted
    finally:
        loop.close()


def test_a_link_dropped_for_what_it_sent_passes_none_of_it_on() -> None:
    link, transport, handler, limiter, loop = link_with(ConnectionsConfig(partial_frames_max_bytes=1))
    try:
        limiter.partial_budget = 10  # at least a frame in real life; tiny here
        link.data_received(b"POST /teardown HTTP/1.1\r\n" + b"x" * 100)
        assert transport.aborted and handler.got == b""
    finally:
        loop.close()


def test_an_ended_tasks_history_keeps_a_bounded_message_and_its_own_statuses() -> None:
    task = TaskRecord("fw", "agent", TaskInfo(task_id="t", name="n", agent_id="agent"), resources=None)  # type: ignore[arg-type]
    task.message = "x" * 10_000_000
    task.moved_to(2, 1.0)
    ended = task.ended("*")
    assert len(ended.message) == ENDED_MESSAGE_MAX
    task.moved_to(3, 2.0)
    assert [s[0] for s in ended.statuses] == [task.statuses[0][0], 2]  # not changed after
    task.moved_to(4, 3.0, "reason_x", "y" * 10_000, "agent")
    assert task.statuses[-1] == (4, 3.0, "reason_x", "y" * STATUS_MESSAGE_MAX, "agent")  # bounded too
    task.moved_to(5, 4.0, "r" * 10_000, "", "s" * 10_000)  # what a hostile executor may send
    assert task.statuses[-1] == (5, 4.0, "r" * REASON_MAX, "", "s" * REASON_MAX)
