"""What both v1 APIs (the scheduler's at the master, the executor's at an agent) do alike
over HTTP: JSON only, a body read no further than a bound, errors in plain text as Apache
Mesos answers them (its clients show that text as it is), and a subscription's events
written out as they come."""

from __future__ import annotations

from aiohttp import web

from ..v1.event_buffer import EventBuffer

JSON = "application/json"


def text_error(status: int, message: str) -> web.Response:
    """An error answer of a v1 API: ``status`` with ``message`` as plain text."""
    return web.Response(status=status, text=message)


def content_type_refusal(request: web.Request) -> web.Response | None:
    """The answer to a v1 call that is not JSON (400 without a ``Content-Type``, 415 for
    another one, as Mesos answers), or None."""
    content_type = request.headers.get("Content-Type")
    if content_type is None:
        return text_error(400, "Expecting 'Content-Type' to be present")
    if content_type.split(";", 1)[0].strip().lower() != JSON:
        return text_error(415, f"Content-Type {content_type[:60]!r}: only {JSON} is served (no protobuf)")
    return None


async def read_body(request: web.Request, limit: int) -> bytes | None:
    """The body, or None past ``limit`` bytes (read no further than that)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_chunked(1 << 16):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def write_events(
    request: web.Request, response: web.StreamResponse, events: EventBuffer, heartbeat: float
) -> None:
    """Write ``events`` to ``response`` (prepared, chunked) as they come, with a
    ``HEARTBEAT`` after ``heartbeat`` seconds without another, until the buffer is closed
    and drained; then end the response. ``ConnectionError``: the peer left."""
    # The head goes out with the first events through aiohttp (which holds it until a
    # write); from then on the buffer writes its events itself (see EventBuffer).
    await response.write(events.take())
    transport = request.transport
    if transport is None:
        raise ConnectionResetError("the connection was lost before the stream began")
    events.push_to(transport)
    while not await events.idle(heartbeat):
        events.heartbeat()
    events.flush()
    await response.write_eof()
