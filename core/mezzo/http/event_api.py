"""The operator event stream over HTTP (:mod:`mezzo.master.events`).

Two framings of the same events, whichever a tool reads more easily:

- ``POST /api/v1`` (and ``/master/api/v1``) with the body ``{"type": "SUBSCRIBE"}``:
  Apache Mesos' v1 operator subscription, in RecordIO (each event is its length in
  bytes, a newline, and the JSON), ``Content-Type: application/recordio``,
  ``Message-Content-Type: application/json``. Other v1 calls answer 400 naming the
  type; a body that is not JSON answers 400.
- ``GET /events`` (and ``/master/events``): one JSON event per line (ndjson), for
  ``curl -N`` and scripts.

Who may subscribe and what each sees: as for ``/state`` (the caller's ``view_*``
ACLs; nothing to see is 403; the cluster's counts in ``SUBSCRIBED`` only to those who
see everything). At most :data:`~mezzo.master.events.MAX_SUBSCRIBERS`
at once (then 503). The response is streamed until the client leaves, the master
stops leading or the subscriber falls too far behind (a last ``ERROR`` event says
which); a ``HEARTBEAT`` comes every ``[master.http] event_heartbeat`` seconds (15). The connection is marked streaming, so the
port's idle timeout spares it; a client that stops reading is still cut off by the
port's ``write_stall_timeout`` and by the subscriber's queue bound.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

from aiohttp import web

from ..acls import Acls
from ..master.events import EventStream, encode
from .access import viewer
from .server import BadParameter, json_error

STREAMING = "http-event-stream"
"""The tag an event stream's link carries: registered, as the port's idle check sees it."""


class EventSource(Protocol):
    """What the stream needs of the master (:class:`mezzo.master.master.Master`)."""

    acls: Acls
    events: EventStream
    config: Any
    """The master's :class:`~mezzo.config.MasterConfig` (``http.event_heartbeat``)."""

    def event_counts(self) -> dict[str, Any]: ...


def add_event_routes(app: web.Application, master: EventSource, prefixes: tuple[str, ...]) -> None:
    """Route ``/api/v1`` (POST) and ``/events`` (GET) under each of ``prefixes`` to ``master``'s stream."""
    for prefix in prefixes:
        app.router.add_post(f"{prefix}/api/v1", _subscribe_v1(master))
        app.router.add_get(f"{prefix}/events", _subscribe_ndjson(master))


def _recordio(record: bytes) -> bytes:
    return b"%d\n%s" % (len(record), record)


def _ndjson(record: bytes) -> bytes:
    return record + b"\n"


def _subscribe_v1(master: EventSource) -> Any:
    async def subscribe_v1(request: web.Request) -> web.StreamResponse:
        try:
            call = json.loads(await request.read())
        except ValueError:
            raise BadParameter("body", 'not JSON: expected {"type": "SUBSCRIBE"}') from None
        kind = call.get("type") if isinstance(call, dict) else None
        if kind != "SUBSCRIBE":
            raise BadParameter("type", f"{str(kind)[:30]!r}: only SUBSCRIBE is served here")
        return await _stream(
            request,
            master,
            _recordio,
            {"Content-Type": "application/recordio", "Message-Content-Type": "application/json"},
        )

    return subscribe_v1


def _subscribe_ndjson(master: EventSource) -> Any:
    async def subscribe_ndjson(request: web.Request) -> web.StreamResponse:
        return await _stream(request, master, _ndjson, {"Content-Type": "application/x-ndjson"})

    return subscribe_ndjson


async def _stream(
    request: web.Request,
    master: EventSource,
    frame: Callable[[bytes], bytes],
    headers: dict[str, str],
) -> web.StreamResponse:
    view = viewer(request, master.acls, "events")
    heartbeat = master.config.http.event_heartbeat
    subscriber = master.events.subscribe(view)
    if subscriber is None:
        return json_error(503, "too many event subscribers at once; try again later", **{"Retry-After": "5"})
    link: Any = request.transport  # an HttpLink (its tag), or None once the client left
    if link is not None and hasattr(link, "tag"):
        link.tag = STREAMING  # the idle check spares it (see the module docstring)
    response = web.StreamResponse(headers={**headers, "Cache-Control": "no-store"})
    try:
        await response.prepare(request)
        await response.write(
            frame(
                encode(
                    "SUBSCRIBED",
                    "subscribed",
                    {
                        "heartbeat_interval_seconds": heartbeat,
                        **(master.event_counts() if view.everything else {}),
                    },
                )
            )
        )
        while True:
            batch = await subscriber.next_batch(heartbeat)
            if not batch:
                batch = [encode("HEARTBEAT", None, None)]
            await response.write(b"".join(frame(record) for record in batch))
            if subscriber.ended is not None:
                break
        await response.write_eof()
    except ConnectionResetError:
        pass  # the client left: the usual end of a subscription
    finally:
        master.events.unsubscribe(subscriber)
        if link is not None and getattr(link, "tag", None) == STREAMING:
            link.tag = None  # an idle keep-alive again, as the port's idle check sees it
    return response
