"""The master's HTTP endpoints, at its Thrift port, in the shape Apache Mesos' tools expect.

Each endpoint is served at its Mesos path and again under ``/master`` (Mesos
serves both), so a URL from Mesos' documentation or a tool written for Mesos works
as it is:

- ``GET /health``: 200 with an empty body, leader or not (a load balancer's check).
- ``GET /version``: ``{"version": ..., "name": "mezzo"}``.
- ``GET /redirect``: 307 to the leading master (``//host:port``), the URL to bookmark.
- ``GET /metrics/snapshot``: the counters as flat JSON under Mesos' names
  (:mod:`.metrics`); ``GET /metrics``: the same in Prometheus' text format. Both
  need ``view_cluster`` in ``[master.acls]``.
- ``GET /state`` (``/state.json``), ``/state-summary``, ``/frameworks?framework_id=``,
  ``/slaves?slave_id=`` (``/agents``), ``/tasks?framework_id=&task_id=&limit=&offset=&order=``:
  the state in Mesos' shape (:mod:`mezzo.master.mesos_view`), as much as the
  caller's ``view_*`` ACLs show, rendered in a forked child like ``mezzo state``.
- ``GET /flags``: ``{"flags": {...}}``, the master's settings (``[master]`` as
  loaded, defaults filled in), the ZooKeeper password hidden and the ACLs counted,
  not listed; needs ``view_cluster``.
- ``POST /teardown`` (form ``frameworkId=``): ends a framework as ``mezzo teardown``
  does; 200, or 400 for an unknown id, 403 where ``teardown_frameworks`` does not allow it.

A standby answers every call but ``/health`` with 307 to the leader, or 503 while
none is elected. Callers are who their TLS certificate says (the port's TLS, as for
Thrift); refusals are 403 with the same words and audit line as the Thrift calls'.
A request that changes something and that a browser says another site sent is
refused (:func:`.server.same_origin`). Handlers read the master's state cheaply (none
is O(agents) on the loop: the documents are rendered in a child); only ``/teardown``
changes it, through the same code as ``mezzo teardown``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable
from typing import Any, Protocol

from aiohttp import web

from .. import __version__
from ..acls import Acls, View
from ..master import mesos_view
from ..master.audit import principal_of as link_principal
from ..master.audit import refused
from ..master.service import REFUSED, TORN_DOWN
from ..rpc.codec import Utf8Text
from . import metrics
from .server import (
    MAX_BODY_BYTES,
    BadParameter,
    Handler,
    json_error,
    json_errors,
    request_arrived,
    same_origin,
)

PREFIXES = ("", "/master")
"""Every endpoint is served at its path and under ``/master``, as Mesos does."""


class MasterView(Protocol):
    """What the endpoints read of the master (:class:`mezzo.master.master.Master`)."""

    @property
    def leading(self) -> bool: ...

    leader_address: str
    acls: Acls
    config: Any
    """The master's :class:`~mezzo.config.MasterConfig`."""
    zk_url: Any
    """Its parsed ``zk://`` URL (whose text hides the password), or None."""

    def metrics(self) -> dict[str, Any]: ...

    def teardown(self, principal: str | None, peer: str, framework_id: str) -> tuple[str, str]: ...

    def request_document(
        self,
        document: str,
        view: View,
        params: tuple[tuple[str, Any], ...],
        reply: Callable[[Utf8Text], None],
    ) -> bool: ...


def principal_of(request: web.Request) -> str | None:
    """Who the caller proved to be with its TLS certificate (None without TLS or a certificate)."""
    return link_principal(request.transport)


