"""Retries back off (issue 14, "graceful under overload"): every redial and resend in the
daemons and drivers waits exponentially longer, with jitter, up to a cap.

The redial tests point a real agent process, a scheduler driver, an executor driver and
a pool of emulated agents at a "master" that accepts every connection and closes it at
once (a master too loaded to keep anyone, the case where retries must not pile on), and
count the dials. With ``reconnect_interval = 0.05`` a fixed-rate loop dials some 20
times a second. A backoff's n-th wait is at least half of ``0.05 * 2**n``, so over a few
seconds the dials are few, and each gap at least its floor: a loaded machine only
stretches the gaps, so these bounds hold however slow the machine is.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
import subprocess
import sys
import threading
import time

import mezzo
from mezzo.agent.status_updates import StatusUpdateManager
from mezzo.backoff import REDIAL_CAP
from mezzo.driver.executor import AGENT_REDIAL_CAP
from mezzo.emulation.agents import FIRST_RETRY_SECONDS, MAX_RETRY_SECONDS, EmulatedAgentPool
from mezzo.testing import to_toml, wait_for
from mezzo.wire.ttypes import TaskState, TaskStatus

INTERVAL = 0.05
SLACK = 0.9  # timers never fire early; this only absorbs clock granularity


class DroppingMaster:
    """Accepts every connection and closes it at once, recording when each came."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=256)
        self.sock.settimeout(0.05)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.times: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="dropping-master", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.times.append(time.monotonic())
            conn.close()

    def dials_within(self, seconds: float, timeout: float) -> list[float]:
        """Wait for the first dial, then ``seconds`` more; the times of the dials in that window."""
        wait_for(lambda: self.times, timeout, "the first dial")
        first = self.times[0]
        time.sleep(max(0.0, first + seconds - time.monotonic()))
        return [t for t in self.times if t <= first + seconds]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def floors(initial: float, cap: float, n: int) -> list[float]:
    """The shortest possible waits of a backoff's first ``n`` attempts (equal jitter)."""
    return [0.5 * min(cap, initial * 2**i) for i in range(n)]


def assert_backs_off(times: list[float], window: float, initial: float, cap: float) -> None:
    """Every gap at least its backoff floor; so no more dials than the floors allow in ``window``."""
    gaps = [b - a for a, b in itertools.pairwise(times)]
    lows = floors(initial, cap, len(gaps))
    for i, (gap, low) in enumerate(zip(gaps, lows, strict=True)):
        assert gap >= low * SLACK, f"gap {i} = {gap:.3f} s, below its floor {low:.3f} s: {gaps}"
    most = 1 + sum(1 for total in itertools.accumulate(floors(initial, cap, 64)) if total * SLACK <= window)
    fixed_rate = window / initial
    assert len(times) <= most < fixed_rate / 4, (len(times), most, gaps)
    assert len(times) >= 3, f"it stopped trying: {gaps}"


