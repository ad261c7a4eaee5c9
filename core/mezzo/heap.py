"""Garbage-collector settings for processes holding a large, long-lived heap, and the
time the collector takes.

Used by the master and by the emulators of the scale benchmarks.
"""

from __future__ import annotations

import gc
import time
from typing import Any


class GcPauses:
    """How long the cyclic collector held this process, per generation: a ``gc.callbacks``
    entry (:func:`tune_gc` installs :data:`GC_PAUSES`). A collection stops everything the
    process does, its event loop included, so a young-generation collection of a big heap
    shows as a stall of every connection; operators see these in the master's metrics."""

    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self.max_pause = 0.0
        self._began = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        pause = time.perf_counter() - self._began
        generation = min(int(info.get("generation", 2)), 2)
        self.collections[generation] += 1
        self.seconds[generation] += pause
        self.max_pause = max(self.max_pause, pause)

    def stats(self) -> dict[str, float]:
        """``gen<N>_collections``, ``gen<N>_seconds`` and ``max_pause_seconds`` so far."""
        out: dict[str, float] = {}
        for generation in range(3):
            out[f"gen{generation}_collections"] = self.collections[generation]
            out[f"gen{generation}_seconds"] = round(self.seconds[generation], 4)
        out["max_pause_seconds"] = round(self.max_pause, 4)
        return out


GC_PAUSES = GcPauses()
"""This process's collector pauses, counted once :func:`tune_gc` ran."""


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
    if GC_PAUSES not in gc.callbacks:
        gc.callbacks.append(GC_PAUSES)
