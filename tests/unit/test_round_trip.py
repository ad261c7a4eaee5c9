"""The round-trip estimate that stretches status-update resends for a slow master."""

from __future__ import annotations

import math
import random

import pytest

from mezzo.backoff import Backoff
from mezzo.round_trip import RoundTripEstimate


def test_before_any_answer_the_timeout_is_the_floor():
    assert RoundTripEstimate(1.0, 15.0).timeout == 1.0


def test_a_fast_peer_keeps_the_floor():
    rtt = RoundTripEstimate(1.0, 15.0)
    for _ in range(100):
        rtt.observe(0.003)
    assert rtt.timeout == 1.0


def test_a_steadily_slow_peer_gets_a_timeout_just_above_its_round_trip():
    rtt = RoundTripEstimate(1.0, 15.0)
    for _ in range(100):
        rtt.observe(3.0)
    assert 3.0 <= rtt.timeout < 3.1
    assert rtt.smoothed == pytest.approx(3.0)


def test_a_jittery_peer_gets_room_for_its_variation():
    rtt = RoundTripEstimate(0.1, 15.0)
    rng = random.Random(3)
    samples = [rng.uniform(1.0, 3.0) for _ in range(500)]
    for s in samples:
        rtt.observe(s)
    # Well above the mean (2 s), so that most answers come before a resend would.
    assert rtt.timeout > 3.0
    assert sum(s < rtt.timeout for s in samples[-100:]) >= 95


def test_the_timeout_never_exceeds_the_ceiling():
    rtt = RoundTripEstimate(1.0, 15.0)
    rtt.observe(600.0)
    assert rtt.timeout == 15.0


def test_a_stall_is_forgotten_once_answers_are_fast_again():
    rtt = RoundTripEstimate(1.0, 15.0)
    rtt.observe(20.0)  # one answer after a 20 s stall
    assert rtt.timeout == 15.0
    for _ in range(60):
        rtt.observe(0.01)
    assert rtt.timeout == 1.0


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, -math.inf])
def test_nonsense_samples_are_ignored(bad):
    rtt = RoundTripEstimate(1.0, 15.0)
    rtt.observe(bad)
    assert rtt.samples == 0 and rtt.timeout == 1.0


@pytest.mark.parametrize(("floor", "ceiling"), [(0.0, 1.0), (2.0, 1.0), (-1.0, 5.0)])
def test_bounds_are_checked(floor, ceiling):
    with pytest.raises(ValueError, match="floor"):
        RoundTripEstimate(floor, ceiling)


def test_a_backoff_scaled_by_the_estimate_stretches_every_wait_up_to_its_cap():
    b = Backoff(2.0, 30.0)
    assert [b.ceiling(n, 3.0) for n in range(4)] == [6.0, 12.0, 24.0, 30.0]
    assert b.ceiling(40, 3.0) == 30.0
    assert b.ceiling(0, 0.2) == b.ceiling(0) == 2.0  # never shortened
    assert all(1.5 <= b.delay(0, 1.5) <= 3.0 for _ in range(100))  # the upper half of 1.5 * 2.0
