"""The master's state in Apache Mesos' JSON shape, for the HTTP API (``/state``,
``/state-summary``, ``/frameworks``, ``/slaves``, ``/tasks``), and mezzo's own
small documents for the web UI (``/overview``, ``/offers``).

Tools written for Mesos (dashboards, ``mesos_exporter``, scripts reading
``/master/state``) read the field names and shapes of Mesos' ``/state`` (its
``src/master/readonly_handler.cpp``): agents are ``slaves`` with ``slave_id``s,
resources are flattened to ``{"cpus": 2.0, "mem": 1024.0, "ports": "[31000-32000]"}``,
task states are their ``TASK_*`` names, times are Unix seconds. Where mezzo knows
more, the fact is an extra field (a framework's ``dominant_share``, ``guarantee``,
offer ``filters``, ``agents_refused``, ``not_offered_last_cycle``, ``why_pending``
(:mod:`.why_pending`) and ``failover_deadline``; an agent's ``free_resources`` and
``draining``; a task's ``message``, ``reason``, ``exit_code``, ``hostname``,
``start_time``, ``end_time`` and ``sandbox``, the path of its sandbox in the files
API); where it knows less, the Mesos field is there, empty (``reserved_resources``,
``capabilities``). Lists that can be long page (``limit``, ``offset``, ``total``).

Like ``mezzo state`` (:mod:`.state_view`), each document is rendered in a forked
child (:mod:`.state_snapshot`), never on the master's loop, and shows only what
the caller's :class:`~mezzo.acls.View` shows: the frameworks whose user it sees,
their tasks and offers, and the agents and settings only with ``view_cluster``.
Task environments and data are never part of it.
"""

from __future__ import annotations

import itertools
import json
import socket
from typing import TYPE_CHECKING, Any

from .. import __version__, is_terminal, state_name
from ..acls import FULL_VIEW, View
from ..resources import Resources
from ..rpc.address import parse_address
from ..task_user import DEFAULT_USER
from ..wire.ttypes import TaskState
from .records import EndedFramework, EndedTask, FrameworkRecord
from .state_view import shows, sum_of, used_on
from .why_pending import PendingFacts, why_pending

if TYPE_CHECKING:
    from .master import Master
    from .records import AgentRecord, OfferRecord, TaskRecord

TASKS_LIMIT = 100
"""``/tasks``' default ``limit``, Mesos' ``TASK_LIMIT``."""
ORDERS = ("asc", "desc")


def flat(resources: Resources) -> dict[str, Any]:
    """Resources as Mesos' JSON has them: scalars as numbers, ranges as ``"[a-b, c-d]"``."""
    out: dict[str, Any] = {
        name: float(value) for name, value in resources.to_dict().items() if not isinstance(value, list)
    }
    for name in sorted(resources.ranges):
        out[name] = "[" + ", ".join(f"{b}-{e}" for b, e in resources.range_pairs(name)) + "]"
    return out


def state(master: Master, view: View = FULL_VIEW) -> dict[str, Any]:
    """``/state``: the whole cluster as ``view`` may see it."""
    term = master.term
    st = term.state
    shown = _shown_frameworks(master, view)
    host, port = parse_address(master.address, 0)  # the host without IPv6 brackets
    agents = list(st.agents.values()) if view.cluster else []
    facts = PendingFacts(master, view)
    out: dict[str, Any] = {
        "version": __version__,
        "id": st.id,
        "pid": f"master@{master.address}",
        "hostname": host or socket.gethostname(),
        "port": port or None,
        "start_time": master.started_at,
        "elected_time": master.started_at if term.leading else None,
        "leader": f"master@{master.leader_address}" if master.leader_address else "",
        "activated_slaves": sum(1 for a in agents if a.connected and a.drain is None),
        "deactivated_slaves": sum(1 for a in agents if not a.connected or a.drain is not None),
        "unreachable_slaves": 0,
        "cluster": "",
        "slaves": [agent_body(a) for a in agents],
        "recovered_slaves": [],
        "frameworks": [_framework(master, f, full=True, facts=facts) for f in shown],
        "completed_frameworks": [_ended_framework(master, f) for f in _shown_ended(master, view)],
        "orphan_tasks": [],
        "unregistered_frameworks": [],
    }
    if not view.everything:
        out["partial"] = "the viewer's principal may see only part of the state (master.acls)"
    return out


