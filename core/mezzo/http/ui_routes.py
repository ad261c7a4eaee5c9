"""The master's read-only web UI: ``/`` and its files under ``/ui/...``.

The UI is the files of the ``ui/`` folder beside this module, served as they are:
plain ES modules, one stylesheet and ``index.html``. There is no JavaScript build step
and no third-party library, on purpose: nothing to build before a release (the wheel
carries the very files that are tested), nothing fetched from elsewhere at run time
(the UI works on a cluster with no way out), and the operator's browser talks to the
master only, through the same JSON endpoints as every other tool (``/overview``,
``/tasks``, ``/files/*``, ...), with the same ACLs and, under TLS, the operator's
certificate. See ``docs/web-ui.md``.

Contract of :func:`add_ui_routes`:

- ``GET /`` (and ``/index.html``) answers ``ui/index.html``; ``GET /ui/<name>``
  answers the file ``ui/<name>``. Only the files found in ``ui/`` when the routes
  were added are served, looked up by name in a table (a request's path is never
  joined to a directory), so no path reaches a file outside the folder; any other
  name is the API's usual JSON 404.
- Content types from a fixed table (``.js`` as ``text/javascript``, which module
  scripts need); ``X-Content-Type-Options: nosniff``.
- ``Cache-Control: no-cache`` with a strong ``ETag`` (a hash of the content): the
  file names carry no version, so a browser must ask again after an upgrade, but a
  page reload costs a round of ``304 Not Modified`` answers, not the files.
- A ``Content-Security-Policy`` that lets the pages load scripts, styles and data
  from this master only and run no inline script: data shown by the UI can never
  become code, and nothing leaves for another host.

The files are read into memory once (tens of kilobytes), so serving one is a dict
lookup; none needs a permission (they hold no cluster data: the endpoints they call
check the caller's ACLs).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

UI_DIR = Path(__file__).with_name("ui")
"""The folder of the UI's files (package data of ``mezzo.http``)."""

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".json": "application/json",
}
"""The kinds of file the UI may have; a file of another kind in ``ui/`` is not served."""

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)


@dataclass(frozen=True)
class UiFile:
    """One file of the UI as it is served."""

    body: bytes
    content_type: str
    etag: str


def load_ui_files(directory: Path = UI_DIR) -> dict[str, UiFile]:
    """Every servable file under ``directory``, by its ``/``-separated path relative to it
    (``"js/app.js"``). Hidden files, unknown kinds and anything that is not a regular file
    inside ``directory`` (a symlink out of it) are left out."""
    root = directory.resolve()
    files: dict[str, UiFile] = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        content_type = CONTENT_TYPES.get(path.suffix)
        if content_type is None or any(part.startswith(".") for part in relative.parts):
            continue
        if not path.is_file() or not path.resolve().is_relative_to(root):
            continue
        body = path.read_bytes()
        etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
        files[relative.as_posix()] = UiFile(body, content_type, etag)
    return files


def add_ui_routes(app: web.Application, directory: Path = UI_DIR) -> None:
    """Serve the UI of ``directory`` from ``app``: ``/``, ``/index.html`` and ``/ui/{name}``
    (see the module docstring). Raises ``FileNotFoundError`` if it has no ``index.html``
    (a broken install should fail at start, not show a blank page)."""
    files = load_ui_files(directory)
    if "index.html" not in files:
        raise FileNotFoundError(f"the web UI's index.html is missing from {directory}")

    async def index(request: web.Request) -> web.Response:
        return _answer(request, files["index.html"])

    async def asset(request: web.Request) -> web.Response:
        found = files.get(request.match_info["name"])
        if found is None:
            raise web.HTTPNotFound()  # the json_errors middleware words it like every 404
        return _answer(request, found)

    app.router.add_get("/", index)
    app.router.add_get("/index.html", index)
    app.router.add_get("/ui/{name:.+}", asset)


def _answer(request: web.Request, file: UiFile) -> web.Response:
    headers = {
        "Cache-Control": "no-cache",
        "ETag": file.etag,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }
    if file.content_type.startswith("text/html"):
        headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    if file.etag in _etags(request.headers.get("If-None-Match", "")):
        return web.Response(status=304, headers=headers)
    headers["Content-Type"] = file.content_type
    return web.Response(body=file.body, headers=headers)


def _etags(header: str) -> set[str]:
    """The tags of an ``If-None-Match`` header (weak ones compared by their value)."""
    return {tag.strip().removeprefix("W/") for tag in header.split(",") if tag.strip()}
