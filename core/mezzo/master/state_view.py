"""The master's state as JSON (``mezzo state``): agents, frameworks, tasks, offers.

Built from the records in one pass; it is a snapshot, so a client polling it
sees a consistent cluster. The master renders it in a forked child
(:mod:`.state_snapshot`), so its event loop does not stall for the second this
takes at 50,000 agents; Apache Mesos masters froze under state queries at scale.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from .. import state_name
from ..acls import FULL_VIEW, View
from ..resources import Resources
from ..task_user import DEFAULT_USER
from ..wire.ttypes import FrameworkInfo

if TYPE_CHECKING:
    from .master import Master


def snapshot(master: Master, view: View = FULL_VIEW) -> dict[str, Any]:
    """The state as JSON-ready dicts, as much of it as ``view`` shows (see
    :meth:`mezzo.acls.Acls.view_of`): without ``view.cluster`` no master settings and no
    agents; only the frameworks whose user the view shows, and their tasks and
    offers. Task environments and data are never part of the state."""
    if not view.everything:
        return _partial(snapshot(master), view, master)
    term = master.term
    state = term.state
    now = state.now()
    allocator = state.allocator
    config = master.config
    last_cycle = term.allocation.last_cycle
    as_dict = _Dicts()
    facts = why_pending.PendingFacts(master)
    return {
        "master": {
            "id": state.id,
            "address": master.address,
            "leading": term.leading,
            "leader": master.leader_address,
            "zk": str(master.zk_url) if master.zk_url is not None else None,
            "recovering": term.recovery.holding,
            "awaiting_agents": len(term.recovery.awaiting),
            "started_at": master.started_at,
            "allocator": config.allocator.name,
            "offer_filters": list(config.offer_filters),
            "allocation_interval": config.allocation_interval,
            "offer_timeout": config.offer_timeout,
            "min_offer": master.min_offer.to_dict() if master.min_offer is not None else None,
            "revocation_policy": config.revocation_policy.name,
            "revocation_delay": config.revocation_delay,
        },
        "revocation": term.revocation.state() if term.revocation is not None else None,
        "agents": [
            {
                "id": a.id,
                "hostname": a.info.hostname,
                "port": a.info.port,
                "address": a.info.address,
                "connected": a.connected,
                "drain": a.drain.shown(a) if a.drain is not None else None,
                "attributes": dict(a.info.attributes or {}),
                "resources": as_dict(a.total),
                "free": as_dict(a.free),
                "offered": as_dict(sum_of(o.resources for o in a.offers.values())),
                "used": as_dict(used_on(a)),
                "tasks": len(a.tasks),
                "executors": [{"framework_id": f, "executor_id": e} for (f, e) in a.executors],
                "containers": a.statistics,
            }
            for a in state.agents.values()
        ],
        "frameworks": [
            {
                "id": f.id,
                "name": f.info.name,
                "role": f.info.role,
                "connected": f.conn is not None,
                "active": f.active,
                "dominant_share": round(allocator.dominant_share(f.id), 6),
                "guaranteed_share": allocator.guaranteed_share(f.id).to_dict(),
                "used": as_dict(sum_of(t.resources for t in f.tasks.values())),
                "offered": as_dict(sum_of(o.resources for o in f.offers.values())),
                "tasks": len(f.tasks),
                "filters": {
                    "agents": sorted(f.agent_whitelist) if f.agent_whitelist is not None else None,
                    "min_free": f.min_free.to_dict() if f.min_free else None,
                },
                "agents_refused": state.refusals.agents_refused_by(f.id),
                "not_offered_last_cycle": last_cycle.get("not_offered", {}).get(f.id, {}),
                "why_pending": why_pending.why_pending(facts, f),
            }
            for f in state.frameworks.values()
        ],
        "tasks": [
            {
                "id": t.id,
                "framework_id": t.framework_id,
                "agent_id": t.agent_id,
                "state": state_name(t.state),
                "resources": as_dict(t.resources),
                "message": t.message,
            }
            for f in state.frameworks.values()
            for t in f.tasks.values()
        ],
        "completed_tasks": [
            {
                "id": t.id,
                "framework_id": t.framework_id,
                "agent_id": t.agent_id,
                "state": state_name(t.state),
                "reason": t.reason,
                "message": t.message,
            }
            for t in list(state.completed_tasks)[-100:]
        ],
        "unreachable_tasks": [
            {
                "id": t.id,
                "framework_id": t.framework_id,
                "agent_id": t.agent_id,
                "state": state_name(t.state),
                "reason": t.reason,
                "message": t.message,
            }
            for f in state.frameworks.values()
            for t in list(f.unreachable_tasks.values())[-100:]
        ],
        "offers": [
            {
                "id": o.id,
                "framework_id": o.framework_id,
                "agent_id": o.agent_id,
                "resources": as_dict(o.resources),
                "age_seconds": round(time.time() - o.created_at, 3),
                "expires_in_seconds": None if o.expires_at == float("inf") else round(o.expires_at - now, 3),
            }
            for o in state.offer_book.offers.values()
        ],
        "refuse_filters": len(state.refusals),
        "last_allocation": {k: v for k, v in last_cycle.items() if k != "not_offered"},
        "plugin_failures": master.guard.counts(),
    }


def shows(view: View, framework: FrameworkInfo) -> bool:
    """Whether ``view`` shows the framework (by its user, ``nobody`` when it names none)."""
    return view.sees_user(framework.user or DEFAULT_USER)


def render_state(master: Master, view: View = FULL_VIEW) -> str:
    return json.dumps(snapshot(master, view), sort_keys=False)


def _partial(full: dict[str, Any], view: View, master: Master) -> dict[str, Any]:
    """``full`` cut down to ``view``: O(its size), in the rendering child like the rest."""
    frameworks = master.term.state.frameworks
    shown = {fid for fid, f in frameworks.items() if shows(view, f.info)}
    facts = why_pending.PendingFacts(master, view)  # what the full state says of others is not theirs
    out: dict[str, Any] = {
        "master": {k: full["master"][k] for k in ("id", "address", "leading", "leader")},
        "frameworks": [
            {**f, "why_pending": why_pending.why_pending(facts, frameworks[f["id"]])}
            for f in full["frameworks"]
            if f["id"] in shown
        ],
        "tasks": [t for t in full["tasks"] if t["framework_id"] in shown],
        "completed_tasks": [t for t in full["completed_tasks"] if t["framework_id"] in shown],
        "unreachable_tasks": [t for t in full["unreachable_tasks"] if t["framework_id"] in shown],
        "offers": [o for o in full["offers"] if o["framework_id"] in shown],
        "partial": "the viewer's principal may see only part of the state (master.acls)",
    }
    if view.cluster:
        for key in ("master", "revocation", "refuse_filters", "last_allocation", "plugin_failures"):
            out[key] = full[key]
        out["agents"] = full["agents"]
        for agent in out["agents"]:
            agent["executors"] = [e for e in agent["executors"] if e["framework_id"] in shown]
            agent["containers"] = [
                c for c in agent["containers"] or () if isinstance(c, dict) and c.get("framework_id") in shown
            ]
    return out


class _Dicts:
    """``Resources.to_dict`` memoized by value for one snapshot.

    At 50,000 agents and 100,000 tasks a snapshot converts some 300,000 bundles,
    nearly all of a handful of shapes (an agent's total, a task's size); the
    resulting dicts are shared, which ``json.dumps`` does not mind.
    """

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: dict[tuple, dict] = {}

    def __call__(self, resources: Resources) -> dict:
        if resources.ranges:
            return resources.to_dict()  # rare, and ranges make poor keys
        key = tuple(resources.scalars.items())
        out = self._seen.get(key)
        if out is None:
            out = self._seen[key] = resources.to_dict()
        return out


def used_on(agent) -> Resources:
    """What tasks and executors hold on ``agent`` (not what is offered of it)."""
    used = agent.total - agent.free
    for o in agent.offers.values():
        used = used - o.resources
    return used


def sum_of(resources) -> Resources:
    """The sum of some resource bundles."""
    total = Resources()
    for r in resources:
        total = total + r
    return total


# why_pending reads this module's ``shows``; imported last so that either may be loaded first.
from . import why_pending  # noqa: E402
