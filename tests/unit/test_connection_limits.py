"""The bounds on a server's connections (mezzo.rpc.limits), without sockets.

Connections run against a fake transport that behaves like asyncio's selector
transport where it matters here (write buffer, high/low water marks, pausing,
close that waits for the buffer, abort that does not); the sweep is called with
explicit loop times, and the loop's clock is moved by hand where a test needs
bytes to arrive at a given time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import resource
import sys
from pathlib import Path

import pytest
import structlog.testing

from mezzo.config import ConnectionsConfig, from_dict
from mezzo.errors import ConfigError
from mezzo.rpc.connection import Connection
from mezzo.rpc.framing import frame
from mezzo.rpc.limits import (
    ConnectionLimiter,
    _Throttled,
    address_of,
    max_open_allowed,
    sweep_interval,
)
from mezzo.services import MASTER, TOOL

# -- pure rules ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "setting, soft, expected",
    [
        (0, 1024, 896),  # an eighth kept back
        (0, 20_000, 17_500),
        (0, 100, 68),  # at least 32 kept back
        (0, 20, 1),  # never nothing
        (500, 1024, 500),
        (5000, 1024, 896),  # a setting above the descriptors there are is cut down
        (0, resource.RLIM_INFINITY, sys.maxsize),
        (10, resource.RLIM_INFINITY, 10),
    ],
)
def test_max_open_follows_the_open_file_limit(setting, soft, expected):
    assert max_open_allowed(setting, soft) == expected


@pytest.mark.parametrize(
    "peer, expected",
    [
        (("127.0.0.1", 4000), ("127.0.0.1", True)),
        (("127.0.0.2", 4000), ("127.0.0.2", True)),
        (("10.0.0.1", 4000), ("10.0.0.1", False)),
        (("::1", 4000, 0, 0), ("::1", True)),
        (("::ffff:127.0.0.1", 4000, 0, 0), ("127.0.0.1", True)),  # dual-stack socket
        (("::ffff:10.1.2.3", 4000, 0, 0), ("10.1.2.3", False)),
        (("fe80::1%eth0", 4000, 0, 2), ("fe80::1", False)),
        (("2001:db8::1", 4000, 0, 0), ("2001:db8::1", False)),
        (None, ("", True)),  # no IP address: a Unix socket, local
        ("", ("", True)),
    ],
)
def test_address_of(peer, expected):
    assert address_of(peer) == expected


def test_sweep_interval_is_a_quarter_of_the_shortest_timeout_within_bounds():
    assert sweep_interval(ConnectionsConfig()) == 1.0  # defaults: 10 s and up
    assert sweep_interval(ConnectionsConfig(first_frame_timeout=2.0)) == 0.5
    assert sweep_interval(ConnectionsConfig(partial_frame_timeout=0.1)) == 0.05
    off = ConnectionsConfig(
        first_frame_timeout=0, unregistered_idle_timeout=0, partial_frame_timeout=0, write_stall_timeout=0
    )
    assert sweep_interval(off) == 0.0


def test_throttled_log_says_how_many_lines_it_left_out():
    with structlog.testing.capture_logs() as logs:
        import structlog as sl

        t = _Throttled(sl.get_logger("t"), every=10.0)
        t.note("max_open", 100.0, peer="a")
        for i in range(5):
            t.note("max_open", 101.0 + i, peer="b")
        t.note("first_frame_timeout", 102.0, peer="c")  # another kind has its own clock
        t.note("max_open", 110.5, peer="d")
    lines = [(e["event"], e["peer"], e.get("not_logged_since_last_line")) for e in logs]
    assert [(p, n) for _, p, n in lines] == [("a", None), ("c", None), ("d", 5)]
    assert "max_open" in lines[0][0] and "first_frame_timeout" in lines[1][0]


# -- settings ------------------------------------------------------------------------


def test_connections_tables_of_master_and_agent():
    c = from_dict(
        {
            "master": {"connections": {"max_open": 0, "max_per_address": 0, "first_frame_timeout": 2}},
            "agent": {"connections": {"write_buffer_high": 4096, "write_buffer_max": 4096}},
        }
    )
    assert c.master.connections == ConnectionsConfig(max_per_address=0, first_frame_timeout=2.0)
    assert c.agent.connections.write_buffer_max == 4096
    assert from_dict({}).master.connections == ConnectionsConfig()


@pytest.mark.parametrize(
    "table, message",
    [
        ({"max_open": -1}, "master.connections.max_open: expected an integer >= 0, got -1"),
        ({"max_per_address": True}, "master.connections.max_per_address: expected an integer >= 0, got True"),
        (
            {"write_buffer_high": 0},
            "master.connections.write_buffer_high: expected a positive integer, got 0",
        ),
        (
            {"first_frame_timeout": -1},
            "master.connections.first_frame_timeout: expected a finite number >= 0, got -1",
        ),
        (
            {"write_buffer_high": 100, "write_buffer_max": 99},
            "master.connections.write_buffer_max: must be at least write_buffer_high (100), got 99",
        ),
    ],
)
def test_bad_connection_settings_name_the_key(table, message):
    with pytest.raises(ConfigError) as ei:
        from_dict({"master": {"connections": table}})
    assert str(ei.value) == message


def test_unknown_connection_setting_lists_the_known_ones():
    with pytest.raises(ConfigError) as ei:
        from_dict({"agent": {"connections": {"max_connections": 10}}})
    assert str(ei.value).startswith(
        "agent.connections.max_connections: unknown key (known keys here: first_frame"
    )


def test_every_connection_setting_is_documented():
    docs = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    missing = [f.name for f in dataclasses.fields(ConnectionsConfig) if f"| `{f.name}` |" not in docs]
    assert missing == []


# -- connections against a fake transport ---------------------------------------------


class Transport(asyncio.Transport):
    """Like asyncio's selector transport: what the kernel does not take stays in a
    buffer; above ``high`` the protocol is paused, at or below ``low`` resumed;
    ``close`` waits for the buffer to empty, ``abort`` does not."""

    def __init__(self, protocol: Connection, peer, kernel_room: int = 0) -> None:
        super().__init__()
        self.protocol = protocol
        self.peer = peer
        self.kernel_room = kernel_room  # bytes of each write the "kernel" takes at once
        self.buffer = 0
        self.high, self.low = 64 * 1024, 16 * 1024
        self.protocol_paused = False
        self.reading = True
        self.closing = self.aborted = self.lost = False

    def get_extra_info(self, name, default=None):
        return {"peername": self.peer}.get(name, default)

    def set_write_buffer_limits(self, high=None, low=None):
        self.high, self.low = high, low

    def get_write_buffer_size(self):
        return self.buffer

    def write(self, data):
        assert not self.closing
        self.buffer += max(0, len(data) - self.kernel_room)
        if self.buffer > self.high and not self.protocol_paused:
            self.protocol_paused = True
            self.protocol.pause_writing()

    def drain(self, n: int) -> None:
        """The peer read ``n`` bytes."""
        self.buffer = max(0, self.buffer - n)
        if self.protocol_paused and self.buffer <= self.low:
            self.protocol_paused = False
            self.protocol.resume_writing()
        if self.closing and not self.buffer:
            self._lose()

    def pause_reading(self):
        self.reading = False

    def resume_reading(self):
        self.reading = True

    def close(self):
        if self.closing:
            return
        self.closing = True
        self.reading = False
        if not self.buffer:
            self._lose()

    def abort(self):
        self.aborted = self.closing = True
        self.buffer = 0
        self._lose()

    def _lose(self):
        if not self.lost:
            self.lost = True
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    def is_closing(self):
        return self.closing


class Handler:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.lost: list[Connection] = []

    def request_metrics(self, conn, request_id):
        self.calls.append("request_metrics")

    def kill_task(self, conn, framework_id, task_id):
        self.calls.append("kill_task")

    def connection_lost(self, conn):
        self.lost.append(conn)


class Server:
    """One limiter, a handler, and connections made against fake transports."""

    def __init__(
        self, max_frame: int = 16 * 1024 * 1024, nofile=lambda: 20_000, stalls=None, **settings
    ) -> None:
        self.settings = ConnectionsConfig(**settings)
        self.limiter = ConnectionLimiter(self.settings, max_frame=max_frame, nofile=nofile, stalls=stalls)
        self.handler = Handler()
        self.max_frame = max_frame

    def connect(self, peer=("10.0.0.1", 4000), kernel_room: int = 0):
        """What the listener does with an accepted socket: (connection, transport), or
        (None, None) when the limiter refuses it."""
        address = self.limiter.admit(peer, asyncio.get_running_loop().time())
        if address is None:
            return None, None
        conn = Connection(
            MASTER, self.handler, max_frame=self.max_frame, limiter=self.limiter, address=address
        )
        transport = Transport(conn, peer, kernel_room)
        conn.connection_made(transport)
        return conn, transport


def run(coro, timeout: float = 5.0):
    async def bounded():
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


async def turns(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def msg(method: str, *args) -> bytes:
    return MASTER.encode(method, args, {})


class Clock:
    """Replaces the running loop's clock, so bytes arrive at chosen times."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.now = loop.time()
        loop.time = lambda: self.now  # type: ignore[method-assign]


