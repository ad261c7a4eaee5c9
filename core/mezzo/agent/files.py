"""The sandbox file API (Apache Mesos' ``/files/*``), as pure functions over the agent's work dir.

Both the agent's own HTTP routes (:mod:`mezzo.http.agent_api`) and the master's proxy
(``Agent.files_request``, answered by :mod:`.service`) call these; nothing here knows HTTP
or asyncio. Usage::

    files = SandboxFiles(work_dir, latest=agent.latest_run)
    files.browse("/frameworks/F/executors/E/runs/latest")       # [{path, nlink, size, ...}]
    files.read("/frameworks/F/executors/E/runs/latest/stdout", offset=0, length=4096)
    with files.open_file(path) as f: ...                        # download: f.fd, f.size, f.name

**Paths.** A sandbox is ``<work_dir>/frameworks/<fid>/executors/<eid>/runs/<cid>``
(:meth:`~.sandbox.Sandbox.path_for`). Accepted are that real absolute path, the virtual
``/frameworks/<fid>/executors/<eid>/runs/<cid>``, the same with ``runs/latest`` (the
executor's current run as the agent knows it, else the newest run directory on disk), and
anything below them. Everything else is :class:`Forbidden` (403): the work dir's ``meta/``
journal, ``/etc/passwd``, a ``..`` component. Empty and ``.`` components are ignored.

**No symlinks.** Tasks write their sandboxes, and a task may plant ``stdout2 ->
/etc/shadow`` there. Every component, from the work dir down, is opened through the
directory fd of its parent with ``O_NOFOLLOW``: a symlink anywhere on the path is
:class:`Forbidden`, also if it appears between a check and the open. Only directories and
regular files are read (a FIFO, socket or device is Forbidden), and only those owned by
the sandbox's owner: when the agent (root) runs tasks as their users, a file of another
user's in a sandbox (a hard link to root's) is not handed out, as in
:func:`~.work_dir.read_tail`. Browsing lists symlinks as entries (``lrwxrwxrwx``) without
following them.

**Errors** are :class:`FileError` s carrying the HTTP status Mesos answers: 404 missing
(:class:`NotFound`), 400 a directory to read or a bad parameter (:class:`BadRequest`,
naming it), 403 outside the sandboxes (:class:`Forbidden`).

**Costs.** ``read`` reads at most :data:`READ_MAX` (64 KiB, Mesos' cap); ``browse`` lists
at most :data:`BROWSE_MAX` entries (the first the directory yields, then sorted), so an
answer is bounded whatever a task puts in its sandbox; user and group names are looked up
once per id per call.
"""

from __future__ import annotations

import errno
import grp
import json
import os
import pwd
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .sandbox import InvalidId, check_id

