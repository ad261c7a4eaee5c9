"""The web UI's files as the master serves them (mezzo.http.ui_routes), without a cluster."""

from __future__ import annotations

import asyncio
import tomllib
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from multidict import CIMultiDict
from yarl import URL

from mezzo.http.server import json_errors
from mezzo.http.ui_routes import UI_DIR, add_ui_routes, load_ui_files

CORE = Path(__file__).resolve().parents[2] / "core"


def fetch(
    directory: Path, path: str, headers: dict[str, str] | None = None
) -> tuple[int, CIMultiDict[str], bytes]:
    """One GET of ``path`` (sent as it is, not normalised) from an app serving ``directory``."""

    async def go() -> tuple[int, CIMultiDict[str], bytes]:
        app = web.Application(middlewares=[json_errors])
        add_ui_routes(app, directory)
        async with TestClient(TestServer(app)) as client:
            answer = await client.get(URL(path, encoded=True), headers=headers)
            return answer.status, answer.headers.copy(), await answer.read()

    return asyncio.run(go())


def test_index_and_modules_have_their_content_types_and_revalidate() -> None:
    status, headers, body = fetch(UI_DIR, "/")
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    assert b'<script type="module" src="/ui/js/app.js">' in body
    assert headers["Cache-Control"] == "no-cache" and headers["X-Content-Type-Options"] == "nosniff"
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    for path, kind in [
        ("/ui/js/app.js", "text/javascript"),
        ("/ui/style.css", "text/css"),
        ("/ui/favicon.svg", "image/svg+xml"),
        ("/ui/js/pages/sandbox.js", "text/javascript"),
    ]:
        status, headers, body = fetch(UI_DIR, path)
        assert status == 200 and headers["Content-Type"].startswith(kind) and body, path
    # A second load with the tag costs a 304, not the file.
    _, headers, _ = fetch(UI_DIR, "/ui/js/app.js")
    status, _, body = fetch(UI_DIR, "/ui/js/app.js", {"If-None-Match": headers["ETag"]})
    assert (status, body) == (304, b"")


def test_only_files_of_the_folder_are_served_and_anything_else_is_a_json_404(tmp_path: Path) -> None:
    ui = tmp_path / "ui"
    (ui / "js").mkdir(parents=True)
    (ui / "index.html").write_text("<!doctype html>")
    (ui / "js" / "app.js").write_text("export {};")
    (ui / ".hidden.js").write_text("TOPSECRET")
    (ui / "notes.txt").write_text("not a kind the UI has")
    (tmp_path / "secret.js").write_text("TOPSECRET")
    (ui / "link.js").symlink_to(tmp_path / "secret.js")
    assert sorted(load_ui_files(ui)) == ["index.html", "js/app.js"]
    for path in [
        "/ui/../secret.js",
        "/ui/js/../../secret.js",
        "/ui/..%2fsecret.js",
        "/ui/%2e%2e/secret.js",
        "/ui/link.js",
        "/ui/.hidden.js",
        "/ui/notes.txt",
        "/ui/",
        "/ui/js",
        "/ui/nope.js",
        "/ui//etc/passwd",
        "/ui/js%2fapp.js%00",
    ]:
        status, headers, body = fetch(ui, path)
        assert status == 404 and b"TOPSECRET" not in body, path
        assert headers["Content-Type"].startswith("application/json"), path
    status, _, body = fetch(ui, "/ui/nope.js")
    assert body == b'{"error": "no such endpoint: /ui/nope.js", "status": 404}'


def test_a_folder_without_index_html_fails_at_start(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="index.html"):
        add_ui_routes(web.Application(), tmp_path)


def test_the_wheel_ships_every_file_the_ui_serves() -> None:
    """The package-data globs of core/pyproject.toml cover every served file (a new
    folder of modules needs its glob there, or the installed UI misses it)."""
    project = tomllib.loads((CORE / "pyproject.toml").read_text())
    globs = project["tool"]["setuptools"]["package-data"]["mezzo.http"]
    shipped = {p.relative_to(UI_DIR).as_posix() for g in globs for p in UI_DIR.parent.glob(g)}
    assert set(load_ui_files()) <= shipped