def summary(master: Master, view: View = FULL_VIEW) -> dict[str, Any]:
    """``/state-summary``: agents and frameworks with their task counts by state, no tasks."""
    st = master.term.state
    shown = _shown_frameworks(master, view)
    shown_ids = {f.id for f in shown}
    host = parse_address(master.address, 0)[0]
    slaves = []
    for a in st.agents.values() if view.cluster else ():
        counts: dict[str, int] = {}
        frameworks: set[str] = set()
        for t in a.tasks.values():
            counts[state_name(t.state)] = counts.get(state_name(t.state), 0) + 1
            frameworks.add(t.framework_id)
        slaves.append(
            {
                **agent_body(a),
                **dict.fromkeys(TASK_STATE_NAMES, 0),
                **counts,
                "framework_ids": sorted(frameworks & shown_ids),
            }
        )
    frameworks_out = []
    facts = PendingFacts(master, view)
    for f in shown:
        counts = {}
        agents: set[str] = set()
        for t in f.tasks.values():
            counts[state_name(t.state)] = counts.get(state_name(t.state), 0) + 1
            agents.add(t.agent_id)
        frameworks_out.append(
            {
                **_framework(master, f, full=False, facts=facts),
                **dict.fromkeys(TASK_STATE_NAMES, 0),
                **counts,
                "slave_ids": sorted(agents),
            }
        )
    return {"hostname": host, "cluster": "", "slaves": slaves, "frameworks": frameworks_out}


def frameworks(master: Master, view: View, framework_id: str | None = None) -> dict[str, Any]:
    """``/frameworks[?framework_id=]``."""
    shown = [f for f in _shown_frameworks(master, view) if framework_id is None or f.id == framework_id]
    ended = [f for f in _shown_ended(master, view) if framework_id is None or f.id == framework_id]
    facts = PendingFacts(master, view)  # once per document, not per framework (O(offerable agents))
    return {
        "frameworks": [_framework(master, f, full=True, facts=facts) for f in shown],
        "completed_frameworks": [_ended_framework(master, f) for f in ended],
        "unregistered_frameworks": [],
    }


def slaves(
    master: Master, view: View, agent_id: str | None = None, limit: int | None = None, offset: int = 0
) -> dict[str, Any]:
    """``/slaves[?slave_id=&limit=&offset=]`` (and ``/agents``): nothing without
    ``view_cluster``. ``limit`` and ``offset`` (mezzo's: Mesos lists every agent) page
    through the agents in the order they registered; ``total`` counts them all."""
    agents = master.term.state.agents if view.cluster else {}
    if agent_id is not None:
        found = [agents[agent_id]] if agent_id in agents else []
    else:
        end = None if limit is None else offset + limit
        found = list(itertools.islice(agents.values(), offset, end))
    return {
        "slaves": [agent_body(a) for a in found],
        "recovered_slaves": [],
        "total": len(agents) if agent_id is None else len(found),
    }


def offers(master: Master, view: View, limit: int = TASKS_LIMIT, offset: int = 0) -> dict[str, Any]:
    """``/offers?limit=&offset=`` (mezzo's): the outstanding offers the viewer's
    frameworks hold, oldest first, with ``total``."""
    shown = _shown_frameworks(master, view)
    held = [o for f in shown for o in f.offers.values()]
    held.sort(key=lambda o: o.created_at)
    return {"offers": [_offer(o) for o in held[offset : offset + limit]], "total": len(held)}


