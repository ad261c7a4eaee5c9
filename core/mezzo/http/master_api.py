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
  ``/slaves?slave_id=&limit=&offset=`` (``/agents``),
  ``/tasks?framework_id=&task_id=&state=&limit=&offset=&order=``, and mezzo's
  ``/overview`` (the web UI's front page: counts, totals, frameworks, no lists of
  agents or tasks) and ``/offers?limit=&offset=``: the state in Mesos' shape
  (:mod:`mezzo.master.mesos_view`), each framework with why it is pending
  (:mod:`mezzo.master.why_pending`), as much as the caller's ``view_*`` ACLs show,
  rendered in a forked child like ``mezzo state``.
- ``GET /flags``: ``{"flags": {...}}``, the master's settings (``[master]`` as
  loaded, defaults filled in), the ZooKeeper password hidden and the ACLs counted,
  not listed; needs ``view_cluster``.
- ``POST /teardown`` (form ``frameworkId=``): ends a framework as ``mezzo teardown``
  does; 200, or 400 for an unknown id, 403 where ``teardown_frameworks`` does not allow it.
- ``POST /kill`` (form ``frameworkId=&taskId=``), ``POST /drain`` (form ``agentId=``,
  ``gracePeriod=`` seconds, default 0) and ``POST /reactivate`` (form ``agentId=``):
  :mod:`mezzo.master.operator_actions`; 200, 404 for an unknown id, 403 where
  ``kill_tasks`` / ``drain_agents`` do not allow it.
- ``POST /api/v1/scheduler``: Apache Mesos' v1 scheduler API, for frameworks written
  for Mesos (pymesos): :mod:`.scheduler_api`.

A standby answers every call but ``/health`` with 307 to the leader, or 503 while
none is elected. Callers are who their TLS certificate says (the port's TLS, as for
Thrift), else who their Basic credentials say (``[master.http] credentials``); refusals are 403 with the same words and audit line as the Thrift calls'.
A request that changes something and that a browser says another site sent is
refused (:func:`.server.same_origin`). Handlers read the master's state cheaply (none
is O(agents) on the loop: the documents are rendered in a child); only the ``POST``
calls change it.
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
from ..master.operator_actions import GRACE_MAX, OperatorActions
from ..master.operator_actions import REFUSED as ACTION_REFUSED
from ..master.operator_actions import UNKNOWN as ACTION_UNKNOWN
from ..master.service import REFUSED, TORN_DOWN
from ..rpc.codec import Utf8Text
from . import metrics
from .access import basic_credentials, caller, may_view_cluster, peer_of, viewer
from .credentials import Credentials
from .event_api import EventSource, add_event_routes
from .files_proxy import FilesMaster, add_files_routes
from .scheduler_api import SchedulerMaster, add_scheduler_routes
from .server import (
    MAX_BODY_BYTES,
    BadParameter,
    Handler,
    json_error,
    json_errors,
    request_arrived,
    same_origin,
)
from .ui_routes import add_ui_routes

PREFIXES = ("", "/master")
"""Every endpoint is served at its path and under ``/master``, as Mesos does."""


class MasterView(FilesMaster, EventSource, SchedulerMaster, Protocol):
    """What the endpoints read of the master (:class:`mezzo.master.master.Master`), the
    file proxy's and the event stream's needs included."""

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

    @property
    def operator(self) -> OperatorActions: ...

    def documents_changed(self) -> None: ...

    def request_document(
        self,
        document: str,
        view: View,
        params: tuple[tuple[str, Any], ...],
        reply: Callable[[Utf8Text], None],
    ) -> bool: ...


