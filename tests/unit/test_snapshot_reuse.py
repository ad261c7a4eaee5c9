"""A slow snapshot is reused for a while (the HTTP API's documents); a fast one never is."""

from __future__ import annotations

import asyncio
import itertools
import time

from mezzo.master import state_snapshot
from mezzo.master.state_snapshot import StateSnapshots


def ask(snapshots: StateSnapshots) -> asyncio.Future:
    answer = asyncio.get_running_loop().create_future()
    snapshots.request_encoded(lambda text: answer.set_result(bytes(text.view()).decode()))
    return answer


def test_a_slow_document_answers_requests_within_twice_its_rendering_time(monkeypatch) -> None:
    monkeypatch.setattr(state_snapshot, "REUSE_ABOVE", 0.05)
    counter = itertools.count()

    def render() -> str:
        time.sleep(0.2)  # in the child: a document slow to render
        return f'"render {next(counter)}"'

    async def main() -> None:
        snapshots = StateSnapshots(render, reuse_slow=True)
        first = await asyncio.wait_for(ask(snapshots), 10)
        again = await asyncio.wait_for(ask(snapshots), 10)  # at once: the same one, no new child
        assert again == first and snapshots.forks == 1 and snapshots.reused == 1
        await asyncio.sleep(0.5)  # past twice its 0.2 s: rendered anew
        await asyncio.wait_for(ask(snapshots), 10)
        assert snapshots.forks == 2 and snapshots.reused == 1
        assert snapshots._last is not None
        snapshots.forget()  # an operator acted: the next asker sees the change
        await asyncio.wait_for(ask(snapshots), 10)
        assert snapshots.forks == 3 and snapshots.reused == 1
        await asyncio.sleep(0.5)
        assert snapshots._last is None  # dropped when it stopped answering, not kept

    asyncio.run(main())


def test_fast_documents_and_mezzo_state_are_always_fresh() -> None:
    async def main() -> None:
        fast = StateSnapshots(lambda: '"fast"', reuse_slow=True)
        for _ in range(3):
            await asyncio.wait_for(ask(fast), 10)
        assert fast.forks == 3 and fast.reused == 0

        slow_without_reuse = StateSnapshots(lambda: (time.sleep(0.2), '"slow"')[1])
        for _ in range(2):
            await asyncio.wait_for(ask(slow_without_reuse), 10)
        assert slow_without_reuse.forks == 2 and slow_without_reuse.reused == 0

    asyncio.run(main())
