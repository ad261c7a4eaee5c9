"""What holding one's guarantee means (paper §3.3), in one place for the master's
revocation monitor and for revocation policies.

A guarantee is a vector of resources (:meth:`Allocator.guaranteed_share`). A
framework **meets** it when, in at least one scalar resource the guarantee names,
it holds at least the guaranteed amount: its dominant share *measured against the
guarantee* reaches 1. It is the notion DRF uses for a fair share, and it is the only
one that works with real tasks, whose shapes never match the cluster's: with "at
least the guarantee in every resource", a framework running cpu-heavy, memory-light
tasks would sit below its guarantee in memory forever, immune to revocation while
it holds every cpu, and "starved" while it needs nothing more.

- A framework whose ratio is below 1 is **below** its guarantee: it may be starved,
  and it never loses a task.
- One whose ratio is above 1 is **above** its guarantee: it may lose tasks, as long
  as what it keeps still meets its guarantee.
- An empty guarantee is met by anything (ratio infinite): nothing is guaranteed, so
  the framework is never starved and may lose any task.
"""

from __future__ import annotations

import math

from .resources import Resources


def guarantee_ratio(held: Resources, guaranteed: Resources) -> float:
    """The largest ``held / guaranteed`` over the scalar resources the guarantee
    names (infinite for an empty guarantee). Ranges (ports) are not guarantees."""
    ratio = -math.inf
    for name, g in guaranteed.scalars.items():
        if g > 0:
            ratio = max(ratio, held.milli(name) / g)
    return math.inf if ratio == -math.inf else ratio


def meets_guarantee(held: Resources, guaranteed: Resources) -> bool:
    """True when ``held`` meets ``guaranteed`` (ratio at least 1)."""
    return guarantee_ratio(held, guaranteed) >= 1.0


def above_guarantee(held: Resources, guaranteed: Resources) -> bool:
    """True when ``held`` is more than ``guaranteed`` (ratio above 1): tasks may be
    taken from it. A framework exactly at its guarantee keeps everything."""
    return guarantee_ratio(held, guaranteed) > 1.0


def shortfall(held: Resources, guaranteed: Resources) -> Resources:
    """What a framework below its guarantee is short of: ``guaranteed - held`` in
    scalars (ranges are not guarantees). Getting any one of these resources in full
    meets the guarantee."""
    missing = guaranteed - held
    return Resources._raw(dict(missing.scalars), {}) if missing.ranges else missing
