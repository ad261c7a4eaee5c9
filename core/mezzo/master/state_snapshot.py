"""Serving ``mezzo state`` without stalling the master.

Rendering the whole state of a 50,000-agent cluster as JSON takes about a second
of CPU. Done on the event loop, that second is a second in which no offer is
made and no status update forwarded, and a client polling in a loop freezes the
master (a known Apache Mesos failure). So the master forks: the child holds a
copy-on-write image of the state *at that instant* (a consistent snapshot, for
free), renders it, writes it as UTF-8 into a pipe (its length first) and exits.
The master's loop pays for the fork (milliseconds: page tables, not pages) and
for copying the bytes out, :data:`READ_MAX` per turn, straight into the buffer
the answer is framed in (:class:`~mezzo.rpc.codec.Utf8Text`): the answer is
never joined, decoded or encoded again on the loop, each a copy of the whole
state (19 MiB at 100,000 tasks, 15 to 30 ms of the loop apiece on a small
machine). Requesters asking for bytes (:meth:`StateSnapshots.request_encoded`)
get that buffer; those asking for a ``str`` (:meth:`StateSnapshots.request`)
pay for its decoding.

The child also lowers its CPU priority (:data:`CHILD_NICENESS`): on a busy
machine the snapshot takes longer, but it does not take CPU from the master and
the other processes there, which showed up as slower task starts while a state
of 50,000 agents and 100,000 tasks was rendered every few seconds
(``bench/state_polling.py``).

Requests arriving while a snapshot is being rendered wait for that snapshot
instead of forking again, so any number of pollers costs at most one child at
a time; they are answered one per turn of the loop. Where ``os.fork`` is missing
or fails, the state is rendered inline as before (and every waiter answered at
once).

A small state is rendered on the loop (``inline``, the master's
:meth:`~.state.ClusterState.rendering_items` against ``master.render_inline_max_items``):
the fork costs the loop about as much as rendering a few dozen agents and tasks (its page
tables: 1.1 ms for a 50 MB master, 10 ms at 500 MB), and the asker 5 ms before the first byte.

A slow snapshot may be reused (``reuse_slow``, the HTTP API's documents): one that
took more than :data:`REUSE_ABOVE` seconds to render answers the requests that come
within twice that time of its end (at most :data:`REUSE_MAX` seconds), so that
pollers asking more often than a document can be rendered (``/state-summary`` of
50,000 agents, every second) keep its child busy half the time at most, not always;
on a small cluster, where rendering takes milliseconds, every request gets a fresh
one.

Under overload a snapshot waits: while the master's loop runs late (``saturated``,
:meth:`.loop_watch.LoopWatch.saturated`), the fork and the copying out of the
answer are put off by :data:`DEFER_STEP` at a time, so that offers and status
updates go first, but never for longer than :data:`DEFER_MAX`: a poller is
answered late, not never.
"""

from __future__ import annotations

import asyncio
import fcntl
import gc
import json
import os
import signal
import struct
from collections import deque
from collections.abc import Callable

import structlog

from ..rpc.codec import Utf8Text

log = structlog.get_logger("mezzo.master", component="master")

Reply = Callable[[str], None]
EncodedReply = Callable[[Utf8Text], None]

CHILD_NICENESS = 10
"""Added to the rendering child's nice value: it runs on CPU the master leaves idle."""
DEFER_STEP = 0.25
"""Seconds between two looks at whether the loop is still saturated."""
DEFER_MAX = 5.0
"""Seconds a snapshot waits at most for the loop to catch up."""
READ_MAX = 1 << 20
"""Bytes of the child's answer copied out of the pipe per turn of the loop: about a
millisecond, so that the answer (19 MiB at 100,000 tasks) takes many short turns,
not one long one."""
PIPE_SIZE = 1 << 20
"""Bytes the pipe from the child is asked to hold (Linux; the default, 64 KiB,
would wake the loop sixteen times per MiB)."""

