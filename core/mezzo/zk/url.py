"""``zk://`` addresses: the ZooKeeper ensemble, the path the masters elect under, and
the credentials that protect it.

``zk://USER:PASSWORD@host:port[,host:port...]/path`` (``%XX`` escapes in USER and
PASSWORD, as in any URL: ``%2F`` for ``/``) gives every node mezzo creates an
ACL of that digest user alone (see :mod:`.client`); without credentials the nodes are
open to anyone (``world:anyone``), as ZooKeeper's default is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import unquote

from ..errors import ConfigError


@dataclass(frozen=True)
class ZkUrl:
    hosts: str
    """kazoo's ``hosts`` string: ``host:port,host:port``."""
    path: str
    """Absolute znode path, no trailing slash, e.g. ``/mezzo``."""
    credentials: tuple[str, str] | None = field(default=None, repr=False)
    """(user, password) of ZooKeeper's digest scheme, or None."""

    @property
    def election_path(self) -> str:
        """Where the masters' election nodes live."""
        return f"{self.path}/leader"

    def __str__(self) -> str:
        """The URL for logs and displays: the password is never shown."""
        user = f"{self.credentials[0]}:***@" if self.credentials else ""
        return f"zk://{user}{self.hosts}{self.path}"


def _host_port(entry: str) -> bool:
    host, colon, port = entry.rpartition(":")
    return bool(colon and host and port.isdigit() and 0 < int(port) < 65536)


_PASSWORD = re.compile(r"^(zk://[^:/@]*:).*@")


def shown(address: str) -> str:
    """``address`` (a ``zk://`` URL, ``HOST:PORT``, anything a user typed) fit for a
    message or a log: a zk:// URL's password becomes ``***``. Up to the last ``@``:
    in a URL gone wrong (a ``/`` in the password) the password must not show either,
    and hiding part of a path is the lesser harm."""
    return _PASSWORD.sub(r"\1***@", address) if isinstance(address, str) else address


def parse_zk_url(text: str, key: str = "master") -> ZkUrl:
    """Parse ``zk://host:port[,host:port...]/path``; :class:`ConfigError` naming ``key`` if malformed."""
    if not isinstance(text, str) or not text.startswith("zk://"):
        raise ConfigError(key, f"expected zk://HOST:PORT[,HOST:PORT...]/PATH, got {shown(text)!r}")
    rest = text[len("zk://") :]
    hosts, slash, path = rest.partition("/")
    credentials = None
    auth, at, hosts = hosts.rpartition("@")
    bad = [entry for entry in hosts.split(",") if not _host_port(entry)]
    if not at and bad and "@" in path:
        # Most likely a raw '/' in a password: say so without echoing a piece of it.
        raise ConfigError(
            key,
            f"{shown(text)!r}: a '/' or '@' in the credentials must be percent-encoded (%2F, %40)",
        )
    if at:
        user, colon, password = auth.partition(":")
        if not user or not colon or not password:
            raise ConfigError(key, "credentials in a zk:// URL are USER:PASSWORD@ (both non-empty)")
        credentials = (unquote(user), unquote(password))
        if ":" in credentials[0]:
            raise ConfigError(
                key, "the user of a zk:// URL cannot hold ':' (ZooKeeper's digest splits on it)"
            )
    if not hosts:
        raise ConfigError(key, f"{shown(text)!r}: no ZooKeeper host before the path")
    if bad:
        raise ConfigError(key, f"{shown(text)!r}: {bad[0]!r} is not HOST:PORT")
    path = "/" + path.strip("/")
    if not slash or path == "/":
        raise ConfigError(key, f"{shown(text)!r}: a path is required (zk://HOST:PORT/mezzo), not the root")
    if "//" in path or any(part in (".", "..") for part in path.split("/")):
        raise ConfigError(key, f"{shown(text)!r}: {path!r} is not a valid znode path")
    return ZkUrl(hosts=hosts, path=path, credentials=credentials)