READ_MAX = 64 * 1024
"""The most one ``read`` returns (Mesos: 16 pages), and its default length."""
DOWNLOAD_CHUNK = 1024 * 1024
"""The most one ``download`` piece through the master carries (a Thrift frame each)."""
BROWSE_MAX = 5_000
"""The most entries one ``browse`` lists."""
LATEST = "latest"
"""The run name that stands for an executor's most recent run."""
PATH_MAX = 4_096
"""The longest path accepted (Linux' PATH_MAX)."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class FileError(Exception):
    """A request the API answers with an error: ``status`` (HTTP) and ``str()`` the message."""

    status = 500


class BadRequest(FileError):
    """400: a directory given to read or download, or a bad parameter (``parameter``)."""

    status = 400

    def __init__(self, message: str, parameter: str = "path") -> None:
        super().__init__(f"parameter {parameter!r}: {message}")
        self.parameter = parameter


class Forbidden(FileError):
    """403: outside the sandboxes, a ``..``, a symlink, or not a plain file or directory."""

    status = 403


class NotFound(FileError):
    """404: no such file or directory (or run)."""

    status = 404


LatestRun = Callable[[str, str], "str | None"]
"""``(framework_id, executor_id)`` -> the container id of that executor's current run, or
None when the agent runs none (the newest run directory on disk is then taken)."""


@dataclass
class OpenFile:
    """A regular file of a sandbox, open for reading (see :meth:`SandboxFiles.open_file`)."""

    fd: int
    size: int
    """Its size when opened: a download stops there, so a growing file ends."""
    name: str
    """Its base name, for ``Content-Disposition``."""


class SandboxFiles:
    """The files of the sandboxes under ``work_dir``; see the module docstring."""

    def __init__(self, work_dir: str, latest: LatestRun = lambda fid, eid: None) -> None:
        self.work_dir = os.path.abspath(work_dir)
        self._prefixes = {self.work_dir, os.path.realpath(self.work_dir)}
        self._latest = latest

    # -- the operations ----------------------------------------------------------------

    def browse(self, path: str) -> list[dict[str, Any]]:
        """The entries of the directory at ``path`` as Mesos' ``FileInfo`` s (``path`` is
        the one given joined with the entry's name), sorted by path; a file's own
        ``FileInfo`` alone when ``path`` names a file."""
        names = _Names()
        with self._open(path, directory_ok=True) as (fd, st, _owner):
            if not stat.S_ISDIR(st.st_mode):
                return [_file_info(path.rstrip("/") or "/", st, names)]
            base = path.rstrip("/")
            out: list[dict[str, Any]] = []
            with os.scandir(fd) as entries:
                for entry in entries:
                    if len(out) >= BROWSE_MAX:
                        break
                    try:
                        est = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue  # gone meanwhile
                    out.append(_file_info(f"{base}/{entry.name}", est, names))
        out.sort(key=lambda info: info["path"])
        return out

    def read(self, path: str, offset: int = 0, length: int | None = None) -> dict[str, Any]:
        """``{"offset": offset, "data": text}``: at most ``length`` (default and cap
        :data:`READ_MAX`) bytes of the file at ``path`` from ``offset``. ``offset=-1``
        asks for the file's size: ``{"offset": size, "data": ""}``. Past the end, data is
        empty.

        Mesos puts the raw bytes in a JSON string; JSON text must be Unicode, so mezzo
        decodes them as UTF-8 with ``errors="replace"``: text reads as written, and a
        byte that is not UTF-8 becomes U+FFFD. A character cut at the page's end is left
        for the next page, and ``length`` (mezzo's) says how many bytes the page covers:
        the next page starts at ``offset + length`` (the text's own length differs where
        bytes were replaced)."""
        at, data = self.read_bytes(path, offset, length)
        return page(at, data, _length(length, READ_MAX))

    def read_bytes(
        self, path: str, offset: int = 0, length: int | None = None, *, cap: int = READ_MAX
    ) -> tuple[int, bytes]:
        """:meth:`read` before decoding: ``(offset, bytes)``; for ``offset=-1``, ``(size, b"")``.
        ``cap``: the most read (and the default length); downloads through the master ask
        for :data:`DOWNLOAD_CHUNK` at a time."""
        offset = _offset(offset)
        length = _length(length, cap)
        with self.open_file(path) as f:
            if offset == -1:
                return f.size, b""
            return offset, os.pread(f.fd, length, offset) if length else b""

    @contextmanager
    def open_file(self, path: str) -> Iterator[OpenFile]:
        """The regular file at ``path``, open (closed on leaving the block), for downloads.
        A directory is :class:`BadRequest`."""
        with self._open(path, directory_ok=False) as (fd, st, _owner):
            name = os.path.basename(path.rstrip("/")) or "download"
            yield OpenFile(fd, st.st_size, name)

    # -- paths -------------------------------------------------------------------------

    def components(self, path: str) -> list[str]:
        """``path`` as the components below the work dir down to what it names
        (``["frameworks", fid, "executors", eid, "runs", cid, ...]``, ``latest``
        resolved). Raises :class:`FileError`."""
        if not isinstance(path, str) or not path:
            raise BadRequest("missing: the path of a file or directory in a sandbox")
        if len(path) > PATH_MAX or "\0" in path:
            raise BadRequest(f"longer than {PATH_MAX} characters or holding NUL")
        if not path.startswith("/"):
            raise Forbidden(f"{path[:200]!r}: not an absolute path; sandboxes are /frameworks/<fid>/...")
        relative = path
        for prefix in self._prefixes:
            if path == prefix or path.startswith(prefix + "/"):
                relative = path[len(prefix) :]
                break
        parts = [p for p in relative.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise Forbidden(f"{path[:200]!r}: '..' is not allowed in a path")
        if len(parts) < 6 or parts[0] != "frameworks" or parts[2] != "executors" or parts[4] != "runs":
            raise Forbidden(
                f"{path[:200]!r} is outside the sandboxes "
                "(/frameworks/<framework_id>/executors/<executor_id>/runs/<container_id|latest>/...)"
            )
        try:
            check_id("framework id", parts[1])
            check_id("executor id", parts[3])
            check_id("container id", parts[5])
        except InvalidId as exc:
            raise Forbidden(str(exc)) from None
        if parts[5] == LATEST:
            parts[5] = self._latest_run(parts[1], parts[3])
        return parts

    def _latest_run(self, fid: str, eid: str) -> str:
        known = self._latest(fid, eid)
        if known:
            return known
        # Not running now: the newest run directory on disk (the one written last).
        runs = ["frameworks", fid, "executors", eid, "runs"]
        fd = self._walk(runs)
        try:
            newest: tuple[float, str] | None = None
            with os.scandir(fd) as entries:
                for entry in entries:
                    if entry.name == LATEST or not entry.is_dir(follow_symlinks=False):
                        continue
                    key = (entry.stat(follow_symlinks=False).st_mtime, entry.name)
                    if newest is None or key > newest:
                        newest = key
        finally:
            os.close(fd)
        if newest is None:
            raise NotFound(f"executor {eid!r} of framework {fid!r} has no run on this agent")
        return newest[1]

    def _walk(self, parts: list[str]) -> int:
        """An fd of the directory ``work_dir/parts...``, every component opened without
        following a symlink. Raises :class:`FileError`."""
        fd = os.open(self.work_dir, _DIR_FLAGS & ~os.O_NOFOLLOW)  # above it: the operator's
        try:
            for i, part in enumerate(parts):
                child = _open_component(part, fd, parts[: i + 1], _DIR_FLAGS)
                os.close(fd)
                fd = child
            return fd
        except BaseException:
            os.close(fd)
            raise

    @contextmanager
    def _open(self, path: str, *, directory_ok: bool) -> Iterator[tuple[int, os.stat_result, int]]:
        """``(fd, stat, owner uid)`` of what ``path`` names, checked as the module
        docstring says; the fd is closed on leaving the block."""
        parts = self.components(path)
        fd = self._walk(parts[:6])  # the run directory itself
        try:
            owner = os.fstat(fd).st_uid
            for i, part in enumerate(parts[6:], start=6):
                child = _open_component(part, fd, parts[: i + 1], _FILE_FLAGS)
                os.close(fd)
                fd = child
                st = os.fstat(fd)
                if st.st_uid != owner:
                    raise Forbidden(f"{path[:200]!r} is not the sandbox owner's (uid {st.st_uid})")
                if stat.S_ISDIR(st.st_mode):
                    continue
                if not stat.S_ISREG(st.st_mode):
                    raise Forbidden(f"{path[:200]!r} is neither a regular file nor a directory")
                if i != len(parts) - 1:
                    raise NotFound(f"{path[:200]!r}: {part!r} is a file, not a directory")
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode) and not directory_ok:
                raise BadRequest(f"{path[:200]!r} is a directory; browse it, or name a file")
            if stat.S_ISREG(st.st_mode):
                os.set_blocking(fd, True)
            yield fd, st, owner
        finally:
            os.close(fd)


def _open_component(part: str, dir_fd: int, parts: list[str], flags: int) -> int:
    """Open ``part`` in ``dir_fd`` with ``flags`` (``O_NOFOLLOW`` in them); FileErrors for a
    symlink (403), a missing entry (404), something else in the way (403)."""
    shown = "/" + "/".join(parts)
    try:
        st = os.stat(part, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        raise NotFound(f"{shown[:300]!r}: no such file or directory") from None
    except NotADirectoryError:
        raise NotFound(f"{shown[:300]!r}: no such file or directory") from None
    if stat.S_ISLNK(st.st_mode):
        raise Forbidden(f"{shown[:300]!r} is a symlink; the file API follows none")
    if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
        raise Forbidden(f"{shown[:300]!r} is neither a regular file nor a directory")
    if flags & os.O_DIRECTORY and not stat.S_ISDIR(st.st_mode):
        raise NotFound(f"{shown[:300]!r}: not a directory")
    try:
        return os.open(part, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        raise NotFound(f"{shown[:300]!r}: no such file or directory") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # swapped for a symlink since the stat
            raise Forbidden(f"{shown[:300]!r} is a symlink; the file API follows none") from None
        if exc.errno == errno.EACCES:
            raise Forbidden(f"{shown[:300]!r}: the agent may not read it") from None
        raise


class _Names:
    """User and group names by id, looked up once per call (NSS may be slow)."""

    def __init__(self) -> None:
        self._users: dict[int, str | int] = {}
        self._groups: dict[int, str | int] = {}

    def user(self, uid: int) -> str | int:
        if uid not in self._users:
            try:
                self._users[uid] = pwd.getpwuid(uid).pw_name
            except KeyError:
                self._users[uid] = uid
        return self._users[uid]

    def group(self, gid: int) -> str | int:
        if gid not in self._groups:
            try:
                self._groups[gid] = grp.getgrgid(gid).gr_name
            except KeyError:
                self._groups[gid] = gid
        return self._groups[gid]


def _file_info(path: str, st: os.stat_result, names: _Names) -> dict[str, Any]:
    """Mesos' ``FileInfo`` as its ``/files/browse`` writes it (``mtime`` in seconds)."""
    return {
        "path": path,
        "nlink": st.st_nlink,
        "size": st.st_size,
        "mtime": int(st.st_mtime),
        "mode": stat.filemode(st.st_mode),
        "uid": names.user(st.st_uid),
        "gid": names.group(st.st_gid),
    }


def _offset(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise BadRequest(
            f"{value!r} is not a byte offset (a whole number >= 0, or -1 for the size)", "offset"
        )
    return value


def _length(value: Any, cap: int) -> int:
    if value is None or value == -1:
        return cap  # Mesos' "length" unset
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadRequest(f"{value!r} is not a length (a whole number >= 0)", "length")
    return min(value, cap)


def parse_int(text: str | None, parameter: str) -> int | None:
    """A query parameter as an int (None when absent or empty); :class:`BadRequest`
    naming ``parameter`` when it is not a whole number."""
    if text is None or text == "":
        return None
    try:
        if len(text) > 20:
            raise ValueError
        value = int(text)
    except ValueError:
        raise BadRequest(f"{text[:20]!r} is not a whole number", parameter) from None
    if abs(value) > INT_MAX:
        raise BadRequest(f"{value} is out of range (at most {INT_MAX})", parameter)
    return value


INT_MAX = 1 << 62
"""The largest offset or length taken (it crosses the wire as a Thrift i64)."""


OPERATIONS = ("browse", "read", "download")
"""What :func:`answer` does (``Agent.files_request``'s ``operation``)."""


def answer(files: SandboxFiles, operation: str, path: str, offset: int, length: int) -> tuple[int, bytes]:
    """One ``Agent.files_request`` answered: ``(HTTP status, body)``. ``browse`` and
    ``read`` answer JSON as the HTTP API does; ``download`` the raw bytes of the file from
    ``offset``, at most ``length`` (-1: default) and :data:`DOWNLOAD_CHUNK`; errors a JSON
    ``{"error", "status"}``. Never raises for what a caller sent."""
    try:
        if operation == "browse":
            return 200, _json(files.browse(path))
        if operation == "read":
            return 200, _json(files.read(path, offset, None if length < 0 else length))
        if operation == "download":
            if offset < 0:
                raise BadRequest(f"{offset} is not a byte offset", "offset")
            return 200, files.read_bytes(path, offset, None if length < 0 else length, cap=DOWNLOAD_CHUNK)[1]
        raise BadRequest(f"{operation[:40]!r} is not one of {', '.join(OPERATIONS)}", "operation")
    except FileError as exc:
        return exc.status, _json({"error": str(exc), "status": exc.status})
    except OSError as exc:
        # An I/O error on the agent's disk: the caller's answer, not the agent's failure.
        return 500, _json({"error": f"reading {path[:200]!r} failed: {exc.strerror or exc}", "status": 500})


def page(offset: int, data: bytes, asked: int) -> dict[str, Any]:
    """A ``read`` answer for ``data`` read at ``offset`` for a page of ``asked`` bytes (see
    :meth:`SandboxFiles.read`): ``{"offset", "data", "length"}``, a UTF-8 character cut at
    the end left out for the next read; also at the end of a growing file, where only its
    first bytes are written yet (``length`` 0: nothing new). Only a page too short to hold
    the character it starts keeps it (as U+FFFD), so that such a reader still moves on."""
    cut = _cut_character(data)
    if cut and (cut < len(data) or len(data) < asked):
        data = data[: len(data) - cut]
    return {"offset": offset, "data": data.decode("utf-8", errors="replace"), "length": len(data)}


def read_body(offset: int, data: bytes, asked: int) -> bytes:
    """:func:`page` as the JSON body the API sends. The master builds the same from the
    pieces it reads ahead (:mod:`mezzo.master.read_ahead`)."""
    return _json(page(offset, data, asked))


def _cut_character(data: bytes) -> int:
    """How many bytes at the end of ``data`` begin a UTF-8 character they do not finish
    (0-3): the start of a multi-byte sequence, followed by fewer continuation bytes than
    its first byte announces."""
    for back in range(1, min(3, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # not a continuation byte: a character starts here
            needed = (
                2 if 0xC2 <= byte <= 0xDF else 3 if 0xE0 <= byte <= 0xEF else 4 if 0xF0 <= byte <= 0xF4 else 1
            )
            return back if needed > back else 0
    return 0


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()
