"""TLS on mezzo's connections: contexts built from ``[tls]``, who a peer is, and
what a failed handshake means.

Every mezzo connection (framework, agent, executor, tool) runs over the standard
library's :mod:`ssl` on asyncio when ``tls.enabled`` is set. Both sides prove who
they are with certificates signed by the cluster's CA (``tls.ca``; ``mezzo certs``
makes one): a server always, a client whenever it has a certificate. The
*principal* of a peer is the common name (CN) of its verified certificate, the
name authentication and ACLs speak of.

A server either requires a certificate of every client (``tls.peer_certificates =
"required"``, the master's default) or lets clients without one finish the
handshake with no principal (``"optional"``), for peers that prove who they are
another way. An agent's port is always optional: the executors it starts dial it
without certificates of their own (handing them the agent's key would hand it to
the framework's code), and are told apart by the agent itself.

Protocol mismatches are told apart from other failures, so an operator reading the
log knows which side to fix: plaintext at a TLS port fails the handshake with
``WRONG_VERSION_NUMBER`` (``HTTP_REQUEST`` for a browser), and a TLS handshake at a
plaintext port arrives as a frame header ``16 03 0x ..`` (a TLS record), which
:func:`reads_as_tls_record` recognises.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from typing import Any

from ..config import CONFIG_ENV, PEER_CERTIFICATES, TlsConfig
from ..config import load as load_config
from ..errors import ConfigError

EXECUTOR_CA_ENV = "MEZZO_TLS_CA"
"""Set by an agent whose port is TLS, for the executors it starts: the CA file its
certificate is checked against."""

_TLS_HANDSHAKE_RECORD = 0x16
"""The content type of a TLS record carrying a handshake (its first byte)."""
_TLS_MAJOR_VERSION = 0x03
"""The second byte of every TLS record header (SSL 3.0 up to TLS 1.3 say 3)."""


@dataclass(frozen=True)
class ServerTls:
    """What a listening socket needs: the context, and how long a handshake may take."""

    context: ssl.SSLContext
    handshake_timeout: float


@dataclass(frozen=True)
class ClientTls:
    """What a dialling side needs: the context (it verifies the server against the CA)."""

    context: ssl.SSLContext
    handshake_timeout: float


def check_tls(cfg: TlsConfig, prefix: str = "tls.") -> None:
    """Refuse a ``[tls]`` table that cannot work, naming the key; with TLS on, the
    certificate, key and CA are loaded here, so a wrong path or a key that does not
    match its certificate stops the command before it starts anything.

    Raises :class:`ConfigError`."""
    if cfg.peer_certificates not in PEER_CERTIFICATES:
        raise ConfigError(
            f"{prefix}peer_certificates",
            f"expected one of {', '.join(map(repr, PEER_CERTIFICATES))}, got {cfg.peer_certificates!r}",
        )
    if not cfg.enabled:
        return
    if not cfg.ca:
        raise ConfigError(f"{prefix}ca", "required when tls.enabled is true (mezzo certs makes it)")
    if bool(cfg.cert) != bool(cfg.key):
        missing = "key" if cfg.cert else "cert"
        raise ConfigError(f"{prefix}{missing}", "tls.cert and tls.key go together")
    if cfg.cert:
        server_tls(cfg, prefix=prefix)
    client_tls(cfg, prefix=prefix)


def server_tls(cfg: TlsConfig, *, certificates_optional: bool = False, prefix: str = "tls.") -> ServerTls:
    """The context a server listens with: its certificate, and clients checked
    against ``tls.ca`` (required, unless ``tls.peer_certificates`` or
    ``certificates_optional`` says otherwise). TLS 1.2 at least.

    Raises :class:`ConfigError` naming the key whose file is missing or unusable."""
    if not cfg.cert:
        raise ConfigError(f"{prefix}cert", "a daemon listening with TLS needs its certificate and key")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(context, cfg, prefix)
    _load_ca(context, cfg, prefix)
    optional = certificates_optional or cfg.peer_certificates == "optional"
    context.verify_mode = ssl.CERT_OPTIONAL if optional else ssl.CERT_REQUIRED
    # No session tickets: clients never resume a session (each dial is a new one),
    # so tickets would only be records to write, send and parse after each handshake.
    context.num_tickets = 0
    return ServerTls(context, cfg.handshake_timeout)


def client_tls(cfg: TlsConfig, *, prefix: str = "tls.") -> ClientTls:
    """The context a client dials with: the server checked against ``tls.ca`` (and
    its name against the host dialled, unless ``tls.verify_hostname`` is off), this
    process's certificate shown when it has one.

    Raises :class:`ConfigError` naming the key whose file is missing or unusable."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_ca(context, cfg, prefix)
    context.check_hostname = cfg.verify_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    if cfg.cert:
        _load_chain(context, cfg, prefix)
    return ClientTls(context, cfg.handshake_timeout)


