"""The master's ``/files/*``: sandbox files of any agent, read through the master.

Apache Mesos' web UI fetched sandbox files from each agent directly, so every agent had to
be reachable from the operator's browser. mezzo's master proxies them instead, over the
agent's own link to it (:mod:`mezzo.master.file_requests`), so a browser or a CLI reaches
only the master:

- ``GET /files/browse?agent_id=&path=``: ``[{path, nlink, size, mtime, mode, uid, gid}]``;
- ``GET /files/read?agent_id=&path=&offset=&length=``: ``{"offset": N, "data": "...", "length": bytes}``
  (``offset=-1``: the file's size; at most 64 KiB a read);
- ``GET /files/download?agent_id=&path=``: the raw bytes, fetched from the agent 1 MiB at a
  time and streamed as they come, up to the file's size when the download began;

each also under ``/master/files/...``. ``path`` names a sandbox as
``/frameworks/<fid>/executors/<eid>/runs/<cid|latest>/...`` (what ``/tasks`` gives as a
task's ``sandbox``); the agent's real path to it is taken too, from its ``frameworks/``
component on (browse listings then come back in the ``/frameworks/...`` form). What the
agent serves and refuses (symlinks, ``..``, other files) is :mod:`mezzo.agent.files`'.

Who may read: the caller must see the framework the path names (``view_frameworks`` in
``[master.acls]``; without TLS and ACLs, anyone). Errors are JSON: 400 ``agent_id`` or
``path`` missing or bad (named), 403 not allowed or outside the sandboxes, 404 unknown agent
or file, 503 agent disconnected or too many requests in flight, 504 no answer in time.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import Protocol

import structlog
from aiohttp import web

from ..acls import Acls, View
from ..agent.files import DOWNLOAD_CHUNK, FileError, parse_int
from ..master.audit import refused
from ..master.file_requests import FilesUnavailable
from .access import caller, peer_of, viewer
from .agent_api import download_headers
from .server import BadParameter, json_error

log = structlog.get_logger("mezzo.http", component="files")

ID_MAX = 200
"""Longest ``agent_id`` accepted."""
PATH_MAX = 4_096


class FilesMaster(Protocol):
    """What the proxy needs of the master (:class:`mezzo.master.master.Master`)."""

    acls: Acls

    def request_files(
        self,
        view: View,
        agent_id: str,
        framework_id: str,
        operation: str,
        path: str,
        offset: int,
        length: int,
    ) -> Awaitable[tuple[int, bytes]]: ...


def add_files_routes(
    app: web.Application, master: FilesMaster, prefixes: tuple[str, ...] = ("", "/master")
) -> None:
    """Serve ``/files/browse``, ``/files/read`` and ``/files/download`` under each prefix."""
    proxy = _FilesProxy(master)
    for prefix in prefixes:
        app.router.add_get(f"{prefix}/files/browse", proxy.browse)
        app.router.add_get(f"{prefix}/files/read", proxy.read)
        app.router.add_get(f"{prefix}/files/download", proxy.download)


def sandbox_path(path: str) -> tuple[str, str]:
    """``(framework id, /frameworks/<fid>/...)`` of a sandbox path, virtual or the agent's
    real one. Raises :class:`web.HTTPForbidden` for a ``..`` or a path naming no sandbox."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise web.HTTPForbidden(text=f"{path[:200]!r}: '..' is not allowed in a path")
    for i, part in enumerate(parts):
        if (
            part == "frameworks"
            and len(parts) >= i + 6
            and parts[i + 2] == "executors"
            and parts[i + 4] == "runs"
        ):
            return parts[i + 1], "/" + "/".join(parts[i:])
    raise web.HTTPForbidden(
        text=f"{path[:200]!r} is outside the sandboxes "
        "(/frameworks/<framework_id>/executors/<executor_id>/runs/<container_id|latest>/...)"
    )