def overview(master: Master, view: View) -> dict[str, Any]:
    """``/overview`` (mezzo's): what the web UI's front page shows, in one small
    document whatever the cluster's size: the master, agent and task counts,
    resource totals (and the most of each scalar one active agent has: what no task
    can exceed), and each framework the viewer sees with its task counts and why it
    is pending. No list of agents or tasks."""
    term = master.term
    st = term.state
    host = parse_address(master.address, 0)[0]
    agents = st.agents.values() if view.cluster else ()
    total = Resources()
    used = Resources()
    offered = Resources()
    active = inactive = draining = 0
    largest: dict[str, float] = {}
    for a in agents:
        total = total + a.total
        used = used + used_on(a)
        for o in a.offers.values():
            offered = offered + o.resources
        if a.drain is not None:
            draining += 1
        elif a.connected:
            active += 1
            for name in a.total.scalars:
                amount = a.total.get(name)
                if amount > largest.get(name, 0):
                    largest[name] = amount
        else:
            inactive += 1
    shown = _shown_frameworks(master, view)
    facts = PendingFacts(master, view)
    tasks_by_state: dict[str, int] = dict.fromkeys(TASK_STATE_NAMES, 0)
    frameworks_out = []
    for f in shown:
        counts: dict[str, int] = {}
        for t in f.tasks.values():
            name = state_name(t.state)
            counts[name] = counts.get(name, 0) + 1
        for t in f.completed:
            name = state_name(t.state)
            counts[name] = counts.get(name, 0) + 1
        for name, n in counts.items():
            tasks_by_state[name] = tasks_by_state.get(name, 0) + n
        frameworks_out.append(
            {**_framework(master, f, full=False, facts=facts), **dict.fromkeys(TASK_STATE_NAMES, 0), **counts}
        )
    return {
        "master": {
            "version": __version__,
            "id": st.id,
            "pid": f"master@{master.address}",
            "hostname": host or socket.gethostname(),
            "leader": f"master@{master.leader_address}" if master.leader_address else "",
            "start_time": master.started_at,
            "elected_time": master.started_at if term.leading else None,
            "allocator": master.config.allocator.name,
        },
        "agents": {"active": active, "inactive": inactive, "draining": draining},
        "resources": {
            "total": flat(total),
            "used": flat(used),
            "offered": flat(offered),
            "largest_agent": largest,
        },
        "tasks": tasks_by_state,
        "offers": sum(len(f.offers) for f in shown),
        "frameworks": frameworks_out,
        "completed_frameworks": len(_shown_ended(master, view)),
    }


def tasks(
    master: Master,
    view: View,
    *,
    framework_id: str | None = None,
    task_id: str | None = None,
    agent_id: str | None = None,
    limit: int = TASKS_LIMIT,
    offset: int = 0,
    order: str = "desc",
    state: str | None = None,
) -> dict[str, Any]:
    """``/tasks``: active and completed tasks, newest first (``order=desc``) by the time
    of their last update, ``offset`` skipped, at most ``limit``; only those of
    ``framework_id``, ``task_id``, ``agent_id`` when given, and in ``state``: a ``TASK_*``
    name, ``active`` (not ended) or ``ended`` (mezzo's filters). ``total`` counts all
    that match."""
    found: list[Any] = []
    frameworks: list[FrameworkRecord | EndedFramework] = [
        *_shown_frameworks(master, view),
        *_shown_ended(master, view),
    ]
    for f in frameworks:
        if framework_id is None or f.id == framework_id:
            if isinstance(f, FrameworkRecord):
                found.extend(t for t in f.tasks.values() if task_id is None or t.id == task_id)
            found.extend(t for t in f.completed if task_id is None or t.id == task_id)
    if agent_id is not None:
        found = [t for t in found if t.agent_id == agent_id]
    if state == "active":
        found = [t for t in found if not is_terminal(t.state)]
    elif state == "ended":
        found = [t for t in found if is_terminal(t.state)]
    elif state is not None:
        found = [t for t in found if state_name(t.state) == state]
    found.sort(key=lambda t: t.updated_at, reverse=order == "desc")
    return {"tasks": [_task(master, t) for t in found[offset : offset + limit]], "total": len(found)}


