"""Read-ahead for ``/files/read`` through the master: one agent round trip per MiB, not per page.

A pager, ``mezzo logs`` or a script reading a sandbox file through the master asks for
it in pages of at most 64 KiB (Mesos' cap on ``/files/read``). Asked of the agent one by
one, every page is a Thrift round trip over the agent's link and an open of the file
there, which caps a sequential reader at half of what the agent's own port serves. So
the master fetches a bigger *piece* of the file (``download``, :data:`PIECE` bytes from
the page's offset) once a reader asks for the page after the one it asked before, and
answers the following pages from it while it is fresh.

Freshness: a page is served from a piece only when it lies wholly inside it and the piece
is younger than :data:`TTL` (1 s). A page reaching past a piece's end (the tail of a
growing file, where a follower reads) always asks the agent, so appended output shows at
once; bytes already written are what the piece holds, unless the task rewrites its file
in place, which a reader sees at most :data:`TTL` late.

Bounds: at most :data:`PIECES` pieces (of at most :data:`PIECE` bytes each) are kept,
the least recently used dropped first, and a piece is only kept for the agent connection
it came over. Who may read is decided before a piece is looked at
(:meth:`.file_requests.FileRequests.request`).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..agent.files import DOWNLOAD_CHUNK, READ_MAX, read_body

PIECE = DOWNLOAD_CHUNK
"""Bytes fetched from the agent for a page not held (1 MiB: 16 pages of 64 KiB)."""
PIECES = 32
"""Pieces held at most (32 MiB)."""
TTL = 1.0
"""Seconds a piece answers pages after it was fetched."""
READERS = 1024
"""Files whose last page asked is remembered (to tell a sequential reader)."""


@dataclass(frozen=True)
class _Piece:
    conn: Any
    offset: int
    data: bytes
    fetched: float

    def holds(self, conn: Any, offset: int, length: int) -> bool:
        return conn is self.conn and self.offset <= offset and offset + length <= self.offset + len(self.data)


class ReadAhead:
    """Recently fetched pieces of sandbox files, keyed by agent and path; see the module
    docstring. Pure bookkeeping: :meth:`page` answers from a piece or says to fetch one,
    :meth:`keep` stores what was fetched."""

    def __init__(
        self, *, pieces: int = PIECES, ttl: float = TTL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.pieces = pieces
        self.ttl = ttl
        self._clock = clock
        self._held: OrderedDict[tuple[str, str], _Piece] = OrderedDict()
        self._last: OrderedDict[tuple[str, str], tuple[int, int]] = OrderedDict()
        """The last page asked of each file (offset, length), at most :data:`READERS`."""
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._held)

    @staticmethod
    def applies(offset: int, length: int) -> bool:
        """Whether a read of ``length`` bytes (-1: the default) at ``offset`` is one to serve
        from pieces. The size (``offset=-1``), empty reads and bad values go to the agent,
        which answers them (and names what is wrong) as it always did."""
        if isinstance(offset, bool) or isinstance(length, bool):
            return False
        return (
            isinstance(offset, int)
            and isinstance(length, int)
            and offset >= 0
            and (length == -1 or length > 0)
        )

    def follows(self, agent_id: str, path: str, offset: int) -> bool:
        """Whether a page at ``offset`` continues the last page asked of this file (a
        sequential reader): only then is a piece worth fetching. A single page, a reader
        going backwards (``logs --tail``) or jumping about costs the agent a page, not a MiB."""
        last = self._last.get((agent_id, path))
        return last is not None and last[0] < offset <= last[0] + last[1]

    def page(self, agent_id: str, conn: Any, path: str, offset: int, length: int) -> bytes | None:
        """The JSON answer (as the agent's ``read`` gives it) for ``length`` bytes (-1: the
        default page) of ``path`` at ``offset``, if a fresh piece holds them all; else None
        (fetch a piece from ``offset`` and :meth:`keep` it)."""
        length = page_length(length)
        key = (agent_id, path)
        self._last.pop(key, None)
        self._last[key] = (offset, length)
        if len(self._last) > READERS:
            self._last.popitem(last=False)
        piece = self._held.get(key)
        if piece is not None and self._clock() - piece.fetched > self.ttl:
            del self._held[key]
            piece = None
        if piece is None or not piece.holds(conn, offset, length):
            self.misses += 1
            return None
        self.hits += 1
        self._held.move_to_end(key)
        start = offset - piece.offset
        return read_body(offset, piece.data[start : start + length], length)

    def keep(self, agent_id: str, conn: Any, path: str, offset: int, data: bytes) -> None:
        """Hold ``data``, fetched from the agent on ``conn``, as ``path``'s bytes at ``offset``."""
        key = (agent_id, path)
        self._held.pop(key, None)
        self._held[key] = _Piece(conn, offset, data[:PIECE], self._clock())
        while len(self._held) > self.pieces:
            self._held.popitem(last=False)


def page_length(length: int) -> int:
    """The bytes a ``read`` of ``length`` returns at most: -1 is the default page, and no
    page is longer than :data:`~mezzo.agent.files.READ_MAX`."""
    return READ_MAX if length == -1 else min(length, READ_MAX)
