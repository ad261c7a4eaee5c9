"""Apache Mesos' v1 executor HTTP API at the agent: ``POST /api/v1/executor``.

Custom executors written for Apache Mesos (pymesos' ``MesosExecutorDriver``, or any v1
HTTP client) run on mezzo agents unchanged. The agent starts every custom executor with
Mesos' environment as well as mezzo's (``MESOS_AGENT_ENDPOINT``, ``MESOS_FRAMEWORK_ID``,
``MESOS_EXECUTOR_ID``, ...: :meth:`mezzo.agent.executors.ExecutorRun._launch_spec`), and
whichever driver the executor uses finds its way back: a mezzo driver over Thrift, a
Mesos one here. Behind both is the same :class:`~mezzo.agent.executors.ExecutorRun`,
with a :class:`~mezzo.v1.executor_stream.ExecutorStream` as its connection.

- ``SUBSCRIBE`` answers ``200``, chunked, with a RecordIO stream: ``SUBSCRIBED``, then
  ``LAUNCH`` of each task queued for the executor, ``KILL``, ``ACKNOWLEDGED``,
  ``MESSAGE``, ``SHUTDOWN``, and a ``HEARTBEAT`` after :data:`HEARTBEAT_SECONDS` without
  another event. ``unacknowledged_updates`` it carries are taken as ``UPDATE`` calls.
- ``UPDATE`` and ``MESSAGE`` answer ``202`` with an empty body, once the executor is
  subscribed.
- Errors are plain text, as Mesos': ``400`` for a body that cannot be read or a call
  mezzo does not serve, ``404`` for an executor this agent does not run, ``403`` for a
  caller who is not that executor or an executor not subscribed, ``409`` for a second
  subscription while one lasts, ``413`` past :data:`MAX_CALL_BYTES`, ``415`` for a body
  that is not JSON.

**Who may call.** Anyone who reaches the agent's port could name a framework's and an
executor's ids, so a call must come from the executor: either it carries ``Authorization:
Bearer`` with the token the agent gave only that executor's process
(``MESOS_EXECUTOR_AUTHENTICATION_TOKEN``, Mesos' scheme), or its connection comes from a
process of the executor's container (:mod:`mezzo.agent.peer_process`: how an unmodified
pymesos executor, which sends no token, is known). A connection proven once is
remembered for its later requests (its link's ``tag``, which also spares it the port's
idle timeout). Anything else is ``403`` and the connection closed; the agent's log says
who tried (one line per 10 s at most, with a count of the others).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

import structlog
from aiohttp import web

from ..agent.peer_process import connection_from_container
from ..v1 import executor_translate, translate
from ..v1.executor_stream import ExecutorStream
from .v1_calls import JSON, content_type_refusal, read_body, text_error, write_events

log = structlog.get_logger("mezzo.http", component="v1-executor")

PATH = "/api/v1/executor"
MAX_CALL_BYTES = 1 << 20
"""Largest body of an executor's call (an UPDATE's ``data``, a SUBSCRIBE's updates)."""
REFUSAL_LOG_SECONDS = 10.0
"""At most one warning about refused callers per this many seconds."""
HEARTBEAT_SECONDS = 30.0
"""A ``HEARTBEAT`` after this long without another event, so that neither end takes a
quiet stream for a dead one."""


class ExecutorAgent(Protocol):
    """What the endpoint needs of the agent (:class:`mezzo.agent.agent.Agent`)."""

    def find_executor(self, framework_id: str, executor_id: str) -> Any: ...

    def executor_status(self, conn: Any, run: Any, status: Any) -> None: ...

    def executor_message(self, run: Any, data: bytes) -> None: ...


def add_executor_routes(app: web.Application, agent: ExecutorAgent) -> None:
    """Route ``POST /api/v1/executor`` to :class:`ExecutorApi`."""
    app.router.add_post(PATH, ExecutorApi(agent).call)


