"""The master's own stalls: measured, so that peers are never blamed for them.

Everything the master does runs on one event loop. When that loop is held (a long
handler, a swapped-out or stopped process, a CPU hog beside it), no message is read
and no ping is sent; when it runs again, every agent looks silent for the length of
the stall. Judged by the wall clock, a master frozen for longer than
``agent_ping_timeout`` would declare the whole cluster lost and have every task
killed, for a fault that was its own.

:class:`LoopWatch` keeps a *listening clock*: time that passes while the loop is
able to run. A timer ticks every :data:`TICK` seconds; a tick (or a
:meth:`LoopWatch.sample` between ticks) that comes later than it should by more
than :data:`TOLERANCE` records the excess as a stall, which the listening clock
does not count. Agent health judges silence on the listening clock
(:meth:`LoopWatch.listened_since`), so a peer is judged only on time the master
was able to listen. The watch also reports the loop's lag for the metrics.

Cost: one timer every 0.1 s, and one bounded history of samples (``history``
seconds of them) searched by bisection.
"""

from __future__ import annotations

import bisect
from collections import deque
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from .ports import Clock, Timer

log = structlog.get_logger("mezzo.master", component="loop")

TICK = 0.1
"""Seconds between the watch's own samples."""
TOLERANCE = 0.05
"""Lateness of a sample that is not yet a stall (a busy loop is not a stalled one)."""
REPORT_STALL = 1.0
"""Stalls at least this long are logged."""
SATURATED_LAG = 0.1
"""Lateness of the latest sample from which the loop counts as saturated: it has more
to do than it can, and work that can wait (``mezzo state``, container statistics)
waits or is dropped before offers and status updates are (:meth:`LoopWatch.saturated`)."""


class LoopWatch:
    """The listening clock of one master process. See the module docstring."""

    def __init__(self, clock: Clock, *, history: float = 120.0) -> None:
        self._clock = clock
        self._history = history
        now = clock.now()
        self._last = now
        self._listened = 0.0
        self._samples: deque[tuple[float, float]] = deque([(now, 0.0)])
        """(clock time, listening time) of recent samples, oldest first."""
        self._timer: Timer | None = None
        self.lag = 0.0
        """How late the latest sample came, in seconds (0 when on time)."""
        self.max_lag = 0.0
        """The largest lag seen since the watch started."""
        self.stalls = 0
        """Samples that found the loop stalled."""
        self.stalled_seconds = 0.0
        """Time not counted as listening, in all."""

    def start(self) -> None:
        """Start ticking (again, after :meth:`stop`); idempotent."""
        if self._timer is None:
            self._last = self._clock.now()  # time before the start was not listened to, nor a stall
            self._timer = self._clock.call_later(TICK, self._tick)

    @property
    def running(self) -> bool:
        """Between :meth:`start` and :meth:`stop`: only then is the listening clock kept."""
        return self._timer is not None

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _tick(self) -> None:
        self.sample(due=TICK)
        self._timer = self._clock.call_later(TICK, self._tick)

    def sample(self, *, due: float = TICK) -> None:
        """Account for the time since the last sample. ``due``: how long that should
        have taken at most (the tick for the watch's own timer; callers in between
        pass the default, since the loop cannot have been free for longer than a
        tick without the watch's timer running)."""
        now = self._clock.now()
        gap = now - self._last
        if gap < 0:
            return
        late = max(0.0, gap - due)
        self.lag = late
        self.max_lag = max(self.max_lag, late)
        stalled = late - TOLERANCE if late > TOLERANCE else 0.0
        if stalled > 0:
            self.stalls += 1
            self.stalled_seconds += stalled
            if stalled >= REPORT_STALL:
                log.warning(
                    "the master's event loop was stalled; peers are not blamed for it",
                    seconds=round(stalled, 3),
                )
        self._listened += gap - stalled
        self._last = now
        samples = self._samples
        samples.append((now, self._listened))
        while len(samples) > 2 and samples[1][0] < now - self._history:
            samples.popleft()

    def saturated(self) -> bool:
        """Whether the loop ran at least :data:`SATURATED_LAG` late at its latest sample."""
        return self.lag >= SATURATED_LAG

    def listening_time(self) -> float:
        """The listening clock now (seconds since the watch started, stalls left out)."""
        return self._listened + (self._clock.now() - self._last)

    def listened_since(self, then: float) -> float:
        """How much listening time passed since clock time ``then``: at most
        ``now - then``, less the stalls in between. A time older than the history is
        taken at the oldest sample kept (stalls before it are forgotten)."""
        samples = self._samples
        i = bisect.bisect_right(samples, (then, float("inf"))) - 1
        if i < 0:
            at = samples[0][1]
        else:
            t_i, l_i = samples[i]
            if i + 1 < len(samples):
                t_next, l_next = samples[i + 1]
                # Within one interval the stall's place is unknown: count at most what
                # the interval listened, so a stall is never charged to the peer.
                at = l_i + min(then - t_i, l_next - l_i)
            else:
                at = l_i + (then - t_i)
        return max(0.0, self.listening_time() - at)
