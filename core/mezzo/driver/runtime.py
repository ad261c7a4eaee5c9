"""The driver thread: one asyncio event loop per process, shared by every driver.

Usage (inside mezzo; framework authors never touch it)::

    runtime = get_runtime()
    runtime.call(fn, *args)          # run fn on the driver thread (inline when already on it)
    runtime.run_coroutine(coro)      # schedule a coroutine there; returns a concurrent Future
    runtime.on_driver_thread()       # True inside scheduler/executor callbacks

Why one thread: a process may host many frameworks (the scale benchmark runs 200
schedulers in one process). A thread and a loop per driver would cost 200 threads
contending for the GIL; one loop multiplexes all their connections instead. The
loop thread is a daemon started lazily by the first driver, so importing mezzo or
creating a driver that never starts costs nothing, and a process whose main thread
ends is not kept alive by it.

Error handling: every socket read, every protocol step *and every user callback*
runs on this thread. A callback that blocks (sleeps, waits on a lock, does slow
I/O) therefore delays every driver in the process: offers, status updates and
acknowledgements of all frameworks queue up behind it. Callbacks should hand long
work to their own threads; drivers log a warning naming any callback that holds
the thread longer than :data:`SLOW_CALLBACK_SECONDS`. An exception escaping a
callback is logged by the driver that made the call and does not stop the loop.

After ``os.fork()`` the child has no driver thread; :func:`get_runtime` notices the
new pid and starts a fresh one on first use (drivers created before the fork are
not usable in the child).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import structlog

log = structlog.get_logger("mezzo.driver")

THREAD_NAME = "mezzo-driver"
"""Name of the driver thread (visible in ``threading.enumerate()`` and py-spy)."""

SLOW_CALLBACK_SECONDS = 1.0
"""A callback holding the driver thread longer than this is logged as a warning."""


class DriverRuntime:
    """An event loop running in one daemon thread, started on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._thread_id: int | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The shared loop, starting the driver thread if it is not running yet."""
        loop = self._loop
        if loop is not None:
            return loop
        with self._lock:
            if self._loop is None:
                self._start()
            return self._loop  # type: ignore[return-value]

    @property
    def thread(self) -> threading.Thread | None:
        """The driver thread, or None before the first driver started."""
        return self._thread

    def _start(self) -> None:
        loop = asyncio.new_event_loop()
        loop.set_exception_handler(_log_loop_exception)
        ready = threading.Event()

        def main() -> None:
            asyncio.set_event_loop(loop)
            self._thread_id = threading.get_ident()
            ready.set()
            loop.run_forever()

        thread = threading.Thread(target=main, name=THREAD_NAME, daemon=True)
        thread.start()
        ready.wait()
        self._thread = thread
        self._loop = loop

    def on_driver_thread(self) -> bool:
        """True when the caller runs on the driver thread (e.g. inside a callback)."""
        return self._thread_id is not None and threading.get_ident() == self._thread_id

    def call(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the driver thread.

        On the driver thread itself it runs at once (so actions taken inside a
        callback keep their order relative to what the callback does next); from
        any other thread it is queued, in FIFO order per calling thread.
        """
        if self.on_driver_thread():
            fn(*args)
        else:
            self.loop.call_soon_threadsafe(fn, *args)

    def run_coroutine(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future:
        """Schedule ``coro`` on the driver loop; the returned future is safe to wait on
        from other threads (never from the driver thread itself)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)


def _log_loop_exception(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    exc = context.get("exception")
    log.error(
        "unhandled error on the driver thread",
        message=context.get("message"),
        exc_info=exc if exc is not None else False,
    )


_runtime: DriverRuntime | None = None
_runtime_pid: int | None = None
_runtime_lock = threading.Lock()


def get_runtime() -> DriverRuntime:
    """The process-wide :class:`DriverRuntime` (created, not started, on first call)."""
    global _runtime, _runtime_pid
    pid = os.getpid()
    if _runtime is not None and _runtime_pid == pid:
        return _runtime
    with _runtime_lock:
        if _runtime is None or _runtime_pid != pid:
            _default_logging()
            _runtime = DriverRuntime()
            _runtime_pid = pid
        return _runtime


def _default_logging() -> None:
    """Framework code that never set up structlog would get every debug and info line
    of the drivers on stdout; give it warnings and errors on stderr instead. An
    application that configured structlog itself is left alone."""
    import structlog

    from .. import log as log_setup

    if not structlog.is_configured():
        log_setup.configure("warning")
