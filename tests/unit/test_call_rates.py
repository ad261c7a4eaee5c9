"""Per-framework call rates (mezzo.master.call_rates): the token bucket alone, on a
manual clock. How the master service charges calls: tests/unit/test_framework_bounds.py;
a real master and a flooding framework: tests/test_framework_bounds.py.
"""

from __future__ import annotations

import pytest

from mezzo.master.call_rates import DROPPABLE, CallRates, Verdict
from mezzo.master.loop_watch import LoopWatch
from mezzo.master.ports import ManualClock

STATE_CALL = "set_needs_offers"
DROP_CALL = "reconcile_tasks"


def served(rates: CallRates, call: str, n: int, framework: str = "f") -> int:
    """How many of ``n`` calls in a row are served."""
    return sum(rates.charge(framework, call) is Verdict.SERVE for _ in range(n))


def test_a_burst_is_served_then_calls_over_the_rate_are_refused():
    clock = ManualClock()
    rates = CallRates(clock, rate=10.0, burst=100)
    assert served(rates, STATE_CALL, 100) == 100
    assert rates.charge("f", STATE_CALL) is Verdict.REFUSE
    assert rates.refused == 1
    clock.advance(0.1)  # one token back
    assert rates.charge("f", STATE_CALL) is Verdict.SERVE
    assert rates.charge("f", STATE_CALL) is Verdict.REFUSE


def test_the_sustained_rate_is_the_configured_one():
    clock = ManualClock()
    rates = CallRates(clock, rate=50.0, burst=20)
    total = 0
    for _ in range(1000):  # 10 s, a call every 10 ms: twice the rate
        clock.advance(0.01)
        total += served(rates, STATE_CALL, 1)
    assert total == pytest.approx(20 + 50 * 10, abs=2)


def test_frameworks_have_buckets_of_their_own():
    rates = CallRates(ManualClock(), rate=1.0, burst=10)
    assert served(rates, STATE_CALL, 50, "greedy") == 10
    assert served(rates, STATE_CALL, 10, "other") == 10


def test_calls_safe_to_lose_are_dropped_and_leave_half_the_bucket_to_the_others():
    clock = ManualClock()
    rates = CallRates(clock, rate=10.0, burst=100)
    assert DROP_CALL in DROPPABLE and STATE_CALL not in DROPPABLE
    assert served(rates, DROP_CALL, 90) == 50
    assert rates.dropped == 40 and rates.refused == 0
    # The reserve: a framework flooding reconciliations still launches and revives.
    assert served(rates, STATE_CALL, 50) == 50
    assert rates.charge("f", STATE_CALL) is Verdict.REFUSE
    # Refilled tokens first rebuild the reserve.
    clock.advance(1.0)
    assert rates.charge("f", DROP_CALL) is Verdict.DROP
    assert served(rates, STATE_CALL, 10) == 10


def test_past_a_burst_of_dropped_calls_even_those_are_refused():
    """Dropping still costs the master the decoding: a framework may be dropped a
    burst's worth of calls beyond its rate, no more."""
    rates = CallRates(ManualClock(), rate=10.0, burst=100)
    verdicts = [rates.charge("f", DROP_CALL) for _ in range(151)]
    assert verdicts.count(Verdict.SERVE) == 50 and verdicts.count(Verdict.DROP) == 100
    assert verdicts[-1] is Verdict.REFUSE and rates.refused == 1


@pytest.mark.parametrize(("calls_per_second", "refused"), [(20, False), (30, True)])
def test_up_to_twice_the_rate_what_is_safe_to_lose_is_dropped_for_ever(calls_per_second, refused):
    clock = ManualClock()
    rates = CallRates(clock, rate=10.0, burst=100)
    verdicts = []
    for _ in range(60 * calls_per_second):  # a minute
        clock.advance(1 / calls_per_second)
        verdicts.append(rates.charge("f", DROP_CALL))
    assert (Verdict.REFUSE in verdicts) is refused
    if not refused:
        assert verdicts.count(Verdict.SERVE) == pytest.approx(50 + 600, abs=2)  # the rate, after the burst


def test_a_costly_call_takes_more_tokens_and_the_dearest_still_fits_a_full_bucket():
    rates = CallRates(ManualClock(), rate=1.0, burst=100)
    assert rates.charge("f", DROP_CALL, cost=30) is Verdict.SERVE
    assert rates.tokens("f") == pytest.approx(70)
    assert rates.charge("f", DROP_CALL, cost=30) is Verdict.DROP  # would go below the reserve
    fresh = CallRates(ManualClock(), rate=1.0, burst=100)
    assert fresh.charge("f", DROP_CALL, cost=10**9) is Verdict.SERVE  # charged half the bucket
    assert fresh.tokens("f") == pytest.approx(50)


def test_a_dropped_call_adds_what_reading_it_cost_to_the_debt():
    rates = CallRates(ManualClock(), rate=10.0, burst=100)
    assert served(rates, DROP_CALL, 50) == 50  # down to the reserve
    assert rates.charge("f", DROP_CALL, cost=1, dropped_cost=40) is Verdict.DROP
    assert rates.charge("f", DROP_CALL, cost=1, dropped_cost=40) is Verdict.DROP
    assert rates.charge("f", DROP_CALL, cost=1, dropped_cost=40) is Verdict.REFUSE  # 120 > a burst


def test_rate_zero_is_no_limit():
    rates = CallRates(ManualClock(), rate=0.0, burst=1)
    assert served(rates, STATE_CALL, 10_000) == 10_000
    assert len(rates) == 0


def test_a_stall_of_the_master_is_not_charged_to_the_calls_that_waited_for_it():
    """Calls sent while the master's loop was held arrive together: the bucket grants
    what the stall would have refilled (up to one more burst)."""
    clock = ManualClock()
    watch = LoopWatch(clock)
    watch.start()
    rates = CallRates(clock, rate=1.0, burst=10, watch=watch)
    assert served(rates, STATE_CALL, 10) == 10  # empty
    clock.jump(30.0)  # held for 30 s; the scheduler kept sending
    assert served(rates, STATE_CALL, 30) == 20  # the burst, plus the stall's credit capped at a burst
    # Time the master listened is not a stall: no credit.
    clock.advance(30.0)
    assert served(rates, STATE_CALL, 30) == 10


def test_drops_are_counted_and_logged_at_most_every_ten_seconds():
    from structlog.testing import capture_logs

    clock = ManualClock()
    rates = CallRates(clock, rate=1.0, burst=200)  # 100 tokens kept from what may be dropped
    with capture_logs() as logs:
        assert served(rates, DROP_CALL, 150) == 100
        clock.advance(10.0)
        assert served(rates, DROP_CALL, 50) == 10
    lines = [e for e in logs if e["event"] == "framework over its call rate: calls dropped"]
    assert [line["dropped"] for line in lines] == [1, 50]  # the first at once, then the count since
    assert lines[0]["framework"] == "f" and lines[0]["setting"] == "master.framework_call_rate"
    assert rates.dropped == 90 and rates.refused == 0


def test_buckets_of_frameworks_seen_long_ago_are_forgotten():
    clock = ManualClock()
    rates = CallRates(clock, rate=100.0, burst=100)
    for i in range(3000):
        rates.charge(f"f{i}", STATE_CALL)
    assert len(rates) == 3000  # each still short of its token
    clock.advance(1.0)  # every bucket is full again: the same as a new one
    for i in range(3000, 5000):
        rates.charge(f"f{i}", STATE_CALL)
    assert len(rates) == 2000  # swept when their number doubled
