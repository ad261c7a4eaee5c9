"""Naming the leader the way Apache Mesos does, for Mesos frameworks given ``zk://``.

Mesos masters leave ephemeral, sequential nodes ``<path>/json.info_<seq>`` holding
their ``MasterInfo`` as JSON, and the lowest one leads. Mesos clients follow that:
pymesos 0.3.15 (``pymesos/detector.py``) watches the children of ``<path>``, drops
``log_replicas``, takes the lexicographically smallest name, and dials
``address.ip:address.port`` from its JSON (data that is not JSON it ignores: it waits
for the next change). mezzo's own election lives under ``<path>/leader`` (see
:mod:`.election`), which such a client would take for the leader and never dial.

So the elected master also publishes one such node, and only the leader has one:

- :meth:`MesosDiscovery.publish` when elected: in *one* ZooKeeper transaction it checks
  that the election node it won with still exists, deletes every other ``json.info_``
  node and creates its own. A reader sees the old name go and the new one appear in
  a single change, so the smallest ``json.info_`` child is always the leader's.
- :meth:`MesosDiscovery.retract` when it stops leading, and
  :meth:`MesosDiscovery.remove_session_nodes` once reconnected, before it leaves its
  election node.

The races, and why the node a reader picks names the leader (or, for a moment after a
leader died, nobody, as in Mesos):

- *A leader demoted on a suspended connection.* Its session may still live on the
  server, and its node with it: it can delete nothing while cut off. But its election
  node lives just as long, so no other master is elected while it does; its session
  expiring removes both at once (ZooKeeper deletes a session's ephemeral nodes in one
  step), and only then can another master lead.
- *The same master reconnecting within its session.* It was demoted and asked to delete
  its node the moment it was: kazoo holds a request made while disconnected and sends
  it first once reconnected, before the election gives up its election node (the
  session's requests are carried out in order), and :meth:`remove_session_nodes`
  sweeps up a node created by a transaction whose answer the connection lost.
- *Anything left over anyway* (such a node, if the sweep itself failed): the new leader's
  own transaction deletes it. Deleting other masters' nodes is safe because of the
  check in the same transaction: it only goes through while the publisher's election
  node exists, and an election node that won stays the lowest until it is gone, so the
  publisher leads at that instant and every other ``json.info_`` node is stale (the
  old leader's has the *smaller* sequence number: left there, it would be the one
  readers pick). For the same reason a deposed master's late request can neither add
  a node nor delete the leader's: its check fails, and the transaction does nothing.

Nothing else mezzo makes under ``<path>`` sorts before ``json.info_`` (``leader``, and
``registry``, the admitted agents of :mod:`mezzo.master.registry`): keep it so.

ACLs. pymesos dials ZooKeeper without credentials (kazoo even drops a ``USER:PASSWORD@``
in its host string), so with a ``zk://USER:PASSWORD@...`` URL, where every node mezzo
makes is otherwise that digest user's alone (:mod:`.client`), the discovery node is
also readable by ``world:anyone``, and ``<path>`` itself gets ``world:anyone`` READ (the
right to list its children; still not to create, change or delete any: the check of
:func:`.client.start_session` accepts that). Anyone who reaches ZooKeeper can therefore
read who leads and the names of ``<path>``'s children; the election nodes and the
registry stay unreadable to them, and nobody but the digest user can write anything.
Without credentials every node is ``world:anyone`` already, this one too.
"""

from __future__ import annotations

import ipaddress
import json
import uuid
from collections.abc import Callable
from typing import Any

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NoAuthError, NoNodeError
from kazoo.security import ACL, Permissions, make_acl, make_digest_acl

from .. import __version__
from ..rpc.address import parse_address
from .url import ZkUrl

log = structlog.get_logger("mezzo.zk", component="mesos-discovery")

PREFIX = "json.info_"
"""Mesos' label for JSON ``MasterInfo`` nodes (``MASTER_INFO_JSON_LABEL``); ZooKeeper appends
a ten-digit sequence number."""

WORLD_READ: ACL = make_acl("world", "anyone", read=True)

PUBLISH_TRIES = 5
"""Transactions tried when stale nodes vanish between listing and deleting them (their
sessions expiring meanwhile)."""


def master_info(address: str, master_id: str) -> dict[str, Any]:
    """Mesos' JSON ``MasterInfo`` of the master at ``address`` (``host:port``).

    ``ip`` is the IPv4 address as Mesos writes it: the four bytes in network order read
    as a little-endian integer (127.0.0.1 is 16777343), what a Mesos master on x86
    publishes and its clients decode; 0 when ``host`` is not a dotted IPv4 address.
    ``address.ip`` is ``host`` itself even then (a name, when the master listens on all
    interfaces): pymesos dials ``address.ip:address.port``, so it must be what mezzo's
    own agents dial.
    """
    host, port = parse_address(address, 0)  # an IPv6 host without its brackets
    try:
        ip = int.from_bytes(ipaddress.IPv4Address(host).packed, "little")
    except ValueError:
        ip = 0
    return {
        "id": master_id,
        "ip": ip,
        "port": port,
        "pid": f"master@{address}",
        "hostname": host,
        "version": __version__,
        "address": {"hostname": host, "ip": host, "port": port},
    }


