"""Bounds on what the peers of a server can make it hold: descriptors, time, memory.

A daemon that serves (the master; an agent, for its executors and tools) must keep
serving whatever its peers do: open connections and say nothing, start a frame
and never finish it, ask and never read the answers. One
:class:`ConnectionLimiter` per server enforces, on every connection it accepts:

- **Admission.** At most ``max_open`` connections at once, and at most
  ``max_per_address`` from one remote address (``max_per_loopback_address`` from
  one loopback address). The listener (:mod:`.listener`) asks :meth:`admit`
  right after ``accept()``, and a connection over a limit is reset there and then,
  before anything is read from it or any object is made for it: the descriptors
  in use never exceed the bound by more than the one being refused.
  ``max_open = 0`` follows the process's open-file limit (:func:`max_open_allowed`),
  keeping a share of descriptors for the daemon's own files, pipes and ZooKeeper
  session: a listener that runs into EMFILE cannot accept anyone, not even to
  refuse them, while one that refuses at its own bound keeps serving.
- **Time.** A connection that delivers no complete frame within
  ``first_frame_timeout`` of being accepted; one whose peer never registered
  (``conn.tag`` is None: the master's FrameworkTag/AgentTag, an agent's
  ExecutorRun) and sent nothing for ``unregistered_idle_timeout``; one holding an
  incomplete frame for ``partial_frame_timeout`` (counted only while we read from
  it: not while its reply backlog, a frame on the decode worker or a handler holds
  reading back): closed. A tool (``mezzo state``)
  asks at once and leaves once answered; a connection with output still waiting
  for its peer is never idle.
- **Memory read.** The bytes held in incomplete frames over all connections stay
  within ``partial_frames_max_bytes`` (never below one frame of ``max_frame``):
  past it, the connections whose incomplete frames are the oldest are closed. A
  stalled sender is the oldest; a healthy one completes its frame and leaves the
  queue.
- **Memory written.** A connection whose peer does not read, so that its transport
  holds more than ``write_buffer_high`` unsent bytes, is not read from until the
  backlog drains to a quarter of that (``pause_writing``/``resume_writing``): it
  cannot ask for more while it does not take what it asked for. One that already
  has ``write_buffer_max`` unsent bytes when something more is sent to it is
  aborted; a single message larger than that still goes to a peer that is
  keeping up. One that takes not one byte for ``write_stall_timeout`` while
  paused, or while closing with output pending (a graceful close waits for the
  peer to read), is aborted.

Whose time: with a ``stalls`` clock (the master passes its
:class:`~mezzo.master.loop_watch.LoopWatch`), every timeout counts only time the
server's event loop was able to run. A master whose loop was held for 25 s (a
saturated loop at twice its capacity, a SIGSTOP, a CPU hog) would otherwise close
the tool that connected just before as silent for ``first_frame_timeout``, for a
silence that was its own.

Cost: no timer per connection. One sweep runs every :func:`sweep_interval` seconds
while the server has connections, and looks only at connections that can be due:
those awaiting their first frame and those holding an incomplete frame sit in
dicts ordered by deadline, so the sweep stops at the first one not due; stalled
writers are few. Only the idle check reads every connection, once per quarter of
``unregistered_idle_timeout``: about a millisecond per 5,000 connections. Per
chunk of bytes received, the connection makes one call here, a few dict and
integer operations.

Every refusal and closing is counted (:meth:`ConnectionLimiter.stats`, which the
master reports under ``connections`` in its metrics) and logged with the setting
that caused it: the first of a kind at once, then at most one line per
:data:`LOG_EVERY` seconds, carrying how many there were since the last line.
"""

from __future__ import annotations

import ipaddress
import resource
import sys
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from .framing import DEFAULT_MAX_FRAME

if TYPE_CHECKING:
    import asyncio

    from .connection import Connection

log = structlog.get_logger("mezzo.rpc")

LOG_EVERY = 10.0
"""Seconds between two log lines of one kind of refusal or closing (the first is logged at once)."""

RESERVED_FRACTION = 8
"""With ``max_open = 0``, one descriptor in this many is kept for the daemon's own use."""
RESERVED_MIN = 32
"""... and never fewer than this many (a master needs a few for its log, the pipe of a
state snapshot, ZooKeeper; an agent one or two per running task)."""

REFUSALS = ("max_open", "max_per_address")
"""Why a connection is refused at admission, by the setting that refused it."""
CLOSINGS = (
    "first_frame_timeout",
    "unregistered_idle_timeout",
    "partial_frame_timeout",
    "partial_frames_max_bytes",
    "write_buffer_max",
    "write_stall_timeout",
)
"""Why an admitted connection is closed by a limit, by the setting that closed it."""