def master_app(master: MasterView) -> web.Application:
    """The aiohttp application of ``master``'s endpoints."""
    path = master.config.http.credentials
    credentials = Credentials.load(path) if path else None
    middlewares = [request_arrived, json_errors, same_origin, _leader_only(master)]
    if credentials is not None:
        middlewares.append(basic_credentials(credentials))
    app = web.Application(middlewares=middlewares, client_max_size=MAX_BODY_BYTES)
    endpoints = _Endpoints(master)
    for prefix in PREFIXES:
        app.router.add_get(f"{prefix}/health", endpoints.health, allow_head=True)
        app.router.add_get(f"{prefix}/version", endpoints.version)
        app.router.add_get(f"{prefix}/redirect", endpoints.redirect)
        app.router.add_get(f"{prefix}/metrics/snapshot", endpoints.metrics_snapshot)
        app.router.add_get(f"{prefix}/metrics", endpoints.metrics_prometheus)
        app.router.add_post(f"{prefix}/teardown", endpoints.teardown)
        app.router.add_post(f"{prefix}/kill", endpoints.kill)
        app.router.add_post(f"{prefix}/drain", endpoints.drain)
        app.router.add_post(f"{prefix}/reactivate", endpoints.reactivate)
        app.router.add_get(f"{prefix}/flags", endpoints.flags)
        app.router.add_get(f"{prefix}/state", endpoints.state)
        app.router.add_get(f"{prefix}/state.json", endpoints.state)
        app.router.add_get(f"{prefix}/state-summary", endpoints.state_summary)
        app.router.add_get(f"{prefix}/frameworks", endpoints.frameworks)
        app.router.add_get(f"{prefix}/slaves", endpoints.slaves)
        app.router.add_get(f"{prefix}/agents", endpoints.slaves)
        app.router.add_get(f"{prefix}/tasks", endpoints.tasks)
        app.router.add_get(f"{prefix}/offers", endpoints.offers)
        app.router.add_get(f"{prefix}/overview", endpoints.overview)
    add_event_routes(app, master, PREFIXES)
    add_scheduler_routes(app, master, PREFIXES, credentials)  # Mesos' v1 scheduler API (.scheduler_api)
    add_files_routes(app, master)  # /files/*: agents' sandboxes through the master (.files_proxy)
    add_ui_routes(app)  # the read-only web UI at / (mezzo.http.ui_routes)
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
        limit = _count_parameter(request, "limit", -1)
        params = (
            ("agent_id", agent_id),
            ("limit", None if limit < 0 else limit),
            ("offset", _count_parameter(request, "offset", 0)),
        )
        return await self._document(request, "slaves", params)

    async def offers(self, request: web.Request) -> web.Response:
        params = (
            ("limit", _count_parameter(request, "limit", mesos_view.TASKS_LIMIT)),
            ("offset", _count_parameter(request, "offset", 0)),
        )
        return await self._document(request, "offers", params)

    async def overview(self, request: web.Request) -> web.Response:
        return await self._document(request, "overview")

    async def tasks(self, request: web.Request) -> web.Response:
        order = request.query.get("order", "desc")
        if order not in mesos_view.ORDERS:
            raise BadParameter("order", f"{order[:20]!r} is not asc or desc")
        state = request.query.get("state") or None
        if state is not None and state not in mesos_view.TASK_STATE_FILTERS:
            raise BadParameter(
                "state", f"{state[:20]!r} is not a task state (TASK_RUNNING, ...), active or ended"
            )
        params = (
            ("framework_id", _id_parameter(request, "framework_id")),
            ("task_id", _id_parameter(request, "task_id")),
            ("agent_id", _id_parameter(request, "agent_id")),
            ("limit", _count_parameter(request, "limit", mesos_view.TASKS_LIMIT)),
            ("offset", _count_parameter(request, "offset", 0)),
            ("order", order),
            ("state", state),
        )
        return await self._document(request, "tasks", params)

    async def _document(
        self, request: web.Request, document: str, params: tuple[tuple[str, Any], ...] = ()
    ) -> web.Response:
        """A Mesos-shaped document, as much of it as the caller may see, rendered off the loop."""
        view = viewer(request, self._master.acls, "state")
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
        outcome, message = self._master.teardown(caller(request), peer_of(request), framework_id)
        self._master.documents_changed()
        if outcome == TORN_DOWN:
            return web.json_response({"message": message})
        return json_error(403 if outcome == REFUSED else 400, message)

    async def kill(self, request: web.Request) -> web.Response:
        form = await request.post()
        framework_id = _form_id(form, "frameworkId", "the id of the task's framework")
        task_id = _form_id(form, "taskId", "the id of the task to kill")
        outcome = self._master.operator.kill_task(caller(request), peer_of(request), framework_id, task_id)
        self._master.documents_changed()
        return _action_answer(outcome)

    async def drain(self, request: web.Request) -> web.Response:
        form = await request.post()
        agent_id = _form_id(form, "agentId", "the id of the agent to drain")
        text = form.get("gracePeriod", "0")
        try:
            grace = float(text) if isinstance(text, str) else -1.0
        except ValueError:
            grace = -1.0
        if not 0 <= grace <= GRACE_MAX:  # NaN fails too
            raise BadParameter("gracePeriod", f"seconds between 0 and {GRACE_MAX:g}, not {str(text)[:20]!r}")
        outcome = self._master.operator.drain(caller(request), peer_of(request), agent_id, grace)
        self._master.documents_changed()
        return _action_answer(outcome)

    async def reactivate(self, request: web.Request) -> web.Response:
        form = await request.post()
        agent_id = _form_id(form, "agentId", "the id of the agent to reactivate")
        outcome = self._master.operator.reactivate(caller(request), peer_of(request), agent_id)
        self._master.documents_changed()
        return _action_answer(outcome)

    def _may_view_cluster(self, request: web.Request) -> None:
        may_view_cluster(request, self._master.acls, "the cluster's metrics")


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


def _form_id(form: Any, name: str, what: str) -> str:
    value = form.get(name)
    if not isinstance(value, str) or not value:
        raise BadParameter(name, f"required: {what} (a form field)")
    if len(value) > ID_MAX:
        raise BadParameter(name, f"longer than {ID_MAX} characters")
    return value


def _action_answer(outcome: tuple[str, str]) -> web.Response:
    """An operator action's ``(outcome, message)`` as HTTP: 200, 403 refused, 404 unknown."""
    kind, message = outcome
    if kind == ACTION_REFUSED:
        return json_error(403, message)
    if kind == ACTION_UNKNOWN:
        return json_error(404, message)
    return web.json_response({"message": message, "outcome": kind})


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
