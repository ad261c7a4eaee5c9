"""Following the leading master through ZooKeeper.

Agents, scheduler drivers and tools given ``zk://...`` watch the masters' election
nodes (see :mod:`.election`) and use the address the lowest node carries. The
watch fires on every change of the contenders, so a new leader is known as soon
as ZooKeeper knows it.

Usage::

    detector = LeaderDetector("zk://127.0.0.1:2181/mezzo", on_change=print)
    detector.start()
    address = detector.wait_for_leader(timeout=30)    # "10.0.0.5:5050"
    unsubscribe = detector.subscribe(other_listener)  # more listeners
    ...
    detector.stop()

A process with many drivers (the scale benchmarks run 200 schedulers in one
process) shares one detector per ensemble and path through :func:`shared_detector`:
one ZooKeeper session and one watch instead of one each.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import structlog
from kazoo.exceptions import KazooException

from .client import new_client, start_session
from .url import ZkUrl, parse_zk_url

log = structlog.get_logger("mezzo.zk", component="leader-detector")


class LeaderDetector:
    """The current leader of ``url``; ``on_change(address or None)`` runs on kazoo's
    thread whenever it changes (None: no master is leading)."""

    def __init__(
        self,
        url: ZkUrl | str,
        on_change: Callable[[str | None], None] | None = None,
        *,
        session_timeout: float = 10.0,
    ) -> None:
        self.url = url if isinstance(url, ZkUrl) else parse_zk_url(url)
        self._listeners: list[Callable[[str | None], None]] = [on_change] if on_change is not None else []
        self._zk = new_client(self.url, session_timeout)
        self._election = self._zk.Election(self.url.election_path)
        self._leader: str | None = None
        self._changed = threading.Condition()
        self._stopped = False

    def start(self, timeout: float = 15.0) -> None:
        """Connect and start watching; :class:`TimeoutError` if ZooKeeper is unreachable."""
        start_session(self._zk, self.url, timeout)
        self._zk.ChildrenWatch(self.url.election_path, self._contenders_changed)

    def subscribe(self, listener: Callable[[str | None], None]) -> Callable[[], None]:
        """Also call ``listener(address or None)`` on every change; returns the unsubscriber."""
        with self._changed:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._changed:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def leader(self) -> str | None:
        """The leading master's address, or None while nobody leads."""
        return self._leader

    def wait_for_leader(self, timeout: float, other_than: str | None = None) -> str:
        """Block until a master leads (one other than ``other_than``, if given); its address.

        Raises :class:`TimeoutError` when none does within ``timeout`` seconds.
        """
        with self._changed:
            ok = self._changed.wait_for(
                lambda: self._leader is not None and self._leader != other_than, timeout
            )
            if not ok:
                raise TimeoutError(f"no master leads {self.url} after {timeout:g} s")
            return self._leader  # type: ignore[return-value]

    def stop(self) -> None:
        self._stopped = True
        self._zk.stop()
        self._zk.close()

    def _contenders_changed(self, _children: list[str]) -> bool | None:
        if self._stopped:
            return False  # ends the watch
        try:
            contenders = self._election.contenders()
        except KazooException as exc:
            log.info("cannot read the contenders", error=repr(exc))
            return None
        leader = contenders[0] if contenders else None
        with self._changed:
            if leader == self._leader:
                return None
            self._leader = leader
            self._changed.notify_all()
            listeners = list(self._listeners)
        log.info("leader changed", leader=leader, path=self.url.election_path)
        for listener in listeners:
            try:
                listener(leader)
            except Exception:  # one listener's bug must not silence the others
                log.exception("leader listener failed")
        return None


_shared: dict[tuple[int, ZkUrl], tuple[LeaderDetector, int]] = {}
_shared_lock = threading.Lock()


def shared_detector(url: ZkUrl | str, timeout: float = 15.0) -> tuple[LeaderDetector, Callable[[], None]]:
    """This process's detector of ``url``, started on first use, and its release.

    Every caller must call the release once when done; the last one stops the
    detector. Blocks while the first caller connects (:class:`TimeoutError` if
    ZooKeeper cannot be reached in ``timeout`` seconds).
    """
    zk_url = url if isinstance(url, ZkUrl) else parse_zk_url(url)
    key = (os.getpid(), zk_url)  # a forked child needs its own session
    with _shared_lock:
        entry = _shared.get(key)
        if entry is None:
            detector = LeaderDetector(zk_url)
            detector.start(timeout)
            entry = (detector, 0)
        detector, users = entry
        _shared[key] = (detector, users + 1)
    released = threading.Event()

    def release() -> None:
        if released.is_set():
            return
        released.set()
        with _shared_lock:
            det, n = _shared.get(key, (None, 0))
            if det is not detector:
                return
            if n <= 1:
                del _shared[key]
                detector.stop()
            else:
                _shared[key] = (detector, n - 1)

    return detector, release
