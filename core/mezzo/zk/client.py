"""Opening a ZooKeeper session, shared by the election and the detector.

Every mezzo process talks to ZooKeeper through a client made by :func:`new_client`,
so that all of them retry the same way (:data:`RETRY`): kazoo's own exponential
backoff with jitter, but capped at :data:`RETRY_CAP` seconds instead of kazoo's
default of an hour, which would leave a master out of the election (or an agent
blind to a new leader) for up to that long after a ZooKeeper outage ended.
"""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

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
    """A (not yet started) client of ``url``'s ensemble with mezzo's retry policy."""
    return KazooClient(
        hosts=url.hosts,
        timeout=session_timeout,
        connection_retry=dict(RETRY),
        command_retry=dict(RETRY),
    )


def start_session(client: KazooClient, url: ZkUrl, timeout: float) -> None:
    """Connect ``client`` and make sure the election path exists.

    Raises :class:`TimeoutError` naming the ensemble when it cannot be reached in time.
    """
    try:
        client.start(timeout=timeout)
    except KazooTimeoutError:
        client.close()
        raise TimeoutError(f"cannot reach ZooKeeper at {url.hosts} within {timeout:g} s") from None
    client.ensure_path(url.election_path)
