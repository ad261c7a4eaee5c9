"""cgroups/cpu on the real scheduler: shares split a contended core by cpus; a quota caps."""

from __future__ import annotations

import asyncio
import time

from mezzo.agent.containerizer import Containerizer

WARM_UP = 0.3
WINDOW = 2.0


async def _cpu_seconds(iso, containers) -> list[float]:
    return [(await iso.usage(c))["cpu_seconds"] for c in containers]


def test_shares_split_a_contended_core_one_to_three(cgroot, harness, programs):
    """Two spinners pinned to CPU 0, with 1 and 3 cpus: CPU time 1:3 (within 10 %).

    Both compete for one core with each other, so whatever else the machine runs
    shrinks their parent's slice, not their ratio. One retry absorbs a burst of
    outside noise."""
    iso = harness.cpu(cgroot)
    containerizer = Containerizer([iso])

    async def measure() -> tuple[float, dict]:
        containers = [
            harness.container(harness.python(programs["spinner"]) + ["0"], f"cpus:{n};mem:64") for n in (1, 3)
        ]
        running = [await harness.launch(containerizer, c) for c in containers]
        try:
            await asyncio.sleep(WARM_UP)
            before = await _cpu_seconds(iso, containers)
            await asyncio.sleep(WINDOW)
            after = await _cpu_seconds(iso, containers)
            usage = await iso.usage(containers[1])
        finally:
            for c, r in zip(containers, running, strict=True):
                await harness.end(containerizer, c, r)
        one, three = (a - b for a, b in zip(after, before, strict=True))
        assert one > 0.05, f"the 1-cpu spinner barely ran ({one:.3f} s): is CPU 0 saturated?"
        return three / one, usage

    ratio, usage = asyncio.run(measure())
    if not 2.7 <= ratio <= 3.3:
        ratio, usage = asyncio.run(measure())
    assert 2.7 <= ratio <= 3.3, f"CPU time ratio {ratio:.2f}, expected 3 ± 10 %"
    assert usage["cpu_shares"] == 3072
    assert "cpus_limit" not in usage  # no quota unless asked for


def test_a_quota_caps_a_spinner_at_its_cpus(cgroot, harness, programs):
    iso = harness.cpu(cgroot, cfs_quota=True, cfs_period_us=50_000)
    containerizer = Containerizer([iso])

    async def main() -> tuple[float, dict]:
        c = harness.container(harness.python(programs["spinner"]), "cpus:0.5;mem:64")
        running = await harness.launch(containerizer, c)
        try:
            await asyncio.sleep(WARM_UP)
            t0, (before,) = time.monotonic(), await _cpu_seconds(iso, [c])
            await asyncio.sleep(WINDOW)
            t1, (after,) = time.monotonic(), await _cpu_seconds(iso, [c])
            usage = await iso.usage(c)
        finally:
            await harness.end(containerizer, c, running)
        return (after - before) / (t1 - t0), usage

    share, usage = asyncio.run(main())
    assert 0.3 < share <= 0.55, f"used {share:.0%} of a core under a 50 % quota"
    assert usage["cpus_limit"] == 0.5
    assert usage["cpu_shares"] == 512
    assert usage["cpu_throttled_periods"] > 0 and usage["cpu_throttled_seconds"] > 0


def test_a_container_without_cpus_gets_the_minimum(cgroot, harness):
    iso = harness.cpu(cgroot, cfs_quota=True)
    containerizer = Containerizer([iso])

    async def main() -> dict:
        c = harness.container(["sleep", "30"], "mem:32")
        running = await harness.launch(containerizer, c)
        try:
            return await iso.usage(c)
        finally:
            await harness.end(containerizer, c, running)

    usage = asyncio.run(main())
    assert usage["cpu_shares"] == 2
    assert usage["cpus_limit"] == 0.01  # 1 ms per 100 ms period, the kernel's smallest quota
