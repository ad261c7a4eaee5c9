"""Named network namespaces: create, remove, list, enter from a child, talk netlink inside.

Usage::

    await create("mezzo-net-3f2a")               # like ``ip netns add mezzo-net-3f2a``
    sock = await route_socket("mezzo-net-3f2a")  # an rtnetlink socket inside it:
    async with AsyncIPRoute(use_socket=sock) as inside: ...
    fd = open_fd("mezzo-net-3f2a")               # in the parent, before the spawn
    launch.preexec.append(entering(fd))          # the child joins the namespace before exec
    os.close(fd)                                 # once the child has started
    await remove("mezzo-net-3f2a")               # idempotent
    names("mezzo-net-")                          # the named namespaces with that prefix

A named namespace is a bind mount of a namespace file on ``/run/netns/<name>``
(the place ``ip netns`` uses), so it lives on without any process in it until
:func:`remove` unmounts it.

Why fresh threads rather than pyroute2's helpers: a network namespace belongs to
one *thread*, and pyroute2 creates namespaces and in-namespace sockets by forking
the calling process and running Python in the child. Forking the agent (threads,
locks and all) is what the isolator contract avoids everywhere else. Here a
short-lived thread unshares or enters the namespace, does its one job and ends,
so no thread of the agent is ever left in a foreign namespace, even when a step
fails half-way.

Error handling: every function raises :class:`OSError` with the errno of the
system call that failed and the namespace's name; :func:`remove` ignores a
namespace that is already gone.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import socket
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from pyroute2 import netns as _pyroute2_netns

NETNS_DIR = "/run/netns"
"""Where named namespaces are mounted (``/var/run/netns`` is the same directory on Debian)."""

CLONE_NEWNET = 0x40000000
NETLINK_ROUTE = 0

_libc = ctypes.CDLL(None, use_errno=True)
_libc.setns.argtypes = (ctypes.c_int, ctypes.c_int)
_libc.unshare.argtypes = (ctypes.c_int,)

T = TypeVar("T")


def path(name: str) -> str:
    return os.path.join(NETNS_DIR, name)


def names(prefix: str = "") -> list[str]:
    """The named namespaces whose name starts with ``prefix``, sorted."""
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(prefix))
    except FileNotFoundError:
        return []


def exists(name: str) -> bool:
    return os.path.exists(path(name))


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def _create_here(name: str) -> None:
    """In a fresh thread: move this thread to a new network namespace and bind-mount
    it on ``/run/netns/<name>`` (pyroute2's ``attach`` does what ``ip netns add``
    does: make the directory a shared mount, create the file, bind the namespace)."""
    if _libc.unshare(CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"cannot create network namespace {name!r}: unshare: {os.strerror(err)}")
    try:
        _pyroute2_netns.attach(path(name), threading.get_native_id())
    except FileExistsError:
        raise OSError(17, f"network namespace {name!r} already exists") from None
    except BaseException:
        _remove_now(name)  # the mount point file may have been made before the mount failed
        raise


def _remove_now(name: str) -> None:
    target = path(name)
    _libc.umount2(target.encode(), 2)  # MNT_DETACH; fails harmlessly when not mounted
    try:
        os.unlink(target)
    except FileNotFoundError:
        pass


def _socket_inside(name: str) -> socket.socket:
    fd = open_fd(name)
    try:
        _setns(fd)
    finally:
        os.close(fd)
    return socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_ROUTE)


async def in_fresh_thread(fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn(*args)`` in a new thread that ends with it, without blocking the loop.

    For work that changes the calling thread's namespaces. If the caller is
    cancelled meanwhile, a socket ``fn`` returns is closed rather than leaked."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: Any, exc: BaseException | None) -> None:
        if done.cancelled():
            if isinstance(result, socket.socket):
                result.close()
        elif exc is not None:
            done.set_exception(exc)
        else:
            done.set_result(result)

    def run() -> None:
        try:
            result = fn(*args)
        except BaseException as exc:  # noqa: BLE001 (handed to the awaiting coroutine)
            loop.call_soon_threadsafe(settle, None, exc)
        else:
            loop.call_soon_threadsafe(settle, result, None)

    threading.Thread(target=run, name="mezzo-netns", daemon=True).start()
    return await done


async def create(name: str) -> None:
    """Create the named namespace ``name``; :class:`OSError` (EEXIST) if it exists."""
    await in_fresh_thread(_create_here, name)


async def remove(name: str) -> None:
    """Unmount and delete the named namespace; nothing if it is gone already. The
    namespace itself ends once no process is in it and no file holds it open."""
    await asyncio.to_thread(_remove_now, name)


async def route_socket(name: str) -> socket.socket:
    """An rtnetlink socket created inside namespace ``name`` (a socket stays in the
    namespace it was made in): hand it to ``AsyncIPRoute(use_socket=...)``."""
    return await in_fresh_thread(_socket_inside, name)


def open_fd(name: str) -> int:
    """A file descriptor on the namespace (close-on-exec), e.g. for :func:`entering`."""
    return os.open(path(name), os.O_RDONLY | os.O_CLOEXEC)


def entering(fd: int) -> Callable[[], None]:
    """A ``preexec`` function that moves the child into the namespace ``fd`` names.

    It runs between fork and exec of a threaded parent, so it makes one system
    call and nothing else; ``fd`` was opened by the parent (a forked child keeps
    close-on-exec descriptors until the exec, and ``subprocess`` closes the
    others only after the preexec functions ran). A failure raises, and the
    spawn fails: the process never runs outside its namespace.
    """
    if hasattr(os, "setns"):  # Python 3.12+
        setns = os.setns

        def enter() -> None:
            setns(fd, CLONE_NEWNET)
    else:

        def enter() -> None:
            _setns(fd)

    return enter


def inode(name: str) -> int | None:
    """The namespace's inode (what ``/proc/<pid>/ns/net`` shows), None if gone."""
    try:
        return os.stat(path(name)).st_ino
    except OSError:
        return None


def inode_of_process(pid: int) -> int | None:
    """The inode of ``pid``'s network namespace; None when it cannot be read (gone)."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None
