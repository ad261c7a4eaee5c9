"""AllocationTimer: when cycles run, on a scripted clock (no sleeping, no timing).

The loop below only records what the timer asks of it; the test moves its clock and
fires the due callbacks itself."""

from __future__ import annotations

import pytest

from mezzo.master.allocation_timer import PROMPT_COST_FACTOR, PROMPT_FRACTION, AllocationTimer

INTERVAL = 0.1


class ScriptedLoop:
    """A :class:`~mezzo.master.ports.Clock` moved by the test."""

    def __init__(self) -> None:
        self.at = 100.0
        self.pending: list[_Handle] = []

    def now(self) -> float:
        return self.at

    def call_soon(self, fn):
        return self.call_at(self.at, fn)

    def call_later(self, delay, fn):
        return self.call_at(self.at + delay, fn)

    def call_at(self, when, fn):
        handle = _Handle(when, fn)
        self.pending.append(handle)
        return handle

    def next_run(self) -> float | None:
        live = [h.when for h in self.pending if not h.cancelled]
        return min(live) if live else None

    def advance_to(self, when: float) -> None:
        """Move the clock to ``when``, running everything due by then, in time order."""
        while True:
            due = sorted(
                (h for h in self.pending if not h.cancelled and h.when <= when), key=lambda h: h.when
            )
            if not due:
                break
            handle = due[0]
            self.pending.remove(handle)
            self.at = max(self.at, handle.when)
            handle.fn()
        self.at = when


class _Handle:
    def __init__(self, when, fn) -> None:
        self.when, self.fn, self.cancelled = when, fn, False

    def cancel(self) -> None:
        self.cancelled = True


@pytest.fixture
def timer():
    loop = ScriptedLoop()
    runs: list[float] = []
    cost = {"seconds": 0.0}

    def run():
        runs.append(loop.at)
        loop.at += cost["seconds"]  # the cycle's own cost: the timer reads it on its clock

    t = AllocationTimer(loop, INTERVAL, run)
    return t, loop, runs, cost


def test_a_request_after_a_quiet_period_runs_at_once_and_the_next_waits_an_interval(timer):
    t, loop, runs, _ = timer
    t.request()
    loop.advance_to(loop.at)
    assert runs == [100.0]
    t.request()
    t.request()  # batched with the one before
    assert loop.next_run() == pytest.approx(100.0 + INTERVAL)
    loop.advance_to(101.0)
    assert runs == [100.0, pytest.approx(100.0 + INTERVAL)]


def test_a_prompt_request_waits_only_a_fraction_of_the_interval(timer):
    t, loop, runs, _ = timer
    t.request()
    loop.advance_to(100.0)
    t.request()  # a decline: the full interval
    t.request(prompt=True)  # a task ended: moves the pending cycle earlier
    assert loop.next_run() == pytest.approx(100.0 + INTERVAL * PROMPT_FRACTION)
    loop.advance_to(101.0)
    assert runs == [100.0, pytest.approx(100.0 + INTERVAL * PROMPT_FRACTION)]


def test_a_prompt_request_never_comes_sooner_than_a_multiple_of_the_cycle_s_cost(timer):
    t, loop, runs, cost = timer
    cost["seconds"] = 0.02  # a large cluster: 20 ms per cycle
    t.request()
    loop.advance_to(100.02)  # the cycle ran at 100.0 and ended at 100.02
    t.request(prompt=True)
    assert loop.next_run() == pytest.approx(100.02 + 0.02 * PROMPT_COST_FACTOR)


def test_an_ordinary_request_does_not_delay_a_prompt_one(timer):
    t, loop, runs, _ = timer
    t.request()
    loop.advance_to(100.0)
    t.request(prompt=True)
    t.request()
    assert loop.next_run() == pytest.approx(100.0 + INTERVAL * PROMPT_FRACTION)


def test_prompt_requests_wait_the_whole_interval_while_cycles_run_late(timer):
    t, loop, runs, _ = timer
    t.request()
    loop.advance_to(100.0)
    t.request()
    # The loop was busy: the cycle due at 100.1 runs 50 ms late.
    loop.pending[-1].when = 100.15
    loop.advance_to(100.15)
    assert runs == [100.0, 100.15]
    t.request(prompt=True)
    assert loop.next_run() == pytest.approx(100.15 + INTERVAL)
    loop.advance_to(100.25)
    assert runs[-1] == pytest.approx(100.25)
    t.request(prompt=True)  # that cycle ran on time: prompt again
    assert loop.next_run() == pytest.approx(100.25 + INTERVAL * PROMPT_FRACTION)
