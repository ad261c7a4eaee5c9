"""A cluster's certificate authority and certificates (``mezzo certs``).

mezzo's TLS (:mod:`mezzo.rpc.tls`) needs three files per process: the cluster's CA
certificate, the process's own certificate signed by that CA, and its key. This
module makes them with ``cryptography``, so that a cluster can be secured without
knowing openssl's flags:

- :func:`ensure_ca` makes ``ca.crt`` / ``ca.key`` in a directory, or loads them when
  they are there already (adding principals later signs with the same CA);
- :func:`issue` signs a certificate for one *principal*: its common name is the
  name ACLs and logs use, and its subject alternative names are the hosts clients
  dial it by (a server's certificate must name them when ``tls.verify_hostname``).

Keys are ECDSA P-256 (a handshake costs about a tenth of RSA-2048's signing),
written 0600 and never overwritten unless asked; the directory is made 0700.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .config import TlsConfig
from .errors import MezzoError

CA_DAYS = 3650
"""Days a new CA is valid."""
CERT_DAYS = 825
"""Days a new certificate is valid (the longest browsers still accept for a server)."""

_PRINCIPAL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
"""A principal: what ACLs and logs name, so plain letters, digits and ``._@-`` only."""


_DNS_NAME = re.compile(
    r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)


class CertificateError(MezzoError):
    """A certificate cannot be made: a bad name, or files in the way."""


@dataclass(frozen=True)
class Issued:
    """The files of one certificate."""

    principal: str
    cert: Path
    key: Path


def check_principal(name: str) -> str:
    """``name`` when it can be a principal; raises :class:`CertificateError` saying why not."""
    if not _PRINCIPAL.fullmatch(name):
        raise CertificateError(
            f"principal {name!r}: expected 1 to 64 letters, digits or '._@-', starting with a letter or digit"
        )
    return name


def ensure_ca(
    directory: Path, *, name: str = "mezzo cluster CA"
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """The CA in ``directory`` (``ca.crt``, ``ca.key``), made first if it is not there.

    Raises :class:`CertificateError` when only one of the two files exists or they
    cannot be read as a certificate and its key."""
    _make_private_dir(directory)
    cert_path, key_path = directory / "ca.crt", directory / "ca.key"
    if cert_path.exists() != key_path.exists():
        missing = key_path if cert_path.exists() else cert_path
        raise CertificateError(f"{missing} is missing while its pair is there: restore it, or remove both")
    if cert_path.exists():
        try:
            cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
            key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        except (ValueError, TypeError, OSError) as exc:
            raise CertificateError(f"cannot read the CA in {directory}: {exc}") from None
        if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != cert.public_key():
            raise CertificateError(f"{key_path} is not the key of {cert_path}")
        return cert, key
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        _builder(subject, subject, key, CA_DAYS)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write(key_path, _key_pem(key), private=True)
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), private=False)
    return cert, key


def issue(
    directory: Path,
    principal: str,
    hosts: list[str],
    *,
    days: int = CERT_DAYS,
    overwrite: bool = False,
) -> Issued:
    """Sign ``<principal>.crt`` / ``<principal>.key`` in ``directory`` with its CA
    (made first if need be). The certificate serves both ends of a connection
    (server and client authentication) and names ``hosts`` (DNS names or IP
    addresses) as its subject alternative names.

    Raises :class:`CertificateError` for a bad principal or host, or when the files
    exist and ``overwrite`` is false."""
    check_principal(principal)
    if days < 1:
        raise CertificateError(f"--days {days}: expected at least 1")
    names = [_san(h) for h in hosts]
    cert_path, key_path = directory / f"{principal}.crt", directory / f"{principal}.key"
    if principal == "ca":
        raise CertificateError("principal 'ca': that name is the CA's own files")
    if not overwrite and (cert_path.exists() or key_path.exists()):
        raise CertificateError(f"{cert_path} exists already (--force replaces it)")
    ca_cert, ca_key = ensure_ca(directory)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, principal)])
    builder = (
        _builder(subject, ca_cert.subject, key, days)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    _write(key_path, _key_pem(key), private=True)
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), private=False)
    return Issued(principal, cert_path, key_path)


def check_host(host: str) -> str:
    """``host`` when it is a DNS name or an IP address; raises :class:`CertificateError`."""
    _san(host)
    return host


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        pass
    if len(host) > 253 or not _DNS_NAME.fullmatch(host):
        raise CertificateError(f"host {host!r}: not a DNS name or an IP address")
    return x509.DNSName(host)


def _make_private_dir(directory: Path) -> None:
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise CertificateError(f"cannot make {directory}: {exc.strerror}") from None


def _write(path: Path, data: bytes, *, private: bool) -> None:
    """Write ``path`` whole, 0600 for a key (created so: never readable by others, even
    for a moment), 0644 for a certificate."""
    mode = 0o600 if private else 0o644
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    except OSError as exc:
        raise CertificateError(f"cannot write {path}: {exc.strerror}") from None
    with os.fdopen(fd, "wb") as f:
        os.fchmod(fd, mode)  # an existing file keeps its old mode through O_CREAT
        f.write(data)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey, days: int
) -> x509.CertificateBuilder:
    """A certificate of ``key`` for ``subject`` by ``issuer``, valid ``days`` from five
    minutes ago (a peer whose clock is a little behind must not find it not yet valid)."""
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
    )


def principal_tls(
    directory: Path, principal: str, hosts: Sequence[str] = ("127.0.0.1", "localhost")
) -> TlsConfig:
    """A ``[tls]`` holding ``principal``'s certificate in ``directory``, signed by the CA
    there; both are made first if they are not there yet (tests, benchmarks, local
    clusters)."""
    cert, key = directory / f"{principal}.crt", directory / f"{principal}.key"
    if not cert.exists():
        issue(directory, principal, list(hosts))
    return TlsConfig(enabled=True, ca=str(directory / "ca.crt"), cert=str(cert), key=str(key))


def tls_toml(tls: TlsConfig) -> str:
    """``tls`` as the ``[tls]`` table of a TOML file (what a client's ``MEZZO_CONFIG``
    names): the switch and the three files; other keys keep their defaults."""
    return f'[tls]\nenabled = {str(tls.enabled).lower()}\nca = "{tls.ca}"\ncert = "{tls.cert}"\nkey = "{tls.key}"\n'
