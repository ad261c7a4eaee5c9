"""Resends of an update its scheduler has not acknowledged yet are not forwarded again."""

from __future__ import annotations

from mezzo.master.forwarded_updates import LIMIT_FLOOR, RESEND_WINDOW, ForwardedUpdates


def test_a_resend_over_the_same_connection_within_the_window_is_not_forwarded():
    sent, conn = ForwardedUpdates(), object()
    sent.note("u1", conn, 100.0, limit=10)
    assert sent.is_resend("u1", conn, 100.0 + RESEND_WINDOW - 0.1)
    assert not sent.is_resend("u1", conn, 100.0 + RESEND_WINDOW)  # long unacknowledged: again
    assert not sent.is_resend("u2", conn, 100.0)  # never forwarded


def test_a_new_scheduler_connection_gets_the_resend_at_once():
    sent = ForwardedUpdates()
    sent.note("u1", object(), 100.0, limit=10)
    assert not sent.is_resend("u1", object(), 100.5)


def test_an_acknowledged_update_is_forgotten_and_a_reforward_restarts_the_window():
    sent, conn = ForwardedUpdates(), object()
    sent.note("u1", conn, 100.0, limit=10)
    sent.acknowledged("u1")
    assert len(sent) == 0 and not sent.is_resend("u1", conn, 100.1)
    sent.note("u2", conn, 100.0, limit=10)
    sent.note("u2", conn, 100.0 + RESEND_WINDOW, limit=10)  # forwarded again once the window passed
    assert sent.is_resend("u2", conn, 100.0 + RESEND_WINDOW + 1)


def test_memory_is_bounded_oldest_first():
    sent, conn = ForwardedUpdates(), object()
    for i in range(LIMIT_FLOOR + 500):
        sent.note(f"u{i}", conn, float(i), limit=0)  # a scheduler that never acknowledges
    assert len(sent) == LIMIT_FLOOR
    assert not sent.is_resend("u0", conn, 600.0) and sent.is_resend(f"u{LIMIT_FLOOR + 499}", conn, 1500.0)
    sent.note("big", conn, 0.0, limit=LIMIT_FLOOR * 3)  # a framework with many tasks keeps more
    assert len(sent) == LIMIT_FLOOR + 1


def test_a_reforwarded_update_counts_as_the_newest_when_the_oldest_are_dropped():
    sent, conn = ForwardedUpdates(), object()
    for i in range(LIMIT_FLOOR):
        sent.note(f"u{i}", conn, 100.0, limit=0)
    sent.note("u0", conn, 101.0, limit=0)  # forwarded again: now the newest
    sent.note("new", conn, 102.0, limit=0)  # one over the bound: the oldest goes
    assert len(sent) == LIMIT_FLOOR
    assert sent.is_resend("u0", conn, 102.0) and not sent.is_resend("u1", conn, 102.0)
