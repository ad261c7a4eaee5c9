"""Where to dial a peer: a fixed ``host:port``, or the master ZooKeeper says leads.

Agents, scheduler drivers, ``mezzo run`` and ``mezzo state`` take ``--master`` as
either form; everything that dials goes through :func:`peer_address`, so that
following a failed-over master is one code path.

Usage (on an event loop)::

    target = peer_address("zk://127.0.0.1:2181/mezzo", default_port=5050)
    await target.start()                 # zk: connects to ZooKeeper (in a thread)
    host_port = target.current()         # ("127.0.0.1", 5050), or None while nobody leads
    await target.changed(timeout=0.5)    # returns early when the leader changes
    target.add_listener(fn)              # fn(host_port or None) on the loop, on every change
    target.close()

Error handling: a malformed address raises :class:`ValueError` naming it when the
object is made; an unreachable ZooKeeper raises :class:`TimeoutError` from
:meth:`start`. A leader's address that cannot be parsed counts as "nobody
leads" (and is logged), never as an exception in the dialling loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from .errors import ConfigError
from .rpc import parse_address

log = structlog.get_logger("mezzo.discovery")

HostPort = tuple[str, int]


class FixedAddress:
    """A peer at one address that never moves."""

    is_zk = False

    def __init__(self, host: str, port: int) -> None:
        self._address = (host, port)

    def __str__(self) -> str:
        return f"{self._address[0]}:{self._address[1]}"

    async def start(self) -> None:
        pass

    def current(self) -> HostPort | None:
        return self._address

    async def changed(self, timeout: float) -> bool:
        """Wait ``timeout`` seconds (a fixed address never changes); False."""
        await asyncio.sleep(timeout)
        return False

    def add_listener(self, listener: Callable[[HostPort | None], None]) -> None:
        pass

    def close(self) -> None:
        pass


class LeaderAddress:
    """The master leading a ZooKeeper election (see :mod:`mezzo.zk`)."""

    is_zk = True

    def __init__(self, url: str, default_port: int, connect_timeout: float = 15.0) -> None:
        from .zk import parse_zk_url
        from .zk.url import shown

        try:
            self.url = parse_zk_url(url)
        except ConfigError as exc:
            raise ValueError(f"master address {shown(url)!r}: {exc.problem}") from None
        self._default_port = default_port
        self._connect_timeout = connect_timeout
        self._leader: HostPort | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._change = asyncio.Event()
        self._listeners: list[Callable[[HostPort | None], None]] = []
        self._release: Callable[[], None] | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._closed = False

    def __str__(self) -> str:
        leader = self._leader
        now = f"{leader[0]}:{leader[1]}" if leader is not None else "no leader"
        return f"{self.url} ({now})"

    async def start(self) -> None:
        """Connect to ZooKeeper (once) and follow the election from now on."""
        if self._release is not None or self._closed:
            return
        from .zk import shared_detector

        self._loop = asyncio.get_running_loop()
        self._change = asyncio.Event()
        detector, release = await self._loop.run_in_executor(
            None, shared_detector, self.url, self._connect_timeout
        )
        if self._closed:
            release()
            return
        self._release = release
        self._unsubscribe = detector.subscribe(self._from_zk)
        self._set(detector.leader())

    def current(self) -> HostPort | None:
        return self._leader

    async def changed(self, timeout: float) -> bool:
        """Wait until the leader changes, at most ``timeout`` seconds; True if it did."""
        try:
            await asyncio.wait_for(self._change.wait(), timeout)
        except TimeoutError:
            return False
        finally:
            self._change.clear()
        return True

    def add_listener(self, listener: Callable[[HostPort | None], None]) -> None:
        self._listeners.append(listener)

    def close(self) -> None:
        self._closed = True
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._release is not None:
            release, self._release = self._release, None
            # Stopping a ZooKeeper session blocks for a moment: not on the loop.
            loop = self._loop
            if loop is not None and loop.is_running():
                loop.run_in_executor(None, release)
            else:
                release()

    def _from_zk(self, leader: str | None) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._set, leader)

    def _set(self, leader: str | None) -> None:
        address: HostPort | None = None
        if leader:
            try:
                address = parse_address(leader, self._default_port)
            except ValueError:
                log.warning(
                    "the leader published an address that cannot be parsed", leader=leader, url=str(self.url)
                )
        if address == self._leader:
            return
        self._leader = address
        self._change.set()
        for listener in list(self._listeners):
            try:
                listener(address)
            except Exception:
                log.exception("leader listener failed")


def peer_address(text: str, default_port: int, connect_timeout: float = 15.0) -> FixedAddress | LeaderAddress:
    """``host:port`` or ``zk://hosts/path``; :class:`ValueError` naming the text if malformed.

    ``connect_timeout`` bounds how long :meth:`LeaderAddress.start` waits for ZooKeeper.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"master address {text!r} is empty; expected HOST:PORT or zk://HOST:PORT/PATH")
    text = text.strip()
    if text.startswith("zk://"):
        return LeaderAddress(text, default_port, connect_timeout)
    if "://" in text:
        raise ValueError(f"master address {text!r}: expected HOST:PORT or zk://HOST:PORT/PATH")
    host, port = parse_address(text, default_port)
    return FixedAddress(host, port)