_MESSAGES = {
    "max_open": "refusing a connection: max_open connections are open",
    "max_per_address": "refusing a connection: its address has max_per_address connections open",
    "first_frame_timeout": "closing a connection: no complete message within first_frame_timeout",
    "unregistered_idle_timeout": "closing a connection: never registered and silent for unregistered_idle_timeout",
    "partial_frame_timeout": "closing a connection: a message incomplete for partial_frame_timeout",
    "partial_frames_max_bytes": "closing a connection: incomplete messages exceed partial_frames_max_bytes; its is the oldest",
    "write_buffer_max": "closing a connection: its peer does not read and write_buffer_max bytes wait for it",
    "write_stall_timeout": "closing a connection: its peer read nothing for write_stall_timeout",
}


class StallClock(Protocol):
    """The server's own stalls (:class:`mezzo.master.loop_watch.LoopWatch`)."""

    @property
    def running(self) -> bool:
        """Whether it is watching now (a master watches its loop while it leads)."""

    def sample(self) -> None:
        """Account for the time since the clock last looked (a stall just ended)."""

    def listened_since(self, then: float) -> float:
        """Seconds since loop time ``then`` that the loop was able to run."""


class LimitSettings(Protocol):
    """What a :class:`ConnectionLimiter` reads of its settings
    (:class:`mezzo.config.ConnectionsConfig`, ``[master.connections]`` and
    ``[agent.connections]``, which documents each). Counts of 0 and durations of 0
    mean no limit, but for ``max_open``: 0 follows the open-file limit."""

    @property
    def max_open(self) -> int: ...
    @property
    def max_per_address(self) -> int: ...
    @property
    def max_per_loopback_address(self) -> int: ...
    @property
    def first_frame_timeout(self) -> float: ...
    @property
    def unregistered_idle_timeout(self) -> float: ...
    @property
    def partial_frame_timeout(self) -> float: ...
    @property
    def partial_frames_max_bytes(self) -> int: ...
    @property
    def write_buffer_high(self) -> int: ...
    @property
    def write_buffer_max(self) -> int: ...
    @property
    def write_stall_timeout(self) -> float: ...


# -- pure rules --------------------------------------------------------------------