def test_connections_over_max_open_are_refused():
    async def main():
        server = Server(max_open=2)
        (a, ta), (b, _) = server.connect(), server.connect()
        with structlog.testing.capture_logs() as logs:
            assert server.connect(("10.0.0.9", 1)) == (None, None)
        assert a.is_open and b.is_open
        stats = server.limiter.stats()
        assert stats["open"] == 2 and stats["max_open"] == 2 and stats["refused"]["max_open"] == 1
        assert (
            logs[0]["log_level"] == "warning"
            and "max_open" in logs[0]["event"]
            and logs[0]["peer"] == "10.0.0.9:1"
        )
        ta.close()  # one leaves: room for the next
        await turns()
        d, td = server.connect()
        assert d.is_open and not td.aborted

    run(main())


def test_max_open_zero_follows_the_open_file_limit_of_the_moment():
    async def main():
        nofile = [40]
        server = Server(nofile=lambda: nofile[0])
        conns = [server.connect(("10.0.0.1", i))[0] for i in range(10)]
        assert sum(c is not None for c in conns) == 8  # 40 less the 32 kept back
        nofile[0] = 41  # raised meanwhile (prlimit)
        assert server.connect()[0] is not None
        assert server.limiter.stats()["refused"]["max_open"] == 2

    run(main())


