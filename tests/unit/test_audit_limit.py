"""Audit lines are bounded per kind of refusal: a peer refused in a loop cannot flood the log."""

from __future__ import annotations

import structlog.testing
from mezzo.master import audit
from mezzo.master.audit import BURST, WINDOW, AuditLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def refusals(monkeypatch, clock: Clock, calls) -> list[dict]:
    monkeypatch.setattr(audit, "LIMITER", AuditLimiter(clock))
    with structlog.testing.capture_logs() as logs:
        calls()
    return [line for line in logs if line.get("event") == "refused"]


def test_a_peer_refused_in_a_loop_is_logged_a_burst_per_window_then_told_how_many_were_left_out(monkeypatch) -> None:
    clock = Clock()

    def calls():
        for i in range(10_000):  # a new object each time does not make a new kind
            audit.refused("teardown_framework", "mallory", f"framework fw-{i}", "master.acls", "10.0.0.9:4000")
        clock.now += WINDOW
        audit.refused("teardown_framework", "mallory", "framework fw-last", "master.acls", "10.0.0.9:4000")

    lines = refusals(monkeypatch, clock, calls)
    assert len(lines) == BURST + 1
    assert all("suppressed" not in line for line in lines[:BURST])
    assert lines[-1]["suppressed"] == 10_000 - BURST
    assert lines[-1]["object"] == "framework fw-last"


def test_other_kinds_of_refusal_are_logged_while_one_kind_is_held_back(monkeypatch) -> None:
    clock = Clock()

    def calls():
        for _ in range(BURST * 3):
            audit.refused("reregister_agent", "mallory", "agent a", "not its principal")
        audit.refused("reregister_agent", "eve", "agent a", "not its principal")
        audit.refused("register_framework", "mallory", "role x", "master.acls.register_frameworks")

    lines = refusals(monkeypatch, clock, calls)
    assert len(lines) == BURST + 2
    assert {(line["principal"], line["action"]) for line in lines[-2:]} == {
        ("eve", "reregister_agent"),
        ("mallory", "register_framework"),
    }
