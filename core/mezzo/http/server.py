"""An aiohttp application served through :class:`~mezzo.http.link.HttpLink` s.

No socket of its own: the daemon's port hands HTTP connections over (see
:mod:`.link`), and :meth:`HttpServer.handler` makes the request handler for each.
Every error is JSON, ``{"error": "...", "status": N}``, whatever raised it: an
unknown path (404), a method the path does not take (405, with ``Allow``), a bad
parameter (400, naming it), a refusal (403), and a handler's own failure (500,
logged with its traceback; the daemon serves on).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web

log = structlog.get_logger("mezzo.http", component="http")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

MAX_BODY_BYTES = 1 << 20
"""Largest request body read (aiohttp answers 413 past it): the API's bodies are forms."""
KEEPALIVE_TIMEOUT = 365 * 86400.0
"""aiohttp's own idle timeout of a keep-alive connection: in effect none. Which idle
connections to close is the port's decision (``unregistered_idle_timeout``, applied by
:mod:`.link`, which spares those it must: a v1 client's calls connection, an executor's;
pymesos fails its driver on a keep-alive connection the server closed while quiet).
aiohttp's timer would close those too: it starts when the connection opens and never
sees the requests the fast lane answers."""
SHUTDOWN_TIMEOUT = 1.0
"""Seconds the requests in flight get to finish when the daemon stops (then they are cancelled)."""


def json_error(status: int, message: str, **headers: str) -> web.Response:
    """An error answer: ``{"error": message, "status": status}``."""
    return web.json_response({"error": message, "status": status}, status=status, headers=headers or None)


class BadParameter(Exception):
    """A query or form parameter that cannot be used; answered 400 naming it."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"parameter {name!r}: {problem}")
        self.name = name


@web.middleware
async def request_arrived(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Tell the link a whole request head is in (:meth:`.link.HttpLink.request_arrived`):
    from now on the time is the handler's (a state rendered for seconds), not the client's."""
    arrived = getattr(request.transport, "request_arrived", None)
    if arrived is not None:
        arrived()
    return await handler(request)


@web.middleware
async def same_origin(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse a request that changes something when a browser says another site sent it
    (``Origin`` not this host, or ``Sec-Fetch-Site: cross-site``): a web page open near
    the cluster must not tear down frameworks with a form. Tools send neither header."""
    if request.method not in ("GET", "HEAD", "OPTIONS"):
        origin = request.headers.get("Origin")
        site = request.headers.get("Sec-Fetch-Site")
        foreign_origin = origin is not None and origin.split("://", 1)[-1] != request.host
        if site in ("cross-site", "same-site") or foreign_origin:
            return json_error(
                403, f"{request.method} {request.path}: refused, sent by another site ({origin or site})"
            )
    return await handler(request)


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error as JSON (see the module docstring)."""
    try:
        return await handler(request)
    except BadParameter as exc:
        return json_error(400, str(exc))
    except web.HTTPMethodNotAllowed as exc:
        allowed = ", ".join(sorted(exc.allowed_methods))
        return json_error(
            405, f"{request.method} not allowed on {request.path} (allowed: {allowed})", Allow=allowed
        )
    except web.HTTPNotFound:
        return json_error(404, f"no such endpoint: {request.path}")
    except web.HTTPException as exc:
        if exc.status < 400:
            raise  # redirects and the like are answers, not errors
        return json_error(exc.status, exc.text or exc.reason)
    except asyncio.CancelledError:
        raise
    except ConnectionResetError:
        # The client left before its request was read whole (aiohttp's "Connection lost"):
        # nothing failed, and nobody is there to answer. Not logged: a client could fill
        # the log by leaving mid-body over and over.
        return web.Response(status=400, text="the connection was lost before the request was read")
    except Exception:
        log.exception("HTTP handler failed", method=request.method, path=request.path)
        return json_error(500, "internal error (logged by the daemon)")


def dumps(value: Any) -> str:
    """JSON text as the API writes it (compact; no NaN: a metric that is not a number is null)."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


class HttpServer:
    """``app`` served through links: :meth:`start` once on the daemon's loop, then
    :meth:`handler` per connection, :meth:`stop` at the end."""

    def __init__(self, app: web.Application) -> None:
        self.app = app
        self._runner: web.AppRunner | None = None
        self._server: web.Server | None = None

    async def start(self) -> None:
        self._runner = web.AppRunner(
            self.app,
            handle_signals=False,
            access_log=None,
            keepalive_timeout=KEEPALIVE_TIMEOUT,
            shutdown_timeout=SHUTDOWN_TIMEOUT,
        )
        await self._runner.setup()
        self._server = self._runner.server

    def handler(self) -> asyncio.Protocol:
        """aiohttp's request handler for one new connection."""
        assert self._server is not None, "HttpServer.start() first"
        return self._server()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