REUSE_ABOVE = 0.1
"""Seconds of rendering above which a snapshot is reused (with ``reuse_slow``)."""
REUSE_FACTOR = 2.0
"""A reused snapshot answers for this many times as long as it took to render."""
REUSE_MAX = 30.0
"""Seconds a reused snapshot answers at most after it was rendered."""
REUSE_MAX_BYTES = 64 << 20
"""A bigger snapshot is not kept for reuse (memory)."""

_LENGTH = struct.Struct("!Q")
"""What the child writes first: the length of the UTF-8 that follows."""


class StateSnapshots:
    """Renders ``render()`` in a forked child and hands the text to every waiter."""

    def __init__(
        self,
        render: Callable[[], str],
        *,
        use_fork: bool = True,
        saturated: Callable[[], bool] = lambda: False,
        reuse_slow: bool = False,
        inline: Callable[[], bool] = lambda: False,
    ) -> None:
        self._render = render
        self._inline = inline
        """True when the state is small enough to render on the loop, cheaper than a fork."""
        self.rendered_inline = 0
        """Snapshots rendered on the loop because the state was small (for the metrics and the tests)."""
        self._reuse_slow = reuse_slow
        self._started_at = 0.0
        """Loop time the snapshot being rendered was forked."""
        self._last: tuple[Utf8Text, float] | None = None
        """With ``reuse_slow``: the latest slow snapshot and the loop time until which it answers."""
        self._last_expiry: asyncio.TimerHandle | None = None
        """Drops :attr:`_last` when it stops answering (its memory is not kept for nothing)."""
        self.reused = 0
        """Requests answered with a snapshot rendered for an earlier one (for the tests)."""
        self._use_fork = use_fork and hasattr(os, "fork")
        self._saturated = saturated
        self._waiting_since: float | None = None
        self._retry: asyncio.TimerHandle | None = None
        self.deferred = 0
        """Snapshots put off for a saturated loop (for the metrics and the tests)."""
        self._waiters: list[_Waiter] = []
        self._child: int | None = None
        self._pipe: int | None = None
        self._transfer: _Transfer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closes = 0
        """How many times :meth:`close` ran: answers being spread before it stop."""
        self.forks = 0
        """Snapshots rendered in a child (for the metrics and the tests)."""

    @property
    def busy(self) -> bool:
        """True while a snapshot is wanted, being rendered or being handed out."""
        return (
            bool(self._waiters)
            or self._child is not None
            or self._retry is not None
            or self._transfer is not None
        )

    def request(self, reply: Reply) -> None:
        """Call ``reply(state_json)`` once a snapshot taken now or a moment ago is ready.

        The text is decoded from the snapshot's UTF-8 for this: a copy of the whole
        state on the loop, which :meth:`request_encoded` spares."""
        self._wait(_Waiter(reply, None))

    def request_encoded(self, reply: EncodedReply) -> None:
        """:meth:`request`, the state given as UTF-8 in a buffer the answer can be framed
        around without copying it (:meth:`.ServiceSchema.encode_with_text`). Waiters of
        one snapshot share the buffer: it must not be changed."""
        self._wait(_Waiter(None, reply))

    def _wait(self, waiter: _Waiter) -> None:
        last = self._last
        if last is not None and self._child is None:
            loop = asyncio.get_running_loop()
            if loop.time() < last[1]:
                self.reused += 1
                answering = _Answering([waiter], utf8=last[0])
                loop.call_soon(answering.next)  # as a fresh one would be: not within the call
                return
            self._last = None
        self._waiters.append(waiter)
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
        if self._use_fork and self._inline():
            self.rendered_inline += 1
        elif self._use_fork and self._fork():
            return
        self._answer_all(self._render_inline())

    def _fork(self) -> bool:
        loop = asyncio.get_running_loop()
        read_fd, write_fd = os.pipe()
        _enlarge(read_fd)
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
        self._started_at = loop.time()
        self._child, self._pipe, self._transfer, self._loop = pid, read_fd, _Transfer(), loop
        loop.add_reader(read_fd, self._readable)
        return True

    def _readable(self) -> None:
        """Copy at most :data:`READ_MAX` bytes out of the pipe; the loop calls again while
        it has more. Finishes at the end of the child's output."""
        fd, transfer = self._pipe, self._transfer
        assert fd is not None and transfer is not None
        try:
            ended = transfer.read_some(fd)
        except BlockingIOError:
            return  # woken for nothing; more comes later
        except OSError as exc:
            log.warning("state snapshot pipe failed; rendering inline", error=str(exc))
            self._finish(None)
            return
        if ended:
            self._finish(transfer.text if transfer.complete else None)

    def _finish(self, text: Utf8Text | None) -> None:
        loop, fd, pid = self._loop, self._pipe, self._child
        if loop is not None and fd is not None:
            loop.remove_reader(fd)
            os.close(fd)
        self._pipe, self._transfer = None, None
        status = _reap(pid)  # the pipe is closed: the child is exiting, or gone
        self._child = None
        if text is None or status != 0:
            if status != 0:
                log.warning("state snapshot child failed; rendering inline", exit_status=status)
            elif text is None:
                log.warning("state snapshot child wrote other than the answer it announced; rendering inline")
            self._answer_all(self._render_inline())
            return
        if self._reuse_slow and loop is not None:
            now = loop.time()
            took = now - self._started_at
            if took > REUSE_ABOVE and text.size <= REUSE_MAX_BYTES:
                until = now + min(REUSE_FACTOR * took, REUSE_MAX)
                self.forget()
                self._last = (text, until)
                self._last_expiry = loop.call_at(until, self.forget)
        self._answer_spread(text)

    def _render_inline(self) -> str:
        """The state rendered here; a failure answers every waiter with an error object
        rather than leaving them to wait for the next snapshot."""
        try:
            return self._render()
        except Exception as exc:  # a bug in rendering must not wedge the waiters
            log.exception("rendering the state failed")
            return json.dumps({"error": f"rendering the state failed: {exc!r}"})

    def _answer_all(self, text: str) -> None:
        """Answer every waiter now: the state was rendered inline, in this turn anyway."""
        waiters, self._waiters = self._waiters, []
        answering = _Answering(waiters, text=text)
        while answering.next():
            pass

    def _answer_spread(self, utf8: Utf8Text) -> None:
        """Answer the waiters one per turn of the loop: each may copy the whole state
        (a ``str`` requester, or the second to frame the buffer) and send it."""
        waiters, self._waiters = self._waiters, []
        answering = _Answering(waiters, utf8=utf8)
        loop = self._loop
        assert loop is not None
        closes = self._closes

        # Not cancelled by the next snapshot: its waiters came later, these are still owed.
        def next_one() -> None:
            if self._closes == closes and answering.next():
                loop.call_soon(next_one)

        next_one()

    def forget(self) -> None:
        """Answer the next request with a new snapshot (the state changed in a way its
        asker expects to see at once: an operator's action), and free the kept one."""
        self._last = None
        if self._last_expiry is not None:
            self._last_expiry.cancel()
            self._last_expiry = None

    def close(self) -> None:
        """Stop a snapshot in progress, answering nobody (the master is stopping)."""
        self.forget()
        self._closes += 1
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
        self._child, self._pipe, self._transfer, self._waiters = None, None, None, []