def test_per_address_limits_count_remote_and_loopback_addresses_apart():
    async def main():
        server = Server(max_per_address=2, max_per_loopback_address=0)
        remote = [server.connect(("10.0.0.1", i))[0] for i in range(3)]
        assert [c is not None for c in remote] == [True, True, False]
        assert server.connect(("10.0.0.2", 1))[0] is not None  # another address has its own count
        assert server.connect(("::ffff:10.0.0.1", 9, 0, 0))[0] is None  # the same IPv4 host
        local = [server.connect(("127.0.0.1", i))[0] for i in range(50)]
        assert all(c is not None for c in local)  # loopback: no limit by default
        assert server.limiter.stats()["refused"] == {"max_open": 0, "max_per_address": 2}
        remote[0].close()
        await turns()
        assert server.connect(("10.0.0.1", 7))[0] is not None

        strict = Server(max_per_loopback_address=3)
        assert [strict.connect(("127.0.0.1", i))[0] is not None for i in range(4)] == [
            True,
            True,
            True,
            False,
        ]

    run(main())


def test_a_slot_given_back_by_a_socket_that_never_became_a_connection():
    server = Server(max_open=1)
    assert server.limiter.admit(("10.0.0.1", 1), 0.0) == "10.0.0.1"
    assert server.limiter.admit(("10.0.0.1", 2), 0.0) is None
    server.limiter.abandon("10.0.0.1")
    assert server.limiter.stats()["open"] == 0 and server.limiter._per_address == {}
    assert server.limiter.admit(("10.0.0.1", 3), 0.0) == "10.0.0.1"


def test_first_frame_timeout_closes_silent_connections_only():
    async def main():
        server = Server(first_frame_timeout=10.0)
        t0 = asyncio.get_running_loop().time()
        silent, t_silent = server.connect()
        talker, t_talker = server.connect()
        half, t_half = server.connect()
        talker.data_received(msg("kill_task", "fw", "t"))
        half.data_received(msg("kill_task", "fw", "t")[:5])  # bytes, but no complete frame
        server.limiter.sweep(t0 + 9.9)
        assert not (t_silent.aborted or t_half.aborted)
        server.limiter.sweep(t0 + 10.1)
        assert t_silent.aborted and t_half.aborted and not t_talker.closing
        assert server.limiter.closed["first_frame_timeout"] == 2
        await turns()
        assert server.limiter.stats()["open"] == 1

    run(main())


