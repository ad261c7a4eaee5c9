"""The agent's HTTP endpoints, at its own port (as the master's: :mod:`.link` hands a
connection whose first byte is a letter to them).

- ``GET /health``: 200 with an empty body; ``GET /version``: ``{"version", "name"}``.
- ``GET /metrics/snapshot``: the agent's counters, flat JSON under Mesos' agent names
  (:mod:`mezzo.agent.metrics`); ``GET /metrics``: the same as Prometheus text.
- ``GET /files/browse?path=``, ``/files/read?path=&offset=&length=``,
  ``/files/download?path=``: the sandboxes' files in Mesos' shape
  (:mod:`mezzo.agent.files`, which says which paths are served and why others are not).
- ``POST /api/v1/executor``: Apache Mesos' v1 executor API, for custom executors written
  for Mesos (:mod:`.executor_api`, which checks that the caller is the executor).

Who may call: without TLS, anyone who reaches the port (like everything else there, see
docs/security.md). With TLS, the files and the metrics only principals listed in
``[agent.http] readers`` (default none: the master's proxy, which reaches the agent over
its own link, is then the only way in); others get 403 naming that key. ``/health`` and
``/version`` answer everyone, and ``/api/v1/executor`` whoever it finds to be the
executor named. Errors are JSON (:func:`.server.json_error`), but the executor API's,
which are plain text as Mesos'.

Nothing here blocks the loop for long: a read is at most 64 KiB, a browse runs on a worker
thread, a download goes out in 64 KiB pieces read on a worker thread, each written only
once the client took the last (aiohttp's flow control), and ends at the file's size when
it was opened.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from typing import Any

from aiohttp import web

from .. import __version__
from ..agent.files import FileError, SandboxFiles, parse_int
from . import metrics
from .executor_api import PATH as EXECUTOR_API_PATH
from .executor_api import ExecutorAgent, add_executor_routes
from .server import MAX_BODY_BYTES, Handler, json_error, json_errors, request_arrived

DOWNLOAD_PIECE = 64 * 1024
"""Bytes read and written at a time by a download."""
READERS_KEY = "agent.http.readers"


def agent_app(
    files: SandboxFiles,
    snapshot: Callable[[], dict[str, float]],
    *,
    tls: bool,
    readers: list[str],
    executors: ExecutorAgent | None = None,
) -> web.Application:
    """The aiohttp application of an agent's endpoints: ``files`` its sandboxes, ``snapshot()``
    its metrics (:func:`mezzo.agent.metrics.snapshot`), ``tls`` whether its port speaks TLS,
    ``readers`` ``[agent.http] readers``, ``executors`` the agent whose custom executors
    the v1 executor API serves (None: not served)."""
    app = web.Application(
        middlewares=[request_arrived, json_errors, _readers_only(tls, frozenset(readers))],
        client_max_size=MAX_BODY_BYTES,
    )
    endpoints = _Endpoints(files, snapshot)
    app.router.add_get("/health", endpoints.health, allow_head=True)
    app.router.add_get("/version", endpoints.version)
    app.router.add_get("/metrics/snapshot", endpoints.metrics_snapshot)
    app.router.add_get("/metrics", endpoints.metrics_prometheus)
    app.router.add_get("/files/browse", endpoints.browse)
    app.router.add_get("/files/read", endpoints.read)
    app.router.add_get("/files/download", endpoints.download)
    if executors is not None:
        add_executor_routes(app, executors)
    return app


OPEN_PATHS = frozenset({"/health", "/version", EXECUTOR_API_PATH})
"""Paths the readers rule does not apply to (the executor API checks its callers itself)."""


def _readers_only(tls: bool, readers: frozenset[str]) -> Any:
    @web.middleware
    async def readers_only(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not tls or request.path in OPEN_PATHS:
            return await handler(request)
        # The link's TLS principal (mezzo.master.audit.principal_of; not imported: the
        # agent does not load the master's modules).
        principal = getattr(request.transport, "principal", None)
        if principal is not None and principal in readers:
            return await handler(request)
        who = f"principal {principal}" if principal else "a caller without a certificate"
        return json_error(
            403,
            f"{who} may not read this agent's files or metrics ({READERS_KEY}); "
            "read sandboxes through the master's /files/* instead",
        )

    return readers_only


def file_error(exc: FileError) -> web.Response:
    """A :class:`~mezzo.agent.files.FileError` as the JSON error answer of its status."""
    return json_error(exc.status, str(exc))


class _Endpoints:
    def __init__(self, files: SandboxFiles, snapshot: Callable[[], dict[str, float]]) -> None:
        self._files = files
        self._snapshot = snapshot

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": __version__, "name": "mezzo"})

    async def metrics_snapshot(self, request: web.Request) -> web.Response:
        return web.json_response(self._snapshot())

    async def metrics_prometheus(self, request: web.Request) -> web.Response:
        body = metrics.prometheus_text(self._snapshot())
        return web.Response(body=body, headers={"Content-Type": metrics.PROMETHEUS_CONTENT_TYPE})

    async def browse(self, request: web.Request) -> web.Response:
        path = request.query.get("path", "")
        try:
            listing = await asyncio.to_thread(self._files.browse, path)
        except FileError as exc:
            return file_error(exc)
        return web.json_response(listing)

    async def read(self, request: web.Request) -> web.Response:
        try:
            offset = parse_int(request.query.get("offset"), "offset")
            length = parse_int(request.query.get("length"), "length")
            answer = self._files.read(request.query.get("path", ""), 0 if offset is None else offset, length)
        except FileError as exc:
            return file_error(exc)
        return web.json_response(answer)

    async def download(self, request: web.Request) -> web.StreamResponse:
        with contextlib.ExitStack() as stack:
            try:
                f = stack.enter_context(self._files.open_file(request.query.get("path", "")))
            except FileError as exc:
                return file_error(exc)
            return await stream_file(request, f.fd, f.size, f.name)


async def stream_file(request: web.Request, fd: int, size: int, name: str) -> web.StreamResponse:
    """Send ``size`` bytes of ``fd`` as a download named ``name``, a piece at a time."""
    response = web.StreamResponse(headers=download_headers(name))
    response.content_length = size
    await response.prepare(request)
    sent = 0
    while sent < size:
        piece = await asyncio.to_thread(os.pread, fd, min(DOWNLOAD_PIECE, size - sent), sent)
        if not piece:
            break  # truncated meanwhile: the client sees a short body
        await response.write(piece)
        sent += len(piece)
    await response.write_eof()
    return response


def download_headers(name: str) -> dict[str, str]:
    """Headers of a download of a file named ``name`` (a sandbox's file name: quoted safely)."""
    safe = "".join(c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in name)
    return {
        "Content-Type": "application/octet-stream",
        "Content-Disposition": f'attachment; filename="{safe or "download"}"',
    }
