"""Small states are rendered on the master's loop, large ones in a forked child:
ClusterState.rendering_items (what a document of the state costs, counted no further
than needed) and StateSnapshots' ``inline`` choice, on an in-process master."""

from __future__ import annotations

import asyncio
import json

from mezzo import TaskState
from mezzo.acls import FULL_VIEW
from mezzo.master.state import AGENT_ITEMS
from mezzo.master.state_snapshot import StateSnapshots

from .test_operator_actions import Cluster


def test_items_count_agents_frameworks_tasks_offers_and_what_ended() -> None:
    c = Cluster()  # two agents, one framework holding an offer of each
    try:
        state = c.state
        assert state.rendering_items(1000) == 2 * AGENT_ITEMS + 1 + 2
        c.launch(c.a, "t1")  # the offer of agent a becomes a task
        assert state.rendering_items(1000) == 2 * AGENT_ITEMS + 1 + 1 + 1
        c.report(c.a, "t1", TaskState.TASK_FINISHED)
        with_ended = state.rendering_items(1000)
        assert with_ended == 2 * AGENT_ITEMS + 1 + 1 + 1  # b's offer; the ended task
        # /overview does not show ended tasks: they do not count for it.
        assert state.rendering_items(1000, ended=False) == with_ended - 1
        # A framework removed keeps its ended tasks in the history: both count.
        c.master.service.unregister_framework(c.fw, c.fid)
        assert len(state.completed_frameworks) == 1
        assert state.rendering_items(1000) == 2 * AGENT_ITEMS + 1 + 1
        assert state.rendering_items(1000, ended=False) == 2 * AGENT_ITEMS
    finally:
        c.close()


def test_counting_stops_once_past_the_limit() -> None:
    """A big state is found big without being walked: the count stops past ``limit``."""
    c = Cluster()
    try:
        state = c.state
        everything = state.rendering_items(10**9)  # 2 agents, 1 framework, 2 offers
        assert state.rendering_items(0) > 0
        # Past the limit with the agents and the framework: the offers are not counted.
        assert 2 * AGENT_ITEMS < state.rendering_items(2 * AGENT_ITEMS) < everything
    finally:
        c.close()


def test_the_master_renders_a_small_state_inline_and_forks_past_its_limit() -> None:
    c = Cluster()
    master = c.master
    try:

        async def fetch(document: str) -> dict:
            got = asyncio.get_running_loop().create_future()
            assert master.request_document(document, FULL_VIEW, (), got.set_result)
            return json.loads(bytes((await asyncio.wait_for(got, 20)).view()))

        async def main() -> None:
            assert (await fetch("summary"))["slaves"] != []
            snapshots = master._documents[("summary", FULL_VIEW, ())]
            assert (snapshots.rendered_inline, snapshots.forks) == (1, 0)
            master.config.render_inline_max_items = state_items - 1  # one item too many now
            await fetch("summary")
            assert (snapshots.rendered_inline, snapshots.forks) == (1, 1)
            master.config.render_inline_max_items = 0  # 0: always fork
            await fetch("summary")
            assert (snapshots.rendered_inline, snapshots.forks) == (1, 2)

        state_items = c.state.rendering_items(10**9)
        asyncio.run(main())
    finally:
        c.close()


def test_an_inline_snapshot_answers_every_waiter_with_what_a_child_would() -> None:
    small = [True]
    snapshots = StateSnapshots(lambda: '{"state": 1}', inline=lambda: small[0])

    async def ask() -> str:
        got = asyncio.get_running_loop().create_future()
        snapshots.request(got.set_result)
        return await asyncio.wait_for(got, 20)

    async def main() -> None:
        assert await ask() == '{"state": 1}'
        assert (snapshots.rendered_inline, snapshots.forks) == (1, 0)
        small[0] = False
        assert await ask() == '{"state": 1}'
        assert (snapshots.rendered_inline, snapshots.forks) == (1, 1)

    asyncio.run(main())