class _Waiter:
    """One request: exactly one of its replies is set (wants a ``str``, or the UTF-8)."""

    __slots__ = ("encoded", "text")

    def __init__(self, text: Reply | None, encoded: EncodedReply | None) -> None:
        self.text = text
        self.encoded = encoded


class _Answering:
    """The waiters of one snapshot, answered one at a time. The snapshot is converted
    (UTF-8 from a ``str`` rendered inline, a ``str`` from a child's UTF-8) once, for
    the first waiter wanting the other form."""

    __slots__ = ("_text", "_utf8", "_waiters")

    def __init__(
        self, waiters: list[_Waiter], *, text: str | None = None, utf8: Utf8Text | None = None
    ) -> None:
        self._waiters = deque(waiters)
        self._text = text
        self._utf8 = utf8

    def next(self) -> bool:
        """Answer the next waiter; False if none was left. A failing reply is logged:
        one broken requester must not starve the others."""
        if not self._waiters:
            return False
        waiter = self._waiters.popleft()
        try:
            if waiter.encoded is not None:
                waiter.encoded(self._as_utf8())
            elif waiter.text is not None:
                waiter.text(self._as_text())
        except Exception:
            log.exception("sending the state failed")
        return True

    def _as_utf8(self) -> Utf8Text:
        if self._utf8 is None:
            assert self._text is not None
            self._utf8 = Utf8Text.of(self._text.encode("utf-8"))
        return self._utf8

    def _as_text(self) -> str:
        if self._text is None:
            assert self._utf8 is not None
            self._text = self._utf8.decode()
        return self._text