def max_open_allowed(setting: int, soft_limit: int) -> int:
    """Connections a server may hold open under an open-file limit of ``soft_limit``.

    The open-file limit less a reserve (an eighth, at least :data:`RESERVED_MIN`);
    ``setting`` 0 means exactly that, and a setting above it is cut down to it. An
    unlimited (or negative, i.e. RLIM_INFINITY) ``soft_limit`` leaves ``setting``
    as is (0: no limit, ``sys.maxsize``).
    """
    if soft_limit < 0 or soft_limit == resource.RLIM_INFINITY:
        return setting or sys.maxsize
    allowed = max(1, soft_limit - max(RESERVED_MIN, soft_limit // RESERVED_FRACTION))
    return min(setting, allowed) if setting else allowed


def open_file_limit() -> int:
    """This process's soft limit on open descriptors, now (RLIM_INFINITY if unlimited)."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def address_of(peername: Any) -> tuple[str, bool]:
    """The address a peer is counted under, and whether it is a loopback address.

    ``peername`` is the transport's (``(host, port)``, ``(host, port, flow, scope)``
    for IPv6). An IPv4 address seen through a dual-stack socket
    (``::ffff:10.0.0.1``) counts as that IPv4 address. A peer without an IP address
    (a Unix socket) is local: ``("", True)``.
    """
    host = peername[0] if isinstance(peername, tuple) and peername else ""
    if not isinstance(host, str) or not host:
        return "", True
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host, False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip), ip.is_loopback


def sweep_interval(settings: LimitSettings) -> float:
    """Seconds between two sweeps: a quarter of the shortest timeout in force, between
    0.05 and 1 s, so nothing outlives its timeout by more than a quarter (or a second);
    0 when no timeout is in force (no sweep at all)."""
    timeouts = [
        t
        for t in (
            settings.first_frame_timeout,
            settings.unregistered_idle_timeout,
            settings.partial_frame_timeout,
            settings.write_stall_timeout,
        )
        if t > 0
    ]
    if not timeouts:
        return 0.0
    return min(1.0, max(0.05, min(timeouts) / 4))


def _peer_text(peername: Any) -> str:
    """``host:port`` as connections name their peer."""
    if isinstance(peername, tuple) and len(peername) >= 2:
        return f"{peername[0]}:{peername[1]}"
    return "?"


class _Throttled:
    """Log lines per kind: the first at once, then at most one per ``every`` seconds,
    each saying how many were not logged since the previous one."""

    def __init__(self, logger: Any, every: float) -> None:
        self._log = logger
        self._every = every
        self._last: dict[str, float] = {}
        self._unlogged: dict[str, int] = {}

    def note(self, kind: str, now: float, **fields: Any) -> None:
        last = self._last.get(kind)
        if last is not None and now - last < self._every:
            self._unlogged[kind] = self._unlogged.get(kind, 0) + 1
            return
        if last is not None:
            fields["not_logged_since_last_line"] = self._unlogged.get(kind, 0)
        self._last[kind] = now
        self._unlogged[kind] = 0
        self._log.warning(_MESSAGES[kind], **fields)


# -- the limiter -------------------------------------------------------------------


class ConnectionLimiter:
    """The bounds of one server's connections; see the module docstring.

    Made by the daemon (it reads :meth:`stats`) and handed to
    :func:`mezzo.rpc.serve`. Everything happens on the event loop: the listener
    calls :meth:`admit` for each accepted socket (and :meth:`abandon` if no
    connection could be made of it); each connection then calls :meth:`made`,
    :meth:`received` per chunk, :meth:`write_paused`/:meth:`write_resumed`,
    :meth:`closing` and :meth:`overflow`, and :meth:`release` when lost.
    """

    def __init__(
        self,
        settings: LimitSettings,
        *,
        max_frame: int = DEFAULT_MAX_FRAME,
        logger: Any = None,
        nofile: Callable[[], int] = open_file_limit,
        stalls: StallClock | None = None,
    ) -> None:
        self.settings = settings
        self._stalls = stalls
        self._log = logger if logger is not None else log
        self._nofile = nofile
        self.partial_budget = max(settings.partial_frames_max_bytes, max_frame)
        """``partial_frames_max_bytes``, but never less than one whole frame."""
        self.interval = sweep_interval(settings)
        self.open = 0
        """Connections admitted and not yet lost (made or still being made)."""
        self.conns: set[Connection] = set()
        """Admitted connections made and not yet lost."""
        self.partial_bytes = 0
        """Bytes held in incomplete frames, over all connections."""
        self.refused = dict.fromkeys(REFUSALS, 0)
        self.closed = dict.fromkeys(CLOSINGS, 0)
        self._hosts: dict[Connection, str] = {}
        self._per_address: dict[str, int] = {}
        # The three below are read oldest first. OrderedDicts: a plain dict keeps the
        # slots of deleted keys until it resizes, so taking its first key again and
        # again after deleting the one before costs more each time.
        self._awaiting_first: OrderedDict[Connection, float] = OrderedDict()
        """Accept time of connections with no complete frame yet; oldest first."""
        self._held: OrderedDict[Connection, int] = OrderedDict()
        """Bytes of the incomplete frame of each connection that holds one."""
        self._partials: OrderedDict[Connection, float] = OrderedDict()
        """When each held incomplete frame began, oldest first (not while paused)."""
        self._stalled: dict[Connection, tuple[int, float]] = {}
        """Paused or closing with output: (bytes its peer had taken, when that last grew)."""
        self._paused = 0
        self._next_idle_scan = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._logs = _Throttled(self._log, LOG_EVERY)
        configured, allowed = settings.max_open, self.max_open()
        if configured and allowed < configured:
            self._log.warning(
                "max_open is above what the open-file limit allows; using the lower bound",
                max_open=configured,
                open_file_limit=nofile(),
                used=allowed,
            )

    def max_open(self) -> int:
        """The bound on open connections in force now (it follows the open-file limit)."""
        return max_open_allowed(self.settings.max_open, self._nofile())

    # -- from connections ------------------------------------------------------------

    def admit(self, peername: Any, now: float) -> str | None:
        """A socket from ``peername`` was just accepted: the address it is counted
        under, its slot taken; or None if it is over a limit (then the caller resets
        it at once; the refusal is counted and logged here)."""
        host, loopback = address_of(peername)
        limit = self.max_open()
        if self.open >= limit:
            self._refuse("max_open", peername, now, open=self.open, max_open=limit)
            return None
        s = self.settings
        per_address = s.max_per_loopback_address if loopback else s.max_per_address
        count = self._per_address.get(host, 0)
        if per_address and count >= per_address:
            self._refuse(
                "max_per_address", peername, now, open_from_address=count, max_per_address=per_address
            )
            return None
        self.open += 1
        self._per_address[host] = count + 1
        return host

    def abandon(self, address: str) -> None:
        """An admitted socket never became a connection: give its slot back."""
        self.open -= 1
        left = self._per_address[address] - 1
        if left:
            self._per_address[address] = left
        else:
            del self._per_address[address]

    def made(self, conn: Connection, address: str, now: float) -> None:
        """``conn`` is the connection of a socket admitted under ``address``."""
        self.conns.add(conn)
        self._hosts[conn] = address
        if self.settings.first_frame_timeout > 0:
            self._awaiting_first[conn] = now
        if self._timer is None and self.interval > 0:
            loop = conn._loop
            self._timer = loop.call_later(self.interval, self._tick, loop)

    def received(self, conn: Connection, frames: int, now: float) -> None:
        """``conn`` got bytes that completed ``frames`` frames; account for the rest."""
        if frames and self._awaiting_first:
            self._awaiting_first.pop(conn, None)
        pending = conn.pending_input
        held = self._held.get(conn, 0)
        if pending == held and not (pending and frames):
            return  # the common case: whole frames only, nothing held before or after
        self.partial_bytes += pending - held
        if not pending:
            del self._held[conn]
            self._partials.pop(conn, None)
            return
        self._held[conn] = pending
        if conn.write_paused or conn.reading_held:
            # We stopped reading (a slow reader, a frame on the decode worker, a
            # handler's hold): what is incomplete waits for us, not for the peer.
            self._partials.pop(conn, None)
        elif frames or not held:
            # A new incomplete frame began in this chunk: its clock starts now.
            self._partials.pop(conn, None)
            self._partials[conn] = now
        if self.partial_bytes > self.partial_budget:
            self._evict(now)

    def write_paused(self, conn: Connection, now: float) -> None:
        """``conn``'s peer fell behind (its transport is above ``write_buffer_high``):
        the connection stopped reading. Its read-side clocks stop meanwhile, since
        whatever it has not sent yet waits for us."""
        self._paused += 1
        self._stalled[conn] = (conn.bytes_sent, now)
        self._awaiting_first.pop(conn, None)
        self._partials.pop(conn, None)

    def write_resumed(self, conn: Connection, now: float) -> None:
        """``conn``'s backlog drained; it reads again."""
        self._paused -= 1
        self._stalled.pop(conn, None)
        if conn in self._held:
            self._partials[conn] = now  # the incomplete frame gets a whole timeout again

    def reading_held(self, conn: Connection) -> None:
        """``conn`` stopped reading for this side's own reasons (a frame on the decode
        worker, a handler's hold): its incomplete frame's clock stops meanwhile."""
        self._partials.pop(conn, None)

    def reading_released(self, conn: Connection, now: float) -> None:
        """``conn`` reads again after :meth:`reading_held`: an incomplete frame gets a
        whole timeout from now."""
        if conn in self._held and not conn.write_paused and conn not in self._partials:
            self._partials[conn] = now

    def closing(self, conn: Connection, now: float) -> None:
        """``conn`` closed gracefully with output its peer has yet to read."""
        if conn not in self._stalled:
            self._stalled[conn] = (conn.bytes_sent, now)

    def overflow(self, conn: Connection, queued: int) -> None:
        """Something more is to be sent to ``conn`` while ``queued`` (at least
        ``write_buffer_max``) bytes wait for its peer: abort it."""
        self._drop("write_buffer_max", conn, conn._loop.time(), unsent=queued)

    def handed_over(self, conn: Connection, to: Connection, now: float) -> None:
        """``conn``'s socket now belongs to ``to`` (another protocol at the port took it
        over, see :meth:`Connection._hand_over`): the same slot, clocks started anew."""
        if conn not in self.conns:
            return
        self.conns.discard(conn)
        address = self._hosts.pop(conn)
        self._forget(conn)
        if conn.write_paused:
            self._paused -= 1
        self.made(to, address, now)

    def release(self, conn: Connection) -> None:
        """``conn`` is lost (any reason). No-op for a connection never admitted."""
        if conn not in self.conns:
            return
        self.conns.discard(conn)
        self.abandon(self._hosts.pop(conn))
        self._forget(conn)
        if conn.write_paused:
            self._paused -= 1

    # -- the sweep ---------------------------------------------------------------------

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        try:
            self.sweep(loop.time())
        except Exception:  # a bug here must not end the bounds for good
            self._log.exception("connection sweep failed")
        if self.conns:
            self._timer = loop.call_later(self.interval, self._tick, loop)

    def sweep(self, now: float) -> None:
        """Close every connection past one of its timeouts at loop time ``now``
        (counting only time the loop could run, with a ``stalls`` clock)."""
        s = self.settings
        elapsed = self._elapsed(now)
        # Each dict is ordered by start time and elapsed() falls as the start grows,
        # so each scan stops at the first connection not yet due.
        if s.first_frame_timeout > 0:
            while self._awaiting_first:
                conn, since = next(iter(self._awaiting_first.items()))
                waited = elapsed(since)
                if waited < s.first_frame_timeout:
                    break
                self._drop("first_frame_timeout", conn, now, seconds=round(waited, 1))
        if s.partial_frame_timeout > 0:
            while self._partials:
                conn, since = next(iter(self._partials.items()))
                waited = elapsed(since)
                if waited < s.partial_frame_timeout:
                    break
                self._drop(
                    "partial_frame_timeout",
                    conn,
                    now,
                    seconds=round(waited, 1),
                    incomplete_bytes=self._held.get(conn, 0),
                )
        if s.write_stall_timeout > 0 and self._stalled:
            for conn, (taken, since) in list(self._stalled.items()):
                sent = conn.bytes_sent
                if sent > taken:
                    self._stalled[conn] = (sent, now)  # slow is fine; stopped is not
                elif elapsed(since) >= s.write_stall_timeout:
                    self._drop("write_stall_timeout", conn, now, unsent=conn.unsent_bytes())
        if s.unregistered_idle_timeout > 0 and now >= self._next_idle_scan:
            self._next_idle_scan = now + max(self.interval, s.unregistered_idle_timeout / 4)
            due = now - s.unregistered_idle_timeout  # listened time is never more than wall time
            idle = [
                c
                for c in self.conns
                if c.tag is None
                and c.last_received <= due
                and elapsed(c.last_received) >= s.unregistered_idle_timeout
            ]
            for conn in idle:
                if conn.is_open and not conn.write_paused and not conn.unsent_bytes():
                    self._count("unregistered_idle_timeout", conn, now)
                    conn.close()  # nothing waits for the peer: a graceful close ends at once

    def _elapsed(self, now: float) -> Callable[[float], float]:
        """Seconds from a loop time to ``now`` that count: all of them, or with a
        ``stalls`` clock only those the loop could run."""
        stalls = self._stalls
        if stalls is None or not stalls.running:
            return lambda since: now - since
        stalls.sample()  # a stall that has just ended is ours, not the peers'
        return stalls.listened_since

    # -- closing -----------------------------------------------------------------------

    def _evict(self, now: float) -> None:
        """Incomplete frames exceed the budget: close the oldest holders until they do not."""
        while self.partial_bytes > self.partial_budget and self._held:
            victim = next(iter(self._partials)) if self._partials else next(iter(self._held))
            self._drop(
                "partial_frames_max_bytes",
                victim,
                now,
                incomplete_bytes=self._held[victim],
                all_incomplete_bytes=self.partial_bytes,
                budget=self.partial_budget,
            )

    def _drop(self, reason: str, conn: Connection, now: float, **fields: Any) -> None:
        self._count(reason, conn, now, **fields)
        self._forget(conn)
        conn.dropped_for = reason  # what the connection's users say when it ends
        conn.abort()

    def _count(self, reason: str, conn: Connection, now: float, **fields: Any) -> None:
        self.closed[reason] += 1
        self._logs.note(reason, now, peer=conn.peer, **fields)

    def _refuse(self, reason: str, peername: Any, now: float, **fields: Any) -> None:
        self.refused[reason] += 1
        self._logs.note(reason, now, peer=_peer_text(peername), **fields)

    def _forget(self, conn: Connection) -> None:
        """Drop ``conn`` from every clock and its incomplete frame from the budget."""
        self._awaiting_first.pop(conn, None)
        self._partials.pop(conn, None)
        self._stalled.pop(conn, None)
        self.partial_bytes -= self._held.pop(conn, 0)

    # -- reporting ---------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counters for metrics: open connections and the bound now, connections not
        read from (their peer is behind), bytes in incomplete frames, and the refusals
        and closings so far by the setting that caused them."""
        return {
            "open": self.open,
            "max_open": self.max_open(),
            "reading_paused": self._paused,
            "incomplete_frame_bytes": self.partial_bytes,
            "refused": dict(self.refused),
            "closed": dict(self.closed),
        }
