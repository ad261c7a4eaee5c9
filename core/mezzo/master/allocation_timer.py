"""When allocation cycles run: batched over ``allocation_interval``, prompt for freed resources.

Triggers (freed resources, new frameworks, revives, declines) arrive in bursts;
running a cycle for each would spend the master's loop on cycles that each offer
a crumb. :class:`AllocationTimer` batches them so that at most one cycle runs per
``allocation_interval``, but a trigger after a quiet period runs at once:
frameworks are not made to wait for a tick.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .ports import Clock, Timer

PROMPT_FRACTION = 0.1
"""A prompt request waits at most this fraction of ``allocation_interval`` after the last cycle."""

PROMPT_COST_FACTOR = 10
"""...and at least this many times the last cycle's own cost, so that prompt cycles never take
more than about a tenth of the master's loop, however large the cluster."""


class AllocationTimer:
    """Runs ``run`` after a trigger, at most once per ``interval`` seconds.

    A *prompt* request (resources that a task's end freed, a framework that just
    registered) may run sooner: at most
    ``interval × PROMPT_FRACTION`` after the last cycle, but never sooner than
    ``PROMPT_COST_FACTOR`` times that cycle's cost after its end, and only while the
    master keeps up: when the last cycle ran later than it was due by more than that
    fraction, the loop is saturated and prompt requests wait the whole interval like
    any other (at 50,000 agents they cost latency instead of saving it). Why both kinds:
    tasks that end together end a few milliseconds apart, and with the full interval
    the second slot would wait up to a whole interval for the first slot's cycle to
    age (2-5 % of a job of one-second tasks, ``bench/overhead.py``). Declines and
    unused resources keep the full interval: a framework that declines with
    ``refuse_seconds = 0`` would otherwise be sent the same offer as fast as it can
    answer. Task ends are bounded by real work, registrations by their handshakes.
    """

    def __init__(self, clock: Clock, interval: float, run: Callable[[], None]) -> None:
        self._clock = clock
        self._interval = interval
        self._run = run
        self._handle: Timer | None = None
        self._handle_at = float("inf")
        self._last = -float("inf")
        self._last_end = -float("inf")
        self._last_cost = 0.0
        self._saturated = False
        self._wakeup: Timer | None = None
        self._wakeup_at = float("inf")

    def request(self, *, prompt: bool = False) -> None:
        """Ask for a cycle: at once if none ran in the last interval, else at its end
        (``prompt``: see the class docstring)."""
        if prompt and not self._saturated:
            when = max(
                self._last + self._interval * PROMPT_FRACTION,
                self._last_end + self._last_cost * PROMPT_COST_FACTOR,
            )
        else:
            when = self._last + self._interval
        if self._handle is not None:
            if when >= self._handle_at:
                return
            self._handle.cancel()
        now = self._clock.now()
        if when <= now:
            self._handle = self._clock.call_soon(self._fire)
            self._handle_at = now
        else:
            self._handle = self._clock.call_at(when, self._fire)
            self._handle_at = when

    def request_at(self, when: float) -> None:
        """Ask for a cycle at loop time ``when`` (a refuse filter or offer expiring)."""
        if when >= self._wakeup_at:
            return
        if self._wakeup is not None:
            self._wakeup.cancel()
        self._wakeup_at = when
        self._wakeup = self._clock.call_at(when, self._woken)

    def _woken(self) -> None:
        self._wakeup = None
        self._wakeup_at = float("inf")
        self.request()

    def _fire(self) -> None:
        self._last = self._clock.now()
        self._saturated = self._last - self._handle_at > self._interval * PROMPT_FRACTION
        self._handle = None
        self._handle_at = float("inf")
        try:
            self._run()
        finally:
            # The cycle's cost as the master's clock sees it (the loop's time under a
            # LoopClock), not time.perf_counter: pacing must read no time but the
            # injected Clock, or a ManualClock run would depend on how busy the machine
            # is (a cycle descheduled for 0.1 s pushed the next prompt one a second
            # later, and Hypothesis' replays of tests/unit/test_cluster_state.py diverged).
            self._last_end = self._clock.now()
            self._last_cost = self._last_end - self._last

    def cancel(self) -> None:
        for h in (self._handle, self._wakeup):
            if h is not None:
                h.cancel()
        self._handle = self._wakeup = None
        self._handle_at = self._wakeup_at = float("inf")
