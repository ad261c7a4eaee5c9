"""The agents the cluster has admitted: what tells a returning agent from a stranger.

Everything else the master knows is soft state, rebuilt from re-registrations
(paper §3.6). This one list is not: after a failover the new leader must know
whether an agent re-registering under an id was admitted and is welcome back,
or was declared lost (its tasks already reported TASK_LOST to their frameworks),
in which case it must start over as a new agent instead of resurrecting them.

- :class:`MemoryRegistry` (a lone master): admits in memory. Having no memory of
  an earlier master's decisions, it welcomes agents it has never seen and refuses
  only those it removed itself.
- :class:`ZkRegistry` (masters elected through ZooKeeper): one persistent znode per
  admitted agent under ``<path>/registry``. It is the authority: an agent not listed
  there is refused. The leader loads it when elected and writes through it.

An agent declared lost because it fell silent (a partition, a frozen host) is not
forgotten but listed as *unreachable* (:meth:`MemoryRegistry.mark_unreachable`;
``<path>/unreachable`` in ZooKeeper): should it come back, it is welcome, with the
tasks of partition-aware frameworks (which were told TASK_UNREACHABLE) kept and the
others killed (their frameworks were told TASK_LOST). At most :data:`MAX_UNREACHABLE`
are listed; the oldest beyond that are forgotten, as removed agents are.

Both answer :meth:`verdict` from memory, so re-registering 4,000 agents costs no
ZooKeeper round trip; only admitting and removing write.

Both also remember each admitted agent's *owner*: the principal (TLS certificate
name) that registered it, which alone may re-register it (issue 15). A lone
master's records hold that already; the ZooKeeper registry keeps it in the znode's
name, ``<agent id>@<principal, percent-encoded>``, so that a new leader knows it
from the one listing it reads when elected (data under 20,000 znodes would be
20,000 reads) and an agent principal cannot take over another's agent in the
moments after a failover, before the real one is back. Znodes written before
owners were recorded (no ``@``) have none: the first principal back takes them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, unquote

import structlog

log = structlog.get_logger("mezzo.master", component="registry")

WELCOME = "welcome"
REFUSE = "refuse"
UNREACHABLE = "unreachable"
"""The verdict on an agent declared lost for its silence: welcome back, see the module docstring."""

MAX_UNREACHABLE = 10_000
"""Unreachable agents listed at most (the oldest beyond are forgotten, hence refused)."""

REMEMBER_REMOVED = 100_000
"""Removed agent ids a :class:`MemoryRegistry` remembers (oldest forgotten first)."""


def node_name(agent_id: str, owner: str | None) -> str:
    """The znode name of an admitted agent: its id, and its owner if it has one."""
    return agent_id if owner is None else f"{agent_id}@{quote(owner, safe='')}"


def parse_node_name(name: str) -> tuple[str, str | None]:
    """``(agent id, owner)`` from a znode name (owner None for a name without one)."""
    agent_id, sep, owner = name.partition("@")
    return (agent_id, unquote(owner)) if sep else (name, None)


class MemoryRegistry:
    """Admitted agents of a lone master, in memory."""

    authoritative = False

    def __init__(self) -> None:
        self.admitted: dict[str, str | None] = {}
        """Admitted agent ids and their owners."""
        self.unreachable: OrderedDict[str, str | None] = OrderedDict()
        """Agents declared lost for their silence, oldest first, and their owners."""
        self._removed: OrderedDict[str, None] = OrderedDict()

    def verdict(self, agent_id: str) -> str:
        """Whether an agent re-registering as ``agent_id`` may come back (:data:`WELCOME`,
        :data:`UNREACHABLE`: welcome, it was declared lost for its silence, or :data:`REFUSE`)."""
        if agent_id in self.unreachable:
            return UNREACHABLE
        return REFUSE if agent_id in self._removed else WELCOME

    def owner(self, agent_id: str) -> str | None:
        """The principal that registered ``agent_id``, if known (None: anyone admitted may)."""
        if agent_id in self.unreachable:
            return self.unreachable[agent_id]
        return self.admitted.get(agent_id)

    def admit(self, agent_id: str, owner: str | None, done: Callable[[bool], None]) -> None:
        """Record ``agent_id``, registered by ``owner`` (no longer unreachable, if it
        was); ``done(True)`` once it is recorded (here: at once)."""
        if agent_id in self.unreachable:  # back: the first owner stays its owner
            owner = self.unreachable.pop(agent_id)
        self.admitted.setdefault(agent_id, owner)
        done(True)

    def mark_unreachable(self, agent_id: str) -> list[str]:
        """``agent_id`` was declared lost for its silence: welcome back, as
        :data:`UNREACHABLE`. Returns the oldest unreachable agents forgotten to keep
        the list within :data:`MAX_UNREACHABLE` (refused from now on)."""
        self.unreachable[agent_id] = self.admitted.pop(agent_id, self.unreachable.get(agent_id))
        forgotten = []
        while len(self.unreachable) > MAX_UNREACHABLE:
            forgotten.append(self.unreachable.popitem(last=False)[0])
            self._forget(forgotten[-1])
        return forgotten

    def remove(self, agent_id: str) -> None:
        self.admitted.pop(agent_id, None)
        self.unreachable.pop(agent_id, None)
        self._forget(agent_id)

    def _forget(self, agent_id: str) -> None:
        self._removed[agent_id] = None
        if len(self._removed) > REMEMBER_REMOVED:
            self._removed.popitem(last=False)


class ZkRegistry:
    """Admitted agents as znodes ``<path>/registry/<agent id>``; see the module docstring.

    ``call_soon`` hands kazoo's completions back to the master's event loop
    (``loop.call_soon_threadsafe``).

    The name sorts after ``json.info_``: Mesos frameworks (pymesos) take the smallest
    child of ``<path>`` for the leader's MasterInfo (:mod:`mezzo.zk.mesos_discovery`).
    Clusters made before kept the list under ``<path>/agents``, which sorts first;
    :meth:`load` moves it. So upgrade every master before one of the new ones leads: an
    older master elected after the move would find no list and refuse every agent.
    """

    authoritative = True

    def __init__(self, client: Any, path: str, call_soon: Callable[..., Any]) -> None:
        self._zk = client
        self.path = f"{path}/registry"
        self._old_path = f"{path}/agents"
        self._call_soon = call_soon
        self.admitted: dict[str, str | None] = {}
        """Admitted agent ids and their owners."""
        self.unreachable_path = f"{path}/unreachable"
        self.unreachable: OrderedDict[str, str | None] = OrderedDict()
        """Agents declared lost for their silence, and their owners."""

    def load(self) -> dict[str, str | None]:
        """Read the lists (blocking: call it off the event loop, when elected); returns
        the admitted agents (the ones a new leader waits for)."""
        self._zk.ensure_path(self.path)
        self._zk.ensure_path(self.unreachable_path)
        self._move_old_list()
        self.admitted = dict(parse_node_name(name) for name in self._zk.get_children(self.path))
        self.unreachable = OrderedDict()
        for name in sorted(self._zk.get_children(self.unreachable_path)):
            aid, owner = parse_node_name(name)
            if aid in self.admitted:
                # Listed in both (a leader died between writing one and deleting the
                # other): admitted, and the other goes, or a later removal would leave it.
                self._delete(f"{self.unreachable_path}/{name}", aid)
            else:
                self.unreachable[aid] = owner
        return dict(self.admitted)

    def _move_old_list(self) -> None:
        """Move ``<path>/agents/*`` (the old layout) to :attr:`path`, then remove it:
        created first, so a leader that dies half-way leaves every agent listed."""
        from kazoo.exceptions import NodeExistsError, NoNodeError

        try:
            names = self._zk.get_children(self._old_path)
        except NoNodeError:
            return
        for name in names:
            try:
                self._zk.create(f"{self.path}/{name}", b"")
            except NodeExistsError:
                pass
        for name in names:
            try:
                self._zk.delete(f"{self._old_path}/{name}")
            except NoNodeError:
                pass
        try:
            self._zk.delete(self._old_path)
        except NoNodeError:
            pass
        log.info("moved the admitted agents' list", agents=len(names), old=self._old_path, new=self.path)

    def verdict(self, agent_id: str) -> str:
        if agent_id in self.admitted:
            return WELCOME
        return UNREACHABLE if agent_id in self.unreachable else REFUSE

    def owner(self, agent_id: str) -> str | None:
        if agent_id in self.unreachable:
            return self.unreachable[agent_id]
        return self.admitted.get(agent_id)

    def admit(self, agent_id: str, owner: str | None, done: Callable[[bool], None]) -> None:
        """Create the agent's znode; ``done(ok)`` on the loop once ZooKeeper answered.

        An agent already listed costs nothing (its owner stays what was written):
        after a failover thousands re-register at once, and a write each had been
        half the new leader's work (bench/failover.py).
        """
        if agent_id in self.admitted:
            done(True)
            return
        was_unreachable = agent_id in self.unreachable
        if was_unreachable:  # back: the first owner stays its owner
            owner = self.unreachable.pop(agent_id)
        self.admitted[agent_id] = owner

        def written(result: Any) -> None:
            from kazoo.exceptions import NodeExistsError

            try:
                result.get()
                ok = True
            except NodeExistsError:
                ok = True
            except Exception as exc:  # noqa: BLE001 - any ZooKeeper failure: not admitted
                log.error("cannot record an admitted agent in ZooKeeper", agent=agent_id, error=repr(exc))
                ok = False
            if ok and was_unreachable:  # listed as admitted first: never in neither list
                self._call_soon(self._delete_if, agent_id, self.admitted, self.unreachable_path, owner)
            self._call_soon(done, ok)

        self._zk.create_async(f"{self.path}/{node_name(agent_id, owner)}", b"").rawlink(written)

    def mark_unreachable(self, agent_id: str) -> list[str]:
        """Move ``agent_id`` from the admitted list to the unreachable one. Created
        there first: a leader dying in between leaves it admitted, not forgotten.
        Returns the oldest unreachable agents forgotten to keep within
        :data:`MAX_UNREACHABLE`."""
        if agent_id not in self.admitted:
            return []
        owner = self.admitted.pop(agent_id)
        self.unreachable[agent_id] = owner
        name = node_name(agent_id, owner)

        def created(result: Any) -> None:
            from kazoo.exceptions import NodeExistsError

            try:
                result.get()
            except NodeExistsError:
                pass
            except Exception as exc:  # noqa: BLE001 - it stays admitted in ZooKeeper: welcome back either way
                log.error("cannot list an unreachable agent in ZooKeeper", agent=agent_id, error=repr(exc))
                return
            self._call_soon(self._delete_if, agent_id, self.unreachable, self.path, owner)

        self._zk.create_async(f"{self.unreachable_path}/{name}", b"").rawlink(created)
        forgotten = []
        while len(self.unreachable) > MAX_UNREACHABLE:
            old, old_owner = self.unreachable.popitem(last=False)
            self._delete(f"{self.unreachable_path}/{node_name(old, old_owner)}", old)
            forgotten.append(old)
        return forgotten

    def remove(self, agent_id: str) -> None:
        if agent_id in self.unreachable:
            owner = self.unreachable.pop(agent_id)
            self._delete(f"{self.unreachable_path}/{node_name(agent_id, owner)}", agent_id)
        if agent_id not in self.admitted:
            return
        owner = self.admitted.pop(agent_id)
        self._delete(f"{self.path}/{node_name(agent_id, owner)}", agent_id)

    def _delete_if(self, agent_id: str, still_in: dict, folder: str, owner: str | None) -> None:
        """On the loop, once ZooKeeper has the agent in its new list: delete it from the
        other (``folder``), unless it moved back meanwhile (``still_in`` no longer lists
        it). Writes of one session apply in order, so a later move is not undone."""
        if agent_id in still_in:
            self._delete(f"{folder}/{node_name(agent_id, owner)}", agent_id)

    def _delete(self, path: str, agent_id: str) -> None:
        def deleted(result: Any) -> None:
            from kazoo.exceptions import NoNodeError

            try:
                result.get()
            except NoNodeError:
                pass
            except Exception as exc:  # noqa: BLE001
                log.error("cannot remove an agent from ZooKeeper's lists", agent=agent_id, error=repr(exc))

        self._zk.delete_async(path).rawlink(deleted)
