"""Garbage-collector settings for processes holding a large, long-lived heap.

Used by the master and by the emulators of the scale benchmarks.
"""

from __future__ import annotations

import gc


def tune_gc() -> None:
    """Make garbage collection cheap for a process holding a large, long-lived heap.

    A master's state (thousands of agents, offers, refuse filters) is mostly
    acyclic and freed by reference counting; the cyclic collector only has to find
    the rare cycles (connections and their transports). With the default
    thresholds, full collections walk the whole heap every few allocation cycles
    and showed up as 1 s stalls at 10,000 agents (bench/allocation_cycle.py).
    Freezing what exists at start-up and collecting the young generation less often
    keeps cycles collectable while taking the stalls off the hot path.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
