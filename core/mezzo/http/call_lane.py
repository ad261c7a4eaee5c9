"""The v1 scheduler calls' fast lane: the common call answered without aiohttp.

A v1 framework sends three HTTP requests per task (ACCEPT, then an ACKNOWLEDGE per
status update) on a keep-alive connection of its own. Through aiohttp each costs the
master a task, a request object, four middlewares and a response object, several
times what the call itself costs (``bench/v1_cost.py``). The lane takes the request
the connection's :class:`~mezzo.http.link.HttpLink` received *before* aiohttp sees
it, when it is exactly the common case:

    POST /api/v1/scheduler HTTP/1.1   (or /master/api/v1/scheduler)
    Content-Type: application/json
    Content-Length: <at most MAX_BODY>
    Mesos-Stream-Id: <id>

and nothing unusual besides (no ``Transfer-Encoding``, ``Expect``, ``Upgrade``,
``Origin``, ``Sec-Fetch-Site``, ``Content-Encoding``, ``Connection`` other than
keep-alive, no repeated or malformed header line, no byte outside ASCII). Its answer
comes from the same :meth:`~mezzo.http.scheduler_api.SchedulerApi.lane_call` as
aiohttp's route, which returns None for anything it does not answer itself (a
standby, a big body, Basic credentials that match no principal): then, as for every
request the lane does not take, the connection goes to aiohttp for good, with the
bytes not yet answered. Responses leave in the order their requests
came, since the lane answers at once, on the loop, before reading further.

The lane is a parser of one strict shape, not an HTTP server: whatever it is unsure
of is aiohttp's to accept or refuse.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

log = structlog.get_logger("mezzo.http", component="v1-scheduler")

MAX_HEAD = 8 << 10
"""A head longer than this is aiohttp's to read (pymesos' are a few hundred bytes)."""
MAX_BODY = 64 << 10
"""A bigger body is aiohttp's, which reads it as it comes (and the façade decodes it
in a thread: :data:`~mezzo.http.scheduler_api.INLINE_PARSE_BYTES`)."""
_ALLOWED_CONNECTION = (b"keep-alive", b"keepalive")
_NOT_MINE_HEADERS = frozenset(
    {b"transfer-encoding", b"expect", b"upgrade", b"origin", b"sec-fetch-site", b"content-encoding"}
)

Answer = Callable[[str, "str | None", bytes, "str | None"], "tuple[int, str] | None"]
"""``(stream id, certificate's principal, body, Authorization header) -> (status,
text)``, or None: not for the lane."""


@dataclass(frozen=True, slots=True)
class LaneRequest:
    stream_id: str
    body: bytes
    end: int
    """Where the request ends in the buffer (and the next one begins)."""
    authorization: str | None = None
    """The ``Authorization`` header, if any (Basic credentials: :mod:`.credentials`)."""


@dataclass(frozen=True, slots=True)
class NeedMore:
    """The start of what may be a lane request. ``until``: once its head is in, how many
    bytes from its start the whole request takes (nothing is worth reading again before
    then); 0 while the head is still coming."""

    until: int = 0


NEED_MORE = NeedMore()
"""A head still coming (:class:`NeedMore` with no length yet)."""
NOT_MINE = "not mine"


_HEAD = re.compile(
    rb"POST (?:/master)?/api/v1/scheduler HTTP/1\.1\r\n"
    # Header lines: a token, a colon, visible ASCII, spaces and tabs. Nothing else
    # matches (no fold, no space before the colon, no control byte, nothing past
    # ASCII), and the match is linear: each line ends at the first CR.
    rb"((?:[!#$%&'*+.^_`|~0-9A-Za-z-]+:[\t\x20-\x7e]*\r\n){0,100})\r\n"
)
_LINES = (b"POST /api/v1/scheduler HTTP/1.1\r\n", b"POST /master/api/v1/scheduler HTTP/1.1\r\n")


def parse(buf: bytes | bytearray, start: int = 0) -> LaneRequest | NeedMore | str:
    """The lane request at ``start`` in ``buf``; a :class:`NeedMore` if it may be one
    still arriving; :data:`NOT_MINE` if it is anything else. Looks no further than
    :data:`MAX_HEAD` plus the body's declared length past ``start``.

    Linear in what it looks at. A caller feeding a request as it arrives should not call
    it again on every piece (that would be quadratic in a trickled request): while the
    head comes, only once its blank line is in (:func:`head_complete`); then, once
    ``NeedMore.until`` bytes are."""
    head = _HEAD.match(buf, start, start + MAX_HEAD)
    if head is None:
        return _partial(buf, start)
    lines = head.group(1).split(b"\r\n")
    lines.pop()  # the empty piece after the last line's CRLF
    headers = {}
    for line in lines:
        name, _, value = line.partition(b":")
        headers[name.lower()] = value.strip(b" \t")
    if len(headers) != len(lines) or not _NOT_MINE_HEADERS.isdisjoint(headers):
        return NOT_MINE  # a repeated header, or one that changes how to read: aiohttp decides
    length = headers.get(b"content-length", b"")
    content_type = headers.get(b"content-type", b"")
    stream_id = headers.get(b"mesos-stream-id")
    if (
        not length.isdigit()
        or len(length) > 7
        or int(length) > MAX_BODY
        or content_type.split(b";", 1)[0].strip().lower() != b"application/json"
        or not stream_id
        or headers.get(b"connection", b"keep-alive").lower() not in _ALLOWED_CONNECTION
    ):
        return NOT_MINE
    end = head.end() + int(length)
    if len(buf) < end:
        return NeedMore(end - start)
    authorization = headers.get(b"authorization")
    return LaneRequest(
        stream_id.decode("ascii"),
        bytes(buf[head.end() : end]),
        end,
        None if authorization is None else authorization.decode("ascii"),
    )


def head_complete(buf: bytes | bytearray, scanned: int) -> bool:
    """Whether the head held in ``buf`` (from 0) ended, or grew as long as a head may,
    looking only past ``scanned``, how far an earlier call looked."""
    return len(buf) >= MAX_HEAD or buf.find(b"\r\n\r\n", max(0, scanned - 3)) >= 0


def _partial(buf: bytes | bytearray, start: int) -> NeedMore | str:
    """Whether what did not match at ``start`` may still become a lane request."""
    rest = len(buf) - start
    if rest >= MAX_HEAD or buf.find(b"\r\n\r\n", start, start + MAX_HEAD) >= 0:
        return NOT_MINE  # a whole head, or as long as one may be, and not the lane's shape
    first = bytes(buf[start : start + len(_LINES[1])])
    for line in _LINES:
        if line.startswith(first[: len(line)]) and (len(first) < len(line) or first.startswith(line)):
            return NEED_MORE
    return NOT_MINE


_REASONS = {202: "Accepted", 400: "Bad Request", 403: "Forbidden", 500: "Internal Server Error"}
_date: list = [0, b""]
"""The ``Date`` header of the current second, and that second."""


def _date_header() -> bytes:
    # An origin server with a clock sends Date (RFC 9110); made once a second. The C
    # locale's day and month names: Python does not set LC_TIME from the environment.
    now = int(time.time())
    if now != _date[0]:
        _date[:] = [
            now,
            time.strftime("Date: %a, %d %b %Y %H:%M:%S GMT\r\n", time.gmtime(now)).encode("ascii"),
        ]
    return _date[1]


def response(status: int, text: str) -> bytes:
    """The bytes of an answer, as the aiohttp route writes them: 202 with no body (as
    pymesos' keep-alive needs); the façade's refusals in plain text (as Mesos answers
    them); a failure of the master's code as the server's JSON error."""
    if status == 202:
        return b"HTTP/1.1 202 Accepted\r\n" + _date_header() + b"Content-Length: 0\r\n\r\n"
    if status >= 500:
        body = json.dumps({"error": text, "status": status}).encode("utf-8")
        content_type = "application/json; charset=utf-8"
    else:
        body = text.encode("utf-8")
        content_type = "text/plain; charset=utf-8"
    reason = _REASONS.get(status, "Error")
    head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
    return head.encode("ascii") + _date_header() + b"\r\n" + body


def answer(lane: Answer, request: LaneRequest, principal: str | None) -> bytes | None:
    """The response to ``request`` from ``lane``, or None (aiohttp's to answer). A
    failure of the master's code is a 500, logged, as aiohttp's route answers it."""
    try:
        result = lane(request.stream_id, principal, request.body, request.authorization)
    except Exception:
        log.exception("v1 call failed", stream=request.stream_id[:100])
        result = (500, "internal error (logged by the daemon)")
    return None if result is None else response(*result)
