"""Connection (asyncio protocol) against a fake transport: dispatch, errors, sending."""

from __future__ import annotations

import asyncio
import socket
import threading

import structlog.testing
from mezzo.rpc.codec import Remote
from mezzo.rpc.connection import Connection
from mezzo.rpc.framing import frame
from mezzo.services import MASTER, SCHEDULER


def run(coro, timeout: float = 5.0):
    async def bounded():
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


class FakeTransport(asyncio.Transport):
    """Behaves like a selector transport: ``close`` calls ``connection_lost`` on the next turn."""

    def __init__(self, protocol: asyncio.Protocol, sock=None, peer=("10.1.2.3", 4567)) -> None:
        super().__init__()
        self._protocol = protocol
        self._extra = {"peername": peer, "socket": sock}
        self.writes: list[bytes] = []
        self.write_threads: list[int] = []
        self.closed = False

    def get_extra_info(self, name, default=None):
        return self._extra.get(name, default)

    def write(self, data) -> None:
        assert not self.closed, "write after close"
        self.writes.append(bytes(data))
        self.write_threads.append(threading.get_ident())

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            asyncio.get_running_loop().call_soon(self._protocol.connection_lost, None)

    def is_closing(self) -> bool:
        return self.closed


class Handler:
    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.lost: list[Connection] = []

    def kill_task(self, conn, framework_id, task_id):
        self.calls.append(("kill_task", conn, framework_id, task_id))

    def unregister_framework(self, conn, framework_id):
        self.calls.append(("unregister_framework", conn, framework_id))

    def set_needs_offers(self, conn, framework_id, needs):
        self.calls.append(("set_needs_offers", framework_id, needs))
        raise RuntimeError("handler bug")

    def connection_lost(self, conn):
        self.lost.append(conn)


def make(handler=None, sock=None, **kw):
    handler = handler if handler is not None else Handler()
    conn = Connection(MASTER, handler, **kw)
    transport = FakeTransport(conn, sock=sock)
    conn.connection_made(transport)
    return conn, transport, handler