def render(document: str, master: Master, view: View, params: tuple[tuple[str, Any], ...] = ()) -> str:
    """One document as JSON text, for :class:`~.state_snapshot.StateSnapshots`."""
    kwargs = dict(params)
    if document == "state":
        value = state(master, view)
    elif document == "summary":
        value = summary(master, view)
    elif document == "frameworks":
        value = frameworks(master, view, **kwargs)
    elif document == "slaves":
        value = slaves(master, view, **kwargs)
    elif document == "tasks":
        value = tasks(master, view, **kwargs)
    elif document == "offers":
        value = offers(master, view, **kwargs)
    elif document == "overview":
        value = overview(master, view)
    else:
        raise ValueError(f"no such document: {document}")
    return json.dumps(value, separators=(",", ":"))


# -- the parts ---------------------------------------------------------------------------


def _shown_frameworks(master: Master, view: View) -> list[FrameworkRecord]:
    frameworks = master.term.state.frameworks.values()
    if view.everything:
        return list(frameworks)
    return [f for f in frameworks if shows(view, f.info)]


TASK_STATE_NAMES = (
    "TASK_STAGING",
    "TASK_STARTING",
    "TASK_RUNNING",
    "TASK_KILLING",
    "TASK_FINISHED",
    "TASK_KILLED",
    "TASK_FAILED",
    "TASK_LOST",
    "TASK_ERROR",
    "TASK_UNREACHABLE",
)
"""The task counts every agent and framework of ``/state-summary`` carries, zeros included."""
TASK_STATE_FILTERS = frozenset({*TaskState.__members__, "active", "ended"})
"""What ``/tasks?state=`` takes: a state, or ``active`` (not ended) or ``ended``."""


def agent_body(a: AgentRecord) -> dict[str, Any]:
    offered = sum_of(o.resources for o in a.offers.values())
    return {
        "id": a.id,
        "pid": f"slave(1)@{a.info.address or f'{a.info.hostname}:{a.info.port}'}",
        "hostname": a.info.hostname,
        "port": a.info.port,
        "registered_time": a.registered_at,
        "resources": flat(a.total),
        "used_resources": flat(used_on(a)),
        "offered_resources": flat(offered),
        "reserved_resources": {},
        "unreserved_resources": flat(a.total),
        "free_resources": flat(a.free),
        "attributes": dict(a.info.attributes or {}),
        "active": a.connected and a.drain is None,  # Mesos: a draining agent is deactivated
        "deactivated": a.drain is not None,
        "draining": a.drain is not None,
        **({"drain_info": a.drain.shown(a)} if a.drain is not None else {}),
        "version": __version__,
        "capabilities": [],
    }


