"""Apache Mesos' v1 scheduler HTTP API at the master: ``POST /api/v1/scheduler``.

Frameworks written for Apache Mesos (pymesos, or any v1 HTTP client) run on mezzo
unchanged: the same endpoint (also under ``/master``), the same JSON, the same
status codes. Each call is translated (:mod:`mezzo.v1.translate`) into the call a
Thrift scheduler would make and handed to the master's service through its
leadership gate, with a :class:`~mezzo.v1.scheduler_stream.SchedulerStream` as the
framework's link: one allocator, one validation, one acknowledgement and failover
path for both kinds of framework.

- ``SUBSCRIBE`` (no ``Mesos-Stream-Id``) answers ``200``, chunked, with a fresh
  ``Mesos-Stream-Id`` and a RecordIO stream of events: ``SUBSCRIBED``, a
  ``HEARTBEAT`` at once and then every ``[master.http] event_heartbeat`` seconds
  (15, Mesos' interval; clients resubscribe after missing about five) without another
  event, ``OFFERS``, ``RESCIND``, ``UPDATE``, ``MESSAGE``, ``FAILURE``, ``ERROR``.
  A subscription the master refuses (an ACL, a framework removed, a failover by
  another principal) answers ``403``/``400`` with the reason, and no stream.
- Every other call carries the stream's ``Mesos-Stream-Id`` and answers ``202``
  with an empty body, or ``400`` naming what is wrong (unknown framework, wrong or
  missing stream id, a field that cannot be read, an operation mezzo does not
  have), ``403`` when the framework is not subscribed or the caller is not the one
  who subscribed, ``415`` for a ``Content-Type`` other than JSON.
- A task in an ``ACCEPT`` that cannot be read (a ``SET`` resource, ``uris``) is
  answered ``TASK_ERROR`` on the stream, as Mesos answers an invalid task; the other
  tasks of the call are launched.

Bounds, since anyone who reaches the port may call: the stream and the caller are
checked before the body is read; a body is at most :data:`MAX_SUBSCRIBE_BYTES`
without a stream and :data:`MAX_CALL_BYTES` with one (413 past it), and one larger
than :data:`INLINE_PARSE_BYTES` is decoded in a thread, not on the master's loop; an
ACCEPT launches at most :data:`MAX_TASKS_PER_CALL` tasks. The events waiting for a
scheduler are bounded by its stream, which is cut off past that (the framework is
disconnected, as after a broken connection). Callers are who their TLS certificate
says, as on the Thrift port, else who their Basic credentials say
(:mod:`.credentials`); the master's ACLs decide what they may do.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, Protocol

import structlog
from aiohttp import web

from .. import __version__
from ..rpc.address import parse_address
from ..v1 import translate
from ..v1.scheduler_stream import SchedulerStream
from ..wire.ttypes import TaskState, TaskStatus
from .access import caller, peer_of
from .credentials import BadCredentials, Credentials
from .link import keep_for_calls
from .v1_calls import JSON, content_type_refusal, read_body, text_error, write_events

log = structlog.get_logger("mezzo.http", component="v1-scheduler")

MAX_CALL_BYTES = 4 << 20
"""Largest body of a call on a stream: an ACCEPT launching thousands of tasks fits."""
MAX_SUBSCRIBE_BYTES = 64 << 10
"""Largest body without a stream (a SUBSCRIBE's FrameworkInfo is well under 1 KiB)."""
MAX_TASKS_PER_CALL = 10_000
"""Most tasks one ACCEPT may launch (each invalid one is an event to send back)."""
INLINE_PARSE_BYTES = 64 << 10
"""Bodies larger than this are decoded in a thread, not on the master's loop."""
STREAMING = "v1-scheduler-stream"
"""The tag of a subscription's HTTP link: registered, as the port's idle check sees it."""

SCHEDULER_API: web.AppKey[SchedulerApi] = web.AppKey("v1_scheduler_api")
"""The app's :class:`SchedulerApi`, for the port's fast lane (:mod:`.call_lane`)."""


class SchedulerMaster(Protocol):
    """What the façade needs of the master (:class:`mezzo.master.master.Master`)."""

    config: Any
    """The master's :class:`~mezzo.config.MasterConfig` (``http.event_heartbeat``)."""
    gate: Any
    """Routes calls to the leading term's service (:class:`~mezzo.master.leadership.LeaderGate`)."""

    @property
    def state(self) -> Any: ...

    @property
    def id(self) -> str: ...

    @property
    def leading(self) -> bool: ...


def add_scheduler_routes(
    app: web.Application,
    master: SchedulerMaster,
    prefixes: tuple[str, ...],
    credentials: Credentials | None = None,
) -> None:
    """Route ``POST {prefix}/api/v1/scheduler`` for each of ``prefixes`` to the façade
    (``credentials``: the master's HTTP Basic credentials, for its fast lane)."""
    api = SchedulerApi(master, credentials)
    for prefix in prefixes:
        app.router.add_post(f"{prefix}/api/v1/scheduler", api.call)
    app[SCHEDULER_API] = api


class SchedulerApi:
    """The endpoint; see the module docstring. Knows the live streams by id."""

    def __init__(self, master: SchedulerMaster, credentials: Credentials | None = None) -> None:
        self._master = master
        self._credentials = credentials
        self.streams: dict[str, SchedulerStream] = {}

    async def call(self, request: web.Request) -> web.StreamResponse:
        not_json = content_type_refusal(request)
        if not_json is not None:
            return not_json
        # Who is calling, before reading a byte of the body: a body is parsed on the loop
        # (or, a big one, in a thread) only for a live stream's own principal.
        stream_id = request.headers.get("Mesos-Stream-Id")
        stream: SchedulerStream | None = None
        if stream_id is not None:
            stream, refusal = self._stream_of(stream_id, caller(request))
            if stream is None:
                return text_error(*refusal)
        limit = MAX_CALL_BYTES if stream is not None else MAX_SUBSCRIBE_BYTES
        body = await read_body(request, limit)
        if body is None:
            return text_error(
                413, f"a call's body is at most {limit} bytes" + ("" if stream else " without a stream")
            )
        try:
            if len(body) > INLINE_PARSE_BYTES:
                role = stream.role if stream is not None else "*"
                loop = asyncio.get_running_loop()
                call, accept = await loop.run_in_executor(None, _decode, body, role)
            else:
                call, accept = _decode(body, stream.role if stream is not None else "*")
        except translate.BadCall as exc:
            return text_error(400, f"Failed to validate scheduler::Call: {exc}")
        if call.type == "SUBSCRIBE" and stream is None:
            return await self._subscribe(request, call)
        if stream is None:
            return self._without_stream(call)
        status, text = self._answer(stream, call, accept)
        if status != 202:
            return text_error(status, text)
        keep_for_calls(request.transport)
        return web.Response(status=202)

    def lane_call(
        self, stream_id: str, principal: str | None, body: bytes, authorization: str | None = None
    ) -> tuple[int, str] | None:
        """A call the port's fast lane read (:mod:`.call_lane`), answered as :meth:`call`
        answers it: ``(status, text)``; None for what only :meth:`call` answers (this
        master does not lead, a body to decode in a thread, Basic credentials that match
        no principal: the route's middleware answers and audits those). ``principal``:
        the connection's certificate's; ``authorization``: the request's header, read
        as the master's Basic credentials middleware reads it (:mod:`.access`)."""
        if not self._master.leading or len(body) > INLINE_PARSE_BYTES:
            return None
        if principal is None and authorization is not None and self._credentials is not None:
            try:
                principal = self._credentials.principal(authorization)
            except BadCredentials:
                return None  # aiohttp's route answers it, as every request it refuses (JSON 401)
        stream, refusal = self._stream_of(stream_id, principal)
        if stream is None:
            return refusal
        try:
            call, accept = _decode(body, stream.role)
        except translate.BadCall as exc:
            return 400, f"Failed to validate scheduler::Call: {exc}"
        return self._answer(stream, call, accept)

    def _stream_of(
        self, stream_id: str, principal: str | None
    ) -> tuple[SchedulerStream | None, tuple[int, str]]:
        """The live stream ``stream_id`` names, if ``principal`` may call on it; else why not."""
        stream = self.streams.get(stream_id)
        if stream is None:
            return None, (400, f"The stream ID {stream_id[:100]!r} included in this request is not valid")
        if stream.closing:
            return None, (403, "Framework is not subscribed")
        if principal != stream.principal:
            # The stream id is not a secret worth a framework: the caller must be who subscribed.
            return None, (403, "the caller is not the principal that subscribed this framework")
        return stream, (202, "")

    def _answer(
        self, stream: SchedulerStream, call: translate.Call, accept: translate.Accept | None
    ) -> tuple[int, str]:
        """A call on ``stream``, decoded, handed to the master: 202, or an error's status and text."""
        if call.type == "SUBSCRIBE":
            return 400, "Subscribe calls should not include the 'Mesos-Stream-Id' header"
        if call.framework_id != stream.framework_id:
            return 400, f"{call.type}: 'framework_id' is not the framework of this stream"
        try:
            problem = self._dispatch(stream, call, accept)
        except translate.BadCall as exc:
            return 400, f"Failed to validate scheduler::Call: {exc}"
        return (202, "") if problem is None else (400, problem)

    # -- SUBSCRIBE -----------------------------------------------------------------------

    async def _subscribe(self, request: web.Request, call: translate.Call) -> web.StreamResponse:
        try:
            info = translate.framework_info(call.body.get("framework_info"), "subscribe.framework_info")
        except translate.BadCall as exc:
            return text_error(400, f"Failed to validate scheduler::Call: {exc}")
        if call.framework_id:
            if info.framework_id and info.framework_id != call.framework_id:
                return text_error(400, "'framework_id' differs from 'subscribe.framework_info.id'")
            info.framework_id = call.framework_id
        master = self._master
        link: Any = request.transport
        stream = SchedulerStream(
            uuid.uuid4().hex,
            peer=peer_of(request),
            principal=caller(request),
            role=info.role,
            heartbeat_interval=master.config.http.event_heartbeat,
            master_info=self._master_info,
            # A scheduler that stops reading is cut off at once, not once its blocked
            # write times out (write_stall_timeout): the handler is stuck in that write.
            abort=link.abort if link is not None else None,
        )
        master.gate.register_framework(stream, info)
        if not stream.framework_id:  # SUBSCRIBED was not sent
            # Closed first: a call the gate holds while this master takes over is dropped
            # when it opens (the stream is not open), not applied to a stream nobody reads.
            stream.close()
            if not stream.errors:
                return text_error(503, "the master is taking over leadership; subscribe again shortly")
            # Refused (an ACL, a removed framework, another principal's framework): say
            # why in the answer, as Mesos does, with no stream.
            reason = "; ".join(stream.errors)
            status = 403 if "may not" in reason or "another principal" in reason else 400
            return text_error(status, reason)
        self.streams[stream.stream_id] = stream
        if link is not None and hasattr(link, "tag"):
            link.tag = STREAMING  # the port's idle check spares it
        response = web.StreamResponse(
            status=200,
            headers={"Content-Type": JSON, "Mesos-Stream-Id": stream.stream_id, "Cache-Control": "no-store"},
        )
        response.enable_chunked_encoding()
        log.info(
            "v1 framework subscribed",
            framework=stream.framework_id,
            name=info.name,
            peer=stream.peer,
            stream=stream.stream_id,
        )
        try:
            await response.prepare(request)
            await write_events(request, response, stream, stream.heartbeat_interval)
        except (ConnectionResetError, ConnectionError):
            pass  # the scheduler left: its framework is disconnected below
        except asyncio.CancelledError:
            # The master is stopping (aiohttp cancels the handlers): its frameworks are
            # not disconnected by it, or those with no failover_timeout would be removed
            # and their tasks killed while the agents are still connected. A Thrift
            # scheduler's connection closes after the agents' too.
            stream.tag = None
            raise
        finally:
            self.streams.pop(stream.stream_id, None)
            if link is not None and getattr(link, "tag", None) == STREAMING:
                link.tag = None
            stream.close()
            # As when a Thrift scheduler's connection breaks: failover_timeout applies
            # (nothing happens for a stream the master itself let go: torn down, failed over).
            master.gate.connection_lost(stream)
            log.info(
                "v1 framework stream ended",
                framework=stream.framework_id,
                reason=stream.end_reason or _dropped(link) or "the scheduler closed it",
                stream=stream.stream_id,
            )
        return response

    def _master_info(self, address: str) -> dict[str, Any]:
        try:
            host, port = parse_address(address, 0)  # an IPv6 host without its brackets
        except ValueError:
            host, port = address, 0
        return translate.master_info(self._master.id, host, port, __version__)

    # -- the other calls -----------------------------------------------------------------

    def _without_stream(self, call: translate.Call) -> web.Response:
        """The answer to a call without ``Mesos-Stream-Id`` (Mesos' codes)."""
        if not call.framework_id:
            return text_error(400, f"{call.type}: 'framework_id' is required")
        record = self._master.state.frameworks.get(call.framework_id)
        if record is None:
            return text_error(400, f"Framework {call.framework_id[:100]!r} cannot be found")
        if record.conn is None:
            return text_error(403, "Framework is not subscribed")
        return text_error(400, "All non-subscribe calls should include the 'Mesos-Stream-Id' header")

    def _dispatch(
        self, stream: SchedulerStream, call: translate.Call, accept: translate.Accept | None
    ) -> str | None:
        """Hand ``call`` to the master; a problem to answer 400 with, or None."""
        gate = self._master.gate
        fid = call.framework_id
        body = call.body
        kind = call.type
        if kind == "ACCEPT":
            assert accept is not None
            if accept.refused_operations:
                more = len(accept.refused_operations) - 3
                return "; ".join(accept.refused_operations[:3]) + (f"; and {more} more" if more > 0 else "")
            if len(accept.tasks) + len(accept.invalid) > MAX_TASKS_PER_CALL:
                return f"accept: more than {MAX_TASKS_PER_CALL} tasks in one call; launch them in several"
            for task_id, message in accept.invalid:
                stream.status_update(_task_error(task_id, message))
            gate.launch_tasks(stream, fid, accept.offer_ids, accept.tasks, accept.filters, accept.groups)
        elif kind == "DECLINE":
            offer_ids, filters = translate.decline(body)
            gate.decline_offer(stream, fid, offer_ids, filters)
        elif kind == "REVIVE":
            if _for_role(translate.roles(body), stream.role):
                gate.set_needs_offers(stream, fid, True)
        elif kind == "SUPPRESS":
            if _for_role(translate.roles(body), stream.role):
                gate.set_needs_offers(stream, fid, False)
        elif kind == "KILL":
            task_id, _agent_id = translate.kill(body)
            gate.kill_task(stream, fid, task_id)
        elif kind == "ACKNOWLEDGE":
            agent_id, task_id, status_uuid = translate.acknowledge(body)
            gate.acknowledge_status_update(stream, fid, agent_id, task_id, status_uuid)
        elif kind == "RECONCILE":
            statuses = [TaskStatus(task_id=t, agent_id=a) for t, a in translate.reconcile(body)]
            gate.reconcile_tasks(stream, fid, statuses)
        elif kind == "MESSAGE":
            agent_id, executor_id, data = translate.message(body)
            gate.framework_to_executor(stream, fid, agent_id, executor_id, data)
        elif kind == "TEARDOWN":
            gate.unregister_framework(stream, fid)
            stream.close("torn down by its scheduler")
        elif kind == "REQUEST":
            pass  # Mesos' own allocator ignores requests too
        else:
            return f"{kind[:40]!r}: mezzo does not serve this call (see docs/mesos-compatibility.md)"
        return None


def _dropped(link: Any) -> str:
    """Why the port dropped ``link`` (a bound of ``[master.connections]``), or ""."""
    reason = getattr(link, "dropped_for", "")
    return f"dropped for master.connections.{reason}" if reason else ""


def _for_role(roles: list[str], role: str) -> bool:
    """REVIVE and SUPPRESS name roles (none: all of them); a mezzo framework has one."""
    return not roles or role in roles


def _task_error(task_id: str, message: str) -> TaskStatus:
    return TaskStatus(
        task_id=task_id,
        state=TaskState.TASK_ERROR,
        message=message,
        reason="task_invalid",
        source="master",
        timestamp=time.time(),
    )


def _decode(body: bytes, role: str) -> tuple[translate.Call, translate.Accept | None]:
    """The call in ``body``, and an ACCEPT's tasks decoded (the costly part, so that a
    big call is decoded off the loop as a whole)."""
    call = translate.parse_call(body)
    accept = translate.task_infos_of_accept(call.body, role) if call.type == "ACCEPT" else None
    return call, accept
