"""The agent's work dir: created private, and checked before the agent trusts anything in it.

The agent (root, in production) replays the journal it finds in ``<work_dir>/meta/`` and
signals the processes it names, and writes sandboxes under ``<work_dir>/frameworks/``.
Whoever else can write there, or can swap a directory on the way there, can make it
kill any process or write any file. So::

    path = prepare_work_dir(config.work_dir)   # created 0700; UnsafePath if anyone else controls it
    check_entry(journal, directory=False)      # a real file of ours, or missing
    make_dirs(path, ["frameworks", fid, ...], SANDBOX_MODE)   # never through a symlink

Contract:

- What the agent creates it creates itself: the work dir and the parents it has to make
  get mode :data:`WORK_DIR_MODE` (0700), sandboxes :data:`SANDBOX_MODE` (0750), exactly,
  whatever the umask.
- When tasks run as other users (``agent.switch_user``, the agent root): the work dir and
  the directories down to each sandbox are :data:`SHARED_DIR_MODE` (0711): a task's user
  may pass through them to its own sandbox, but list none of them, so it cannot find
  another task's sandbox, which is owned by that task's user and 0750. Each sandbox (and
  what the agent makes in it) is given to its task's user: ``make_dirs(..., owner=)``.
- What it uses must be its own: the work dir, each directory it creates or enters under
  it, the journal and its lock must be a real directory (file), not a symlink, owned by
  the agent's effective uid and not writable by group or others. Every ancestor of the
  work dir must be owned by root or that uid and not writable by group or others unless
  sticky (``/tmp``): otherwise its owner could rename the work dir away and put a symlink
  in its place after the checks.
- Checks use ``lstat`` and ``O_NOFOLLOW`` (through directory fds below the work dir), so a
  symlink is never followed, not even between a check and the use.

Error handling: a check that fails raises :class:`UnsafePath`, an :class:`OSError` whose
one-line message names the path, says what is wrong and how to fix it; callers that treat
an ``OSError`` as a failure to create (a sandbox, the journal) report it as such.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence

WORK_DIR_MODE = 0o700
"""The work dir, and the missing parents the agent creates for it."""
SANDBOX_MODE = 0o750
"""Sandbox directories and the directories leading to them under the work dir."""
SHARED_DIR_MODE = 0o711
"""The work dir and the directories leading to sandboxes when tasks run as other users:
they may pass through (search), not list (read)."""
TRAVERSE_BITS = 0o011
"""What :data:`SHARED_DIR_MODE` adds to a directory the agent made private before."""

Owner = tuple[int, int]
"""``(uid, gid)`` of the user a sandbox is given to."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePath(OSError):
    """A path the agent will not use: someone else owns or can change it, or it is a symlink.
    ``str()`` is the one-line reason."""


