"""What an allocator was told each framework holds, for tests of the master's invariant
"what the allocator was told equals what the state holds"."""

from __future__ import annotations

from typing import Any


class AllocatorLedger:
    """Wraps an allocator's ``allocated``/``recovered`` and keeps the sum per framework,
    in thousandths; ``strict`` asserts nothing is recovered that was not allocated."""

    def __init__(self, allocator: Any, *, strict: bool = True) -> None:
        self.told: dict[str, dict[str, int]] = {}
        allocated, recovered = allocator.allocated, allocator.recovered

        def on_allocated(fid, resources):
            told = self.told.setdefault(fid, {})
            for name, m in resources.scalars.items():
                told[name] = told.get(name, 0) + m
            allocated(fid, resources)

        def on_recovered(fid, resources):
            told = self.told.setdefault(fid, {})
            for name, m in resources.scalars.items():
                told[name] = told.get(name, 0) - m
                assert not strict or told[name] >= 0, f"{fid} recovered more {name} than it was allocated"
            recovered(fid, resources)

        allocator.allocated, allocator.recovered = on_allocated, on_recovered

    def of(self, framework_id: str) -> dict[str, int]:
        """What the allocator was told the framework holds (no zero entries)."""
        return {k: v for k, v in self.told.get(framework_id, {}).items() if v}
