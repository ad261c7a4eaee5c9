"""The master's event stream (mezzo.master.events): who sees what, and the bounds."""

from __future__ import annotations

import asyncio
import json

from mezzo.acls import FULL_VIEW, Rule, View
from mezzo.master import events
from mezzo.master.events import AGENTS, EventStream
from mezzo.wire.ttypes import FrameworkInfo


def decoded(batch: list[bytes]) -> list[dict]:
    return [json.loads(record) for record in batch]


def test_nothing_is_made_when_nobody_listens() -> None:
    stream = EventStream()
    made = []
    stream.publish("AGENT_REMOVED", AGENTS, lambda: made.append(1) or {})
    assert made == [] and stream.published == 0


def test_each_subscriber_sees_what_its_view_shows_and_the_body_is_made_once() -> None:
    async def main() -> None:
        stream = EventStream()
        everyone = stream.subscribe(FULL_VIEW)
        etl_only = stream.subscribe(
            View(
                cluster=False, frameworks=(Rule(frozenset({"viewer"}), frozenset({"etl"})),), permissive=False
            )
        )
        assert everyone is not None and etl_only is not None
        made = []

        def body() -> dict:
            made.append(1)
            return {"agent_id": "a1", "reason": "gone"}

        stream.publish("AGENT_REMOVED", AGENTS, body)
        stream.publish(
            "FRAMEWORK_ADDED", FrameworkInfo(name="x", user="etl"), lambda: {"framework": {"id": "f1"}}
        )
        stream.publish(
            "FRAMEWORK_ADDED", FrameworkInfo(name="y", user="web"), lambda: {"framework": {"id": "f2"}}
        )
        assert made == [1]
        assert [e["type"] for e in decoded(await everyone.next_batch(1))] == [
            "AGENT_REMOVED",
            "FRAMEWORK_ADDED",
            "FRAMEWORK_ADDED",
        ]
        seen = decoded(await etl_only.next_batch(1))
        assert seen == [{"type": "FRAMEWORK_ADDED", "framework_added": {"framework": {"id": "f1"}}}]
        assert await etl_only.next_batch(0.01) == []  # nothing more: a heartbeat is due

    asyncio.run(main())


def test_a_subscriber_that_falls_too_far_behind_is_cut_off_with_a_last_error(monkeypatch) -> None:
    monkeypatch.setattr(events, "QUEUE_BYTES", 1000)

    async def main() -> None:
        stream = EventStream()
        slow = stream.subscribe(FULL_VIEW)
        assert slow is not None
        for i in range(100):
            stream.publish("AGENT_REMOVED", AGENTS, lambda i=i: {"agent_id": f"a{i}", "reason": "x" * 50})
        assert slow.ended is not None and "fell behind" in slow.ended
        assert stream.subscribers == set() and stream.cut_off == 1
        last = decoded(await slow.next_batch(1))
        assert [e["type"] for e in last] == ["ERROR"] and "fell behind" in last[0]["error"]["message"]

    asyncio.run(main())


def test_subscribers_are_bounded_and_ended_when_the_master_stops_leading() -> None:
    async def main() -> None:
        stream = EventStream()
        subscribers = [stream.subscribe(FULL_VIEW) for _ in range(events.MAX_SUBSCRIBERS)]
        assert all(s is not None for s in subscribers)
        assert stream.subscribe(FULL_VIEW) is None
        stream.end_all("this master stopped leading")
        assert stream.subscribers == set()
        first = subscribers[0]
        assert first is not None
        assert decoded(await first.next_batch(1))[0]["error"]["message"] == "this master stopped leading"

    asyncio.run(main())
