"""The master's table of outstanding file requests (mezzo.master.file_requests)."""

from __future__ import annotations

import asyncio

import pytest

from mezzo.master.file_requests import REPLY_MAX_BYTES, FileRequests, FilesUnavailable


class Link:
    """A connection as the table sees it: only its identity matters."""


def test_a_reply_reaches_the_request_asked_on_its_connection_only() -> None:
    async def run() -> None:
        table = FileRequests()
        mine, other = Link(), Link()
        rid, answer = table.ask("a1", mine)
        assert not table.answer(other, rid, 200, b"forged")  # another agent's link
        assert not table.answer(mine, rid + 1000, 200, b"never asked")
        assert not table.answer(mine, "x", 200, b"not an id")
        assert table.ignored == 3 and not answer.done()
        assert table.answer(mine, rid, 200, b"ok")
        assert await answer == (200, b"ok")
        table.forget(rid)
        assert len(table) == 0
        assert not table.answer(mine, rid, 200, b"again")  # answered already: dropped

    asyncio.run(run())


def test_bounds_per_agent_and_in_all_refuse_at_once_and_free_on_forget() -> None:
    async def run() -> None:
        table = FileRequests(per_agent=2, total=3)
        link = Link()
        ids = [table.ask("a1", link)[0] for _ in range(2)]
        with pytest.raises(FilesUnavailable) as refused:
            table.ask("a1", link)
        assert refused.value.status == 503 and "agent a1" in str(refused.value)
        table.ask("a2", link)
        with pytest.raises(FilesUnavailable, match="3 file requests outstanding"):
            table.ask("a3", link)
        table.forget(ids[0])
        table.ask("a1", link)

    asyncio.run(run())


def test_an_oversized_or_odd_reply_is_answered_502() -> None:
    async def run() -> None:
        table = FileRequests()
        link = Link()
        rid, answer = table.ask("a1", link)
        table.answer(link, rid, 200, b"x" * (REPLY_MAX_BYTES + 1))
        assert (await answer)[0] == 502
        rid, answer = table.ask("a1", link)
        table.answer(link, rid, 9999, b"{}")
        assert await answer == (502, b"{}")

    asyncio.run(run())