def test_unregistered_idle_connections_are_closed_registered_ones_kept():
    async def main():
        server = Server(unregistered_idle_timeout=60.0, first_frame_timeout=0)
        tool, t_tool = server.connect()
        framework, t_fw = server.connect()
        waiting, t_wait = server.connect(kernel_room=0)
        for c in (tool, framework, waiting):
            c.data_received(msg("request_metrics", 1))
        t0 = tool.last_received
        framework.tag = "registered"
        # A reply the peer has not taken yet: not idle, whatever the clock says.
        waiting.remote(TOOL).metrics(1, "{}")
        waiting._flush()
        assert waiting.unsent_bytes() > 0
        server.limiter.sweep(t0 + 59)
        assert not t_tool.closing
        server.limiter.sweep(t0 + 75)  # the next scan, a quarter of the timeout later
        # A graceful close (nothing waits for the peer), not an abort.
        assert t_tool.closing and not t_tool.aborted
        assert not t_fw.closing and not t_wait.closing
        assert server.limiter.closed["unregistered_idle_timeout"] == 1

    run(main())


def test_idle_scan_runs_once_per_quarter_timeout():
    async def main():
        server = Server(unregistered_idle_timeout=60.0, first_frame_timeout=0)
        conn, t = server.connect()
        t0 = conn.last_received
        server.limiter.sweep(t0 + 1)  # scans, finds nothing; next scan due at t0 + 16
        server.limiter.sweep(t0 + 61 - 47)  # not due yet
        assert not t.closing
        server.limiter.sweep(t0 + 61)
        assert t.closing

    run(main())


def test_a_message_incomplete_for_partial_frame_timeout_is_dropped_and_its_memory_freed():
    async def main():
        clock = Clock(asyncio.get_running_loop())
        server = Server(partial_frame_timeout=30.0, first_frame_timeout=0)
        conn, t = server.connect()
        whole = msg("kill_task", "fw", "t" * 1000)
        conn.data_received(whole[:500])
        assert server.limiter.partial_bytes == 500 == conn.pending_input
        clock.now += 20
        conn.data_received(whole[500:900])  # progress, but the frame must arrive within 30 s of its start
        assert server.limiter.partial_bytes == 900
        server.limiter.sweep(clock.now + 9.9)
        assert not t.aborted
        server.limiter.sweep(clock.now + 10.1)
        assert t.aborted and conn.pending_input == 0 and server.limiter.partial_bytes == 0
        assert server.limiter.closed["partial_frame_timeout"] == 1
        assert server.handler.calls == []

    run(main())


def test_each_new_incomplete_frame_gets_its_own_clock():
    async def main():
        clock = Clock(asyncio.get_running_loop())
        server = Server(partial_frame_timeout=30.0, first_frame_timeout=0)
        conn, t = server.connect()
        one = msg("kill_task", "fw", "one")
        two = msg("kill_task", "fw", "two")
        conn.data_received(one[:10])
        clock.now += 25
        conn.data_received(one[10:] + two[:10])  # the first completes, the second begins now
        assert server.handler.calls == ["kill_task"]
        server.limiter.sweep(clock.now + 29)
        assert not t.aborted
        clock.now += 10
        conn.data_received(two[10:])
        assert server.limiter.partial_bytes == 0
        server.limiter.sweep(clock.now + 1000)
        assert not t.aborted and server.handler.calls == ["kill_task", "kill_task"]

    run(main())


def test_the_incomplete_frame_clock_waits_while_we_hold_reading():
    # A handler working over many turns (a big re-registration adopted in chunks) or a
    # frame on the decode worker stops reading; the frame the peer is in the middle of
    # sending is then late because of us, and must not cost the peer its connection.
    async def main():
        clock = Clock(asyncio.get_running_loop())
        server = Server(partial_frame_timeout=30.0, first_frame_timeout=0, unregistered_idle_timeout=0)
        conn, t = server.connect()
        one, two = msg("kill_task", "fw", "one"), msg("kill_task", "fw", "two")
        conn.data_received(one + two[:10])
        assert conn.reading_held is False
        release = conn.hold_reading()
        assert conn.reading_held and server.limiter.partial_bytes == 10
        clock.now += 100
        server.limiter.sweep(clock.now)
        assert not t.aborted  # 100 s incomplete, all of it while we held reading
        release()
        await turns()
        assert t.reading and not conn.reading_held
        server.limiter.sweep(clock.now + 29)
        assert not t.aborted  # a whole timeout again from the release
        server.limiter.sweep(clock.now + 31)
        assert t.aborted and server.limiter.closed["partial_frame_timeout"] == 1

    run(main(), timeout=10_000)  # the fake clock jumps 100 s, past a 5 s bound


