"""HTTP Basic credentials: who a caller without a TLS certificate is.

Frameworks written for Apache Mesos authenticate with a principal and a secret sent
as ``Authorization: Basic`` (pymesos' ``principal=`` and ``secret=``), and cannot
present a certificate (pymesos speaks plain HTTP). With ``[master.http] credentials``
naming a file in the format of Mesos' own ``--credentials`` file::

    {"credentials": [{"principal": "etl", "secret": "s3cret"}, ...]}

(read when the master starts, by the master alone: agents and tools sharing its
configuration file need not be able to read it), a request to the master's HTTP API
that carries Basic credentials is the call of
their principal, for the ACLs (``[master.acls]``) and the audit log as a certificate's
would be; credentials that do not match are answered 401. A certificate's principal,
when there is one, is the caller's and the header is not read; a request without the
header is anonymous, as before. Without the setting the header is ignored.

Basic credentials cross the network as they are: over plain HTTP, anyone who can
read the traffic can take them. They fit a network trusted not to be read; elsewhere,
give the master TLS and the frameworks certificates.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import ConfigError

CHALLENGE = 'Basic realm="mezzo"'
"""The ``WWW-Authenticate`` of a 401."""
_NOBODY = hashlib.sha256(b"no principal has this digest's secret").digest()
MAX_FILE_BYTES = 1 << 20
"""A credentials file is a list of principals: a megabyte is thousands of them."""


class BadCredentials(Exception):
    """Credentials that are not those of any principal (the request is answered 401)."""


@dataclass(frozen=True)
class Credentials:
    """Each principal's secret; see the module docstring."""

    digests: Mapping[str, bytes] = field(repr=False)
    """Each principal's secret's SHA-256 (what is compared: of one length, whatever was sent)."""

    @classmethod
    def load(cls, path: str, key: str = "master.http.credentials") -> Credentials:
        """The credentials in the file at ``path``; :class:`ConfigError` naming ``key``
        when it cannot be read or is not in Mesos' format."""
        try:
            with open(path, "rb") as f:
                raw = f.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise ConfigError(key, f"cannot read {path}: {exc.strerror or exc}") from None
        if len(raw) > MAX_FILE_BYTES:
            raise ConfigError(key, f"{path} is over {MAX_FILE_BYTES >> 20} MiB")
        try:
            document = json.loads(raw)
        except RecursionError:
            raise ConfigError(key, f"{path} is nested too deep to be a credentials file") from None
        except ValueError as exc:
            raise ConfigError(key, f"{path} is not JSON: {exc}") from None
        entries = document.get("credentials") if isinstance(document, dict) else None
        if not isinstance(entries, list):
            raise ConfigError(
                key, f'{path}: expected {{"credentials": [{{"principal": ..., "secret": ...}}]}}'
            )
        digests: dict[str, bytes] = {}
        for i, entry in enumerate(entries):
            where = f"{path}: credentials[{i}]"
            if not isinstance(entry, dict):
                raise ConfigError(key, f"{where}: expected an object with principal and secret")
            principal, secret = entry.get("principal"), entry.get("secret")
            if not isinstance(principal, str) or not principal or ":" in principal:
                raise ConfigError(key, f"{where}.principal: expected a non-empty string without ':'")
            if not isinstance(secret, str) or not secret:
                raise ConfigError(key, f"{where}.secret: expected a non-empty string")
            if principal in digests:
                raise ConfigError(key, f"{where}.principal: {principal!r} is listed twice")
            digests[principal] = hashlib.sha256(secret.encode("utf-8")).digest()
        return cls(digests)

    def principal(self, authorization: str) -> str:
        """The principal whose credentials ``authorization`` (the header's value) carries;
        :class:`BadCredentials` saying why when it carries none that match."""
        scheme, _, encoded = authorization.strip().partition(" ")
        if scheme.lower() != "basic":
            raise BadCredentials(f"Authorization: only Basic credentials are accepted, not {scheme[:20]!r}")
        try:
            decoded = binascii.a2b_base64(encoded.strip().encode("ascii"), strict_mode=True)
        except (UnicodeEncodeError, binascii.Error):
            raise BadCredentials("Authorization: Basic credentials are not base64") from None
        principal_bytes, colon, secret = decoded.partition(b":")
        principal = principal_bytes.decode("utf-8", "replace")
        expected = self.digests.get(principal)
        # Digests of one length are compared, with one for a principal that does not
        # exist: the time taken tells neither whether it does nor its secret's length.
        matches = hmac.compare_digest(
            hashlib.sha256(secret).digest(), expected if expected is not None else _NOBODY
        )
        if not colon or expected is None or not matches:
            raise BadCredentials("Authorization: wrong principal or secret")
        return principal
