"""Who is calling an HTTP endpoint of the master, and what they may see: one rule for
every endpoint (documents, metrics, the event stream, sandbox files).

The caller is who its TLS certificate says (:func:`mezzo.master.audit.principal_of`),
else who its HTTP Basic credentials say when the master has ``[master.http]
credentials`` (:func:`basic_credentials`, :mod:`.credentials`); None for neither. A
caller refused is answered 403 naming the ``[master.acls]`` actions, and the refusal
is written to the audit log, as the Thrift calls' refusals are.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ..acls import Acls, View
from ..master.audit import principal_of, refused
from .credentials import CHALLENGE, BadCredentials, Credentials
from .server import Handler, json_error

BASIC_PRINCIPAL = web.RequestKey("basic_principal", str)
"""The principal of a request's valid Basic credentials (see :func:`basic_credentials`)."""


def caller(request: web.Request) -> str | None:
    """The caller's principal: its certificate's, else its Basic credentials', else None."""
    return principal_of(request.transport) or request.get(BASIC_PRINCIPAL)


def basic_credentials(credentials: Credentials) -> Any:
    """A middleware reading ``Authorization: Basic`` of callers without a certificate:
    valid, the request is its principal's (:func:`caller`); not valid, it is answered
    401, audited, and goes no further."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        header = request.headers.get("Authorization")
        if header is not None and principal_of(request.transport) is None:
            try:
                request[BASIC_PRINCIPAL] = credentials.principal(header)
            except BadCredentials as exc:
                # Audited like every refusal (rate-limited: one key, whoever was claimed).
                refused("authenticate", None, f"{request.method} {request.path}", str(exc), peer_of(request))
                return json_error(401, str(exc), **{"WWW-Authenticate": CHALLENGE})
        return await handler(request)

    return check


def peer_of(request: web.Request) -> str:
    """The client's address, for audit lines."""
    return getattr(request.transport, "peer", "?")


def viewer(request: web.Request, acls: Acls, what: str) -> View:
    """The part of the cluster the caller may see; raises 403 (audited, ``what`` being
    what it asked for) when that is nothing."""
    principal = caller(request)
    view = acls.view_of(principal)
    if view.nothing:
        actions = "master.acls.view_cluster, view_frameworks"
        refused(f"{request.method} {request.path}", principal, what, actions, peer_of(request))
        raise web.HTTPForbidden(
            text=f"principal {principal or 'a caller without a certificate'} may not view the cluster "
            "(master.acls: view_cluster, view_frameworks)"
        )
    return view


def may_view_cluster(request: web.Request, acls: Acls, what: str) -> None:
    """Raises 403 (audited) unless ``view_cluster`` allows the caller ``what``."""
    principal = caller(request)
    if not acls.allows("view_cluster", principal):
        refused(
            f"{request.method} {request.path}", principal, what, "master.acls.view_cluster", peer_of(request)
        )
        raise web.HTTPForbidden(
            text=f"principal {principal or 'a caller without a certificate'} may not view the cluster "
            "(master.acls.view_cluster)"
        )
