"""Per-framework call rates (Apache Mesos' ``--rate_limits``): a token bucket each.

Usage (the master service does this for every charged call of a framework)::

    rates = CallRates(clock, rate=1000.0, burst=10000, watch=loop_watch)
    verdict = rates.charge(framework_id, "set_needs_offers")
    if verdict is Verdict.SERVE:
        ...                       # serve the call
    elif verdict is Verdict.DROP:
        ...                       # do nothing: the call may be lost
    else:                         # Verdict.REFUSE
        ...                       # tell the scheduler, disconnect the framework

Each framework has a bucket of ``burst`` tokens (``master.framework_call_burst``)
that refills at ``rate`` tokens a second (``master.framework_call_rate``). A call
takes one token, or one per message it makes the master send or per item it names
where that is what costs (a reconciliation one per task answered, a launch on stale
offers one per task, a decline of unknown offers one per offer id), never more than
the bucket can give it. A bucket admits exactly the traffic Mesos' qps and capacity
admit (``burst`` calls ahead of the rate), but the calls are served at once instead
of queued: a queue holds decoded calls in the master's memory, where no connection
bound sees them, and that memory is what the bound is for.

**What is charged.** Only what a framework asks on its own initiative. The service
charges nothing whose number the master already bounds: acknowledgements (one per
update it sent), launches and declines that answer outstanding offers (one per
offer it made), the first kill of each live task, and unregistering. So a
scheduler keeping up with its offers and updates never comes near the limit,
however busy; what does is a loop gone wrong: revives, reconciliations, kills of
unknown tasks, calls on stale offers, framework messages.

**Over the limit**, by what losing the call costs (:data:`DROPPABLE`):

- Calls safe to lose are *dropped*: not served, and the scheduler is not told
  (an error would abort its driver). A decline leaves its offer to
  ``offer_timeout``; a reconciliation is retried by the scheduler until answered
  (Mesos' reconciliation contract); framework messages are best effort by
  contract; a guaranteed-share request times out for its caller. Drops are logged
  (the first at once, then a line per :data:`LOG_EVERY` seconds per framework with
  the count) and counted. They may only use the upper half of the bucket: the
  lower half is kept for the calls below, so a framework flooding what can be
  dropped loses only that, never its launches. Dropping is not free, though: the
  master still reads and decodes each call (a flood of 100,000 calls a second
  holds its loop whatever it then does with them). So dropped calls run up a
  debt that the rate pays back (a token per call, or per item it names: what the
  master read); a framework whose debt passes a whole burst (it has gone on at
  over twice its rate) is refused as below. Mesos queues ``capacity`` calls and
  then errs; this drops ``burst`` calls and then errs.
- Calls whose loss would silently change what the scheduler believes (launches,
  kills, revive/suppress, filters, re-registration) are *refused*: the scheduler
  gets ``error`` naming the settings, and the master closes the connection (the
  driver aborts on ``error`` anyway; a client that ignores it stops costing the
  master). The framework is then disconnected: its ``failover_timeout`` applies.

**The master's own stalls.** Calls a scheduler sent while the master's loop was
stalled (:mod:`.loop_watch`) wait in the socket and arrive together. Each stall
of ``s`` seconds grants every bucket ``min(rate * s, burst)`` extra tokens, so
that burst is not charged to the framework.

Cost: per charged call a dict lookup and a few float operations; buckets that
are full (the same as a new one) are swept when their number doubles, so
frameworks that left cost nothing for long.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

import structlog

from .loop_watch import TICK

if TYPE_CHECKING:
    from .loop_watch import LoopWatch
    from .ports import Clock

log = structlog.get_logger("mezzo.master", component="master")

LOG_EVERY = 10.0
"""Seconds between two log lines about one framework's dropped calls."""

DROPPABLE = frozenset(
    {
        "decline_offer",
        "reconcile_tasks",
        "framework_to_executor",
        "request_guaranteed_share",
    }
)
"""Calls that are dropped over the limit; every other charged call is refused."""


class Verdict(enum.Enum):
    """What to do with one charged call."""

    SERVE = "serve"
    DROP = "drop"
    """Not served; the scheduler is not told."""
    REFUSE = "refuse"
    """Not served; the scheduler is told and the framework disconnected."""


class TokenBucket:
    """One framework's tokens. ``level`` may exceed the burst by stall credits."""

    __slots__ = ("debt", "debt_at", "dropped", "last", "level", "logged_at", "stalled")

    def __init__(self, level: float, now: float, stalled: float) -> None:
        self.level = level
        self.last = now
        """Clock time of the last refill."""
        self.stalled = stalled
        """The loop watch's stalled seconds already credited."""
        self.debt = 0.0
        """Tokens of dropped calls not yet paid back by the rate."""
        self.debt_at = now
        self.dropped = 0
        """Calls dropped since the last log line about them."""
        self.logged_at = float("-inf")


