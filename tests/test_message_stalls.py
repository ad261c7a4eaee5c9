"""No message holds a real master's event loop: per handler family, the largest
message the frame limit admits (or the largest legal one, where a documented bound
is lower), while a probe measures from outside how long the master takes to answer
a metrics request.

Before the work of issue 14 these held the loop for: a 16 MiB reconciliation 0.6 s
(decode and setup), a decline of 830,000 unknown offers 43 s (a log line each), a
16 MiB statistics report 0.44 s, a filter of 700,000 agents 1.3 s, an agent with
65,536 port ranges 0.27 s. The bound asserted here (MAX_GAP) is loose, so that a
loaded machine does not fail it; ``bench/message_stalls.py`` measures the figures.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from mezzo.master.service import FILTER_AGENTS_MAX
from mezzo.resources import AGENT_RANGE_LIMIT
from mezzo.rpc.framing import DEFAULT_MAX_FRAME
from mezzo.services import AGENT, MASTER, SCHEDULER, TOOL
from mezzo.testing import RawPeer, largest_message
from mezzo.wire.ttypes import (
    AgentInfo,
    CommandInfo,
    FrameworkFilters,
    FrameworkInfo,
    Range,
    Resources,
    TaskInfo,
    TaskStatus,
)

MAX_GAP = 0.5
"""Seconds: the longest a metrics request may wait for its answer while a big message is served."""

LIMIT = DEFAULT_MAX_FRAME - 1024


class Probe:
    """Asks the master for its metrics over and over; keeps the longest wait."""

    def __init__(self, address: str) -> None:
        self.peer = RawPeer(address, TOOL)
        self.worst = 0.0
        self.answered = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        request = 0
        while not self._stop.is_set():
            request += 1
            start = time.monotonic()
            self.peer.send("request_metrics", request)
            self.peer.expect("metrics")
            self.worst = max(self.worst, time.monotonic() - start)
            self.answered += 1
            time.sleep(0.005)

    def __enter__(self) -> Probe:
        self._thread.start()
        while not self.answered:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)
        self.peer.close()


def largest(method: str, make, n: int = 1000) -> tuple[int, bytes]:
    """:func:`mezzo.testing.largest_message` within this module's limit."""
    return largest_message(method, make, LIMIT, n)


@pytest.fixture
def master(make_cluster):
    return make_cluster(0, master={"allocation_interval": 0.05}).master


def framework(address: str) -> tuple[RawPeer, str]:
    peer = RawPeer(address, SCHEDULER)
    peer.send("register_framework", FrameworkInfo(name="big"))
    (fid, _) = peer.expect("registered")
    return peer, fid


def agent(address: str, ranges: int = 1) -> tuple[RawPeer, str]:
    peer = RawPeer(address, AGENT)
    ports = [Range(2 * i, 2 * i) for i in range(ranges)]
    resources = Resources(scalars={"cpus": 8000, "mem": 8_000_000}, ranges={"ports": ports})
    peer.send("register_agent", AgentInfo(hostname="big", port=5051, resources=resources, attributes={}))
    (aid,) = peer.expect("registered")
    return peer, aid


def served_within_bound(master: str, send, then) -> float:
    with Probe(master) as probe:
        send()
        then()
        worst = probe.worst
    assert worst < MAX_GAP, f"a metrics request waited {worst:.2f} s"
    return worst


def test_a_reconciliation_filling_the_frame_limit(master):
    peer, fid = framework(master)
    n, message = largest(
        "reconcile_tasks", lambda n: (fid, [TaskStatus(task_id=f"t{i:09d}") for i in range(n)])
    )
    assert n > 150_000

    def answered():
        last = f"t{n - 1:09d}"
        while peer.expect("status_update")[0].task_id != last:
            pass

    served_within_bound(master, lambda: peer.send_frame(message), answered)


def test_a_decline_of_unknown_offers_filling_the_frame_limit(master):
    peer, fid = framework(master)
    n, message = largest("decline_offer", lambda n: (fid, [f"o{i:011d}" for i in range(n)], None))
    assert n > 500_000

    def handled():  # a call behind it on the same connection is answered after it
        peer.send("request_guaranteed_share", fid, 7)
        peer.expect("guaranteed_share")

    served_within_bound(master, lambda: peer.send_frame(message), handled)


def test_a_filter_naming_agents_up_to_the_frame_limit(master):
    peer, fid = framework(master)
    n, message = largest(
        "set_filters", lambda n: (fid, FrameworkFilters(agents=[f"a{i:011d}" for i in range(n)]))
    )
    assert n > FILTER_AGENTS_MAX

    def refused():
        (error,) = peer.expect("error")
        assert f"at most {FILTER_AGENTS_MAX:,}" in error

    served_within_bound(master, lambda: peer.send_frame(message), refused)

    # The largest filter the master takes is served as quickly.
    peer, fid = framework(master)
    agents = FrameworkFilters(agents=[f"a{i:011d}" for i in range(FILTER_AGENTS_MAX)])

    def handled():  # a call behind it on the same connection is answered after it
        peer.send("request_guaranteed_share", fid, 7)
        peer.expect("guaranteed_share")

    served_within_bound(master, lambda: peer.send("set_filters", fid, agents), handled)


def test_statistics_filling_the_frame_limit(master):
    peer, aid = agent(master)
    report = json.dumps(
        [{"container_id": f"c{i}", "statistics": {"cpus_user_time_secs": i}} for i in range(200_000)]
    )
    message = MASTER.encode("container_statistics", (aid, report[: LIMIT - 200]), {})

    def handled():
        peer.send("pong")
        peer.send("status_update", TaskStatus(task_id="none", state=2, agent_id=aid, uuid="u"))
        time.sleep(0.5)

    served_within_bound(master, lambda: peer.send_frame(message), handled)


def test_an_agent_with_the_most_ranges_it_may_have_and_a_task_asking_for_all(master):
    sched, fid = framework(master)
    peer, aid = agent(master, ranges=AGENT_RANGE_LIMIT)
    offers = sched.expect("resource_offers")[0]
    (offer,) = [o for o in offers if o.agent_id == aid]
    ports = [Range(2 * i, 2 * i) for i in range(AGENT_RANGE_LIMIT)]
    task = TaskInfo(
        task_id="all-ports",
        name="t",
        agent_id=aid,
        command=CommandInfo(value="true"),
        resources=Resources(scalars={"cpus": 1000}, ranges={"ports": ports}),
        labels={},
    )

    def launched():
        peer.expect("run_task")

    served_within_bound(
        master, lambda: sched.send("launch_tasks", fid, [offer.offer_id], [task], None), launched
    )


def test_a_task_asking_for_more_ranges_than_the_frame_limit_holds(master):
    def make(n, offer_id="o" * 40, agent_id="a" * 40):
        ports = [Range(2 * i, 2 * i) for i in range(n)]
        task = TaskInfo(task_id="t", agent_id=agent_id, resources=Resources(ranges={"ports": ports}))
        return (fid, [offer_id], [task], None)

    sched, fid = framework(master)
    n, _ = largest("launch_tasks", make)  # before the offer: it is not kept waiting
    _, aid = agent(master)
    offers = sched.expect("resource_offers")[0]
    (offer,) = [o for o in offers if o.agent_id == aid]
    message = MASTER.encode("launch_tasks", make(n, offer.offer_id, aid), {})

    def refused():
        status = sched.expect("status_update")[0]
        assert "ranges are more than an agent may have" in status.message

    served_within_bound(master, lambda: sched.send_frame(message), refused)