def open_no_follow(path: str, flags: int = os.O_RDONLY, mode: int = 0o600) -> int:
    """``os.open`` that fails (``ELOOP``) rather than follow a symlink at ``path`` itself:
    for the agent's own files in its work dir and sandboxes."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


def prepare_work_dir(work_dir: str, *, shared: bool = False) -> str:
    """Create ``work_dir`` (and the parents it lacks) with mode 0700 and check it is the
    agent's own (see the module docstring). Returns its absolute path. ``shared`` (tasks
    run as other users): the work dir itself is made 0711, also when it exists already,
    so that they can pass through it to their sandboxes.

    Raises :class:`UnsafePath` (checks) or :class:`OSError` (creation failed)."""
    path = os.path.abspath(work_dir)
    existing, missing = _split_existing(path)
    check_ancestors(os.path.join(existing, "x") if missing else path)
    if missing:
        make_dirs(existing, missing, WORK_DIR_MODE, check_base=False)
    check_entry(path, directory=True)
    if shared:
        fd = _open_dir(path, shown=path)
        try:
            _check_owned(os.fstat(fd), path)
            _add_traverse(fd)
        finally:
            os.close(fd)
    return path


def untraversable_ancestor(path: str) -> str | None:
    """The first directory above ``path`` (symlinks resolved) that others may not pass
    through (no search bit for others), or None. A task running as another user cannot
    reach its sandbox under it by path (it still starts in it: its working directory)."""
    for ancestor in _chain(os.path.dirname(os.path.realpath(path))):
        try:
            st = os.stat(ancestor)
        except OSError:
            return ancestor
        if not st.st_mode & 0o001:
            return ancestor
    return None


def make_private_dir(path: str) -> None:
    """Create ``path`` and the parents it lacks with mode 0700; ``path`` must then be a real
    directory of ours (:class:`UnsafePath` otherwise). For ``<work_dir>/meta``: the journal
    may be written before the agent prepared the work dir (tests write one as a crashed
    agent would have), so this does not require the work dir to exist."""
    existing, missing = _split_existing(os.path.abspath(path))
    if missing:
        make_dirs(existing, missing, WORK_DIR_MODE, check_base=False)
    else:
        check_entry(path, directory=True)


def make_dirs(
    base: str,
    parts: Sequence[str],
    mode: int,
    *,
    check_base: bool = True,
    owner: Owner | None = None,
    traverse: bool = False,
) -> str:
    """Create ``base/parts[0]/parts[1]/...`` one directory at a time, through directory fds,
    never following a symlink at ``base`` (unless ``check_base`` is False) or below it.
    Directories created get exactly ``mode``; each one, created or found, and ``base`` when
    ``check_base``, must be a real directory owned by this process's effective uid and not
    writable by group or others. Returns the path made.

    ``owner`` (``(uid, gid)``): directories created are given to that user, and those found
    (``base`` too) may be that user's as well as the agent's: for what the agent makes in
    a sandbox it gave to a task's user. That user may have changed anything under ``base``
    meanwhile; through directory fds and ``O_NOFOLLOW`` the agent still only ever creates
    directories inside directories of the agent's or of that user's. ``traverse``: each
    directory found (not ``base``) that others may not pass through gets the search bits
    of :data:`SHARED_DIR_MODE` added.

    Raises :class:`UnsafePath` naming the first component that fails, or :class:`OSError`."""
    path = base
    allowed = (owner[0],) if owner is not None else ()
    # Not checked: above the work dir (check_ancestors vetted it), where symlinks are the operator's.
    fd = _open_dir(base, shown=base) if check_base else os.open(base, _DIR_FLAGS & ~os.O_NOFOLLOW)
    try:
        if check_base:
            _check_owned(os.fstat(fd), base, also=allowed)
        for part in parts:
            path = os.path.join(path, part)
            try:
                os.mkdir(part, mode, dir_fd=fd)
                created = True
            except FileExistsError:
                created = False
            child = _open_dir(part, dir_fd=fd, shown=path)
            os.close(fd)
            fd = child
            if created:
                os.fchmod(fd, mode)  # exact: the umask may have taken bits off
                if owner is not None:
                    os.fchown(fd, owner[0], owner[1])
            st = os.fstat(fd)
            _check_owned(st, path, also=allowed)
            if traverse and not created:
                _add_traverse(fd, st)
    finally:
        os.close(fd)
    return path


def _add_traverse(fd: int, st: os.stat_result | None = None) -> None:
    """Let others pass through the directory open as ``fd`` (a directory of the agent's)."""
    st = st if st is not None else os.fstat(fd)
    if st.st_uid == os.geteuid() and st.st_mode & TRAVERSE_BITS != TRAVERSE_BITS:
        os.fchmod(fd, stat.S_IMODE(st.st_mode) | TRAVERSE_BITS)


def open_output(path: str, owner: Owner | None) -> int:
    """Open a container's output file (``stdout``, ``stderr``) in its sandbox for appending,
    created if missing, and return the fd. ``owner``: the user of the sandbox, who gets the
    file. Whatever that user put at ``path`` meanwhile, the agent neither follows a symlink,
    nor blocks on a FIFO, nor writes to or gives away a file not its own or that user's
    (a hard link to one of root's files has the agent's uid and a link count above 1).

    Raises :class:`UnsafePath` or ``OSError``."""
    fd = open_no_follow(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK, 0o640)
    try:
        st = os.fstat(fd)
        euid = os.geteuid()
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePath(f"{path!r} is not a regular file")
        if st.st_uid == euid and st.st_nlink != 1:
            raise UnsafePath(f"{path!r} has {st.st_nlink} hard links: not a file the agent made")
        if st.st_uid != euid and (owner is None or st.st_uid != owner[0]):
            raise UnsafePath(f"{path!r} is owned by uid {st.st_uid}, neither the agent's nor the task's")
        os.set_blocking(fd, True)
        if owner is not None and st.st_uid == euid and euid != owner[0]:
            os.fchown(fd, owner[0], owner[1])
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_tail(path: str, limit: int, uid: int | None = None) -> bytes | None:
    """The last ``limit`` bytes of the file at ``path`` in a sandbox, or None when there is
    no such regular file of user ``uid`` (default: the agent's). The sandbox's user could
    have put a symlink, a FIFO or a hard link to a file it may not read there: the agent
    (root) follows no symlink, never blocks, and reads only a file that user owns, so it
    never hands on what the user could not read itself."""
    try:
        fd = open_no_follow(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != (os.geteuid() if uid is None else uid):
            return None
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - limit))
        return f.read(limit)