class CallRates:
    """The buckets of one leadership term's frameworks. See the module docstring.

    ``rate`` 0 turns the limit off: every call is served.
    """

    def __init__(self, clock: Clock, *, rate: float, burst: int, watch: LoopWatch | None = None) -> None:
        self._clock = clock
        self._watch = watch
        self.rate = rate
        self.burst = burst
        self._reserve = burst // 2
        """Tokens dropped calls may not use."""
        self._buckets: dict[str, TokenBucket] = {}
        self._sweep_at = 1024
        self._sampled_at = float("-inf")
        self.dropped = 0
        """Calls dropped this term."""
        self.refused = 0
        """Calls refused this term (each disconnected its framework)."""

    def charge(self, framework_id: str, call: str, cost: int = 1, dropped_cost: int = 1) -> Verdict:
        """Take ``cost`` tokens for ``call`` from the framework's bucket, if they are
        there; else the call is dropped (adding ``dropped_cost`` to the framework's
        debt: what reading it cost) or refused (see the module docstring)."""
        if self.rate <= 0:
            return Verdict.SERVE
        droppable = call in DROPPABLE
        floor = self._reserve if droppable else 0
        usable = self.burst - floor
        cost = max(1, min(cost, usable))  # the dearest call still fits a full bucket
        now = self._clock.now()
        bucket = self._bucket(framework_id, now)
        self._refill(bucket, now)
        if bucket.level - cost < floor and self._watch is not None and now - self._sampled_at >= TICK:
            # Short of tokens: a stall of the master may have just ended that its watch
            # has not seen yet (reads run before the watch's overdue tick).
            self._sampled_at = now
            self._watch.sample()
            self._refill(bucket, now)
        if bucket.level - cost >= floor:
            bucket.level -= cost
            return Verdict.SERVE
        if droppable:
            debt = max(0.0, bucket.debt - self.rate * (now - bucket.debt_at))
            bucket.debt = debt + max(1, min(dropped_cost, usable))
            bucket.debt_at = now
        if droppable and bucket.debt <= self.burst:
            self.dropped += 1
            bucket.dropped += 1
            if now - bucket.logged_at >= LOG_EVERY:
                log.warning(
                    "framework over its call rate: calls dropped",
                    framework=framework_id,
                    call=call,
                    dropped=bucket.dropped,
                    rate=self.rate,
                    burst=self.burst,
                    setting="master.framework_call_rate",
                )
                bucket.logged_at = now
                bucket.dropped = 0
            return Verdict.DROP
        self.refused += 1
        return Verdict.REFUSE

    def tokens(self, framework_id: str) -> float:
        """The framework's tokens now (``burst`` for one not seen lately)."""
        bucket = self._buckets.get(framework_id)
        if bucket is None:
            return float(self.burst)
        self._refill(bucket, self._clock.now())
        return bucket.level

    def __len__(self) -> int:
        """Frameworks with a bucket kept (those seen lately that are not full)."""
        return len(self._buckets)

    def _bucket(self, framework_id: str, now: float) -> TokenBucket:
        bucket = self._buckets.get(framework_id)
        if bucket is None:
            if len(self._buckets) >= self._sweep_at:
                self._sweep(now)
            stalled = self._watch.stalled_seconds if self._watch is not None else 0.0
            bucket = self._buckets[framework_id] = TokenBucket(float(self.burst), now, stalled)
        return bucket

    def _refill(self, bucket: TokenBucket, now: float) -> None:
        elapsed = now - bucket.last
        if elapsed > 0:
            bucket.last = now
            if bucket.level < self.burst:
                bucket.level = min(float(self.burst), bucket.level + self.rate * elapsed)
        if self._watch is not None:
            owed = self._watch.stalled_seconds - bucket.stalled
            if owed > 0:
                bucket.stalled += owed
                credit = min(self.rate * owed, float(self.burst))
                bucket.level = min(bucket.level + credit, 2.0 * self.burst)

    def _sweep(self, now: float) -> None:
        """Forget full buckets: a new one would be the same."""
        for framework_id, bucket in list(self._buckets.items()):
            self._refill(bucket, now)
            if bucket.level >= self.burst and bucket.debt <= self.rate * (now - bucket.debt_at):
                del self._buckets[framework_id]
        self._sweep_at = max(1024, 2 * len(self._buckets))
