"""How long to wait before the next retry: exponential backoff with jitter and a cap.

Every retry in mezzo's daemons and drivers (redialling a master or an agent,
re-sending an unacknowledged status update, waiting for a master that is taking
over) draws its delay from a :class:`Backoff`, so that a peer in trouble sees
fewer attempts the longer its trouble lasts, never a fixed-rate storm.

Usage::

    redial = Backoff(initial=0.5, cap=REDIAL_CAP)
    while not await try_to_connect():
        await asyncio.sleep(redial.next())   # 0.25-0.5 s, 0.5-1 s, 1-2 s, ... then 5-10 s
    ...
    redial.reset()                           # the peer answered: start from 0.5 s next time

The contract:

- The n-th delay after a :meth:`~Backoff.reset` (n = 0, 1, 2, ...) has the ceiling
  ``d(n) = min(cap, initial * factor**n)`` and is drawn uniformly from
  ``[(1 - jitter) * d(n), d(n)]``, independently of every other draw.
- So a delay is never longer than ``cap`` and never shorter than
  ``(1 - jitter) * initial``; the floor grows by ``factor`` per attempt until it
  reaches ``(1 - jitter) * cap``. With ``jitter < 1``, the attempts a client makes in
  ``T`` seconds of failure number at most about ``log(T / initial) / log(factor)``
  plus ``T / ((1 - jitter) * cap)``: the load a peer sees falls as its outage lasts.
- :meth:`~Backoff.reset` starts again from ``initial``. Callers reset when the peer
  has shown it works (registration answered, update acknowledged), not merely when
  a connection opened: a master that accepts and at once closes must still be
  backed off from.

Why jitter: after a master fails over, thousands of agents and schedulers lose it
in the same instant. With a deterministic schedule they would all retry in
lock-step, each wave a spike of connections and registrations at the new leader
(and each spike slower to serve, so more of the next wave fails too). Independent
random delays spread every wave over a window as wide as the jitter.

Why "equal" jitter (``jitter=0.5``, half of the ceiling fixed and half random) by
default rather than "full" jitter (``jitter=1``, anywhere in ``[0, d(n)]``): full
jitter spreads a wave widest, but lets any delay be arbitrarily close to zero, so
after every failure some share of clients retries at once and the schedule has no
floor that grows: it does not back off in the sense of the requirement ("no
retry storm"). Equal jitter keeps a floor that doubles with every attempt and still
spreads each wave over half its ceiling (seconds, once a few attempts have
failed), which is what de-synchronises thousands of clients.

Tests pass their own seeded ``random.Random`` as ``rng``; everything else shares
the :mod:`random` module's generator.
"""

from __future__ import annotations

import random
from collections.abc import Callable

__all__ = ["REDIAL_CAP", "Backoff"]

REDIAL_CAP = 10.0
"""Seconds: the longest an agent or a scheduler driver waits between two dials of a
master it cannot reach (or that drops it before registering). A configured
``reconnect_interval`` above it raises the cap to that interval. A new leader named
by ZooKeeper is dialled at once, whatever the backoff."""


class Backoff:
    """Delays of ``initial``, ``initial * factor``, ... up to ``cap`` seconds, each
    jittered down by up to ``jitter`` of itself; see the module docstring."""

    __slots__ = ("initial", "cap", "factor", "jitter", "attempts", "_random", "_steps")

    def __init__(
        self,
        initial: float,
        cap: float,
        *,
        factor: float = 2.0,
        jitter: float = 0.5,
        rng: random.Random | None = None,
    ) -> None:
        if not initial > 0:
            raise ValueError(f"initial must be > 0 seconds, got {initial!r}")
        if not cap >= initial:
            raise ValueError(f"cap must be >= initial ({initial!r}), got {cap!r}")
        if not factor >= 1:
            raise ValueError(f"factor must be >= 1, got {factor!r}")
        if not 0 <= jitter <= 1:
            raise ValueError(f"jitter must be within [0, 1], got {jitter!r}")
        self.initial = float(initial)
        self.cap = float(cap)
        self.factor = float(factor)
        self.jitter = float(jitter)
        self.attempts = 0
        """Delays handed out since the last :meth:`reset`."""
        self._random: Callable[[], float] = rng.random if rng is not None else random.random
        # The first n whose ceiling is the cap: beyond it nothing grows, and no
        # factor**n is ever computed large enough to overflow a float.
        steps, ceiling = 0, self.initial
        while ceiling < self.cap and self.factor > 1:
            ceiling *= self.factor
            steps += 1
        self._steps = steps

    def ceiling(self, attempt: int, scale: float = 1.0) -> float:
        """The longest delay of attempt ``attempt`` (0 first): ``min(cap, scale * initial * factor**attempt)``.

        ``scale`` (at least 1) stretches the schedule for a peer known to be slow
        (:class:`~mezzo.round_trip.RoundTripEstimate`); the cap still holds."""
        if attempt >= self._steps:
            return self.cap  # with scale >= 1 the cap is reached no later
        return min(self.cap, max(scale, 1.0) * self.initial * self.factor ** max(attempt, 0))

    def delay(self, attempt: int, scale: float = 1.0) -> float:
        """A fresh draw for attempt ``attempt`` (0 first), without touching :attr:`attempts`.

        For callers that keep many retries' attempt counters themselves and share one
        policy (the emulated agents' status updates)."""
        top = self.ceiling(attempt, scale)
        return top * (1.0 - self.jitter * self._random())

    def next(self, scale: float = 1.0) -> float:
        """The delay before the next attempt; each call moves one attempt further."""
        wait = self.delay(self.attempts, scale)
        self.attempts += 1
        return wait

    def reset(self) -> None:
        """Start again from ``initial`` (the peer answered; the trouble is over)."""
        self.attempts = 0

    def __repr__(self) -> str:
        return (
            f"Backoff(initial={self.initial:g}, cap={self.cap:g}, factor={self.factor:g}, "
            f"jitter={self.jitter:g}, attempts={self.attempts})"
        )