async def turns(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def msg(method: str, *args) -> bytes:
    return MASTER.encode(method, args, {})


def test_dispatches_to_handler_with_connection_first():
    async def main():
        conn, transport, h = make()
        assert conn.peer == "10.1.2.3:4567"
        assert conn.is_open
        conn.data_received(msg("kill_task", "fw-1", "t-1") + msg("unregister_framework", "fw-1"))
        assert h.calls == [("kill_task", conn, "fw-1", "t-1"), ("unregister_framework", conn, "fw-1")]

    run(main())


def test_frame_split_over_many_data_received_calls():
    async def main():
        conn, transport, h = make()
        data = msg("kill_task", "fw-1", "t-1") * 3
        for i in range(len(data)):
            conn.data_received(data[i : i + 1])
        assert [c[0] for c in h.calls] == ["kill_task"] * 3

    run(main())


def test_oversized_frame_closes_and_logs_peer():
    async def main():
        conn, transport, h = make(max_frame=64)
        with structlog.testing.capture_logs() as logs:
            conn.data_received((1000).to_bytes(4, "big"))
            await turns()
        assert transport.closed
        assert not conn.is_open and conn.closed.done()
        assert h.lost == [conn]
        warn = [e for e in logs if e["log_level"] == "warning"]
        assert warn and "oversized" in warn[0]["event"] and warn[0]["peer"] == "10.1.2.3:4567"

    run(main())


def test_malformed_message_closes_logs_and_stops_dispatch():
    async def main():
        conn, transport, h = make()
        with structlog.testing.capture_logs() as logs:
            conn.data_received(frame(b"\x80\x01\x00\x04garbage") + msg("kill_task", "fw", "t"))
            await turns()
        assert transport.closed
        assert h.calls == []  # nothing after the bad frame is trusted
        warn = [e for e in logs if e["log_level"] == "warning"]
        assert warn and "malformed" in warn[0]["event"] and warn[0]["peer"] == "10.1.2.3:4567"

    run(main())


def test_message_of_wrong_service_is_malformed():
    async def main():
        conn, transport, h = make()
        conn.data_received(SCHEDULER.encode("offer_rescinded", ("m-O1",), {}))
        await turns()
        assert transport.closed

    run(main())


def test_frames_before_a_malformed_one_are_dispatched():
    async def main():
        conn, transport, h = make()
        conn.data_received(msg("kill_task", "fw", "t") + frame(b"junk"))
        await turns()
        assert [c[0] for c in h.calls] == ["kill_task"]
        assert transport.closed

    run(main())


def test_handler_exception_is_logged_and_connection_keeps_serving():
    async def main():
        conn, transport, h = make()
        with structlog.testing.capture_logs() as logs:
            conn.data_received(msg("set_needs_offers", "fw", True) + msg("kill_task", "fw", "t"))
            conn.data_received(msg("unregister_framework", "fw"))
            await turns()
        assert not transport.closed and conn.is_open
        assert [c[0] for c in h.calls] == ["set_needs_offers", "kill_task", "unregister_framework"]
        errors = [e for e in logs if e["log_level"] == "error"]
        assert len(errors) == 1
        assert errors[0]["method"] == "set_needs_offers" and errors[0].get("exc_info")

    run(main())


def test_handler_without_the_method_does_not_close():
    async def main():
        conn, transport, h = make()
        with structlog.testing.capture_logs():
            conn.data_received(msg("request_state", 5) + msg("kill_task", "fw", "t"))
            await turns()
        assert not transport.closed
        assert [c[0] for c in h.calls] == ["kill_task"]

    run(main())


def test_frames_after_handler_closes_the_connection_are_not_dispatched():
    """A handler that closes its connection (e.g. a protocol violation) must not be
    called again for the rest of the chunk that is already buffered."""

    class Closer(Handler):
        def kill_task(self, conn, framework_id, task_id):
            super().kill_task(conn, framework_id, task_id)
            conn.close()

    async def main():
        conn, transport, h = make(Closer())
        conn.data_received(msg("kill_task", "fw", "t1") + msg("kill_task", "fw", "t2"))
        await turns()
        assert transport.closed
        assert [c[3] for c in h.calls] == ["t1"]

    run(main())


def test_sends_in_one_turn_coalesce_into_one_write():
    async def main():
        conn, transport, h = make()
        a, b, c = (SCHEDULER.encode("offer_rescinded", (f"m-O{i}",), {}) for i in range(3))
        conn.send(a)
        conn.send(b)
        conn.send(c)
        assert transport.writes == []  # nothing leaves before the loop turns
        await turns()
        assert transport.writes == [a + b + c]
        conn.send(a)
        await turns()
        assert transport.writes == [a + b + c, a]

    run(main())


def test_remote_stub_is_cached_and_sends_through_connection():
    async def main():
        conn, transport, h = make()
        stub = conn.remote(SCHEDULER)
        assert isinstance(stub, Remote)
        assert conn.remote(SCHEDULER) is stub
        stub.registered("fw-1", "m:5050")
        await turns()
        assert transport.writes == [SCHEDULER.encode("registered", ("fw-1", "m:5050"), {})]

    run(main())


def test_close_flushes_queued_messages_first():
    async def main():
        conn, transport, h = make()
        m = SCHEDULER.encode("error", ("bye",), {})
        conn.send(m)
        conn.close()
        assert transport.writes == [m] and transport.closed
        conn.close()  # idempotent
        await turns()
        assert h.lost == [conn]
        assert conn.closed.done()

    run(main())


def test_send_after_close_is_dropped_silently():
    async def main():
        conn, transport, h = make()
        conn.close()
        await turns()
        assert not conn.is_open
        conn.send(SCHEDULER.encode("error", ("late",), {}))
        conn.remote(SCHEDULER).agent_lost("ag")
        await turns()
        assert transport.writes == []

    run(main())


def test_connection_lost_handler_exception_is_swallowed():
    class BadLost(Handler):
        def connection_lost(self, conn):
            raise RuntimeError("boom")

    async def main():
        conn, transport, h = make(BadLost())
        with structlog.testing.capture_logs() as logs:
            conn.connection_lost(ConnectionResetError())
        assert conn.closed.done() and not conn.is_open
        assert any(e["log_level"] == "error" for e in logs)

    run(main())


def test_handler_without_connection_lost_is_fine():
    class Bare:
        pass

    async def main():
        conn, transport, h = make(Bare())
        conn.connection_lost(None)
        assert conn.closed.done()

    run(main())


def test_send_from_another_thread_is_written_on_the_loop():
    async def main():
        conn, transport, h = make()
        m = SCHEDULER.encode("offer_rescinded", ("m-O1",), {})
        t = threading.Thread(target=conn.send, args=(m,))
        t.start()
        await asyncio.get_running_loop().run_in_executor(None, t.join)
        await turns()
        assert transport.writes == [m]
        # The write itself happened on the loop's thread, not the sender's.
        assert transport.write_threads == [threading.get_ident()]

    run(main())


def test_close_from_another_thread():
    async def main():
        conn, transport, h = make()
        t = threading.Thread(target=conn.close)
        t.start()
        await asyncio.get_running_loop().run_in_executor(None, t.join)
        await asyncio.wait_for(conn.closed, 1)
        assert transport.closed

    run(main())


def test_connection_made_sets_tcp_nodelay():
    async def main():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0
            make(sock=sock)
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0

    run(main())


def test_connection_made_tolerates_unix_socket_and_missing_peer():
    async def main():
        a, b = socket.socketpair(socket.AF_UNIX)
        with a, b:
            conn = Connection(MASTER, Handler())
            transport = FakeTransport(conn, sock=a, peer=None)
            conn.connection_made(transport)
            assert conn.peer == "?"

    run(main())


def test_connections_of_a_loop_share_one_flush_per_turn_and_a_failing_one_spares_the_rest():
    class BrokenTransport(FakeTransport):
        def write(self, data) -> None:
            raise RuntimeError("transport broke")

    async def scenario():
        loop = asyncio.get_running_loop()
        scheduled = []
        original = loop.call_soon

        def counting_call_soon(callback, *args, **kwargs):
            scheduled.append(getattr(callback, "__qualname__", repr(callback)))
            return original(callback, *args, **kwargs)

        conns = []
        for i in range(3):
            conn = Connection(MASTER, Handler())
            transport = (BrokenTransport if i == 0 else FakeTransport)(conn)
            conn.connection_made(transport)
            conns.append((conn, transport))
        loop.call_soon = counting_call_soon
        try:
            with structlog.testing.capture_logs() as logs:
                for conn, _ in conns:
                    conn.remote(SCHEDULER).offer_rescinded("o-1")
                    conn.remote(SCHEDULER).offer_rescinded("o-2")
                await asyncio.sleep(0)
                await asyncio.sleep(0)
        finally:
            loop.call_soon = original
        return conns, scheduled, logs

    conns, scheduled, logs = run(scenario())
    assert scheduled.count("_Flusher._flush_all") == 1  # one callback for three connections
    for _, transport in conns[1:]:
        assert len(transport.writes) == 1  # both frames of the turn in one write
    assert any(e["event"] == "flushing a connection failed" for e in logs)
    # The broken connection can still queue and flush later turns.
    assert conns[0][0]._flush_scheduled is False
