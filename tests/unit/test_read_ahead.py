"""Read-ahead of sandbox files at the master (mezzo.master.read_ahead): which pages a piece
answers, for how long, and how many pieces are held."""

from __future__ import annotations

import json

from mezzo.agent.files import READ_MAX, read_body
from mezzo.master.read_ahead import PIECE, ReadAhead


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


LINK = object()
DATA = bytes(range(256)) * 4096  # 1 MiB, every byte value


def test_pages_inside_a_fresh_piece_are_answered_as_the_agent_would() -> None:
    clock = Clock()
    ahead = ReadAhead(clock=clock)
    assert ahead.page("a1", LINK, "/f", 0, -1) is None  # nothing held: fetch
    ahead.keep("a1", LINK, "/f", 4096, DATA)
    for offset, length in [(4096, -1), (4096 + 10, 5), (4096 + PIECE - READ_MAX, -1), (5000, 10**6)]:
        want = min(READ_MAX if length == -1 else length, READ_MAX)
        start = offset - 4096
        assert ahead.page("a1", LINK, "/f", offset, length) == read_body(offset, DATA[start : start + want], want)
    assert ahead.hits == 4 and ahead.misses == 1


def test_a_page_reaching_past_the_piece_or_before_it_asks_the_agent() -> None:
    ahead = ReadAhead(clock=Clock())
    ahead.keep("a1", LINK, "/f", 1000, b"x" * 500)  # the file's end when fetched
    assert ahead.page("a1", LINK, "/f", 1000, 500) is not None
    assert ahead.page("a1", LINK, "/f", 1000, 501) is None  # the file may have grown
    assert ahead.page("a1", LINK, "/f", 1500, -1) is None  # the tail: always fresh
    assert ahead.page("a1", LINK, "/f", 999, 1) is None


def test_a_piece_answers_for_its_ttl_on_its_connection_for_its_agent_and_path_only() -> None:
    clock = Clock()
    ahead = ReadAhead(ttl=1.0, clock=clock)
    ahead.keep("a1", LINK, "/f", 0, b"abc")
    assert ahead.page("a2", LINK, "/f", 0, 3) is None
    assert ahead.page("a1", LINK, "/g", 0, 3) is None
    assert ahead.page("a1", object(), "/f", 0, 3) is None  # the agent reconnected
    clock.now += 1.0
    assert json.loads(ahead.page("a1", LINK, "/f", 0, 3) or b"") == {"offset": 0, "data": "abc", "length": 3}
    clock.now += 0.01
    assert ahead.page("a1", LINK, "/f", 0, 3) is None
    assert len(ahead) == 0  # the stale piece is gone


def test_at_most_the_bound_of_pieces_is_held_the_least_recently_used_dropped() -> None:
    ahead = ReadAhead(pieces=2, clock=Clock())
    ahead.keep("a1", LINK, "/1", 0, b"1")
    ahead.keep("a1", LINK, "/2", 0, b"2")
    assert ahead.page("a1", LINK, "/1", 0, 1) is not None  # /1 used last
    ahead.keep("a1", LINK, "/3", 0, b"3")
    assert len(ahead) == 2
    assert ahead.page("a1", LINK, "/2", 0, 1) is None
    assert ahead.page("a1", LINK, "/1", 0, 1) is not None
    ahead.keep("a1", LINK, "/4", 0, b"x" * (PIECE + 10))
    assert ahead.page("a1", LINK, "/4", PIECE, 1) is None  # never more than a piece kept


def test_only_plain_page_reads_are_served_from_pieces() -> None:
    assert ReadAhead.applies(0, -1) and ReadAhead.applies(10, 5)
    assert not ReadAhead.applies(-1, -1)  # the size: always the agent's
    assert not ReadAhead.applies(0, 0)
    assert not ReadAhead.applies(-5, 10)  # the agent names the bad offset
    assert not ReadAhead.applies(True, 10)


def test_a_character_cut_at_a_page_edge_reads_as_the_agent_reads_it() -> None:
    ahead = ReadAhead(clock=Clock())
    text = "é" * 10  # two bytes each
    ahead.keep("a1", LINK, "/f", 0, text.encode())
    body = ahead.page("a1", LINK, "/f", 0, 3)
    assert body == read_body(0, text.encode()[:3], 3)
    # The cut "é" is left for the next page, which starts where "length" says.
    assert json.loads(body or b"") == {"offset": 0, "data": "é", "length": 2}


def test_only_a_reader_asking_for_the_page_after_its_last_is_worth_a_piece() -> None:
    ahead = ReadAhead(clock=Clock())
    assert not ahead.follows("a1", "/f", 0)  # a first page: one page from the agent
    ahead.page("a1", LINK, "/f", 0, -1)
    assert ahead.follows("a1", "/f", READ_MAX)  # the next one: read ahead
    assert ahead.follows("a1", "/f", READ_MAX - 2)  # a page cut short at a character
    assert not ahead.follows("a1", "/f", 0)  # the same page again
    ahead.page("a1", LINK, "/f", 10 * READ_MAX, -1)
    assert not ahead.follows("a1", "/f", 9 * READ_MAX)  # backwards (logs --tail)
    assert not ahead.follows("a1", "/g", READ_MAX)  # another file