class Stall:
    """A stall clock whose loop could not run between ``start`` and ``end`` (loop times)."""

    def __init__(self, clock: Clock, start: float, end: float, running: bool = True) -> None:
        self.clock, self.start, self.end, self.running = clock, start, end, running
        self.samples = 0

    def sample(self) -> None:
        self.samples += 1

    def listened_since(self, then: float) -> float:
        now = self.clock.now
        overlap = max(0.0, min(now, self.end) - max(then, self.start))
        return now - then - overlap


def test_timeouts_count_only_time_the_loop_could_run():
    # A tool connects just before the master's loop is held for 100 s (a saturated
    # loop, a SIGSTOP): silent, idle and incomplete only because nobody listened.
    async def main():
        clock = Clock(asyncio.get_running_loop())
        stall = Stall(clock, clock.now + 1, clock.now + 101)
        server = Server(
            stalls=stall, first_frame_timeout=10.0, partial_frame_timeout=10.0, unregistered_idle_timeout=10.0
        )
        silent, t_silent = server.connect(("10.0.0.1", 1))
        partial, t_partial = server.connect(("10.0.0.2", 2))
        partial.data_received(msg("kill_task", "fw", "x") + msg("kill_task", "fw", "y")[:10])
        clock.now += 105  # 100 s of them stalled: 5 s listened
        server.limiter.sweep(clock.now)
        assert stall.samples == 1  # the clock is asked to account for a stall just ended
        assert not (t_silent.closing or t_partial.closing)
        clock.now += 5.5  # 10.5 s listened
        server.limiter.sweep(clock.now)
        assert t_silent.aborted and t_partial.aborted
        assert server.limiter.closed["first_frame_timeout"] == 1
        assert server.limiter.closed["partial_frame_timeout"] == 1

    run(main(), timeout=10_000)  # the fake clock jumps past the 5 s bound


def test_without_a_running_stall_clock_timeouts_use_the_loop_time():
    async def main():
        clock = Clock(asyncio.get_running_loop())
        stall = Stall(clock, clock.now, clock.now + 1000, running=False)  # a standby master
        server = Server(stalls=stall, first_frame_timeout=10.0)
        _, t = server.connect()
        clock.now += 10.5
        server.limiter.sweep(clock.now)
        assert t.aborted and stall.samples == 0

    run(main(), timeout=10_000)


def test_incomplete_frames_over_the_budget_drop_the_oldest_holders():
    async def main():
        clock = Clock(asyncio.get_running_loop())
        server = Server(max_frame=1000, partial_frames_max_bytes=1000, first_frame_timeout=0)
        announce = (900).to_bytes(4, "big")
        (a, ta), (b, tb), (c, tc) = (server.connect(("10.0.0.1", i)) for i in range(3))
        a.data_received(announce + b"x" * 400)
        clock.now += 1
        b.data_received(announce + b"x" * 400)
        assert server.limiter.partial_bytes == 808
        clock.now += 1
        c.data_received(announce + b"x" * 400)  # 1212 > 1000: the oldest, a, goes
        assert ta.aborted and not tb.aborted and not tc.aborted
        assert server.limiter.partial_bytes == 808
        assert server.limiter.closed["partial_frames_max_bytes"] == 1
        b.data_received(b"x" * 500)  # b completes its frame (garbage payload: closed as malformed)
        assert server.limiter.partial_bytes == 404

    run(main())


def test_partial_budget_is_never_below_one_frame():
    server = Server(max_frame=16 * 1024 * 1024, partial_frames_max_bytes=1024)
    assert server.limiter.partial_budget == 16 * 1024 * 1024


