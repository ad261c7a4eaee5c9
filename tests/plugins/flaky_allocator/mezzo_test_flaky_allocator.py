"""An allocator that raises half-way through a cycle, right after making an offer.

``[master.allocator.flaky] fail_at_offers = [1]`` makes the cycle in which it makes
its first offer raise right after that offer: exactly the failure that would leave
an offer booked but never sent, were the master not to roll the cycle back.
Otherwise it offers each agent to the first framework that may have it.
"""

from __future__ import annotations

from typing import Any

from mezzo import hookimpl
from mezzo.hookspecs import AllocationCycle, Allocator


class FlakyAllocator(Allocator):
    name = "flaky"
    description = "offers first-come, and raises in the cycles it is told to (tests only)"
    known_settings = ("fail_at_offers",)

    def __init__(self, settings: Any, *, key: str) -> None:
        super().__init__(settings, key=key)
        self.fail_at_offers = set(settings.get("fail_at_offers", []))
        self.active: dict[str, None] = {}
        self.offers = 0

    def add_framework(self, framework_id: str, info: Any) -> None:
        self.active[framework_id] = None

    def remove_framework(self, framework_id: str) -> None:
        self.active.pop(framework_id, None)

    def activate(self, framework_id: str) -> None:
        self.active[framework_id] = None

    def deactivate(self, framework_id: str) -> None:
        self.active.pop(framework_id, None)

    def add_agent(self, agent_id: str, total: Any) -> None:
        pass

    def remove_agent(self, agent_id: str, total: Any) -> None:
        pass

    def allocated(self, framework_id: str, resources: Any) -> None:
        pass

    def recovered(self, framework_id: str, resources: Any) -> None:
        pass

    def allocate(self, cycle: AllocationCycle) -> None:
        for agent_id in cycle.agents():
            for framework_id in self.active:
                if cycle.may_offer(framework_id, agent_id):
                    cycle.offer(framework_id, agent_id)
                    self.offers += 1
                    if self.offers in self.fail_at_offers:
                        raise RuntimeError(f"flaky allocator: failing at offer {self.offers} on purpose")
                    break


@hookimpl
def mezzo_register_components(registry: Any) -> None:
    registry.add(FlakyAllocator)
