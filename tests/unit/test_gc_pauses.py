"""The collector's pauses as the master's metrics count them (mezzo.heap.GcPauses)."""

from __future__ import annotations

import gc

from mezzo.heap import GcPauses


def test_each_collection_is_counted_in_its_generation_with_its_time() -> None:
    pauses = GcPauses()
    gc.callbacks.append(pauses)
    try:
        gc.collect(0)
        gc.collect(0)
        gc.collect(2)
    finally:
        gc.callbacks.remove(pauses)
    stats = pauses.stats()
    assert stats["gen0_collections"] >= 2 and stats["gen2_collections"] >= 1
    assert stats["gen2_seconds"] > 0
    assert 0 < stats["max_pause_seconds"] <= sum(stats[f"gen{g}_seconds"] for g in range(3))
