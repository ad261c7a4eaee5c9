"""The master's outstanding sandbox-file requests to agents (its ``/files/*`` proxy).

The master cannot dial agents (they dial it), so it asks over the agent's own link
(``Agent.files_request(request_id, ...)``), and the agent answers ``Master.files_reply``
with the same id. This table holds the requests in flight:

- bounded: at most :data:`PER_AGENT_MAX` per agent and :data:`TOTAL_MAX` in all; past
  either, :class:`FilesUnavailable` 503 at once (nothing is queued);
- each waits at most :data:`TIMEOUT` seconds, then 504 (an agent that never answers
  leaves nothing behind);
- a reply is taken only from the connection the request went out on, for an id the table
  holds; anything else (an id never asked, asked of another agent, already timed out) is
  logged and dropped: an agent cannot answer for another;
- a reply bigger than :data:`REPLY_MAX_BYTES` is refused (502): an agent answers at most
  a 1 MiB piece of a download or a bounded listing.

``read`` pages are answered from a 1 MiB piece fetched ahead where one holds them
(:mod:`.read_ahead`), so a sequential reader costs one request per MiB, not per page.

Who may read which sandbox is decided before (:meth:`FileRequests.request`, by the
framework named in the path and the caller's ``view_frameworks``).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from ..acls import View
from ..agent.files import read_body
from .read_ahead import PIECE, ReadAhead, page_length
from .state_view import shows

if TYPE_CHECKING:
    from .state import ClusterState

log = structlog.get_logger("mezzo.master", component="files")

PER_AGENT_MAX = 8
"""File requests outstanding to one agent at once."""
TOTAL_MAX = 256
"""File requests outstanding to all agents at once."""
TIMEOUT = 10.0
"""Seconds an agent has to answer a file request (then 504)."""
REPLY_MAX_BYTES = 4 * 1024 * 1024
"""The largest reply body taken (a 1 MiB download piece, a listing of 5,000 entries)."""


class FilesUnavailable(Exception):
    """The proxy cannot ask: ``status`` (HTTP) and ``str()`` why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class _Pending:
    agent_id: str
    conn: Any
    answer: asyncio.Future[tuple[int, bytes]] = field(repr=False)