def test_a_peer_that_does_not_read_is_not_read_from_until_it_catches_up():
    async def main():
        server = Server(write_buffer_high=10_000, write_buffer_max=100_000)
        conn, t = server.connect()
        conn.data_received(msg("request_metrics", 1))
        assert (t.high, t.low) == (10_000, 2_500)
        conn.remote(TOOL).metrics(1, "x" * 12_000)
        conn._flush()
        assert conn.write_paused and not t.reading
        assert server.limiter.stats()["reading_paused"] == 1
        t.drain(10_000)  # down to the low-water mark: reading again
        assert not conn.write_paused and t.reading
        assert server.limiter.stats()["reading_paused"] == 0

    run(main())


def test_more_for_a_peer_already_holding_write_buffer_max_drops_it():
    async def main():
        server = Server(write_buffer_high=10_000, write_buffer_max=50_000)
        conn, t = server.connect()
        tool = conn.remote(TOOL)
        tool.metrics(1, "x" * 200_000)  # one message bigger than the bound goes to a peer keeping up
        conn._flush()
        assert not t.aborted and t.buffer > 50_000
        with structlog.testing.capture_logs() as logs:
            tool.metrics(2, "y")
        assert t.aborted and t.buffer == 0
        assert server.limiter.closed["write_buffer_max"] == 1
        assert "write_buffer_max" in logs[0]["event"] and logs[0]["unsent"] > 50_000
        tool.metrics(3, "z")  # dropped, like anything sent to a closed connection

    run(main())


def test_replies_piling_up_within_one_turn_count_too():
    """A peer that pipelined many requests in one chunk gets their replies in one turn,
    before anything reaches the transport: the outbox counts."""

    async def main():
        server = Server(write_buffer_high=10_000, write_buffer_max=50_000)
        conn, t = server.connect()
        for i in range(100):
            conn.remote(TOOL).metrics(i, "x" * 1_000)
        assert t.aborted and server.limiter.closed["write_buffer_max"] == 1
        await turns()
        assert server.handler.lost == [conn]

    run(main())


def test_a_slow_reader_is_kept_a_stopped_one_dropped():
    async def main():
        server = Server(write_buffer_high=10_000, write_buffer_max=10_000_000, write_stall_timeout=60.0)
        slow, ts = server.connect()
        stopped, tx = server.connect(("10.0.0.2", 1))
        for conn in (slow, stopped):
            conn.remote(TOOL).metrics(1, "x" * 1_000_000)
            conn._flush()
            assert conn.write_paused
        t0 = asyncio.get_running_loop().time()
        for minute in range(1, 5):  # slow reads a little every 50 s: progress
            ts.drain(1_000)
            server.limiter.sweep(t0 + 50 * minute)
        assert not ts.aborted and slow.write_paused
        assert tx.aborted and server.limiter.closed["write_stall_timeout"] == 1

    run(main())


def test_a_graceful_close_that_the_peer_never_reads_ends_in_an_abort():
    async def main():
        server = Server(write_buffer_high=10_000, write_stall_timeout=60.0)
        conn, t = server.connect()
        conn.data_received(msg("request_metrics", 1))
        conn.remote(TOOL).metrics(1, "x" * 5_000)  # below the high-water mark
        conn.close()
        assert t.closing and not t.lost and t.buffer
        t0 = asyncio.get_running_loop().time()
        server.limiter.sweep(t0 + 61)
        assert t.aborted and server.limiter.closed["write_stall_timeout"] == 1
        await turns()
        assert server.limiter.stats()["open"] == 0

    run(main())


def test_no_sweep_timer_without_connections():
    async def main():
        server = Server(first_frame_timeout=0.2)
        assert server.limiter._timer is None
        conn, t = server.connect()
        assert server.limiter._timer is not None
        t.close()
        await asyncio.sleep(0.15)  # the next sweep finds no connection and stops
        assert server.limiter._timer is None

    run(main())


def test_sweep_timer_closes_silent_connections_by_itself():
    async def main():
        server = Server(first_frame_timeout=0.2)
        conn, t = server.connect()
        await asyncio.wait_for(conn.closed, 1.0)
        assert t.aborted

    run(main())


def test_a_connection_without_limiter_keeps_reading_when_its_peer_lags():
    """A dialled connection (agent to master, driver to master) must always read, or
    two daemons could each wait for the other."""

    async def main():
        conn = Connection(MASTER, Handler())
        t = Transport(conn, ("10.0.0.1", 1))
        conn.connection_made(t)
        conn.remote(TOOL).metrics(1, "x" * 1_000_000)
        conn._flush()
        assert t.protocol_paused and t.reading and not conn.write_paused
        for i in range(100):
            conn.remote(TOOL).metrics(i, "x" * 1_000_000)  # no bound either
        assert not t.aborted

    run(main())


