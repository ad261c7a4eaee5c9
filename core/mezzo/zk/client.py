"""Opening a ZooKeeper session, shared by the election and the detector."""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from .url import ZkUrl


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