class MesosDiscovery:
    """The Mesos-style discovery node of one master; see the module docstring.

    ``client`` is the election's own session, so that the node dies with it.
    ``master_id()`` names the master in ``MasterInfo.id`` (a UUID of this object's
    own when None). :meth:`publish` and :meth:`remove_session_nodes` block; call them
    on the election's thread, not kazoo's. :meth:`retract` does not.
    """

    def __init__(
        self,
        client: KazooClient,
        url: ZkUrl,
        address: str,
        master_id: Callable[[], str] | None = None,
    ) -> None:
        self._zk = client
        self.url = url
        self.address = address
        own_id = str(uuid.uuid4())
        self._master_id = master_id or (lambda: own_id)
        self._node: str | None = None
        self._acl: list[ACL] | None = None  # the client's default (world:anyone) without credentials
        if url.credentials is not None:
            user, password = url.credentials
            self._acl = [make_digest_acl(user, password, all=True), WORLD_READ]

    @property
    def node(self) -> str | None:
        """The path of this master's node while it is published, else None."""
        return self._node

    def publish(self, election_node: str) -> None:
        """Replace every ``json.info_`` node by this master's, provided ``election_node``
        (the full path of the node it was elected with) still exists.

        Never raises: a leader that cannot publish goes on leading (mezzo's agents and
        drivers follow the election) and says so in the log.
        """
        path = self.url.path
        try:
            data = json.dumps(master_info(self.address, self._master_id()), separators=(",", ":")).encode()
            self._open_for_listing()
            for _ in range(PUBLISH_TRIES):
                stale = [child for child in self._zk.get_children(path) if child.startswith(PREFIX)]
                tx = self._zk.transaction()
                tx.check(election_node, -1)  # version -1: exists, whatever its version
                for child in stale:
                    tx.delete(f"{path}/{child}")
                tx.create(f"{path}/{PREFIX}", data, acl=self._acl, ephemeral=True, sequence=True)
                results = tx.commit()
                if not any(isinstance(r, Exception) for r in results):
                    self._node = results[-1]
                    log.info("published for Mesos frameworks", node=self._node, replaced=stale)
                    return
                if isinstance(results[0], NoNodeError):
                    log.info(
                        "not published for Mesos frameworks: no longer elected", election_node=election_node
                    )
                    return
                # A stale node went away meanwhile (its session expired): list again.
            log.warning("cannot publish for Mesos frameworks: the nodes kept changing", path=path)
        except KazooException as exc:
            log.warning("cannot publish for Mesos frameworks", path=path, error=repr(exc))
        except Exception:  # a bug here must not cost the master its leadership
            log.exception("cannot publish for Mesos frameworks", path=path)

    def retract(self) -> None:
        """Delete this master's node, without waiting. Made while disconnected, the
        request waits in kazoo's queue and goes first once reconnected (or fails with
        the session, which takes the node along)."""
        node, self._node = self._node, None
        if node is None:
            return

        def done(result: Any) -> None:  # kazoo's thread
            try:
                result.get()
            except NoNodeError:
                pass
            except Exception as exc:  # noqa: BLE001 - a lost session took the node along
                log.info("discovery node not deleted", node=node, error=repr(exc))

        try:
            self._zk.delete_async(node).rawlink(done)
        except Exception as exc:  # noqa: BLE001 - a client being closed: its session goes, with the node
            log.info("discovery node not deleted", node=node, error=repr(exc))

    def remove_session_nodes(self) -> None:
        """Delete the ``json.info_`` nodes this session holds (blocking). Run by a master
        that reconnected within its session, before it gives up its election node; it
        catches a node whose creation the lost connection did not report."""
        self._node = None
        session = self._zk.client_id[0] if self._zk.client_id else None
        path = self.url.path
        for child in self._zk.get_children(path):
            if not child.startswith(PREFIX):
                continue
            try:
                _, stat = self._zk.get(f"{path}/{child}")
                if stat.ephemeralOwner == session:
                    self._zk.delete(f"{path}/{child}")
            except NoNodeError:
                continue

    def _open_for_listing(self) -> None:
        """With credentials: give ``world:anyone`` READ on ``<path>`` (listing its children),
        without which a client with no credentials cannot find the node."""
        if self.url.credentials is None:
            return
        path = self.url.path
        try:
            acls, stat = self._zk.get_acls(path)
            if any(a.id.scheme == "world" and a.perms & Permissions.READ for a in acls):
                return
            self._zk.set_acls(path, [*acls, WORLD_READ], version=stat.aversion)
        except (BadVersionError, NoAuthError) as exc:  # changed meanwhile; or not ours to change
            log.warning(
                "cannot make the path listable: Mesos frameworks without credentials "
                "will not find the leader",
                path=path,
                error=repr(exc),
            )
            return
        log.info("made the path listable by anyone, for Mesos frameworks", path=path)
