"""What the master's state needs from the outside world: a clock and an outbox.

The cluster state (:mod:`.state`) and the logic over it own no event loop and no
connection. They read the time and set timers through a :class:`Clock`, and send
through an :class:`Outbox`, addressing peers by their records. The master wires
the real ones (:class:`LoopClock`, :class:`ConnectionOutbox`); a test can wire a
manual clock and an outbox that records what would have been sent
(:class:`ManualClock`, :class:`RecordingOutbox`), and drive the state without sockets or sleeps.

A record's ``conn`` is the peer's *link*: opaque to the state, which compares it
(``record.conn is None`` means disconnected) and hands it back to the outbox, but
never calls it.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Callable
from typing import Any, Protocol

from ..services import AGENT, SCHEDULER


class Timer(Protocol):
    """A scheduled callback (``asyncio.TimerHandle`` is one)."""

    def cancel(self) -> None: ...


class Clock(Protocol):
    """Monotonic time and timers, in seconds."""

    def now(self) -> float: ...

    def call_soon(self, callback: Callable[..., Any], *args: Any) -> Timer:
        """Run ``callback`` as soon as the current work is done (before timers that are due)."""
        ...

    def call_at(self, when: float, callback: Callable[..., Any], *args: Any) -> Timer: ...

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Timer: ...


class Outbox(Protocol):
    """Where the state's messages go.

    ``scheduler(link)`` and ``agent(link)`` return a stub whose methods are the
    calls of the Scheduler and Agent services (``thrift/mezzo.thrift``): sending is
    one-way and never fails; a message to a peer that is gone is dropped (the
    protocol makes up for it with acknowledgements and re-registration).
    """

    def scheduler(self, link: Any) -> Any: ...

    def agent(self, link: Any) -> Any: ...

    def close(self, link: Any) -> None:
        """Close the link once what was sent on it is flushed."""

    def hold_reading(self, link: Any) -> Callable[[], None]:
        """Handle no more messages from ``link`` until the returned release is called
        (idempotent): work on one of its messages goes on over several turns of the
        loop, and the next ones must wait for it (see :meth:`mezzo.rpc.Connection.hold_reading`)."""


class LoopClock:
    """:class:`Clock` of the running asyncio event loop.

    asyncio's loop time is ``time.monotonic()``, so reading the time needs no loop
    and a master can be built before its loop runs; timers are set on whichever
    loop is running when they are set (the master's: it runs on one).
    """

    __slots__ = ()

    now = staticmethod(time.monotonic)

    def call_soon(self, callback: Callable[..., Any], *args: Any) -> Timer:
        return asyncio.get_running_loop().call_soon(callback, *args)

    def call_at(self, when: float, callback: Callable[..., Any], *args: Any) -> Timer:
        return asyncio.get_running_loop().call_at(when, callback, *args)

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Timer:
        return asyncio.get_running_loop().call_later(delay, callback, *args)


class ConnectionOutbox:
    """:class:`Outbox` over :class:`mezzo.rpc.Connection` links."""

    __slots__ = ()

    def scheduler(self, link: Any) -> Any:
        return link.remote(SCHEDULER)

    def agent(self, link: Any) -> Any:
        return link.remote(AGENT)

    def close(self, link: Any) -> None:
        link.close()

    def hold_reading(self, link: Any) -> Callable[[], None]:
        # Test doubles that serve one call at a time when told to need not hold.
        hold = getattr(link, "hold_reading", None)
        return hold() if hold is not None else _no_release


class ManualClock:
    """:class:`Clock` whose time moves only when told to (tests, simulations).

    Timers fire in time order, each at its own time, during :meth:`advance`;
    ``call_soon`` callbacks run at the next :meth:`advance` (``advance(0)`` runs them).
    """

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._timers: list[tuple[float, int, _ManualTimer]] = []
        self._seq = 0

    def now(self) -> float:
        return self._now

    def call_soon(self, callback: Callable[..., Any], *args: Any) -> Timer:
        return self.call_at(self._now, callback, *args)

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Timer:
        return self.call_at(self._now + max(delay, 0.0), callback, *args)

    def call_at(self, when: float, callback: Callable[..., Any], *args: Any) -> Timer:
        timer = _ManualTimer(callback, args)
        self._seq += 1
        heapq.heappush(self._timers, (when, self._seq, timer))
        return timer

    def advance(self, seconds: float) -> int:
        """Move time forward by ``seconds``, firing every timer due on the way; how many fired."""
        until = self._now + seconds
        fired = 0
        while self._timers and self._timers[0][0] <= until:
            when, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self._now = max(self._now, when)
            timer.callback(*timer.args)
            fired += 1
        self._now = until
        return fired

    def turn(self) -> int:
        """One turn of a real loop: fire the timers due now that were set before this
        call (not those they set, unlike ``advance(0)``); how many fired."""
        last = self._seq
        fired = 0
        while self._timers and self._timers[0][0] <= self._now and self._timers[0][1] <= last:
            _, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            timer.callback(*timer.args)
            fired += 1
        return fired

    def jump(self, seconds: float) -> None:
        """Move time forward by ``seconds`` without firing anything: a loop that was
        stalled (held by a long handler, or its process stopped). The timers that came
        due fire, late, at the next :meth:`advance`."""
        self._now += seconds

    def pending(self) -> int:
        """Timers not yet fired nor cancelled."""
        return sum(1 for _, _, t in self._timers if not t.cancelled)


class _ManualTimer:
    __slots__ = ("args", "callback", "cancelled")

    def __init__(self, callback: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.callback = callback
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class RecordingOutbox:
    """:class:`Outbox` that records instead of sending: ``sent`` holds
    ``(link, service, call, args)`` in order; links are whatever the test used."""

    def __init__(self) -> None:
        self.sent: list[tuple[Any, str, str, tuple[Any, ...]]] = []
        self.closed: list[Any] = []
        self.held: list[Any] = []
        """Links whose reading is held (:meth:`hold_reading`), once per hold."""

    def scheduler(self, link: Any) -> Any:
        return _Recorder(self, link, "Scheduler")

    def agent(self, link: Any) -> Any:
        return _Recorder(self, link, "Agent")

    def close(self, link: Any) -> None:
        self.closed.append(link)

    def hold_reading(self, link: Any) -> Callable[[], None]:
        """Records ``link`` in ``held`` until released."""
        self.held.append(link)

        def release() -> None:
            if link in self.held:
                self.held.remove(link)

        return release

    def calls(self, link: Any, call: str) -> list[tuple[Any, ...]]:
        """The arguments of every ``call`` sent to ``link``."""
        return [args for lk, _, c, args in self.sent if lk is link and c == call]


def _no_release() -> None:
    return None


class _Recorder:
    def __init__(self, outbox: RecordingOutbox, link: Any, service: str) -> None:
        self._outbox, self._link, self._service = outbox, link, service
        self._schema = SCHEDULER if service == "Scheduler" else AGENT

    def __getattr__(self, call: str) -> Callable[..., None]:
        if call not in self._schema.methods:
            raise AttributeError(f"service {self._service} has no method {call!r}")

        def record(*args: Any) -> None:
            self._outbox.sent.append((self._link, self._service, call, args))

        return record
