"""Big frames decode off the loop (mezzo.rpc.offload): the same messages as the C
decoder, in order, and the server's loop keeps turning meanwhile. Real loopback
sockets; the lag is compared with the inline decode of the same frame measured in
the same run, so a busy machine slows both."""

from __future__ import annotations

import asyncio
import gc
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mezzo.rpc.codec import MalformedMessage
from mezzo.rpc.endpoint import connect, serve
from mezzo.rpc.offload import INLINE_DECODE_MAX, OFFLOAD, OffLoopDecoder
from mezzo.services import MASTER
from mezzo.wire.ttypes import Resources, RunningTask, TaskInfo, TaskStatus

from ..thrift_strategies import calls
from .test_endpoint import Inbox, run


def decoded_or_refused(decode, payload: bytes):
    try:
        return decode(payload)
    except MalformedMessage:
        return "malformed"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls(MASTER))
def test_the_yielding_decoder_reads_every_message_as_the_c_decoder_does(call):
    method, args = call
    payload = MASTER.encode(method, args, {})[4:]
    name, slow = MASTER.decode_yielding(payload)
    _, fast = MASTER.decode(payload)
    # Compared as bytes: a NaN is not equal to itself.
    assert MASTER.encode(name, slow, {}) == MASTER.encode(name, fast, {})


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(MASTER.methods)), st.binary(max_size=300))
def test_a_real_header_then_garbage_is_refused_or_read_never_raised(method, tail):
    payload = MASTER.encode(method, (), {})[4:-1] + tail  # the header, without the stop byte
    outcome = decoded_or_refused(MASTER.decode_yielding, payload)
    assert outcome == "malformed" or outcome[0] == method


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_garbage_is_refused_as_the_c_decoder_refuses_it(payload):
    if decoded_or_refused(MASTER.decode, payload) == "malformed":
        assert decoded_or_refused(MASTER.decode_yielding, payload) == "malformed"


def big_reconcile(n: int) -> tuple:
    return ("f1", [TaskStatus(task_id=f"task-{i:08d}", agent_id="a1") for i in range(n)])


def test_a_big_frame_is_handled_in_order_with_the_frames_around_it():
    async def scenario():
        inbox = Inbox(MASTER.methods)
        server = await serve("127.0.0.1", 0, MASTER, inbox)
        port = server.sockets[0].getsockname()[1]
        client = await connect("127.0.0.1", port, MASTER, Inbox(()))
        peer = client.remote(MASTER)
        before = OFFLOAD.decoded
        peer.kill_task("f1", "first")
        peer.reconcile_tasks(*big_reconcile(20_000))
        peer.kill_task("f1", "second")
        peer.kill_task("f1", "third")
        got = [await asyncio.wait_for(inbox.queue.get(), 20) for _ in range(4)]
        assert [(m, a[1] if m == "kill_task" else len(a[1])) for m, _, a in got] == [
            ("kill_task", "first"),
            ("reconcile_tasks", 20_000),
            ("kill_task", "second"),
            ("kill_task", "third"),
        ]
        assert got[1][2][1][-1] == TaskStatus(task_id="task-00019999", agent_id="a1")
        assert OFFLOAD.decoded == before + 1  # the big one went to the worker, only it
        client.close()
        server.close()

    run(scenario(), timeout=40)


async def max_lag_while(work, probe_every: float = 0.002) -> float:
    """The longest the loop went without running a 2 ms sleeper while ``work`` ran."""
    loop = asyncio.get_running_loop()
    worst = 0.0
    done = asyncio.Event()

    async def probe():
        nonlocal worst
        while not done.is_set():
            start = loop.time()
            await asyncio.sleep(probe_every)
            worst = max(worst, loop.time() - start - probe_every)

    prober = asyncio.create_task(probe())
    await asyncio.sleep(0.01)
    try:
        await work()
    finally:
        done.set()
        await prober
    return worst


