""" "Why is my framework getting no offers?": what stands between a framework and offers,
in words, for the HTTP API (``/frameworks``, ``/state``, ``/overview``), the web UI
and the CLI.

Mesos left users to guess (Marathon's "no matching offer", Nomad's "dimension cpu
exhausted"). The master knows every reason it holds an offer back, so it says them:
:func:`why_pending` lists, for one framework, each that applies now, as
``{"reason": <code>, "message": <one line>, ...facts}``, most decisive first:

=====================  ======================================================================
``recovering``         the master just took over and waits for agents to re-register
``disconnected``       its scheduler is gone; ``failover_seconds_left`` until it is removed
``suppressed``         it asked for no offers (``set_needs_offers(False)``)
``offers_held``        it holds offers it has neither used nor declined (they are its share)
``refuse_filters``     it declined agents, refused for a while: how many, and the soonest
                       ``agents`` with ``seconds_left``
``framework_filters``  its own ``set_filters`` (agent list, minimum free) and what they kept
                       out in the latest allocation cycle
``offer_filters``      an offer filter plugin said no (per reason, counted last cycle)
``no_free_resources``  no agent has anything free that is not offered or used (``draining``
                       agents are never offered)
``min_offer``          agents held back with less than ``master.min_offer`` free
``long_task_room``     agents whose room for long tasks is used up (short tasks still fit)
``guarantee``          below its guarantee and starved (revocation will act, or is off), or
                       above it with its newest tasks being revoked for others
``allocator_order``    where it stands in the allocator's order (dominant share, rank)
=====================  ======================================================================

An empty list means nothing holds it back: it is offered what frees up, in its turn.

What a viewer may see (:class:`~mezzo.acls.View`) bounds what the reasons say: agent
ids and counts of agents only with ``view_cluster``; other frameworks only if the view
shows them (the allocator order ranks among the frameworks it shows; a framework
revoked for one it does not see hears "another framework").

Cost: the cluster-wide facts are computed once per document (:class:`PendingFacts`,
O(offerable agents)), each framework's in O(its refusals + offers). Documents are
rendered in a forked child, never on the master's loop.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from ..acls import FULL_VIEW, View
from ..resources import Resources
from .long_tasks import room
from .state_view import shows

if TYPE_CHECKING:
    from .master import Master
    from .records import FrameworkRecord

REFUSED_AGENTS_SHOWN = 10
"""Agents a ``refuse_filters`` reason lists (the soonest to lapse); the count is exact."""


class PendingFacts:
    """What :func:`why_pending` needs that is the same for every framework, computed once."""

    def __init__(self, master: Master, view: View = FULL_VIEW) -> None:
        term = master.term
        st = term.state
        self.master = master
        self.view = view
        self.now = st.now()
        """Loop time (refusals count in it)."""
        self.wall = time.time()
        """Unix time (offers' ages and failover deadlines count in it)."""
        self.recovering = term.recovery.holding
        self.awaiting_agents = len(term.recovery.awaiting)
        self.offerable = len(st.offerable)
        self.draining = sum(1 for a in st.agents.values() if a.drain is not None)
        self.last_cycle = term.allocation.last_cycle
        self.no_long_room = sum(
            1 for a in st.offerable.values() if a.long_limit is not None and not _has_room(a)
        )
        revocation = term.revocation
        self.starved = {s.framework_id: s for s in revocation.starved_now} if revocation else {}
        self.revoking: dict[str, list[str]] = {}
        for entry in revocation.revoking.values() if revocation else ():
            self.revoking.setdefault(entry.framework_id, []).append(entry.for_framework_id or "")
        self.revocation_on = revocation is not None
        allocator = st.allocator
        wanting = [
            f
            for f in st.frameworks.values()
            if f.active and f.conn is not None and (view.everything or shows(view, f.info))
        ]
        wanting.sort(key=lambda f: allocator.dominant_share(f.id))
        self.rank = {f.id: i + 1 for i, f in enumerate(wanting)}
        self.wanting = len(wanting)


def _has_room(agent: Any) -> bool:
    left = room(agent)
    return left is None or bool(left)


def why_pending(facts: PendingFacts, f: FrameworkRecord) -> list[dict[str, Any]]:
    """Each reason that keeps offers from ``f`` now (see the module docstring)."""
    master = facts.master
    st = master.term.state
    config = master.config
    out: list[dict[str, Any]] = []

    def say(reason: str, message: str, **facts_: Any) -> None:
        out.append({"reason": reason, "message": message, **facts_})

    if facts.recovering:
        say(
            "recovering",
            f"this master took over recently and makes no offers until agents re-register "
            f"({facts.awaiting_agents} awaited, at most master.agent_reregister_timeout)",
        )
    if f.conn is None:
        left = None if f.failover_deadline is None else max(0.0, f.failover_deadline - facts.wall)
        when = "" if left is None else f"; removed in {left:.0f} s unless it fails over (failover_timeout)"
        say("disconnected", f"its scheduler is disconnected: no offers{when}", failover_seconds_left=left)
    elif not f.active:
        say("suppressed", "it asked for no offers (set_needs_offers(False)); reviving brings them back")
    if f.offers:
        held = Resources()
        for o in f.offers.values():
            held = held + o.resources
        oldest = min(o.created_at for o in f.offers.values())
        say(
            "offers_held",
            f"it holds {len(f.offers)} offer(s) ({held}) it has neither used nor declined; "
            f"the oldest is {max(0.0, facts.wall - oldest):.0f} s old (master.offer_timeout "
            f"{config.offer_timeout:g} s)",
            offers=len(f.offers),
        )
    cluster = facts.view.cluster
    count, soonest = st.refusals.refused_agents(f.id, facts.now, REFUSED_AGENTS_SHOWN)
    if count:
        first = soonest[0][1] if soonest else math.inf
        lapse = "until it revives" if math.isinf(first) else f"the first lapses in {max(0.0, first):.1f} s"
        agents = [
            {"slave_id": aid, "seconds_left": None if math.isinf(left) else round(max(0.0, left), 3)}
            for aid, left in soonest
        ]
        say(
            "refuse_filters",
            f"it declined {count} agent(s), refused to it for a while ({lapse})",
            agents_refused=count,
            agents=agents if cluster else [{"seconds_left": a["seconds_left"]} for a in agents],
        )
    not_offered: dict[str, int] = facts.last_cycle.get("not_offered", {}).get(f.id, {})
    if f.has_filters:
        parts = []
        if f.agent_whitelist is not None:
            parts.append(f"only agents {_listed(sorted(f.agent_whitelist))}")
        if f.min_free:
            parts.append(f"only agents with at least {f.min_free} free")
        kept_out = sum(n for reason, n in not_offered.items() if ":" not in reason)
        say(
            "framework_filters",
            f"its filters (set_filters) accept {' and '.join(parts)}; "
            f"{kept_out} agent(s) kept out in the latest cycle",
            agents_filtered=kept_out,
        )
    for reason, n in sorted(not_offered.items()):
        if ":" in reason:  # "<offer filter>: <its reason>"
            say("offer_filters", f"offer filter {reason} ({n} agent(s) in the latest cycle)", agents=n)
    if facts.offerable == 0:
        draining = f"; {facts.draining} agent(s) draining" if facts.draining and cluster else ""
        say(
            "no_free_resources",
            f"no agent has resources free: all are used by tasks or offered{draining}",
        )
    below = facts.last_cycle.get("agents_below_min_offer", 0)
    if below and cluster:
        say(
            "min_offer",
            f"{below} agent(s) held back: less than master.min_offer ({master.min_offer}) free on them",
            agents=below,
        )
    if facts.no_long_room and cluster:
        say(
            "long_task_room",
            f"{facts.no_long_room} agent(s) with free resources have no room left for long tasks "
            "(master.long_task_fraction); short tasks still fit",
            agents=facts.no_long_room,
        )
    starved = facts.starved.get(f.id)
    if starved is not None:
        acting = (
            "revocation frees resources for it"
            if facts.revocation_on
            else "revocation is off (master.revocation_delay 0)"
        )
        say(
            "guarantee",
            f"below its guarantee ({st.allocator.guaranteed_share(f.id)}) and starved for "
            f"{starved.waiting_seconds:.0f} s: {acting}",
            wants=starved.wants.to_dict(),
        )
    revoked_for = facts.revoking.get(f.id)
    if revoked_for:
        frameworks = st.frameworks
        names = sorted(
            {
                fid
                if fid
                and (fid in frameworks and (facts.view.everything or shows(facts.view, frameworks[fid].info)))
                else "another framework"
                for fid in revoked_for
            }
        )
        say(
            "guarantee",
            f"above its guarantee: {len(revoked_for)} of its tasks being revoked for {_listed(names)}",
            tasks_revoked=len(revoked_for),
        )
    rank = facts.rank.get(f.id)
    if rank is not None and facts.wanting > 1:
        share = st.allocator.dominant_share(f.id)
        say(
            "allocator_order",
            f"{config.allocator.name}: dominant share {share:.3f}, {_ordinal(rank)} lowest of "
            f"{facts.wanting} frameworks wanting offers",
            rank=rank,
            of=facts.wanting,
        )
    return out


def _listed(names: list[str], shown: int = 5) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
