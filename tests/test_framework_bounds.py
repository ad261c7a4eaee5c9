"""Two bounds on frameworks against a real master over real sockets (issue 14):

- the probe registered 5,000 frameworks and went silent, connections open: they
  were never freed. Here silent frameworks are pinged and, unanswered past
  ``master.framework_idle_timeout``, disconnected and closed, while a real driver
  that is idle but alive answers its pings and keeps its framework;
- a framework flooding the master is held to ``master.framework_call_rate`` (what
  is safe to lose dropped, then a call that must not be lost refused with an
  error naming the setting and the connection closed), while another framework's
  offers and launches go on.

In process, on a manual clock: tests/unit/test_framework_bounds.py and
tests/unit/test_call_rates.py.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import mezzo
from mezzo import FrameworkInfo
from mezzo.rpc.framing import FrameDecoder
from mezzo.services import MASTER, SCHEDULER
from mezzo.state_client import fetch_metrics

from .conftest import Recorder, wait_for


class RawScheduler:
    """A framework on a bare socket: it registers, then does only what the test says.
    ``read()`` collects what the master sent so far (None once it closed)."""

    def __init__(self, port: int, name: str) -> None:
        self.name = name
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.decoder = FrameDecoder(64 * 1024 * 1024)
        self.received: list[tuple[str, tuple]] = []
        self.closed = False
        self.framework_id = ""
        self.sent = 0
        self.sock.sendall(MASTER.encode("register_framework", (FrameworkInfo(name=name),), {}))

    def registered(self) -> RawScheduler:
        self.framework_id = wait_for(lambda: self._got("registered"), 10, f"{self.name} to register")[0]
        return self

    def _got(self, name: str):
        self.read(0.1, then=0.0)  # wait_for polls: no pause after each answer
        return next((args for n, args in self.received if n == name), None)

    def read(self, wait: float, then: float = 0.01) -> None:
        """Read what has arrived within ``wait`` seconds, and what follows within
        ``then`` seconds of each piece."""
        self.sock.settimeout(wait)
        try:
            while True:
                data = self.sock.recv(1 << 20)
                if not data:
                    self.closed = True
                    return
                for payload in self.decoder.feed(data):
                    self.received.append(SCHEDULER.decode(payload, 64 * 1024 * 1024))
                self.sock.settimeout(then)
        except (TimeoutError, BlockingIOError):
            return
        except (ConnectionResetError, BrokenPipeError):
            self.closed = True

    def closed_by_master(self, within: float) -> bool:
        deadline = time.monotonic() + within
        while not self.closed and time.monotonic() < deadline:
            self.read(0.2)
        return self.closed

    def keep_out_of_the_way(self) -> None:
        """Want no offers, and decline for an hour the ones made at registration."""
        self.send("set_needs_offers", self.framework_id, False)
        self.read(0.5)
        offers = [o.offer_id for n, args in self.received if n == "resource_offers" for o in args[0]]
        self.send("decline_offer", self.framework_id, offers, mezzo.Filters(refuse_seconds=3600))

    def send(self, method: str, *args) -> None:
        self.sock.sendall(MASTER.encode(method, args, {}))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def test_silent_frameworks_are_freed_and_an_idle_driver_is_not(make_cluster, drivers):
    cluster = make_cluster(0, master={"framework_ping_interval": 0.5, "framework_idle_timeout": 2.0})
    alive = Recorder()
    drivers(alive, "idle-but-alive", cluster.master)  # no agents: nothing to say, ever
    assert alive.registered_event.wait(10)
    started = time.monotonic()
    silent = [RawScheduler(cluster.port, f"silent-{i}") for i in range(200)]
    try:
        for s in silent:
            s.registered()
        # They keep their connections open and never send a byte again.
        wait_for(
            lambda: fetch_metrics(cluster.master)["frameworks"] == 1, 15, "silent frameworks to be freed"
        )
        freed_after = time.monotonic() - started
        assert all(s.closed_by_master(5.0) for s in silent)
        metrics = fetch_metrics(cluster.master)
        assert metrics["frameworks_connected"] == 1 and metrics["frameworks_found_silent"] == 200
        assert 1.5 < freed_after < 12.0, freed_after
        assert alive.disconnections == 0 and not alive.errors
        log = (cluster.dir / "master.log").read_text()
        assert "framework disconnected by the master" in log and "no answer to pings" in log
        assert silent[0].framework_id in log
        # Idle but alive, through many more timeouts: it answers every ping.
        time.sleep(4.0)
        metrics = fetch_metrics(cluster.master)
        assert metrics["frameworks_connected"] == 1 and metrics["frameworks_found_silent"] == 200
        assert alive.disconnections == 0
    finally:
        for s in silent:
            s.close()


def _runs_tasks(total: int):
    """An ``on_offers`` launching ``true`` tasks, one per offer, until ``total`` are launched."""
    launched: list[str] = []

    def on_offers(driver, offers):
        for o in offers:
            if len(launched) >= total:
                driver.decline_offer(o.offer_id, mezzo.Filters(refuse_seconds=60))
                continue
            launched.append(f"t{len(launched)}")
            task = mezzo.TaskInfo(
                task_id=launched[-1],
                agent_id=o.agent_id,
                resources=mezzo.Resources(cpus=1, mem=32),
                command=mezzo.CommandInfo(value="true"),
            )
            driver.launch_tasks(o.offer_id, [task], mezzo.Filters(refuse_seconds=0))

    return on_offers


def _flood(raw: RawScheduler, method: str, *args) -> threading.Thread:
    """Send ``method`` as fast as the socket takes it, until the master closes it."""
    batch = MASTER.encode(method, (raw.framework_id, *args), {}) * 1000

    def flood():
        raw.sock.settimeout(None)
        with contextlib.suppress(OSError):
            while True:
                raw.sock.sendall(batch)
                raw.sent += 1000

    raw.sent = 0
    thread = threading.Thread(target=flood, daemon=True)
    thread.start()
    return thread


def test_flooding_frameworks_are_cut_off_while_another_runs_its_tasks(make_cluster, drivers):
    cluster = make_cluster(1, master={"framework_call_rate": 20.0, "framework_call_burst": 40})
    reconciler = RawScheduler(cluster.port, "reconciler").registered()
    reviver = RawScheduler(cluster.port, "reviver").registered()
    for raw in (reconciler, reviver):
        raw.keep_out_of_the_way()
    good = Recorder(on_offers=_runs_tasks(20))
    drivers(good, "good", cluster.master)
    assert good.registered_event.wait(10)
    started = time.monotonic()
    floods = [_flood(reconciler, "reconcile_tasks", []), _flood(reviver, "set_needs_offers", True)]
    wait_for(lambda: all(good.final(f"t{i}") for i in range(20)), 30, "the good framework's 20 tasks")
    took = time.monotonic() - started
    assert [mezzo.state_name(good.final(f"t{i}").state) for i in range(20)] == ["TASK_FINISHED"] * 20
    assert took < 15, took  # 0.3-0.45 s measured, as without the floods
    for thread in floods:
        thread.join(10)
        assert not thread.is_alive()  # the master closed the flooders' connections

    # Reconciliations are safe to lose: a burst's worth was dropped before the master
    # gave up on the flood. A revive must not be lost silently: refused at once.
    for raw, call in ((reconciler, "reconcile_tasks"), (reviver, "set_needs_offers")):
        assert raw.closed_by_master(10)
        (error,) = [a for n, a in raw.received if n == "error"]
        assert call in error[0] and "master.framework_call_rate" in error[0], error
        raw.close()
    metrics = fetch_metrics(cluster.master)
    assert 40 <= metrics["framework_calls_dropped"] < 100 and metrics["framework_calls_refused"] == 2
    assert metrics["frameworks"] == 1 and metrics["frameworks_connected"] == 1  # the good one
    assert good.disconnections == 0 and not good.errors
    log = (cluster.dir / "master.log").read_text()
    assert "framework over its call rate: calls dropped" in log
    for raw in (reconciler, reviver):
        assert raw.framework_id in log
    assert log.count("framework disconnected by the master") == 2
