"""A master contending for leadership through ZooKeeper.

Each contender holds an ephemeral, sequential node under ``<path>/leader`` whose
data is its address (kazoo's election recipe); the lowest node leads. A leader
whose process dies loses its node when its session expires, so the next
contender leads after at most the session timeout (the platform notes measured
1.8 s with a 2 s session).

No split brain: the moment the connection to ZooKeeper is *suspended* (the
session may already have expired on the server's side, and another master may
lead), the leader is demoted and ``on_demoted`` runs. It does not wait to learn
whether the session survived. Once connected again it contends afresh, as a
standby.

Usage::

    election = LeaderElection("zk://127.0.0.1:2181/mezzo", "10.0.0.5:5050",
                              on_elected=..., on_demoted=...)
    election.start()        # returns at once; the callbacks come on kazoo's threads
    ...
    election.stop()
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import structlog
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NoNodeError

from .client import new_client, start_session
from .mesos_discovery import MesosDiscovery
from .url import ZkUrl, parse_zk_url

log = structlog.get_logger("mezzo.zk", component="leader-election")


class LeaderElection:
    """Contend for leadership of ``url`` under the name ``address``; see the module docstring.

    ``on_elected()`` and ``on_demoted(reason)`` run on kazoo's threads, alternately,
    starting with ``on_elected``. They must not block: hand the news to your loop.
    While leading it also names itself to Mesos frameworks (:mod:`.mesos_discovery`),
    as ``master_id()`` if given.
    """

    def __init__(
        self,
        url: ZkUrl | str,
        address: str,
        *,
        on_elected: Callable[[], None],
        on_demoted: Callable[[str], None],
        session_timeout: float = 10.0,
        master_id: Callable[[], str] | None = None,
    ) -> None:
        self.url = url if isinstance(url, ZkUrl) else parse_zk_url(url)
        self.address = address
        self._on_elected = on_elected
        self._on_demoted = on_demoted
        self._zk = new_client(self.url, session_timeout)
        self._zk.add_listener(self._state_changed)
        self._election = self._zk.Election(self.url.election_path, address)
        self._discovery = MesosDiscovery(self._zk, self.url, address, master_id)  # for Mesos frameworks
        self._lock = threading.Lock()
        self._leading = False
        self._released = threading.Event()
        self._connected = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None

    @property
    def is_leader(self) -> bool:
        return self._leading

    @property
    def client(self) -> KazooClient:
        """The session the election runs on; the leader writes its registry through it,
        so those writes stop with its leadership."""
        return self._zk

    def start(self, timeout: float = 15.0) -> None:
        """Connect (raises :class:`TimeoutError` if ZooKeeper is unreachable) and start contending."""
        start_session(self._zk, self.url, timeout)
        self._connected.set()
        self._thread = threading.Thread(target=self._contend, name="mezzo-leader-election", daemon=True)
        self._thread.start()

    def leader(self) -> str | None:
        """The current leader's address as ZooKeeper has it (any contender may ask)."""
        contenders = self._election.contenders()
        return contenders[0] if contenders else None

    def stop(self) -> None:
        """Leave the election; a leader steps down first (``on_demoted`` runs)."""
        self._stopping = True
        self._demote("stopping")
        self._connected.set()  # wake a contender waiting for the connection
        try:
            self._election.cancel()
        except KazooException:
            pass
        if self._thread is not None:
            # Connected, the contender leaves at once (cancelled). Not connected, it may be
            # blocked in a request kazoo retries until the session is lost: stopping the
            # client below fails that request and ends it; a master asked to stop during a
            # ZooKeeper outage must not wait out the retries (it took 10 s).
            self._thread.join(timeout=10 if self._zk.connected else 0.2)
        self._zk.stop()
        self._zk.close()

    # -- kazoo's threads ---------------------------------------------------------

    def _contend(self) -> None:
        first = True
        while not self._stopping:
            self._connected.wait()
            if self._stopping:
                return
            self._released.clear()
            try:
                if not first:
                    self._remove_own_nodes()
                    self._election = self._zk.Election(self.url.election_path, self.address)
                first = False
                self._election.run(self._lead)
            except KazooException as exc:  # connection trouble while contending or stepping down
                log.info("election interrupted", error=repr(exc))
            if not self._stopping:
                # Demoted or interrupted: contend again, as a standby, once connected.
                self._demote("left the election")

    def _remove_own_nodes(self) -> None:
        """Delete election nodes this session still holds. After a suspension the session
        may have survived, and with it our old node: left there, it would lead while
        we wait behind it, and nobody would act as leader."""
        self._discovery.remove_session_nodes()  # first: see mezzo.zk.mesos_discovery
        session = self._zk.client_id[0] if self._zk.client_id else None
        path = self.url.election_path
        for child in self._zk.get_children(path):
            try:
                _, stat = self._zk.get(f"{path}/{child}")
                if stat.ephemeralOwner == session:
                    self._zk.delete(f"{path}/{child}")
            except NoNodeError:
                continue  # gone meanwhile

    def _lead(self) -> None:
        with self._lock:
            if self._stopping or not self._connected.is_set():
                return
            # A connection lost while we waited in line set this; left set, we would
            # step down the moment we won.
            self._released.clear()
            self._leading = True
        log.info("elected leader", address=self.address, path=self.url.election_path)
        self._on_elected()
        self._discovery.publish(f"{self.url.election_path}/{self._election.lock.node}")
        self._released.wait()
        self._discovery.retract()  # before kazoo deletes our election node

    def _state_changed(self, state: str) -> None:
        # Called on kazoo's connection thread: no blocking, no ZooKeeper calls here.
        if state == KazooState.CONNECTED:
            self._connected.set()
            return
        self._connected.clear()
        self._demote(f"ZooKeeper connection {state.lower()}")

    def _demote(self, reason: str) -> None:
        with self._lock:
            was_leading, self._leading = self._leading, False
        self._released.set()
        if was_leading:
            log.warning("no longer leader", address=self.address, reason=reason)
            self._on_demoted(reason)