def master_app(master: MasterView) -> web.Application:
    """The aiohttp application of ``master``'s endpoints."""
    app = web.Application(
        middlewares=[request_arrived, json_errors, same_origin, _leader_only(master)],
        client_max_size=MAX_BODY_BYTES,
    )
    endpoints = _Endpoints(master)
    for prefix in PREFIXES:
        app.router.add_get(f"{prefix}/health", endpoints.health, allow_head=True)
        app.router.add_get(f"{prefix}/version", endpoints.version)
        app.router.add_get(f"{prefix}/redirect", endpoints.redirect)
        app.router.add_get(f"{prefix}/metrics/snapshot", endpoints.metrics_snapshot)
        app.router.add_get(f"{prefix}/metrics", endpoints.metrics_prometheus)
        app.router.add_post(f"{prefix}/teardown", endpoints.teardown)
        app.router.add_get(f"{prefix}/flags", endpoints.flags)
        app.router.add_get(f"{prefix}/state", endpoints.state)
        app.router.add_get(f"{prefix}/state.json", endpoints.state)
        app.router.add_get(f"{prefix}/state-summary", endpoints.state_summary)
        app.router.add_get(f"{prefix}/frameworks", endpoints.frameworks)
        app.router.add_get(f"{prefix}/slaves", endpoints.slaves)
        app.router.add_get(f"{prefix}/agents", endpoints.slaves)
        app.router.add_get(f"{prefix}/tasks", endpoints.tasks)
    return app


def _leader_only(master: MasterView) -> Any:
    @web.middleware
    async def leader_only(request: web.Request, handler: Handler) -> web.StreamResponse:
        if master.leading or request.path in ("/health", "/master/health"):
            return await handler(request)
        if not master.leader_address:
            return json_error(503, "no master is leading yet (an election is under way); try again shortly")
        if request.path in ("/redirect", "/master/redirect"):
            raise web.HTTPTemporaryRedirect(f"//{master.leader_address}")
        # Standbys send every caller to the leader, path and query kept.
        raise web.HTTPTemporaryRedirect(f"//{master.leader_address}{request.rel_url}")

    return leader_only


