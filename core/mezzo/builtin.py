"""Core's built-in components, registered through the same hook as any plugin.

- ``posix`` isolator: no enforcement; processes run as ordinary children of the
  agent in their own process group. The default ``agent.isolation``.
- ``agents`` and ``min-free`` offer filters: the paper's two framework filters
  ("only offer nodes from list L", "only offer nodes with at least R free"),
  driven by each framework's ``set_filters`` call. The master always applies
  them, before any configured offer filter.
- ``fair-share`` revocation policy (:mod:`mezzo.revocation`): the default
  ``master.revocation_policy``.
"""

from __future__ import annotations

from typing import Any

from .agent.posix import PosixIsolator
from .hookspecs import AgentView, FrameworkView, OfferFilter, hookimpl
from .resources import Resources
from .revocation import FairSharePolicy


class AgentListFilter(OfferFilter):
    name = "agents"
    description = "only offer agents in the framework's list (set_filters agents=[...])"

    def refuse(self, framework: FrameworkView, agent: AgentView, free: Resources) -> str | None:
        allowed = framework.agent_whitelist
        if allowed is None or agent.id in allowed or agent.info.hostname in allowed:
            return None
        return "agent not in the framework's agent list"


class MinFreeFilter(OfferFilter):
    name = "min-free"
    description = "only offer agents with at least the framework's minimum free (set_filters min_free=...)"

    def refuse(self, framework: FrameworkView, agent: AgentView, free: Resources) -> str | None:
        minimum = framework.min_free
        if minimum is None or minimum.fits_in(free):
            return None
        return f"less free than the framework's minimum ({'; '.join(minimum.shortfall(free))})"


BUILTIN_OFFER_FILTERS = ("agents", "min-free")


@hookimpl
def mezzo_register_components(registry: Any) -> None:
    registry.add(PosixIsolator)
    registry.add(AgentListFilter)
    registry.add(MinFreeFilter)
    registry.add(FairSharePolicy)