class ExecutorApi:
    """The endpoint; see the module docstring."""

    def __init__(self, agent: ExecutorAgent) -> None:
        self._agent = agent
        self._refusals = _RefusalLog()

    async def call(self, request: web.Request) -> web.StreamResponse:
        refusal = content_type_refusal(request)
        if refusal is not None:
            return refusal
        body = await read_body(request, MAX_CALL_BYTES)
        if body is None:
            return text_error(413, f"an executor's call is at most {MAX_CALL_BYTES} bytes")
        try:
            call = translate.parse_call(body)
        except translate.BadCall as exc:
            return text_error(400, f"Failed to validate executor::Call: {exc}")
        if not call.framework_id or not call.executor_id:
            return text_error(
                400, "Failed to validate executor::Call: 'framework_id' and 'executor_id' are required"
            )
        run = self._agent.find_executor(call.framework_id, call.executor_id)
        if run is None:
            return text_error(
                404,
                f"no executor {call.executor_id[:100]!r} of framework {call.framework_id[:100]!r} on this agent",
            )
        problem = await _not_the_executor(request, run)
        if problem is not None:
            self._refusals.refused(
                call=call.type[:40],
                framework=call.framework_id[:100],
                executor=call.executor_id[:100],
                peer=_peer(request),
                why=problem,
            )
            # Closed after the answer: each attempt of a stranger costs it a connection
            # (which the port's bounds limit), not just a request.
            refusal = text_error(403, problem)
            refusal.force_close()
            return refusal
        try:
            if call.type == "SUBSCRIBE":
                return await self._subscribe(request, run, call)
            stream = run.conn
            if not isinstance(stream, ExecutorStream) or stream.closing:
                return text_error(403, f"executor {run.executor_id!r} is not subscribed: SUBSCRIBE first")
            if call.type == "UPDATE":
                self._agent.executor_status(stream, run, executor_translate.update_status(call.body))
            elif call.type == "MESSAGE":
                self._agent.executor_message(run, executor_translate.message_data(call.body))
            else:
                return text_error(
                    400, f"{call.type[:40]!r}: not an executor call mezzo serves (UPDATE, MESSAGE)"
                )
        except translate.BadCall as exc:
            return text_error(400, f"Failed to validate executor::Call: {exc}")
        return web.Response(status=202)

    async def _subscribe(self, request: web.Request, run: Any, call: translate.Call) -> web.StreamResponse:
        updates = executor_translate.unacknowledged_updates(call.body)  # BadCall: the caller's 400
        if not run.accepts_registration():
            why = "is subscribed already" if run.conn is not None else f"is {run.state}"
            return text_error(409, f"executor {run.executor_id!r} {why}: not expecting a subscription")
        link: Any = request.transport
        stream = ExecutorStream(
            peer=_peer(request),
            role=run.framework.role or "*",
            container_id=run.container_id or "",
            abort=link.abort if link is not None else None,
        )
        run.on_registered(stream)  # SUBSCRIBED, then the queued tasks' LAUNCHes
        for status in updates:
            self._agent.executor_status(stream, run, status)
        response = web.StreamResponse(status=200, headers={"Content-Type": JSON, "Cache-Control": "no-store"})
        response.enable_chunked_encoding()
        try:
            await response.prepare(request)
            await write_events(request, response, stream, HEARTBEAT_SECONDS)
        except ConnectionError:
            pass  # the executor left: handled below, as any lost executor connection
        except asyncio.CancelledError:
            # The agent is stopping: its executors are not disconnected by it (a
            # checkpointing agent's executors outlive it and subscribe again).
            stream.close()
            raise
        stream.close()
        run.on_disconnected(stream)
        return response


async def _not_the_executor(request: web.Request, run: Any) -> str | None:
    """Why the caller is not ``run``'s executor, or None if it is (see "Who may call");
    a connection found to be is remembered as the run's. The look through ``/proc`` runs
    on a worker thread: it reads every process's status on the host."""
    link: Any = request.transport
    if link is not None and getattr(link, "tag", None) is run:
        return None
    header = request.headers.get("Authorization", "")
    if header[:7].lower() == "bearer ":
        if not (run.token and run.holds_token(header[7:].strip())):
            return "the Bearer token is not this executor's (MESOS_EXECUTOR_AUTHENTICATION_TOKEN)"
    else:
        running = run.running
        peer = link.get_extra_info("peername") if link is not None else None
        local = link.get_extra_info("sockname") if link is not None else None
        if running is None or not peer or not local:
            return f"executor {run.executor_id!r} has no process to call from yet"
        if not await asyncio.to_thread(connection_from_container, running.pid, peer[:2], local[:2]):
            return (
                f"the caller is not a process of executor {run.executor_id!r} and sent no "
                "Authorization: Bearer token of it (MESOS_EXECUTOR_AUTHENTICATION_TOKEN)"
            )
    if link is not None and hasattr(link, "tag") and link.tag is None:
        link.tag = run
    return None


class _RefusalLog:
    """The refusals' warnings, at most one per :data:`REFUSAL_LOG_SECONDS` (with a count
    of those not logged since): a stranger calling in a loop must not fill the log."""

    def __init__(self) -> None:
        self._last = -REFUSAL_LOG_SECONDS
        self._unlogged = 0

    def refused(self, **fields: Any) -> None:
        now = time.monotonic()
        if now - self._last < REFUSAL_LOG_SECONDS:
            self._unlogged += 1
            return
        log.warning("refusing a v1 executor call", refused_since_last=self._unlogged, **fields)
        self._last, self._unlogged = now, 0


def _peer(request: web.Request) -> str:
    """The caller's address, for the log (the link's; ``?`` if unknown)."""
    return getattr(request.transport, "peer", "?")
