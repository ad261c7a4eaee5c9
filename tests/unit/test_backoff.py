"""The backoff policy every retry in mezzo uses: bounds, growth, cap, reset, jitter."""

from __future__ import annotations

import random
import statistics

import pytest

from mezzo.backoff import Backoff


def draws(backoff: Backoff, n: int) -> list[float]:
    return [backoff.next() for _ in range(n)]


def test_each_delay_lies_between_its_floor_and_its_ceiling():
    b = Backoff(0.1, 5.0, rng=random.Random(1))
    for attempt, wait in enumerate(draws(b, 40)):
        top = min(5.0, 0.1 * 2**attempt)
        assert top * 0.5 <= wait <= top, (attempt, wait)


def test_ceilings_double_up_to_the_cap_and_stay_there():
    b = Backoff(0.05, 1.0)
    assert [b.ceiling(n) for n in range(7)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert b.ceiling(10_000) == 1.0  # no overflow far past the cap


def test_without_jitter_the_schedule_is_the_plain_exponential():
    b = Backoff(0.5, 4.0, factor=3.0, jitter=0.0)
    assert draws(b, 4) == [0.5, 1.5, 4.0, 4.0]


def test_the_floor_grows_so_a_long_outage_gets_fewer_attempts():
    # Whatever the draws, the first k delays add up to at least half the plain schedule's.
    for seed in range(20):
        waits = draws(Backoff(0.1, 10.0, rng=random.Random(seed)), 7)
        assert sum(waits) >= 0.5 * sum(0.1 * 2**n for n in range(7))
    # 60 s of failure cost at most ~log2(10 / 0.1) + 60 / 5 attempts; a fixed 0.1 s loop makes 600.
    b = Backoff(0.1, 10.0, rng=random.Random(3))
    elapsed, attempts = 0.0, 0
    while elapsed < 60:
        elapsed += b.next()
        attempts += 1
    assert attempts <= 7 + 12 + 1


def test_reset_starts_again_from_initial():
    b = Backoff(0.2, 10.0, jitter=0.0)
    draws(b, 5)
    assert b.attempts == 5
    b.reset()
    assert b.attempts == 0 and b.next() == 0.2


def test_delay_is_a_stateless_draw_for_a_given_attempt():
    b = Backoff(1.0, 30.0, rng=random.Random(7))
    for attempt in range(8):
        top = min(30.0, 2.0**attempt)
        assert top / 2 <= b.delay(attempt) <= top
    assert b.attempts == 0


def test_jitter_spreads_a_crowd_across_its_window():
    # 2,000 clients failing together: their retries must not land in lock-step.
    rng = random.Random(42)
    waits = [Backoff(1.0, 10.0, rng=rng).next() for _ in range(2_000)]
    assert min(waits) >= 0.5 and max(waits) <= 1.0
    assert max(waits) - min(waits) > 0.45
    # Roughly uniform: every tenth of the window holds a tenth of the crowd, give or take.
    buckets = [0] * 10
    for w in waits:
        buckets[min(9, int((w - 0.5) / 0.05))] += 1
    assert all(120 <= n <= 280 for n in buckets), buckets
    assert 0.72 <= statistics.mean(waits) <= 0.78


def test_full_jitter_reaches_down_to_zero_and_equal_jitter_does_not():
    rng = random.Random(5)
    full = [Backoff(1.0, 1.0, jitter=1.0, rng=rng).next() for _ in range(500)]
    equal = [Backoff(1.0, 1.0, rng=rng).next() for _ in range(500)]
    assert min(full) < 0.05 and min(equal) >= 0.5


def test_seeded_generators_repeat_their_draws():
    a = draws(Backoff(0.1, 3.0, rng=random.Random(9)), 10)
    b = draws(Backoff(0.1, 3.0, rng=random.Random(9)), 10)
    assert a == b
    assert len(set(a)) == 10


def test_factor_one_is_a_jittered_constant():
    b = Backoff(2.0, 2.0, factor=1.0, rng=random.Random(0))
    assert all(1.0 <= w <= 2.0 for w in draws(b, 20))


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"initial": 0, "cap": 1}, "initial"),
        ({"initial": 2, "cap": 1}, "cap"),
        ({"initial": 1, "cap": 2, "factor": 0.5}, "factor"),
        ({"initial": 1, "cap": 2, "jitter": 1.5}, "jitter"),
        ({"initial": 1, "cap": 2, "jitter": -0.1}, "jitter"),
    ],
)
def test_nonsense_settings_are_refused_naming_the_setting(kwargs, word):
    with pytest.raises(ValueError, match=word):
        Backoff(**kwargs)