def client_tls_for(tls: TlsConfig | None) -> ClientTls | None:
    """What a client process (a driver, a tool) dials with: ``tls`` when given, else
    the ``[tls]`` table of ``$MEZZO_CONFIG`` when that is set (so a framework started
    beside a secured cluster's configuration needs no code for it), else plaintext
    (None).

    Raises :class:`ConfigError` naming the key of a bad table or file."""
    if tls is None:
        path = os.environ.get(CONFIG_ENV)
        if not path:
            return None
        tls = load_config(path).tls  # validated, [tls] included, as it is read
    else:
        check_tls(tls)
    return client_tls(tls) if tls.enabled else None


def _load_chain(context: ssl.SSLContext, cfg: TlsConfig, prefix: str) -> None:
    try:
        context.load_cert_chain(cfg.cert, cfg.key)
    except FileNotFoundError as exc:
        key = "cert" if exc.filename in (None, cfg.cert) else "key"
        raise ConfigError(f"{prefix}{key}", f"{getattr(cfg, key)!r}: no such file") from None
    except PermissionError as exc:
        raise ConfigError(
            f"{prefix}key", f"cannot read {exc.filename or cfg.key!r}: permission denied"
        ) from None
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise ConfigError(f"{prefix}key", f"{cfg.key!r} is not the key of {cfg.cert!r}") from None
        raise ConfigError(
            f"{prefix}cert",
            f"{cfg.cert!r} / {cfg.key!r}: not a PEM certificate and key ({exc.reason or exc})",
        ) from None


def _load_ca(context: ssl.SSLContext, cfg: TlsConfig, prefix: str) -> None:
    try:
        context.load_verify_locations(cafile=cfg.ca)
    except FileNotFoundError:
        raise ConfigError(f"{prefix}ca", f"{cfg.ca!r}: no such file") from None
    except PermissionError:
        raise ConfigError(f"{prefix}ca", f"cannot read {cfg.ca!r}: permission denied") from None
    except ssl.SSLError as exc:
        raise ConfigError(
            f"{prefix}ca", f"{cfg.ca!r}: no PEM certificate in it ({exc.reason or exc})"
        ) from None


def principal_of(transport: Any) -> str | None:
    """The common name of the peer's verified certificate, or None (no TLS, or a
    client without a certificate at a port where that is allowed)."""
    cert = transport.get_extra_info("peercert")
    if not cert:
        return None
    for rdn in cert.get("subject", ()):
        for name, value in rdn:
            if name == "commonName":
                return str(value)
    return None


def reads_as_tls_record(frame_size: int) -> bool:
    """True when a frame header, read as a 4-byte size, is the start of a TLS record
    (a ClientHello at a plaintext port): content type 22, version 3.x."""
    return frame_size >> 24 == _TLS_HANDSHAKE_RECORD and (frame_size >> 16) & 0xFF == _TLS_MAJOR_VERSION


def handshake_refusal(exc: BaseException) -> str:
    """Why a server's TLS handshake with a peer failed, in an operator's words."""
    reason = getattr(exc, "reason", None)
    if reason in ("WRONG_VERSION_NUMBER", "UNEXPECTED_RECORD", "RECORD_LAYER_FAILURE"):
        return "the peer spoke plaintext at this TLS port (is tls.enabled off on its side?)"
    if reason == "HTTP_REQUEST":
        return "the peer sent an HTTP request at this TLS port"
    if reason == "PEER_DID_NOT_RETURN_A_CERTIFICATE":
        return "the peer showed no certificate, and this port requires one (tls.peer_certificates)"
    if reason in ("TLSV1_ALERT_UNKNOWN_CA", "CERTIFICATE_VERIFY_FAILED", "SSLV3_ALERT_BAD_CERTIFICATE"):
        return f"certificates not trusted between this side and the peer ({reason}: is tls.ca the same CA?)"
    if isinstance(exc, TimeoutError):  # tls_stream's handshake timer
        return "the peer did not finish the TLS handshake in time (tls.handshake_timeout)"
    return f"TLS handshake failed: {exc}"


def dial_failure(exc: BaseException, host: str, port: int) -> OSError:
    """A client's failed TLS dial as an :class:`OSError` saying what to check."""
    reason = getattr(exc, "reason", None)
    where = f"{host}:{port}"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return OSError(
            f"TLS: {where}'s certificate is not trusted: {exc.verify_message} (tls.ca, tls.verify_hostname)"
        )
    if isinstance(exc, (ConnectionResetError, ConnectionAbortedError)) or reason in (
        "UNEXPECTED_EOF_WHILE_READING",
        "WRONG_VERSION_NUMBER",
    ):
        return OSError(f"TLS: {where} broke off the handshake (is tls.enabled on at {where}?)")
    if reason in ("TLSV13_ALERT_CERTIFICATE_REQUIRED", "SSLV3_ALERT_HANDSHAKE_FAILURE"):
        return OSError(f"TLS: {where} requires a client certificate (tls.cert, tls.key)")
    if reason in ("TLSV1_ALERT_UNKNOWN_CA", "SSLV3_ALERT_BAD_CERTIFICATE"):
        return OSError(f"TLS: {where} does not trust this side's certificate (is it signed by its tls.ca?)")
    return OSError(f"TLS: handshake with {where} failed: {exc}")
