"""Serving ``mezzo state`` without stalling the master.

Rendering the whole state of a 50,000-agent cluster as JSON takes about a second
of CPU. Done on the event loop, that second is a second in which no offer is
made and no status update forwarded, and a client polling in a loop freezes the
master (a known Apache Mesos failure). So the master forks: the child holds a
copy-on-write image of the state *at that instant* (a consistent snapshot, for
free), renders it, writes the JSON into a pipe and exits; the loop only reads the
pipe as it fills and sends the answer. The master's loop pays for the fork
(milliseconds: page tables, not pages) and for copying the bytes out.

The child also lowers its CPU priority (:data:`CHILD_NICENESS`): on a busy
machine the snapshot takes longer, but it does not take CPU from the master and
the other processes there, which showed up as slower task starts while a state
of 50,000 agents and 100,000 tasks was rendered every few seconds
(``bench/state_polling.py``).

Requests arriving while a snapshot is being rendered wait for that snapshot
instead of forking again, so any number of pollers costs at most one child at
a time. Where ``os.fork`` is missing or fails, the state is rendered inline as
before.

Under overload a snapshot waits: while the master's loop runs late (``saturated``,
:meth:`.loop_watch.LoopWatch.saturated`), the fork and the copying out of the
answer are put off by :data:`DEFER_STEP` at a time, so that offers and status
updates go first, but never for longer than :data:`DEFER_MAX`: a poller is
answered late, not never.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
from collections.abc import Callable

import structlog

log = structlog.get_logger("mezzo.master", component="master")

Reply = Callable[[str], None]

CHILD_NICENESS = 10
"""Added to the rendering child's nice value: it runs on CPU the master leaves idle."""
DEFER_STEP = 0.25
"""Seconds between two looks at whether the loop is still saturated."""
DEFER_MAX = 5.0
"""Seconds a snapshot waits at most for the loop to catch up."""


class StateSnapshots:
    """Renders ``render()`` in a forked child and hands the text to every waiter."""

    def __init__(
        self,
        render: Callable[[], str],
        *,
        use_fork: bool = True,
        saturated: Callable[[], bool] = lambda: False,
    ) -> None:
        self._render = render
        self._use_fork = use_fork and hasattr(os, "fork")
        self._saturated = saturated
        self._waiting_since: float | None = None
        self._retry: asyncio.TimerHandle | None = None
        self.deferred = 0
        """Snapshots put off for a saturated loop (for the metrics and the tests)."""
        self._waiters: list[Reply] = []
        self._child: int | None = None
        self._pipe: int | None = None
        self._chunks: list[bytes] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self.forks = 0
        """Snapshots rendered in a child (for the metrics and the tests)."""

    def request(self, reply: Reply) -> None:
        """Call ``reply(state_json)`` once a snapshot taken now or a moment ago is ready."""
        self._waiters.append(reply)
        if self._child is not None or self._retry is not None:
            return  # the snapshot being rendered, or the one put off, answers this request too
        self._start()

    def _start(self) -> None:
        """Take the snapshot now, unless the loop is saturated and it has not waited
        :data:`DEFER_MAX` yet."""
        self._retry = None
        if self._saturated():
            loop = asyncio.get_running_loop()
            now = loop.time()
            if self._waiting_since is None:
                self._waiting_since = now
                self.deferred += 1
            if now - self._waiting_since < DEFER_MAX:
                self._retry = loop.call_later(DEFER_STEP, self._start)
                return
        self._waiting_since = None
        if not self._use_fork or not self._fork():
            self._answer(self._render_inline())

    def _fork(self) -> bool:
        loop = asyncio.get_running_loop()
        read_fd, write_fd = os.pipe()
        try:
            pid = os.fork()
        except OSError as exc:
            os.close(read_fd)
            os.close(write_fd)
            log.warning("cannot fork to render the state; rendering inline", error=str(exc))
            return False
        if pid == 0:  # the child: render, write, vanish
            os.close(read_fd)
            _render_in_child(self._render, write_fd)
        os.close(write_fd)
        os.set_blocking(read_fd, False)
        self.forks += 1
        self._child, self._pipe, self._chunks, self._loop = pid, read_fd, [], loop
        loop.add_reader(read_fd, self._readable)
        return True

    def _readable(self) -> None:
        fd = self._pipe
        assert fd is not None
        while True:
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:
                return  # drained for now; more comes later
            except OSError as exc:
                log.warning("state snapshot pipe failed; rendering inline", error=str(exc))
                self._finish(None)
                return
            if not chunk:
                self._finish(b"".join(self._chunks))
                return
            self._chunks.append(chunk)

    def _finish(self, data: bytes | None) -> None:
        loop, fd, pid = self._loop, self._pipe, self._child
        if loop is not None and fd is not None:
            loop.remove_reader(fd)
            os.close(fd)
        self._pipe, self._chunks = None, []
        status = _reap(pid)
        self._child = None
        if data is None or status != 0:
            if status != 0:
                log.warning("state snapshot child failed; rendering inline", exit_status=status)
            self._answer(self._render_inline())
            return
        self._answer(data.decode("utf-8"))

    def _render_inline(self) -> str:
        """The state rendered here; a failure answers every waiter with an error object
        rather than leaving them to wait for the next snapshot."""
        try:
            return self._render()
        except Exception as exc:  # a bug in rendering must not wedge the waiters
            log.exception("rendering the state failed")
            return json.dumps({"error": f"rendering the state failed: {exc!r}"})

    def _answer(self, text: str) -> None:
        waiters, self._waiters = self._waiters, []
        for reply in waiters:
            try:
                reply(text)
            except Exception:  # one broken requester must not starve the others
                log.exception("sending the state failed")

    def close(self) -> None:
        """Stop a snapshot in progress, answering nobody (the master is stopping)."""
        if self._retry is not None:
            self._retry.cancel()
            self._retry, self._waiting_since, self._waiters = None, None, []
        if self._child is None:
            return
        try:
            os.kill(self._child, signal.SIGKILL)
        except OSError:
            pass
        if self._loop is not None and self._pipe is not None:
            self._loop.remove_reader(self._pipe)
            os.close(self._pipe)
        _reap(self._child)
        self._child, self._pipe, self._chunks, self._waiters = None, None, [], []


def _render_in_child(render: Callable[[], str], fd: int) -> None:
    """Never returns. Touches nothing shared: no logging (its locks may be held by a
    thread that does not exist here), no event loop, no sockets, no exit handlers."""
    status = 1
    try:
        gc.disable()  # a collection would write to every page of the heap
        try:
            os.nice(CHILD_NICENESS)
        except OSError:
            pass  # not allowed here: render at the master's priority
        data = render().encode("utf-8")
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        status = 0
    except BaseException:  # noqa: BLE001 - the parent renders inline on a non-zero exit
        pass
    finally:
        os._exit(status)


def _reap(pid: int | None) -> int:
    """Wait for the child (it has written everything, so it is exiting); its exit status."""
    if pid is None:
        return 0
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return 0
    return os.waitstatus_to_exitcode(status)