def _framework(master: Master, f: FrameworkRecord, *, full: bool, facts: PendingFacts) -> dict[str, Any]:
    st = master.term.state
    info = f.info
    used = f.tasks.held()
    offered = sum_of(o.resources for o in f.offers.values())
    out: dict[str, Any] = {
        "id": f.id,
        "name": info.name,
        "pid": f"scheduler@{f.conn.peer}" if f.conn is not None else "",
        "user": info.user or DEFAULT_USER,
        "hostname": info.hostname,
        "webui_url": "",
        "active": f.active and f.conn is not None,
        "connected": f.conn is not None,
        "recovered": f.principal is None and f.conn is None,
        "failover_timeout": info.failover_timeout,
        "checkpoint": True,
        "principal": f.principal,
        "role": info.role,
        "roles": [info.role],
        "registered_time": f.registered_at,
        "unregistered_time": 0,
        "failover_deadline": f.failover_deadline,
        "used_resources": flat(used),
        "offered_resources": flat(offered),
        "capabilities": [],
        "labels": [],
        "dominant_share": round(st.allocator.dominant_share(f.id), 6),
        "filters": {
            "agents": sorted(f.agent_whitelist) if f.agent_whitelist is not None else None,
            "min_free": f.min_free.to_dict() if f.min_free else None,
        },
        "agents_refused": st.refusals.agents_refused_by(f.id),
        "not_offered_last_cycle": master.term.allocation.last_cycle.get("not_offered", {}).get(f.id, {}),
        "guarantee": flat(st.allocator.guaranteed_share(f.id)),
        "why_pending": why_pending(facts, f),
    }
    if full:
        out["tasks"] = [_task(master, t) for t in f.tasks.values()]
        out["unreachable_tasks"] = [_task(master, t) for t in f.unreachable_tasks.values()]
        out["completed_tasks"] = [_task(master, t) for t in f.completed]
        out["offers"] = [_offer(o) for o in f.offers.values()]
        out["executors"] = []
    return out


def task_body(t: TaskRecord | EndedTask, role: str) -> dict[str, Any]:
    """What Mesos' JSON says of a task in every shape (the event stream's ``TASK_ADDED``
    too): ids, state, resources, role, labels."""
    return {
        "id": t.id,
        "name": t.name or t.id,
        "framework_id": t.framework_id,
        "executor_id": t.executor_id,
        "slave_id": t.agent_id,
        "state": state_name(t.state),
        "resources": flat(t.resources),
        "role": role,
        "labels": [{"key": k, "value": v} for k, v in sorted(t.labels.items())],
    }


def _task(master: Master, t: TaskRecord | EndedTask) -> dict[str, Any]:
    """A task, running or ended (:class:`~.records.EndedTask`), as Mesos' JSON has it."""
    agent = master.term.state.agents.get(t.agent_id)
    if isinstance(t, EndedTask):
        role = t.role
    else:
        framework = master.term.state.frameworks.get(t.framework_id)
        role = framework.info.role if framework is not None else "*"
    return {
        **task_body(t, role),
        "statuses": [
            {
                "state": state_name(s),
                "timestamp": when,
                "reason": reason,
                "message": message,
                "source": source,
            }
            for s, when, reason, message, source in t.statuses
        ],
        "message": t.message,
        "reason": t.reason,
        "exit_code": t.exit_code,
        "start_time": next((s[1] for s in t.statuses if s[0] == TaskState.TASK_RUNNING), None),
        "end_time": t.statuses[-1][1] if is_terminal(t.state) else None,
        "hostname": agent.info.hostname if agent is not None else "",
        "sandbox": f"/frameworks/{t.framework_id}/executors/{t.executor_id or t.id}/runs/latest",
    }


def _shown_ended(master: Master, view: View) -> list[EndedFramework]:
    ended = master.term.state.completed_frameworks
    if view.everything:
        return list(ended)
    return [f for f in ended if shows(view, f.info)]


def _ended_framework(master: Master, f: EndedFramework) -> dict[str, Any]:
    return {
        "id": f.id,
        "name": f.info.name,
        "user": f.info.user or DEFAULT_USER,
        "hostname": f.info.hostname,
        "active": False,
        "connected": False,
        "principal": f.principal,
        "role": f.info.role,
        "roles": [f.info.role],
        "registered_time": f.registered_at,
        "unregistered_time": f.unregistered_at,
        "removed_because": f.reason,
        "tasks": [],
        "completed_tasks": [_task(master, t) for t in f.completed],
        "offers": [],
        "executors": [],
    }


def _offer(o: OfferRecord) -> dict[str, Any]:
    return {
        "id": o.id,
        "framework_id": o.framework_id,
        "slave_id": o.agent_id,
        "resources": flat(o.resources),
    }