def test_frame_roundtrip_still_dispatches_under_limits():
    async def main():
        server = Server()
        conn, t = server.connect()
        data = msg("kill_task", "fw", "t") * 3
        for i in range(len(data)):
            conn.data_received(data[i : i + 1])
        assert server.handler.calls == ["kill_task"] * 3
        assert server.limiter.partial_bytes == 0
        conn.data_received(frame(b"garbage"))  # malformed: closed as before
        await turns()
        assert t.closing and server.handler.lost == [conn]

    run(main())


# -- the listener, over real loopback sockets -------------------------------------------


async def _open(port: int, n: int, source: str = "127.0.0.1"):
    """``n`` connections from ``source``: (reader, writer), or None for one reset while
    connecting (a refusal can beat the client's own connect completion)."""
    out = []
    for _ in range(n):
        try:
            out.append(await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0)))
        except ConnectionResetError:
            out.append(None)
    return out


async def _refused(pair) -> bool:
    """True if the server reset or closed the connection; False if it keeps it."""
    if pair is None:
        return True
    try:
        return await asyncio.wait_for(pair[0].read(), 0.3) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_listener_refuses_over_the_bound_as_it_accepts():
    """Bursts are refused socket by socket, as they are accepted."""

    async def main():
        from mezzo.rpc.endpoint import serve

        settings = ConnectionsConfig(max_open=5, max_per_loopback_address=3)
        limiter = ConnectionLimiter(settings)
        handler = Handler()
        server = await serve("127.0.0.1", 0, MASTER, handler, limiter=limiter)
        port = server.sockets[0].getsockname()[1]
        first = await _open(port, 3, "127.0.0.2")
        extra = await _open(port, 3, "127.0.0.2")  # over max_per_loopback_address
        others = await _open(port, 4, "127.0.0.3")  # two fit, then over max_open
        assert [await _refused(c) for c in first] == [False] * 3
        assert [await _refused(c) for c in extra] == [True] * 3
        assert [await _refused(c) for c in others] == [False, False, True, True]
        stats = limiter.stats()
        assert stats["open"] == 5 and stats["refused"] == {"max_open": 2, "max_per_address": 3}
        # The admitted ones are served.
        _, w = first[0]
        w.write(msg("kill_task", "fw", "t"))
        for _ in range(100):
            if handler.calls:
                break
            await asyncio.sleep(0.01)
        assert handler.calls == ["kill_task"]
        for pair in first + extra + others:
            if pair is not None:
                pair[1].close()
        for _ in range(100):
            if limiter.open == 0:
                break
            await asyncio.sleep(0.01)
        assert limiter.open == 0 and limiter.conns == set()
        server.close()
        await server.wait_closed()

    run(main(), timeout=15)


class FailingAccepts:
    """A listening socket whose first ``failures`` accepts fail with EMFILE."""

    def __init__(self, sock, failures: int) -> None:
        self.sock = sock
        self.failures = failures

    def fileno(self):
        return self.sock.fileno()

    def accept(self):
        if self.failures:
            self.failures -= 1
            raise OSError(24, "Too many open files")
        return self.sock.accept()

    def close(self):
        self.sock.close()


def test_listener_rests_when_accept_runs_out_of_descriptors(monkeypatch):
    async def main():
        from mezzo.rpc import listener as listener_module
        from mezzo.rpc.listener import Listener, bind

        monkeypatch.setattr(listener_module, "ACCEPT_RETRY_DELAY", 0.05)
        (sock,) = await bind("127.0.0.1", 0, 16)
        failing = FailingAccepts(sock, 3)
        handler = Handler()
        with structlog.testing.capture_logs() as logs:
            server = Listener([failing], lambda a: Connection(MASTER, handler, address=a), None)  # type: ignore[list-item]
            _, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
            writer.write(msg("kill_task", "fw", "t"))
            for _ in range(200):
                if handler.calls:
                    break
                await asyncio.sleep(0.01)
        assert failing.failures == 0 and handler.calls == ["kill_task"]  # served after resting
        errors = [e for e in logs if e["log_level"] == "error"]
        assert len(errors) == 1 and "out of resources" in errors[0]["event"]  # once, not per try
        writer.close()
        server.close()

    run(main())