class FileRequests:
    """The table of outstanding file requests; see the module docstring."""

    def __init__(
        self, *, per_agent: int = PER_AGENT_MAX, total: int = TOTAL_MAX, timeout: float = TIMEOUT
    ) -> None:
        self.per_agent = per_agent
        self.total = total
        self.timeout = timeout
        self._pending: dict[int, _Pending] = {}
        self._by_agent: Counter[str] = Counter()
        self._ids = itertools.count(1)
        self.ignored = 0
        """Replies dropped: unknown id, wrong connection, too big."""
        self.read_ahead = ReadAhead()
        """Pieces of files read lately, which answer the next ``read`` pages (:mod:`.read_ahead`)."""

    def __len__(self) -> int:
        return len(self._pending)

    async def request(
        self,
        state: ClusterState,
        view: View,
        agent_id: str,
        framework_id: str,
        operation: str,
        path: str,
        offset: int = 0,
        length: int = -1,
    ) -> tuple[int, bytes]:
        """Ask agent ``agent_id`` for ``operation`` on ``path`` (in the form
        ``/frameworks/<framework_id>/...``) for a caller seeing ``view``; its
        ``(status, body)``. Raises :class:`FilesUnavailable`: 403 the caller may not see
        that framework, 404 no such agent, 503 disconnected or too many requests, 504 no
        answer in time."""
        framework = state.frameworks.get(framework_id)
        if view.frameworks is not None and (framework is None or not shows(view, framework.info)):
            raise FilesUnavailable(
                403, f"may not view framework {framework_id} (master.acls.view_frameworks)"
            )
        agent = state.agents.get(agent_id)
        if agent is None:
            raise FilesUnavailable(404, f"no agent {agent_id!r} is registered")
        if not agent.connected or agent.conn is None:
            raise FilesUnavailable(503, f"agent {agent_id} is disconnected; its files cannot be read now")
        conn = agent.conn
        if operation == "read" and self.read_ahead.applies(offset, length):
            sequential = self.read_ahead.follows(agent_id, path, offset)
            page = self.read_ahead.page(agent_id, conn, path, offset, length)
            if page is not None:
                return 200, page
            if not sequential:
                return await self._send(state, agent_id, conn, operation, path, offset, length)
            status, piece = await self._send(state, agent_id, conn, "download", path, offset, PIECE)
            if status != 200:
                return status, piece
            self.read_ahead.keep(agent_id, conn, path, offset, piece)
            return 200, read_body(offset, piece[: page_length(length)], page_length(length))
        return await self._send(state, agent_id, conn, operation, path, offset, length)

    async def _send(
        self,
        state: ClusterState,
        agent_id: str,
        conn: Any,
        operation: str,
        path: str,
        offset: int,
        length: int,
    ) -> tuple[int, bytes]:
        """One ``files_request`` to ``agent_id`` on ``conn`` and its answer."""
        rid, answer = self.ask(agent_id, conn)
        try:
            state.outbox.agent(conn).files_request(rid, operation, path, offset, length)
            return await asyncio.wait_for(answer, self.timeout)
        except TimeoutError:
            raise FilesUnavailable(
                504, f"agent {agent_id} did not answer within {self.timeout:g} s"
            ) from None
        finally:
            self.forget(rid)

    def ask(self, agent_id: str, conn: Any) -> tuple[int, asyncio.Future[tuple[int, bytes]]]:
        """Take a slot for a request to ``agent_id`` on ``conn``: its id and its answer.
        :meth:`forget` it when done. Raises :class:`FilesUnavailable` 503 past a bound."""
        if len(self._pending) >= self.total:
            raise FilesUnavailable(
                503, f"the master has {self.total} file requests outstanding; retry shortly"
            )
        if self._by_agent[agent_id] >= self.per_agent:
            raise FilesUnavailable(
                503, f"agent {agent_id} has {self.per_agent} file requests outstanding; retry shortly"
            )
        rid = next(self._ids)
        answer: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
        self._pending[rid] = _Pending(agent_id, conn, answer)
        self._by_agent[agent_id] += 1
        return rid, answer

    def forget(self, request_id: int) -> None:
        """Free the slot of ``request_id`` (answered, timed out, or its caller left)."""
        pending = self._pending.pop(request_id, None)
        if pending is None:
            return
        self._by_agent[pending.agent_id] -= 1
        if self._by_agent[pending.agent_id] <= 0:
            del self._by_agent[pending.agent_id]

    def answer(self, conn: Any, request_id: Any, status: Any, body: Any, peer: str = "?") -> bool:
        """An agent's ``files_reply`` on ``conn``: handed to its waiter (True) if the request
        went out on ``conn``; else logged and dropped (see the module docstring)."""
        pending = self._pending.get(request_id) if isinstance(request_id, int) else None
        if pending is None or pending.conn is not conn:
            self.ignored += 1
            why = (
                "no such request outstanding (never asked, or timed out)"
                if pending is None
                else f"asked of agent {pending.agent_id} on another connection"
            )
            rid = request_id if isinstance(request_id, int) else None
            log.warning("file reply dropped", request=rid, peer=peer, why=why)
            return False
        if not isinstance(body, (bytes, bytearray)) or len(body) > REPLY_MAX_BYTES:
            self.ignored += 1
            log.warning("file reply too big; answered 502", agent=pending.agent_id, bytes=len(body or b""))
            status, body = 502, b'{"error":"the agent answered more than a reply may carry","status":502}'
        if not isinstance(status, int) or not 100 <= status <= 599:
            status = 502
        if not pending.answer.done():
            pending.answer.set_result((status, bytes(body)))
        return True
