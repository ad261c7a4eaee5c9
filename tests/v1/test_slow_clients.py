"""Slow and stalled v1 clients do not harm the master.

Anyone who reaches the master's port may open connections to ``/api/v1/scheduler``
and then misbehave. Against a real master on loopback (real sockets, nothing
mocked), with the ``[master.connections]`` setting that governs each case made small
so that it acts within seconds (:mod:`mezzo.rpc.limits`, applied to HTTP
connections by :mod:`mezzo.http.link`), these tests show that:

1. a client that sends a request's head and then trickles its body byte by byte, or
   sends nothing more, holds no one up: while it hangs, another framework's calls
   are answered and applied and ``/health`` and ``/version`` answer; and the master
   closes it without answering it: ``partial_frame_timeout`` for a request still
   incomplete (a call held by the fast lane, a SUBSCRIBE body), and
   ``unregistered_idle_timeout`` for a SUBSCRIBE whose handler waits for a body that
   never comes;
2. a subscriber that stops reading its events, while its own calls (on another
   connection) and the master's heartbeats and offers keep making more, is cut off
   and its framework disconnected, while another framework is served throughout:
   by ``write_stall_timeout`` once it has taken no byte for that long, or at 32 MiB
   of events waiting for it (:data:`mezzo.v1.scheduler_stream.MAX_BUFFERED_BYTES`)
   when that comes first;
3. hundreds of connections left idle keep no framework from being served, and are
   closed: ``first_frame_timeout`` for a socket that never sent a byte,
   ``unregistered_idle_timeout`` for a keep-alive idle after its request, while a
   subscription (whose client sends nothing after SUBSCRIBE either) is spared.

Each closing is checked from both ends: the client sees its connection end, and the
master counts it under the setting expected (``mezzo/connections/closed/<setting>``
in ``/metrics/snapshot``; the 32 MiB bound is the stream's own, not the port's: its
log line says so). No assertion is on elapsed time: every wait is bounded (a master
that stalls fails a wait), nothing more.

A client gone in the middle of a request body is not a handler failure: no traceback
is logged for it (these tests found it was, once per connection: a cheap way to fill
the master's log).
"""

from __future__ import annotations

import http.client
import itertools
import json
import select
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import pytest

from mezzo.testing import LocalProcessCluster, wait_for

from .v1_client import V1Scheduler

CLOSE_WAIT = 10.0
"""Seconds any wait for the master to close a connection is bounded by (the settings
in force are 1 to 2.5 s, checked by a sweep every quarter of the shortest)."""
ANSWER_TIMEOUT = 5.0
"""Seconds the test's own requests wait for an answer: a master held up fails them."""
SLOW_CLIENTS = 20
"""Slow clients of a kind at once: a master serving them one at a time would show."""
TRICKLE_PACE = 0.1
"""Seconds between two bytes of a trickled body (its ~90 bytes would take 9 s)."""


def with_limits(**connections: Any) -> pytest.MarkDecorator:
    """Run the test against a master with these ``[master.connections]`` settings
    (the others at their defaults)."""
    name = ",".join(f"{k}={v}" for k, v in connections.items())
    return pytest.mark.parametrize("cluster", [connections], indirect=True, ids=[name])


@pytest.fixture
def cluster(mezzo_cluster, request) -> LocalProcessCluster:
    # One agent, so that offers too flow to every subscriber; heartbeats 5 a second.
    return mezzo_cluster(
        agents=1,
        master={
            "allocation_interval": 0.02,
            "http": {"event_heartbeat": 0.2},
            "connections": getattr(request, "param", {}),
        },
        agent_resources="cpus:2;mem:1024;disk:1000",
    )


@pytest.fixture
def scheduler(cluster):
    """As in test_scheduler_api: well-behaved v1 frameworks, closed at the end."""
    made: list[V1Scheduler] = []

    def make(**info: Any) -> V1Scheduler:
        s = V1Scheduler(cluster.master, info)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


# -- talking to the master ----------------------------------------------------------------


class Framework(Protocol):
    framework_id: str | None
    stream_id: str | None