class _Endpoints:
    def __init__(self, master: MasterView) -> None:
        self._master = master

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": __version__, "name": "mezzo"})

    async def redirect(self, request: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect(f"//{self._master.leader_address}")

    async def metrics_snapshot(self, request: web.Request) -> web.Response:
        self._may_view_cluster(request)
        return web.json_response(metrics.snapshot(self._master.metrics()))

    async def metrics_prometheus(self, request: web.Request) -> web.Response:
        self._may_view_cluster(request)
        body = metrics.prometheus_text(metrics.snapshot(self._master.metrics()))
        return web.Response(body=body, headers={"Content-Type": metrics.PROMETHEUS_CONTENT_TYPE})

    async def state(self, request: web.Request) -> web.Response:
        return await self._document(request, "state")

    async def state_summary(self, request: web.Request) -> web.Response:
        return await self._document(request, "summary")

    async def frameworks(self, request: web.Request) -> web.Response:
        framework_id = _id_parameter(request, "framework_id")
        return await self._document(request, "frameworks", (("framework_id", framework_id),))

    async def slaves(self, request: web.Request) -> web.Response:
        agent_id = _id_parameter(request, "slave_id") or _id_parameter(request, "agent_id")
        return await self._document(request, "slaves", (("agent_id", agent_id),))

    async def tasks(self, request: web.Request) -> web.Response:
        order = request.query.get("order", "desc")
        if order not in mesos_view.ORDERS:
            raise BadParameter("order", f"{order[:20]!r} is not asc or desc")
        params = (
            ("framework_id", _id_parameter(request, "framework_id")),
            ("task_id", _id_parameter(request, "task_id")),
            ("limit", _count_parameter(request, "limit", mesos_view.TASKS_LIMIT)),
            ("offset", _count_parameter(request, "offset", 0)),
            ("order", order),
        )
        return await self._document(request, "tasks", params)

    async def _document(
        self, request: web.Request, document: str, params: tuple[tuple[str, Any], ...] = ()
    ) -> web.Response:
        """A Mesos-shaped document, as much of it as the caller may see, rendered off the loop."""
        principal = principal_of(request)
        view = self._master.acls.view_of(principal)
        if view.nothing:
            peer = getattr(request.transport, "peer", "?")
            refused(
                f"GET {request.path}", principal, "state", "master.acls.view_cluster, view_frameworks", peer
            )
            who = principal or "a caller without a certificate"
            raise web.HTTPForbidden(
                text=f"principal {who} may not view the cluster (master.acls: view_cluster, view_frameworks)"
            )
        answer: asyncio.Future[Utf8Text] = asyncio.get_running_loop().create_future()

        def reply(text: Utf8Text) -> None:
            if not answer.done():
                answer.set_result(text)

        if not self._master.request_document(document, view, params, reply):
            return json_error(
                503,
                "the master is rendering other documents of its state; ask again shortly",
                **{"Retry-After": "1"},
            )
        text = await answer
        return web.Response(body=text.view(), content_type="application/json")

    async def flags(self, request: web.Request) -> web.Response:
        self._may_view_cluster(request)
        return web.json_response({"flags": settings_of(self._master)})

    async def teardown(self, request: web.Request) -> web.Response:
        form = await request.post()
        framework_id = form.get("frameworkId")
        if not isinstance(framework_id, str) or not framework_id:
            raise BadParameter("frameworkId", "required: the id of the framework to tear down (a form field)")
        peer = getattr(request.transport, "peer", "?")
        outcome, message = self._master.teardown(principal_of(request), peer, framework_id)
        if outcome == TORN_DOWN:
            return web.json_response({"message": message})
        return json_error(403 if outcome == REFUSED else 400, message)

    def _may_view_cluster(self, request: web.Request) -> None:
        principal = principal_of(request)
        if not self._master.acls.allows("view_cluster", principal):
            peer = getattr(request.transport, "peer", "?")
            refused(
                f"GET {request.path}", principal, "the cluster's metrics", "master.acls.view_cluster", peer
            )
            who = principal or "a caller without a certificate"
            raise web.HTTPForbidden(
                text=f"principal {who} may not view the cluster (master.acls.view_cluster)"
            )


def settings_of(master: MasterView) -> dict[str, Any]:
    """``[master]`` as the master runs it, for ``/flags``: no secret in it (the ZooKeeper
    password hidden, plugins' settings tables only named, the ACL rules counted)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(master.config):
        value = getattr(master.config, f.name)
        if f.name == "zk":
            value = str(master.zk_url) if master.zk_url is not None else ""
        elif f.name == "acls":
            # Who may do what is the operators' business, not every viewer's: counted only.
            value = {
                "permissive": bool(master.acls.permissive),
                "rules": {action: len(rules) for action, rules in master.acls.rules.items() if rules},
            }
        elif f.name in ("offer_filter_settings",):
            # Plugins' own tables may hold their credentials: which plugins, not what.
            value = {name: "(set)" for name in value}
        elif f.name in ("allocator", "revocation_policy"):
            value = {"name": value.name, "settings_tables": sorted(value.settings)}
        elif dataclasses.is_dataclass(value):
            value = dataclasses.asdict(value)  # type: ignore[arg-type]
        out[f.name] = value
    return json.loads(json.dumps(out, default=str))  # whatever TOML gave (dates): as text


ID_MAX = 200
"""Longest id a query parameter may carry (ids mezzo makes are far shorter)."""
COUNT_MAX = 100_000
"""Largest ``limit`` or ``offset``."""


def _id_parameter(request: web.Request, name: str) -> str | None:
    value = request.query.get(name)
    if value is None or value == "":
        return None
    if len(value) > ID_MAX:
        raise BadParameter(name, f"longer than {ID_MAX} characters")
    return value


def _count_parameter(request: web.Request, name: str, default: int) -> int:
    text = request.query.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadParameter(name, f"{text[:20]!r} is not a whole number") from None
    if not 0 <= value <= COUNT_MAX:
        raise BadParameter(name, f"{value} is not between 0 and {COUNT_MAX:,}")
    return value
