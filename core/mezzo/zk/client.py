"""Opening a ZooKeeper session, shared by the election and the detector.

Every mezzo process talks to ZooKeeper through a client made by :func:`new_client`,
so that all of them retry the same way (:data:`RETRY`): kazoo's own exponential
backoff with jitter, but capped at :data:`RETRY_CAP` seconds instead of kazoo's
default of an hour, which would leave a master out of the election (or an agent
blind to a new leader) for up to that long after a ZooKeeper outage ended.
"""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.security import Permissions, make_digest_acl

from ..errors import MezzoError
from .url import ZkUrl

RETRY_CAP = 5.0
"""Seconds: the longest nominal wait between two rounds of dialling the ensemble (or two
tries of a command); kazoo's jitter of up to 40 % comes on top of it."""

RETRY = {"max_tries": -1, "delay": 0.1, "backoff": 2, "max_jitter": 0.4, "max_delay": RETRY_CAP}
"""kazoo's ``KazooRetry`` settings for the connection and for commands: forever, from
0.1 s, doubling, each wait multiplied by a random factor in [0.6, 1.4] (kazoo's
jitter: thousands of agents that lost the ensemble together come back spread out),
at most :data:`RETRY_CAP` before that factor. Kazoo resets the connection's backoff
once a session is established."""


def new_client(url: ZkUrl, session_timeout: float) -> KazooClient:
    """A (not yet started) client of ``url``'s ensemble with mezzo's retry policy; with
    credentials in the URL it authenticates with them, and every node it creates
    (the path, election and registry nodes) is readable and writable by that digest
    user alone."""
    auth: dict = {}
    if url.credentials is not None:
        user, password = url.credentials
        auth = {
            "auth_data": [("digest", f"{user}:{password}")],
            "default_acl": [make_digest_acl(user, password, all=True)],
        }
    return KazooClient(
        hosts=url.hosts,
        timeout=session_timeout,
        connection_retry=dict(RETRY),
        command_retry=dict(RETRY),
        **auth,
    )


def start_session(client: KazooClient, url: ZkUrl, timeout: float) -> None:
    """Connect ``client`` and make sure the election path exists (and, with
    credentials, that no one else may write it).

    Raises :class:`TimeoutError` naming the ensemble when it cannot be reached in time,
    and :class:`UnprotectedPath` when the path is others' or open to them.
    """
    try:
        client.start(timeout=timeout)
    except KazooTimeoutError:
        client.close()
        raise TimeoutError(f"cannot reach ZooKeeper at {url.hosts} within {timeout:g} s") from None
    try:
        client.ensure_path(url.election_path)
        problem = _unprotected(client, url)
    except NoAuthError:
        problem = f"{url}: not allowed to use {url.path} (another user's ACL, or wrong credentials)"
    if problem is not None:
        client.stop()
        client.close()
        raise UnprotectedPath(problem)


def _unprotected(client: KazooClient, url: ZkUrl) -> str | None:
    """With credentials in ``url``: why its path is not the cluster's alone, or None.
    Without credentials nothing is protected, and nothing is checked."""
    if url.credentials is None:
        return None
    for path in (url.path, url.election_path):
        why = _open_to_others(client, path, url.credentials[0])
        if why is not None:
            return (
                f"{url}: {path} {why}; nodes there could name any leader. Delete it (mezzo makes "
                "it again, protected), or set its ACL to the cluster's digest user alone"
            )
    return None


class UnprotectedPath(MezzoError, PermissionError):
    """The ZooKeeper path of a cluster with credentials is not theirs alone (or not
    theirs at all). A :class:`PermissionError`, so that callers that give up on a peer
    they cannot reach (drivers, tools) give up on this one too, saying why."""


def _open_to_others(client: KazooClient, path: str, user: str) -> str | None:
    """Why ``path``'s ACL lets someone other than digest ``user`` change it, or None."""
    acls, _stat = client.get_acls(path)
    for acl in acls:
        scheme, ident = acl.id.scheme, acl.id.id
        if scheme == "digest" and ident.split(":", 1)[0] == user:
            continue
        if acl.perms & (Permissions.WRITE | Permissions.CREATE | Permissions.DELETE | Permissions.ADMIN):
            return f"is writable by {scheme}:{ident}"
    return None