def get(cluster: LocalProcessCluster, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", cluster.port, timeout=ANSWER_TIMEOUT)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def post_call(cluster: LocalProcessCluster, who: Framework, kind: str, payload: dict) -> tuple[int, str]:
    """One call of ``who`` on a connection of its own. Not V1Scheduler.call's keep-alive
    connection: with unregistered_idle_timeout at a second or two, the master closes
    that one between calls, as it should."""
    body = json.dumps({"type": kind, "framework_id": {"value": who.framework_id}, kind.lower(): payload})
    conn = http.client.HTTPConnection("127.0.0.1", cluster.port, timeout=ANSWER_TIMEOUT)
    try:
        headers = {"Content-Type": "application/json", "Mesos-Stream-Id": who.stream_id or ""}
        conn.request("POST", "/api/v1/scheduler", body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def metrics(cluster: LocalProcessCluster) -> dict[str, float]:
    status, body = get(cluster, "/metrics/snapshot")
    assert status == 200, body
    return json.loads(body)


def closed_for(cluster: LocalProcessCluster, setting: str) -> int:
    """Connections the master closed for ``setting`` so far."""
    return int(metrics(cluster)[f"mezzo/connections/closed/{setting}"])


def open_connections(cluster: LocalProcessCluster) -> int:
    """Connections the master holds now (this one, asking, among them)."""
    return int(metrics(cluster)["mezzo/connections/open"])


def framework_named(cluster: LocalProcessCluster, name: str) -> dict | None:
    return next((f for f in cluster.state()["frameworks"] if f["name"] == name), None)


_probes = itertools.count()


def assert_serving(cluster: LocalProcessCluster, s: V1Scheduler) -> None:
    """The master answers an operator, and answers and applies a framework's call:
    a reconciliation of a task it never knew is answered on the stream."""
    assert get(cluster, "/health")[0] == 200
    status, body = get(cluster, "/version")
    assert status == 200 and json.loads(body)["name"] == "mezzo"
    probe = f"probe-{next(_probes)}"
    assert post_call(cluster, s, "RECONCILE", {"tasks": [{"task_id": {"value": probe}}]}) == (202, "")
    s.wait_for("UPDATE", lambda e: e["update"]["status"]["task_id"]["value"] == probe, timeout=ANSWER_TIMEOUT)


def request_head(body: bytes, stream_id: str | None = None) -> bytes:
    """The head of a POST to the scheduler API announcing ``body``."""
    stream = f"Mesos-Stream-Id: {stream_id}\r\n" if stream_id else ""
    return (
        "POST /api/v1/scheduler HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        f"{stream}Content-Length: {len(body)}\r\n\r\n"
    ).encode()


def subscribe_body(name: str) -> bytes:
    return json.dumps(
        {"type": "SUBSCRIBE", "subscribe": {"framework_info": {"user": "", "name": name}}}
    ).encode()


def wait_closed(socks: Iterable[socket.socket], timeout: float = CLOSE_WAIT) -> list[socket.socket]:
    """Read each of ``socks`` until the master closes it (EOF or reset), for at most
    ``timeout`` seconds in all: the ones still open then."""
    still_open = set(socks)
    with selectors.DefaultSelector() as selector:  # epoll: hundreds of sockets, any descriptor number
        for sock in still_open:
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while still_open and (left := deadline - time.monotonic()) > 0:
            for key, _ in selector.select(left):
                sock = key.fileobj  # type: ignore[assignment]
                try:
                    ended = not sock.recv(1 << 16)
                except BlockingIOError:
                    continue
                except ConnectionError:
                    ended = True  # aborted: a reset
                if ended:
                    selector.unregister(sock)
                    still_open.discard(sock)
    return list(still_open)


# -- 1. a request that never completes ------------------------------------------------------


class SlowClient:
    """A raw connection that sends a request's head at once, then its body one byte
    per ``pace`` seconds (None: nothing more), in a thread of its own, until the master
    closes the connection (:attr:`ended`) or the test stops it."""

    def __init__(self, port: int, head: bytes, body: bytes, pace: float | None) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=ANSWER_TIMEOUT)
        self.head, self.body, self.pace = head, body, pace
        self.body_sent = 0
        self.answer = b""
        """What the master sent back before closing (nothing, for a request never whole)."""
        self.ended = threading.Event()
        """Set once the master closed the connection (EOF, reset or a broken pipe)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        sock = self.sock
        try:
            sock.sendall(self.head)
            while not self._stop.is_set():
                # Wait one pace for the master to say something (or close), then trickle.
                readable, _, _ = select.select([sock], [], [], self.pace or 0.1)
                if readable:
                    data = sock.recv(1 << 16)
                    if not data:
                        break
                    self.answer += data
                    continue
                if self.pace is not None and self.body_sent < len(self.body):
                    sock.send(self.body[self.body_sent : self.body_sent + 1])
                    self.body_sent += 1
        except OSError:
            pass  # reset by the master, or a write into a connection it closed
        else:
            if self._stop.is_set():
                return  # stopped by the test: the master did not close it
        self.ended.set()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@with_limits(partial_frame_timeout=1.0, unregistered_idle_timeout=1.5)
@pytest.mark.parametrize(
    ("request_kind", "trickled", "setting"),
    [
        # A SUBSCRIBE's head reaches aiohttp's handler at once; its body is then the
        # incomplete request, its clock running from the first byte of it.
        ("subscribe", True, "partial_frame_timeout"),
        # The handler waits for a body that never comes; nothing is incomplete as the
        # port sees it (the head was handed over): the connection is silent.
        ("subscribe", False, "unregistered_idle_timeout"),
        # A stream's call is read whole by the fast lane before anything answers it:
        # head and body are one incomplete request, trickled or not.
        ("call", True, "partial_frame_timeout"),
        ("call", False, "partial_frame_timeout"),
    ],
    ids=["subscribe-trickled", "subscribe-head-only", "call-trickled", "call-head-only"],
)
def test_a_request_that_never_completes_holds_no_one_up_and_is_closed(
    cluster, scheduler, request_kind, trickled, setting
) -> None:
    healthy = scheduler(name="healthy")
    healthy.subscribe()
    if request_kind == "subscribe":
        body = subscribe_body("slow")
        head = request_head(body)
    else:
        # Calls of a subscribed framework, on its real stream, that never arrive whole.
        caller = scheduler(name="slow-caller")
        caller.subscribe()
        body = json.dumps({"type": "REVIVE", "framework_id": {"value": caller.framework_id}}).encode()
        head = request_head(body, caller.stream_id)
    before = closed_for(cluster, setting)
    slow = [
        SlowClient(cluster.port, head, body, TRICKLE_PACE if trickled else None) for _ in range(SLOW_CLIENTS)
    ]
    try:
        # While they hang, the others are served (the master does not wait for them).
        assert_serving(cluster, healthy)
        wait_for(
            lambda: all(c.ended.is_set() for c in slow),
            timeout=CLOSE_WAIT,
            what=f"the master to close {SLOW_CLIENTS} slow clients by {setting}",
        )
        # Closed, not answered: their requests were never whole.
        assert [c.answer for c in slow] == [b""] * SLOW_CLIENTS
        if trickled:
            # Cut off mid-body, not served once the body was in.
            assert all(c.body_sent < len(body) for c in slow)
        assert closed_for(cluster, setting) >= before + SLOW_CLIENTS
    finally:
        for c in slow:
            c.stop()
    assert framework_named(cluster, "slow") is None  # no half-read SUBSCRIBE registered anything
    if request_kind == "call":
        # Only the calls' connections were closed: the framework's stream is untouched.
        assert framework_named(cluster, "slow-caller")["connected"]
    assert_serving(cluster, healthy)


def test_a_client_gone_mid_body_is_not_logged_as_a_handler_failure(cluster) -> None:
    body = subscribe_body("gone")
    baseline = open_connections(cluster)
    for _ in range(5):
        with socket.create_connection(("127.0.0.1", cluster.port), timeout=ANSWER_TIMEOUT) as sock:
            sock.sendall(request_head(body) + body[:10])
            time.sleep(0.05)  # not a wait for anything: the handler reads the body by then
    wait_for(lambda: open_connections(cluster) <= baseline, timeout=5, what="the master to let them go")
    assert get(cluster, "/health")[0] == 200  # a turn of the loop or more after their handlers ended
    log = (cluster.dir / "master.log").read_text(errors="replace")
    assert "HTTP handler failed" not in log


# -- 2. a subscriber that does not read its events ------------------------------------------

RECONCILE_BYTES = 3 << 20
"""Bytes of one flooding RECONCILE (a call's body may have 4 MiB)."""
TASK_ID_BYTES = 16 << 10
"""Length of each task id it names: its answer, an UPDATE, is about as long. Few and
long ids make megabytes of events with few calls (192 tokens of the framework's call
rate each, far below master.framework_call_burst)."""


class StalledSubscriber:
    """A v1 scheduler whose event reader hung: it SUBSCRIBEs on a raw socket with a
    small receive buffer, reads the answer's head (for its ``Mesos-Stream-Id``), and
    never reads again. Its calls still go out, each on a connection of its own."""

    def __init__(self, cluster: LocalProcessCluster, name: str) -> None:
        self.sock = sock = socket.socket()
        # Before connecting: the window it advertises stays small, so what the master
        # writes piles up at the master, not in this socket.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 10)
        sock.settimeout(ANSWER_TIMEOUT)
        sock.connect(("127.0.0.1", cluster.port))
        body = subscribe_body(name)
        sock.sendall(request_head(body) + body)
        head = b""
        while not head.endswith(b"\r\n\r\n"):  # a byte at a time: not one event is read
            byte = sock.recv(1)
            assert byte, f"the master closed the subscription: {head!r}"
            head += byte
        lines = head.decode().split("\r\n")
        assert lines[0].split()[1] == "200", lines[0]
        headers = {
            k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)
        }
        self.stream_id: str | None = headers["mesos-stream-id"]
        self.framework_id: str | None = wait_for(lambda: framework_named(cluster, name), timeout=5)["id"]

    def reconcile_flood(self, cluster: LocalProcessCluster, round_: int) -> tuple[int, str]:
        """A RECONCILE naming RECONCILE_BYTES of tasks the master never knew: each is
        answered on the stream by an UPDATE (TASK_UNKNOWN) carrying its long id."""
        tasks = [
            {"task_id": {"value": f"r{round_}-t{i}-".ljust(TASK_ID_BYTES, "x")}}
            for i in range(RECONCILE_BYTES // TASK_ID_BYTES)
        ]
        return post_call(cluster, self, "RECONCILE", {"tasks": tasks})

    def stream_ends(self, timeout: float = CLOSE_WAIT) -> bool:
        """Read what the master had sent until the stream ends; whether it did (within
        ``timeout``): the master dropped the connection."""
        return not wait_closed([self.sock], timeout)

    def close(self) -> None:
        self.sock.close()


def connected(cluster: LocalProcessCluster, framework_id: str | None) -> bool:
    return any(f["id"] == framework_id and f["connected"] for f in cluster.state()["frameworks"])


def flood_until(
    cluster: LocalProcessCluster,
    stalled: StalledSubscriber,
    healthy: V1Scheduler,
    done: Callable[[], bool],
    rounds: int,
) -> list[int]:
    """Flood ``stalled``'s stream a RECONCILE at a time, checking after each that
    ``healthy`` is served, until ``done()`` or a call is refused (the stream is gone),
    ``rounds`` calls at most: the statuses of the calls."""
    statuses = []
    for round_ in range(rounds):
        status, text = stalled.reconcile_flood(cluster, round_)
        statuses.append(status)
        assert status in (202, 400, 403), (status, text)  # 400/403: its stream is gone
        assert_serving(cluster, healthy)
        if status != 202 or done():
            break
    return statuses


@with_limits(write_stall_timeout=1.0)
def test_a_subscriber_that_stops_reading_is_cut_off_after_write_stall_timeout(cluster, scheduler) -> None:
    healthy = scheduler(name="healthy")
    healthy.subscribe()
    stalled = StalledSubscriber(cluster, "stalled")
    try:
        before = closed_for(cluster, "write_stall_timeout")

        def stalled_or_dropped() -> bool:
            m = metrics(cluster)
            return (
                m["mezzo/connections/reading_paused"] >= 1
                or m["mezzo/connections/closed/write_stall_timeout"] > before
            )

        # Once more waits for it than its socket buffers and write_buffer_high (1 MiB)
        # hold, the master stops writing to it (and reading from it), and its stall
        # clock runs. A few MiB do: stop there, well before the 32 MiB bound.
        statuses = flood_until(cluster, stalled, healthy, stalled_or_dropped, rounds=8)
        assert statuses[0] == 202
        wait_for(
            lambda: closed_for(cluster, "write_stall_timeout") > before,
            timeout=CLOSE_WAIT,
            what="the master to drop the stalled subscriber (write_stall_timeout)",
        )
        wait_for(
            lambda: not connected(cluster, stalled.framework_id), timeout=CLOSE_WAIT, what="it disconnected"
        )
        assert stalled.stream_ends()
        # Its framework is disconnected, not lost (its failover_timeout applies): its
        # calls are refused until it subscribes again.
        assert post_call(cluster, stalled, "REVIVE", {})[0] in (400, 403)
        # The master's line for the stream's end says why, not "the scheduler closed it".
        wait_for(
            lambda: "dropped for master.connections.write_stall_timeout"
            in (cluster.dir / "master.log").read_text(errors="replace"),
            timeout=CLOSE_WAIT,
            what="the stream's end logged with its reason",
        )
    finally:
        stalled.close()
    assert connected(cluster, healthy.framework_id)
    assert_serving(cluster, healthy)


@with_limits(write_stall_timeout=60.0)
def test_a_subscriber_that_stops_reading_is_cut_off_past_32_mib_of_events(cluster, scheduler) -> None:
    # The stall timeout (its default) far off: the bound on the events buffered for one
    # subscriber acts first, as soon as 32 MiB wait, however young the stall.
    healthy = scheduler(name="healthy")
    healthy.subscribe()
    stalled = StalledSubscriber(cluster, "stalled")
    try:
        # Some 40 MiB (13 calls here) reach it: 32 MiB, plus what the socket buffers
        # and write_buffer_high hold; 72 MiB at most, for machines with bigger buffers.
        statuses = flood_until(
            cluster, stalled, healthy, lambda: not connected(cluster, stalled.framework_id), rounds=24
        )
        assert statuses[0] == 202
        wait_for(
            lambda: not connected(cluster, stalled.framework_id), timeout=CLOSE_WAIT, what="it disconnected"
        )
        assert stalled.stream_ends()
        assert post_call(cluster, stalled, "REVIVE", {})[0] in (400, 403)
    finally:
        stalled.close()
    log = (cluster.dir / "master.log").read_text(errors="replace")
    assert "more than 32 MiB of events unread" in log
    assert closed_for(cluster, "write_stall_timeout") == 0  # not what cut it
    assert connected(cluster, healthy.framework_id)
    assert_serving(cluster, healthy)


# -- 3. hundreds of idle connections -------------------------------------------------------

IDLE_CONNECTIONS = 100
"""Of each kind: sockets that never send a byte, and keep-alives idle after one request."""


def kept_alive(cluster: LocalProcessCluster) -> socket.socket:
    """A connection that asked for ``/health``, was answered, and stays open (HTTP/1.1
    keep-alive) without a word more."""
    sock = socket.create_connection(("127.0.0.1", cluster.port), timeout=ANSWER_TIMEOUT)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: test\r\n\r\n")
    response = http.client.HTTPResponse(sock)
    response.begin()
    response.read()
    assert response.status == 200 and not response.will_close
    return sock


@with_limits(first_frame_timeout=3.0, unregistered_idle_timeout=4.0)  # room to open 200 on a busy machine
def test_hundreds_of_idle_connections_are_closed_and_a_framework_is_served_meanwhile(
    cluster, scheduler
) -> None:
    settings = ("first_frame_timeout", "unregistered_idle_timeout")
    before = {k: closed_for(cluster, k) for k in settings}
    baseline = open_connections(cluster)
    # The keep-alives first (each a request and its answer), the silent ones last: all
    # are open at once well within the shorter timeout.
    idle = [kept_alive(cluster) for _ in range(IDLE_CONNECTIONS)]
    silent = [socket.create_connection(("127.0.0.1", cluster.port)) for _ in range(IDLE_CONNECTIONS)]
    try:
        assert open_connections(cluster) >= baseline + 2 * IDLE_CONNECTIONS  # admitted, all of them
        # A framework subscribes and is served with all of them open.
        s = scheduler(name="busy")
        s.subscribe()
        assert_serving(cluster, s)
        assert wait_closed(silent + idle) == []
        after = {k: closed_for(cluster, k) for k in settings}
        assert after["first_frame_timeout"] >= before["first_frame_timeout"] + IDLE_CONNECTIONS
        assert after["unregistered_idle_timeout"] >= before["unregistered_idle_timeout"] + IDLE_CONNECTIONS
        # Their slots are free again: what is left is what was there, and the subscription.
        wait_for(lambda: open_connections(cluster) <= baseline + 1, timeout=5, what="their slots to be freed")
    finally:
        for sock in idle + silent:
            sock.close()
    # The subscription sent nothing after SUBSCRIBE either, for longer than the idle
    # timeout: it is a stream, spared, and its heartbeats still flow.
    assert connected(cluster, s.framework_id)
    heartbeats = sum(e["type"] == "HEARTBEAT" for e in list(s.events))
    wait_for(
        lambda: sum(e["type"] == "HEARTBEAT" for e in list(s.events)) > heartbeats,
        timeout=5,
        what="a heartbeat",
    )
    assert_serving(cluster, s)
