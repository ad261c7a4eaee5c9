"""The master's Mesos-shaped documents: how many are rendered at once (in-process master, real forks)."""

from __future__ import annotations

import asyncio
import json

from mezzo.acls import FULL_VIEW
from mezzo.config import MasterConfig
from mezzo.master import Master
from mezzo.master.master import DOCUMENTS_RENDERING_MAX
from mezzo.master.ports import ManualClock
from mezzo.plugins import load_plugins


def test_only_a_few_different_documents_render_at_once_and_each_waiter_is_answered() -> None:
    # Forked whatever their size: a small state would be rendered on the loop, at once.
    master = Master(
        MasterConfig(allocation_interval=0.01, render_inline_max_items=0), load_plugins(), clock=ManualClock()
    )

    async def main():
        loop = asyncio.get_running_loop()
        answers = []
        started = []
        for i in range(DOCUMENTS_RENDERING_MAX + 2):
            answer = loop.create_future()
            params = (("framework_id", None), ("task_id", f"t-{i}"), ("limit", 100), ("offset", 0), ("order", "desc"))
            started.append(master.request_document("tasks", FULL_VIEW, params, answer.set_result))
            answers.append(answer)
        # The same document again joins the one being rendered, whatever the cap.
        again = loop.create_future()
        same = (("framework_id", None), ("task_id", "t-0"), ("limit", 100), ("offset", 0), ("order", "desc"))
        assert master.request_document("tasks", FULL_VIEW, same, again.set_result)
        assert started == [True] * DOCUMENTS_RENDERING_MAX + [False, False]
        done = await asyncio.wait_for(asyncio.gather(*answers[:DOCUMENTS_RENDERING_MAX], again), 20)
        assert all(json.loads(bytes(text.view())) == {"tasks": [], "total": 0} for text in done)
        # Rendered and handed out: room again.
        late = loop.create_future()
        assert master.request_document("summary", FULL_VIEW, (), late.set_result)
        summary = json.loads(bytes((await asyncio.wait_for(late, 20)).view()))
        assert summary["slaves"] == [] and summary["frameworks"] == []

    try:
        asyncio.run(main())
    finally:
        master.term.close()