def test_an_agent_process_backs_off_from_a_master_that_keeps_dropping_it(tmp_path):
    master = DroppingMaster()
    config = tmp_path / "mezzo.toml"
    config.write_text(
        to_toml(
            {
                "agent": {
                    "master": master.address,
                    "listen": "127.0.0.1:0",
                    "work_dir": str(tmp_path / "work"),
                    "resources": "cpus:1;mem:256;disk:100",
                    "reconnect_interval": INTERVAL,
                },
                "log": {"level": "info", "format": "console"},
            }
        )
    )
    with open(tmp_path / "agent.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mezzo", "agent", "--config", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
    try:
        window = 4.0
        times = master.dials_within(window, timeout=30)
        assert proc.poll() is None, (tmp_path / "agent.log").read_text()[-3000:]
    finally:
        proc.terminate()
        proc.wait(10)
        master.close()
    assert_backs_off(times, window, INTERVAL, REDIAL_CAP)


class Quiet(mezzo.Scheduler):
    pass


def test_a_scheduler_driver_backs_off_from_a_master_that_keeps_dropping_it():
    master = DroppingMaster()
    driver = mezzo.SchedulerDriver(
        Quiet(), mezzo.FrameworkInfo(name="backoff"), master.address, reconnect_interval=INTERVAL
    )
    driver.start()
    try:
        window = 3.0
        times = master.dials_within(window, timeout=10)
    finally:
        driver.abort()
        master.close()
    assert_backs_off(times, window, INTERVAL, REDIAL_CAP)


def test_an_executor_driver_backs_off_from_its_agent_up_to_a_lower_cap(tmp_path):
    agent = DroppingMaster()
    environ = {
        "MEZZO_AGENT_ENDPOINT": agent.address,
        "MEZZO_FRAMEWORK_ID": "fw",
        "MEZZO_EXECUTOR_ID": "ex",
        "MEZZO_SANDBOX": str(tmp_path),
    }
    driver = mezzo.ExecutorDriver(mezzo.Executor(), reconnect_interval=INTERVAL, environ=environ)
    driver.start()
    try:
        window = 3.0
        times = agent.dials_within(window, timeout=10)
    finally:
        driver.abort()
        agent.close()
    assert_backs_off(times, window, INTERVAL, AGENT_REDIAL_CAP)


def test_emulated_agents_back_off_with_jitter_not_in_lock_step():
    master = DroppingMaster()
    dials: list[list[float]] = []

    async def main() -> None:
        pool = EmulatedAgentPool(master.address, count=10, redial_interval=INTERVAL)
        for link in pool.links:
            mine: list[float] = []
            dials.append(mine)

            async def dial(dial=link.dial, mine=mine) -> None:
                mine.append(time.monotonic())
                await dial()

            link.dial = dial  # type: ignore[method-assign]
        await pool.start()
        await asyncio.sleep(3.0)
        await pool.stop()

    try:
        asyncio.run(main())
    finally:
        master.close()
    for times in dials:
        assert_backs_off(times, 3.0, INTERVAL, REDIAL_CAP)
    # Dialled together at the start, the ten connections drift apart: by their fifth dial
    # the waits of each have added up differently (a fixed schedule keeps them together).
    fifth = [times[4] for times in dials if len(times) > 4]
    assert len(fifth) >= 5, dials
    assert max(fifth) - min(fifth) > 0.05, fifth


def test_status_update_resends_spread_out_and_never_come_before_the_plain_schedule():
    retry = 0.05

    async def main() -> dict[str, list[float]]:
        sent: dict[str, list[float]] = {}
        mgr = StatusUpdateManager(
            send=lambda s: sent.setdefault(s.task_id, []).append(time.monotonic()) or True,
            agent_id=lambda: "a1",
            retry=retry,
        )
        for i in range(20):
            mgr.update(TaskStatus(task_id=f"t{i}", state=TaskState.TASK_RUNNING, framework_id="fw"))
        await asyncio.sleep(0.8)
        mgr.close()
        return sent

    sent = asyncio.run(main())
    for times in sent.values():
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert len(gaps) >= 2, gaps
        for i, gap in enumerate(gaps):  # between retry * 2**i and twice that (plus lateness)
            assert gap >= retry * 2**i * SLACK, gaps
    firsts = [times[1] - times[0] for times in sent.values()]
    assert max(firsts) - min(firsts) > 0.01, firsts  # jittered across [0.05, 0.1], not all at 0.05


def test_emulated_status_update_resends_follow_the_real_agents_schedule():
    pool = EmulatedAgentPool("127.0.0.1:5050", count=0)
    policy = pool.update_backoff
    for n in range(10):
        top = min(MAX_RETRY_SECONDS, 2 * FIRST_RETRY_SECONDS * 2**n)
        assert policy.ceiling(n) == top
        assert all(top / 2 <= policy.delay(n) <= top for _ in range(50))


def test_emulated_status_update_resends_wait_for_a_slow_master_like_a_real_agents():
    pool = EmulatedAgentPool("127.0.0.1:5050", count=1)
    agent, key = pool.agents[0], ("fw", "t")
    pool.retry_later(agent, key, first=True)
    due, _, sent = pool._retries[(agent, key)]
    assert FIRST_RETRY_SECONDS * SLACK <= due - sent <= 2 * FIRST_RETRY_SECONDS  # the plain schedule
    for _ in range(30):  # acknowledgements came back 3 s after their first send
        pool.round_trip.observe(3.0)
    pool.acknowledged(agent, key)  # observed too: a first send answered
    assert pool.round_trip.samples == 31
    pool.retry_later(agent, key, first=True)
    due, _, sent = pool._retries[(agent, key)]
    assert 3.0 * SLACK <= due - sent <= 2 * pool.round_trip.timeout
    pool.withdraw(agent, key)  # an agent that started over: nothing observed
    pool.retry_later(agent, key)  # re-sent after re-registration: never observed
    pool.acknowledged(agent, key)
    assert pool.round_trip.samples == 31


def test_emulated_resends_touch_only_the_updates_due_and_skip_the_acknowledged():
    pool = EmulatedAgentPool("127.0.0.1:5050", count=3)
    sent: list[str] = []
    for agent in pool.agents:
        agent._send = lambda status, sent=sent: sent.append(status.task_id)  # type: ignore[method-assign]
    keys = [(agent, ("fw", f"t{i}")) for i, agent in enumerate(pool.agents)]
    for agent, key in keys:
        agent.unacked[key] = TaskStatus(task_id=key[1], state=TaskState.TASK_RUNNING, framework_id="fw")
        pool.retry_later(agent, key, first=True)
    now = time.monotonic()
    assert pool.resend_due(now) == 0  # none due before its first wait
    pool.acknowledged(*keys[1])  # answered: its heap entry is stale from now on
    del keys[1][0].unacked[keys[1][1]]
    later = now + 2 * FIRST_RETRY_SECONDS + 0.01  # past every first wait
    assert pool.resend_due(later) == 2 and sorted(sent) == ["t0", "t2"]
    assert pool.resend_due(later) == 0  # each rescheduled further out, once
    second = [pool._retries[(agent, key)] for agent, key in (keys[0], keys[2])]
    assert all(entry[1] == 2 and entry[0] > later for entry in second)
    pool.retry_later(*keys[0])  # sent anew (re-registration): its old entry no longer counts
    assert pool.resend_due(later + 4 * FIRST_RETRY_SECONDS + 0.01) == 2  # not 3
    assert sorted(sent[2:]) == ["t0", "t2"]


def test_zookeeper_clients_retry_with_a_capped_jittered_backoff():
    from mezzo.zk import parse_zk_url
    from mezzo.zk.client import RETRY_CAP, new_client

    client = new_client(parse_zk_url("zk://127.0.0.1:1/mezzo"), 10.0)
    for retry in (client._conn_retry, client._retry):
        assert retry.max_delay == RETRY_CAP <= 10.0  # kazoo's default is an hour
        assert retry.max_jitter > 0 and retry.backoff == 2 and retry.max_tries == -1


class _Leader:
    """A stand-in for a ``zk://`` target whose leader the test sets (None: nobody leads)."""

    def __init__(self, address: str) -> None:
        host, port = address.split(":")
        self.address: tuple[str, int] | None = (host, int(port))

    async def start(self) -> None:
        pass

    def current(self) -> tuple[str, int] | None:
        return self.address

    async def changed(self, timeout: float) -> bool:
        await asyncio.sleep(timeout)
        return False

    def add_listener(self, listener) -> None:
        pass

    def close(self) -> None:
        pass


def test_emulated_agents_wait_for_a_leader_instead_of_spinning_while_nobody_leads():
    # Before: with nobody leading, the redial loop's dial failed without ever yielding the
    # event loop, so the whole pool hung at 100 % CPU until a leader could not even be heard.
    master = DroppingMaster()
    result: dict[str, int] = {}

    async def main() -> None:
        pool = EmulatedAgentPool(master.address, count=1, redial_interval=INTERVAL)
        leader = _Leader(master.address)
        pool.target = leader  # type: ignore[assignment]
        await pool.start()
        leader.address = None  # the dropped connection is redialled while nobody leads
        await asyncio.sleep(0.5)
        result["while_nobody_leads"] = len(master.times)
        await pool.stop()

    thread = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
    thread.start()
    thread.join(10)
    master.close()
    assert not thread.is_alive(), "the pool's event loop hung"
    assert result == {"while_nobody_leads": 1}