class _Transfer:
    """A child's answer coming through its pipe: its length (:data:`_LENGTH`), then that
    many bytes of UTF-8, copied into a :class:`Utf8Text` at most :data:`READ_MAX` at a
    time, with no joining of pieces."""

    __slots__ = ("_got", "_length", "text")

    def __init__(self) -> None:
        self._length = b""
        self._got = 0
        self.text: Utf8Text | None = None
        """Where the answer goes, once its length is known."""

    @property
    def complete(self) -> bool:
        """True if the whole answer the child announced arrived (and nothing more)."""
        return self.text is not None and self._got == self.text.size

    def read_some(self, fd: int) -> bool:
        """One read from ``fd``, of at most :data:`READ_MAX` bytes; True at the end of
        the child's output: the pipe closed, or more came than announced (then not
        :attr:`complete`). Raises ``BlockingIOError`` if nothing is there yet."""
        text = self.text
        if text is None:
            piece = os.read(fd, _LENGTH.size - len(self._length))
            self._length += piece
            if len(self._length) == _LENGTH.size:
                self.text = Utf8Text(_LENGTH.unpack(self._length)[0])
            return not piece
        if self._got == text.size:
            # All there: what follows must be the end (a byte more is a broken child).
            if os.read(fd, 1):
                self._got += 1
            return True
        got = os.readv(fd, [text.view()[self._got : self._got + READ_MAX]])
        self._got += got
        return got == 0


def _enlarge(fd: int) -> None:
    """Ask for a pipe of :data:`PIPE_SIZE`: a MiB per wakeup, not 64 KiB. Not having
    it (another system, a quota of pipe memory) only means more, shorter reads."""
    try:
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
    except (AttributeError, OSError):
        pass


def _render_in_child(render: Callable[[], str], fd: int) -> None:
    """Never returns. Touches nothing shared: no logging (its locks may be held by a
    thread that does not exist here), no event loop, no sockets, no exit handlers.
    Writes the length of the UTF-8, then the UTF-8: the parent knows how much to
    expect, so it can read it into one buffer and tell a cut answer from a whole one."""
    status = 1
    try:
        gc.disable()  # a collection would write to every page of the heap
        try:
            os.nice(CHILD_NICENESS)
        except OSError:
            pass  # not allowed here: render at the master's priority
        data = render().encode("utf-8")
        _write_all(fd, _LENGTH.pack(len(data)))
        _write_all(fd, data)
        status = 0
    except BaseException:  # noqa: BLE001 - the parent renders inline on a non-zero exit
        pass
    finally:
        os._exit(status)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _reap(pid: int | None) -> int:
    """Wait for the child (it has written everything, so it is exiting); its exit status."""
    if pid is None:
        return 0
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return 0
    return os.waitstatus_to_exitcode(status)