class _FilesProxy:
    def __init__(self, master: FilesMaster) -> None:
        self._master = master

    async def browse(self, request: web.Request) -> web.Response:
        try:
            return _answer(*await self._ask(request, "browse", 0, -1))
        except FilesUnavailable as exc:
            return _unavailable(exc)

    async def read(self, request: web.Request) -> web.Response:
        try:
            offset = parse_int(request.query.get("offset"), "offset")
            length = parse_int(request.query.get("length"), "length")
        except FileError as exc:
            return json_error(exc.status, str(exc))
        offset = 0 if offset is None else offset
        try:
            return _answer(*await self._ask(request, "read", offset, -1 if length is None else length))
        except FilesUnavailable as exc:
            return _unavailable(exc)

    async def download(self, request: web.Request) -> web.StreamResponse:
        try:
            status, body = await self._ask(request, "read", -1, 0)
        except FilesUnavailable as exc:
            return _unavailable(exc)
        if status != 200:
            return _answer(status, body)
        try:
            size = json.loads(body)["offset"]
        except (ValueError, KeyError, TypeError):
            size = None
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            return json_error(502, "the agent answered the file's size with something other than a size")
        name = request.query["path"].rstrip("/").rsplit("/", 1)[-1] or "download"
        response = web.StreamResponse(headers=download_headers(name))
        response.content_length = size
        await response.prepare(request)
        sent = 0
        while sent < size:
            try:
                status, piece = await self._ask(request, "download", sent, min(DOWNLOAD_CHUNK, size - sent))
            except FilesUnavailable as exc:
                status, piece = exc.status, b""
            if status != 200 or not piece:
                # Too late for an error status: the client sees the body end short.
                log.warning(
                    "download through the master cut short",
                    path=request.query["path"][:200],
                    sent=sent,
                    size=size,
                    status=status,
                )
                if request.transport is not None:
                    request.transport.close()
                return response
            piece = piece[: size - sent]  # never past the Content-Length announced
            await response.write(piece)
            sent += len(piece)
        await response.write_eof()
        return response

    async def _ask(self, request: web.Request, operation: str, offset: int, length: int) -> tuple[int, bytes]:
        """The agent's ``(status, body)`` for ``operation``, once the caller is allowed.
        Raises :class:`BadParameter`, or :class:`FilesUnavailable` (a refusal audited)."""
        agent_id = request.query.get("agent_id", "")
        if not agent_id:
            raise BadParameter(
                "agent_id", "required: the id of the agent holding the sandbox (a task's slave_id)"
            )
        if len(agent_id) > ID_MAX:
            raise BadParameter("agent_id", f"longer than {ID_MAX} characters")
        path = request.query.get("path", "")
        if not path:
            raise BadParameter("path", "required: /frameworks/<fid>/executors/<eid>/runs/<cid|latest>/...")
        if len(path) > PATH_MAX or "\0" in path:
            raise BadParameter("path", f"longer than {PATH_MAX} characters or holding NUL")
        framework_id, virtual = sandbox_path(path)
        view = viewer(request, self._master.acls, f"sandbox of framework {framework_id}")
        try:
            return await self._master.request_files(
                view, agent_id, framework_id, operation, virtual, offset, length
            )
        except FilesUnavailable as exc:
            if exc.status != 403:
                raise
            principal = caller(request)
            refused(
                f"GET {request.path}",
                principal,
                f"sandbox of framework {framework_id}",
                str(exc),
                peer_of(request),
            )
            who = principal or "a caller without a certificate"
            raise FilesUnavailable(403, f"principal {who} {exc}") from None


def _answer(status: int, body: bytes) -> web.Response:
    return web.Response(status=status, body=body, content_type="application/json")


def _unavailable(exc: FilesUnavailable) -> web.Response:
    headers = {"Retry-After": "1"} if exc.status == 503 else {}
    return json_error(exc.status, str(exc), **headers)