def check_entry(path: str, *, directory: bool, missing_ok: bool = False) -> None:
    """``path`` must be a real directory (``directory``) or regular file, not a symlink,
    owned by this process's effective uid and not writable by group or others; a missing
    one passes if ``missing_ok``. Raises :class:`UnsafePath` saying which and how to fix it."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if missing_ok:
            return
        raise
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(_symlink_problem(path))
    if directory and not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(f"{path!r} is not a directory: move it away or pick another agent.work_dir")
    if not directory and not stat.S_ISREG(st.st_mode):
        raise UnsafePath(f"{path!r} is not a regular file: remove it")
    _check_owned(st, path)


def check_ancestors(path: str) -> None:
    """Every directory above ``path``, as written and with symlinks resolved, must be owned
    by root or this process's effective uid, and not writable by group or others unless it
    is sticky: whoever else can write to one could replace what is below it by a symlink
    after the work dir was checked. Raises :class:`UnsafePath` naming the first that fails."""
    parent = os.path.dirname(os.path.abspath(path))
    seen: set[str] = set()
    for chain in (_chain(parent), _chain(os.path.realpath(parent))):
        for ancestor in chain:
            if ancestor in seen:
                continue
            seen.add(ancestor)
            try:
                st = os.lstat(ancestor)
            except FileNotFoundError:
                continue  # a dangling link: creating below it fails with its own error
            _check_ancestor(st, ancestor)


def _check_ancestor(st: os.stat_result, path: str) -> None:
    euid = os.geteuid()
    if st.st_uid not in (0, euid):
        raise UnsafePath(
            f"{path!r}, above the work dir, is owned by uid {st.st_uid}, who could swap the work dir "
            f"for a symlink: chown it to root or pick another agent.work_dir"
        )
    if stat.S_ISDIR(st.st_mode) and st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise UnsafePath(
            f"{path!r}, above the work dir, is writable by group or others (mode "
            f"{stat.S_IMODE(st.st_mode):04o}) without the sticky bit: chmod go-w it or pick "
            "another agent.work_dir"
        )


def _check_owned(st: os.stat_result, path: str, also: Sequence[int] = ()) -> None:
    euid = os.geteuid()
    if st.st_uid != euid and st.st_uid not in also:
        raise UnsafePath(
            f"{path!r} is owned by uid {st.st_uid}, not by this agent (uid {euid}): chown it "
            "or pick another agent.work_dir"
        )
    if st.st_mode & 0o022:
        raise UnsafePath(
            f"{path!r} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o}): "
            "chmod go-w it or pick another agent.work_dir"
        )


def _open_dir(name: str, *, shown: str, dir_fd: int | None = None) -> int:
    """Open the directory ``name`` (relative to ``dir_fd``) without following a symlink;
    ``shown`` is its path for the message."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            raise UnsafePath(_symlink_problem(shown, name, dir_fd)) from None
        raise UnsafePath(f"{shown!r} is not a directory: move it away") from None


def _symlink_problem(path: str, name: str | None = None, dir_fd: int | None = None) -> str:
    try:
        target = os.readlink(name if name is not None else path, dir_fd=dir_fd)
    except OSError:
        target = "?"
    return (
        f"{path!r} is a symlink (to {target!r}); the agent follows none in its work dir: "
        "replace it with a real directory of the agent's or pick another agent.work_dir"
    )


def _split_existing(path: str) -> tuple[str, list[str]]:
    """``path`` as its longest prefix that exists (``lstat``) and the components below it."""
    missing: list[str] = []
    existing = path
    while True:
        try:
            os.lstat(existing)
            return existing, missing[::-1]
        except FileNotFoundError:
            head, tail = os.path.split(existing)
            if head == existing:
                return existing, missing[::-1]
            missing.append(tail)
            existing = head


def _chain(path: str) -> list[str]:
    """``path`` and each directory above it, ``/`` first."""
    out = []
    while True:
        out.append(path)
        head = os.path.dirname(path)
        if head == path:
            return out[::-1]
        path = head