def test_the_loop_keeps_turning_while_a_big_frame_decodes():
    """The probe: a 16 MiB reconcile decoded inline held the master's loop 0.46 s."""
    args = big_reconcile(100_000)
    message = MASTER.encode("reconcile_tasks", args, {})
    payload = message[4:]
    assert len(payload) > 100 * INLINE_DECODE_MAX

    async def scenario():
        inbox = Inbox(MASTER.methods)
        server = await serve("127.0.0.1", 0, MASTER, inbox)
        port = server.sockets[0].getsockname()[1]
        client = await connect("127.0.0.1", port, MASTER, Inbox(()))

        async def inline():
            MASTER.decode(payload)

        async def served():
            client.send(message)  # encoded beforehand: this loop is the client's too
            method, _, got = await asyncio.wait_for(inbox.queue.get(), 60)
            assert (method, len(got[1])) == ("reconcile_tasks", 100_000)

        inline_lag = await max_lag_while(inline)
        served_lag = await max_lag_while(served)
        client.close()
        server.close()
        return inline_lag, served_lag

    # Without the cyclic collector: its full collections (which the 100,000 objects
    # made here set off, 80-100 ms each in this test process) would hold the loop
    # whichever thread allocates, and are not what is measured. The master tunes
    # its collector for its heap (mezzo.heap).
    gc.collect()
    gc.disable()
    try:
        inline_lag, served_lag = run(scenario(), timeout=90)
    finally:
        gc.enable()
    # Inline, the loop waits for the whole decode; off it, for a switch interval or
    # a few (5 ms each). A quarter leaves room for a loaded machine.
    assert served_lag < inline_lag / 4, (served_lag, inline_lag)


def test_a_connection_dropped_during_the_decode_gets_nothing_served_and_holds_nothing():
    """As the limits drop a connection (abort) while its big frame waits for the worker."""
    tasks = [
        RunningTask(
            framework_id="f", task=TaskInfo(task_id=f"t{i}", resources=Resources(scalars={"cpus": 1}))
        )
        for i in range(5_000)
    ]
    hog = MASTER.encode("reconcile_tasks", big_reconcile(200_000), {})[4:]

    async def scenario():
        inbox = Inbox(MASTER.methods)
        lost = []
        inbox.connection_lost = lost.append
        server = await serve("127.0.0.1", 0, MASTER, inbox)
        port = server.sockets[0].getsockname()[1]
        client = await connect("127.0.0.1", port, MASTER, Inbox(()))
        # Keep the worker busy for seconds, so that the frame waits for it.
        OFFLOAD.submit(MASTER, hog, len(hog), lambda result: None)
        while OFFLOAD.waiting:  # until the worker has taken it up
            await asyncio.sleep(0.001)
        waiting = OFFLOAD.waiting
        client.remote(MASTER).reregister_agent(None, tasks, [], [])
        deadline = time.monotonic() + 20
        while OFFLOAD.waiting == waiting and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        assert OFFLOAD.waiting == waiting + 1, "the frame never reached the worker"
        (conn,) = [c for c in ACCEPTED if c.pending_input]
        assert conn.pending_input > INLINE_DECODE_MAX  # waiting for the worker counts as held
        conn.abort()
        assert conn.pending_input == 0
        assert OFFLOAD.waiting == waiting  # withdrawn from the queue, its bytes let go
        while not lost and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert lost == [conn]
        await asyncio.sleep(0.2)
        assert inbox.queue.empty()  # nothing is served for a connection that is gone
        client.close()
        server.close()

    run(scenario(), timeout=60)


ACCEPTED: list = []
"""The connections made during a test (the server's among them)."""


@pytest.fixture(autouse=True)
def _record_connections(monkeypatch):
    from mezzo.rpc import connection as module

    made = module.Connection.connection_made

    def record(self, transport):
        ACCEPTED.append(self)
        made(self, transport)

    ACCEPTED.clear()
    monkeypatch.setattr(module.Connection, "connection_made", record)
    yield
    ACCEPTED.clear()


def test_a_cancelled_ticket_is_neither_decoded_nor_delivered():
    async def scenario():
        decoder = OffLoopDecoder()
        got = []
        payload = MASTER.encode("reconcile_tasks", big_reconcile(5_000), {})[4:]
        first = decoder.submit(MASTER, payload, len(payload), got.append)
        second = decoder.submit(MASTER, payload, len(payload), got.append)
        second.cancel()
        assert second.payload is None
        for _ in range(2000):
            if got:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        assert len(got) == 1 and got[0][0] == "reconcile_tasks"
        assert first.payload is None  # let go once decoded
        assert decoder.decoded == 1

    run(scenario(), timeout=40)
