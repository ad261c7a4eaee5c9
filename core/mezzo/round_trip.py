"""How long a busy peer takes to answer, so that a resend waits for it.

An agent re-sends a status update that was not acknowledged in time. A fixed
"in time" turns a slow master into an overloaded one: when the master's queue
holds two seconds of work, every update in flight is sent again, the master
has twice the work, answers later still, and more updates are re-sent (the
metastable collapse seen at 50,000 emulated agents). :class:`RoundTripEstimate`
keeps a smoothed round-trip time and its variation from the acknowledgements
that do come back, the estimator of TCP's retransmission timer (RFC 6298,
Jacobson/Karels gains of 1/8 and 1/4), and names a :attr:`~RoundTripEstimate.timeout`
a resend should not come before.

Usage::

    rtt = RoundTripEstimate(floor=1.0, ceiling=15.0)
    sent_at = time.monotonic(); send(update)
    ...                                            # the acknowledgement arrives
    rtt.observe(time.monotonic() - sent_at)
    first_wait = max(retry, rtt.timeout)           # then back off from there

The contract:

- Before any observation :attr:`timeout` is ``floor``.
- After observations it is ``srtt + 4 * rttvar`` clamped to ``[floor, ceiling]``:
  a peer that answers in a steady 3 s gets a timeout a little over 3 s, and one
  that answers in milliseconds keeps ``floor``.
- Each observation costs O(1); nothing is stored per observation.
- Negative or non-finite samples are ignored (a clock step must not poison it).

What to observe: the time from the *first* send of an update to its
acknowledgement, also when it was re-sent in between. When the first send was
answered late (the overload this is for) that is the true round trip; when it
was lost and a resend was answered, it overestimates, which only makes resends
rarer, never more frequent. Updates sent again because the link was re-made
(re-registration) are not observed: their first send may have gone nowhere.
"""

from __future__ import annotations

import math

__all__ = ["RoundTripEstimate"]

GAIN = 1 / 8
"""How far one sample moves the smoothed round trip (RFC 6298's alpha)."""
VARIATION_GAIN = 1 / 4
"""How far one sample moves the variation (RFC 6298's beta)."""


class RoundTripEstimate:
    """A smoothed round-trip time and the resend timeout it implies (module docstring)."""

    __slots__ = ("floor", "ceiling", "smoothed", "variation", "samples")

    def __init__(self, floor: float, ceiling: float) -> None:
        if not 0 < floor <= ceiling:
            raise ValueError(f"need 0 < floor <= ceiling, got floor={floor!r}, ceiling={ceiling!r}")
        self.floor = float(floor)
        self.ceiling = float(ceiling)
        self.smoothed = 0.0
        """Seconds: the smoothed round trip (0 before the first sample)."""
        self.variation = 0.0
        """Seconds: the smoothed mean deviation of the samples from it."""
        self.samples = 0

    def observe(self, seconds: float) -> None:
        """Take one round trip, measured in seconds."""
        if not (math.isfinite(seconds) and seconds >= 0):
            return
        if self.samples == 0:
            self.smoothed = seconds
            self.variation = seconds / 2
        else:
            self.variation += VARIATION_GAIN * (abs(self.smoothed - seconds) - self.variation)
            self.smoothed += GAIN * (seconds - self.smoothed)
        self.samples += 1

    @property
    def timeout(self) -> float:
        """Seconds a resend should wait for an answer at least, within ``[floor, ceiling]``."""
        if self.samples == 0:
            return self.floor
        return min(self.ceiling, max(self.floor, self.smoothed + 4 * self.variation))

    def __repr__(self) -> str:
        return (
            f"RoundTripEstimate(smoothed={self.smoothed:.3f}, variation={self.variation:.3f}, "
            f"timeout={self.timeout:.3f}, samples={self.samples})"
        )
