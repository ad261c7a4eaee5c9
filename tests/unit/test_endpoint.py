"""serve / connect over real loopback sockets, and parse_address."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading

import pytest
import structlog.testing
from mezzo.rpc.endpoint import connect, parse_address, serve
from mezzo.rpc.framing import frame
from mezzo.services import MASTER, SCHEDULER
from mezzo.wire.ttypes import FrameworkInfo


def run(coro, timeout: float = 8.0):
    async def bounded():
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


class Inbox:
    """Handler recording every call into an asyncio queue: ``(method, conn, args)``."""

    def __init__(self, methods) -> None:
        self.queue: asyncio.Queue = asyncio.Queue()
        self.lost: asyncio.Queue = asyncio.Queue()
        for name in methods:
            if not hasattr(type(self), name):  # subclasses override single methods
                setattr(self, name, self._recorder(name))

    def _recorder(self, name):
        def record(conn, *args):
            self.queue.put_nowait((name, conn, args))

        return record

    def connection_lost(self, conn):
        self.lost.put_nowait(conn)

    async def next(self, timeout: float = 2.0):
        return await asyncio.wait_for(self.queue.get(), timeout)


class MasterStub(Inbox):
    """Answers register_framework with registered(), like a master does."""

    def __init__(self) -> None:
        super().__init__(MASTER.methods)
        self.conns: list = []

    def register_framework(self, conn, framework):
        self.conns.append(conn)
        conn.remote(SCHEDULER).registered(f"fw-{framework.name}", "master")


async def start(handler, **kw):
    server = await serve("127.0.0.1", 0, MASTER, handler, **kw)
    port = server.sockets[0].getsockname()[1]
    assert port != 0
    return server, port


async def closed_by_peer(reader: asyncio.StreamReader, timeout: float = 2.0) -> bool:
    data = await asyncio.wait_for(reader.read(), timeout)  # read to EOF
    return data == b""


def test_messages_flow_both_ways():
    async def main():
        master = MasterStub()
        server, port = await start(master)
        async with server:
            sched = Inbox(SCHEDULER.methods)
            conn = await connect("127.0.0.1", port, SCHEDULER, sched)
            assert conn.is_open
            conn.remote(MASTER).register_framework(FrameworkInfo(name="a"))
            name, c, args = await sched.next()
            assert (name, args) == ("registered", ("fw-a", "master"))
            assert c is conn
            # many messages in one turn arrive complete and in order
            for i in range(200):
                conn.remote(MASTER).kill_task("fw-a", f"t{i}")
            got = [await master.next() for _ in range(200)]
            assert [a for _, _, a in got] == [("fw-a", f"t{i}") for i in range(200)]
            assert all(c is master.conns[0] for _, c, _ in got)
            conn.close()
            await asyncio.wait_for(conn.closed, 2)
            await asyncio.wait_for(master.lost.get(), 2)  # server side noticed too

    run(main())


def test_large_message_within_limit_crosses():
    async def main():
        master = MasterStub()
        server, port = await start(master)
        async with server:
            conn = await connect("127.0.0.1", port, SCHEDULER, Inbox(SCHEDULER.methods))
            blob = bytes(range(256)) * 8192  # 2 MiB: many TCP reads
            conn.remote(MASTER).framework_to_executor("fw", "ag", "ex", blob)
            name, _, args = await master.next(5)
            assert name == "framework_to_executor" and args[3] == blob
            conn.close()

    run(main())


def test_tcp_nodelay_on_both_ends_and_keepalive_on_the_dialler():
    # After a partition the master's FIN may never arrive: an idle agent must not wait
    # on a dead connection for ever. The dialler's socket keeps alive; the server's is
    # left alone (the master pings its peers itself).
    async def main():
        master = MasterStub()
        server, port = await start(master)
        async with server:
            sched = Inbox(SCHEDULER.methods)
            conn = await connect("127.0.0.1", port, SCHEDULER, sched)
            conn.remote(MASTER).register_framework(FrameworkInfo(name="n"))
            await sched.next()
            dialled = conn._transport.get_extra_info("socket")
            accepted = master.conns[0]._transport.get_extra_info("socket")
            for sock in (dialled, accepted):
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
            assert master.conns[0].peer.startswith("127.0.0.1:")
            assert conn.peer == f"127.0.0.1:{port}"
            assert dialled.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert dialled.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 10
            assert dialled.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 5
            assert dialled.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 3
            assert dialled.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 120_000
            assert accepted.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 0
            conn.close()

    run(main())


@pytest.mark.parametrize("bad", ["oversized", "malformed"])
def test_bad_peer_is_cut_off_and_others_keep_being_served(bad):
    async def main():
        master = MasterStub()
        server, port = await start(master, max_frame=1024)
        async with server:
            good = await connect("127.0.0.1", port, SCHEDULER, Inbox(SCHEDULER.methods))
            good.remote(MASTER).kill_task("fw", "before")
            assert (await master.next())[2] == ("fw", "before")

            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            with structlog.testing.capture_logs() as logs:
                if bad == "oversized":
                    writer.write(struct.pack("!I", 4096) + b"x" * 100)
                else:
                    writer.write(frame(b"\x00" * 40))
                await writer.drain()
                assert await closed_by_peer(reader)
            writer.close()
            assert any(e["log_level"] == "warning" and bad in e["event"] for e in logs)

            # the established connection still works, and new ones are accepted
            good.remote(MASTER).kill_task("fw", "after")
            assert (await master.next())[2] == ("fw", "after")
            sched = Inbox(SCHEDULER.methods)
            other = await connect("127.0.0.1", port, SCHEDULER, sched)
            other.remote(MASTER).register_framework(FrameworkInfo(name="b"))
            assert (await sched.next())[2] == ("fw-b", "master")
            assert good.is_open
            good.close()
            other.close()

    run(main())


def test_handler_exception_keeps_the_connection():
    class Flaky(MasterStub):
        def kill_task(self, conn, fid, tid):
            if tid == "boom":
                raise ValueError("bug in handler")
            self.queue.put_nowait(("kill_task", conn, (fid, tid)))

    async def main():
        master = Flaky()
        server, port = await start(master)
        async with server:
            conn = await connect("127.0.0.1", port, SCHEDULER, Inbox(SCHEDULER.methods))
            with structlog.testing.capture_logs():
                conn.remote(MASTER).kill_task("fw", "boom")
                conn.remote(MASTER).kill_task("fw", "ok")
                assert (await master.next())[2] == ("fw", "ok")
            conn.remote(MASTER).kill_task("fw", "later")
            assert (await master.next())[2] == ("fw", "later")
            assert conn.is_open and master.lost.empty()
            conn.close()

    run(main())


def test_send_from_another_thread_arrives():
    async def main():
        master = MasterStub()
        server, port = await start(master)
        async with server:
            conn = await connect("127.0.0.1", port, SCHEDULER, Inbox(SCHEDULER.methods))
            stub = conn.remote(MASTER)

            def worker():
                for i in range(50):
                    stub.kill_task("fw", f"thread-{i}")

            threads = [threading.Thread(target=worker) for _ in range(2)]
            for t in threads:
                t.start()
            loop = asyncio.get_running_loop()
            for t in threads:
                await loop.run_in_executor(None, t.join)
            got = sorted([(await master.next())[2][1] for _ in range(100)])
            assert got == sorted(f"thread-{i}" for i in range(50) for _ in range(2))
            conn.close()

    run(main())


def test_server_initiated_close_reaches_client():
    class Kicker(MasterStub):
        def unregister_framework(self, conn, fid):
            conn.remote(SCHEDULER).error("bye")
            conn.close()

    async def main():
        master = Kicker()
        server, port = await start(master)
        async with server:
            sched = Inbox(SCHEDULER.methods)
            conn = await connect("127.0.0.1", port, SCHEDULER, sched)
            conn.remote(MASTER).unregister_framework("fw")
            assert (await sched.next())[0:3:2] == ("error", ("bye",))  # flushed before close
            await asyncio.wait_for(conn.closed, 2)
            assert not conn.is_open
            assert (await asyncio.wait_for(sched.lost.get(), 2)) is conn

    run(main())


def test_no_dispatch_after_handler_closed_its_connection_real_socket():
    class Strict(MasterStub):
        def kill_task(self, conn, fid, tid):
            self.queue.put_nowait(("kill_task", conn, (fid, tid)))
            conn.close()  # e.g. a protocol violation

    async def main():
        master = Strict()
        server, port = await start(master)
        async with server:
            # both frames in one segment, so the server reads them in one chunk
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(MASTER.encode("kill_task", ("fw", "t1"), {})
                         + MASTER.encode("kill_task", ("fw", "t2"), {}))
            await writer.drain()
            assert await closed_by_peer(reader)
            writer.close()
            got = []
            while not master.queue.empty():
                got.append(master.queue.get_nowait()[2][1])
            assert got == ["t1"]

    run(main())


def test_connect_to_closed_port_raises():
    async def main():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with pytest.raises(OSError):
            await connect("127.0.0.1", port, SCHEDULER, Inbox(SCHEDULER.methods))

    run(main())


# ----------------------------------------------------------- parse_address


@pytest.mark.parametrize(
    "text,expected",
    [
        ("10.0.0.5:5050", ("10.0.0.5", 5050)),
        ("master.example:6000", ("master.example", 6000)),
        ("master.example", ("master.example", 5050)),
        (":7000", ("127.0.0.1", 7000)),
        ("", ("127.0.0.1", 5050)),
        ("  host:1  ", ("host", 1)),
        ("[::1]:5051", ("::1", 5051)),
        ("h:0", ("h", 0)),
        ("h:65535", ("h", 65535)),
    ],
)
def test_parse_address(text, expected):
    assert parse_address(text, 5050) == expected


@pytest.mark.parametrize("text", ["h:http", "h:", "h:1.5", "h:x80"])
def test_parse_address_rejects_non_numeric_port(text):
    with pytest.raises(ValueError, match="not a number") as ei:
        parse_address(text, 5050)
    assert repr(text) in str(ei.value)


@pytest.mark.parametrize("text", ["h:65536", "h:-1", ":99999"])
def test_parse_address_rejects_port_out_of_range(text):
    with pytest.raises(ValueError, match="out of range") as ei:
        parse_address(text, 5050)
    assert repr(text) in str(ei.value)
