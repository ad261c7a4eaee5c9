"""The emulated agents' timing wheel ends each task on time: not early, at most a tick late."""

from __future__ import annotations

import asyncio
import time

from mezzo.emulation.agents import _TaskClock
from mezzo.wire.ttypes import TaskState


class Recorder:
    def __init__(self) -> None:
        self.ended: dict[tuple[str, str], tuple[float, int]] = {}

    def finish(self, key, state) -> None:
        assert key not in self.ended, "a task ended twice"
        self.ended[key] = (time.monotonic(), state)


def test_tasks_end_after_their_duration_and_within_a_few_ticks():
    async def main():
        clock, agent = _TaskClock(), Recorder()
        started = time.monotonic()
        durations = {("f", f"t{i}"): d for i, d in enumerate([0.0, 0.05, 0.12, 0.12, 0.3, 0.01])}
        for key, d in durations.items():
            clock.finish_later(agent, key, d)
        await asyncio.sleep(0.5)
        clock.stop()
        return started, durations, agent.ended

    started, durations, ended = asyncio.run(main())
    assert set(ended) == set(durations)
    for key, d in durations.items():
        at, state = ended[key]
        assert state == TaskState.TASK_FINISHED
        assert at - started >= d, f"{key} ended early"
        assert at - started <= d + 0.1, f"{key} ended {at - started - d:.3f} s late"


def test_tasks_scheduled_while_the_wheel_runs_and_after_it_went_idle():
    async def main():
        clock, agent = _TaskClock(), Recorder()
        clock.finish_later(agent, ("f", "a"), 0.05)
        await asyncio.sleep(0.2)            # "a" ended; the wheel is idle now
        clock.finish_later(agent, ("f", "b"), 0.05)
        await asyncio.sleep(0.02)
        clock.finish_later(agent, ("f", "c"), 0.0)
        await asyncio.sleep(0.2)
        clock.stop()
        return agent.ended

    ended = asyncio.run(main())
    assert set(ended) == {("f", "a"), ("f", "b"), ("f", "c")}
    assert ended[("f", "c")][0] <= ended[("f", "b")][0]


def test_stop_drops_what_has_not_ended():
    async def main():
        clock, agent = _TaskClock(), Recorder()
        clock.finish_later(agent, ("f", "late"), 0.2)
        clock.stop()
        await asyncio.sleep(0.3)
        return agent.ended

    assert asyncio.run(main()) == {}
