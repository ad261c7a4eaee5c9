"""Test doubles for the DRF allocator's unit tests.

``FakeCycle`` stands in for the master's ``AllocationCycle``: a fixed set of agents
with free resources, a set of refused (framework, agent) pairs, and an ``offer``
that, like the master's, empties the agent and calls ``allocator.allocated``
before returning. Handed out through fixtures so the tests work under any pytest
import mode.
"""

from __future__ import annotations

import pytest
from mezzo.hookspecs import AllocationCycle
from mezzo.resources import Resources
from mezzo.wire.ttypes import FrameworkInfo


class FakeCycle(AllocationCycle):
    def __init__(self, allocator, free: dict[str, Resources], refused=()) -> None:
        self.allocator = allocator
        self._free = dict(free)
        self.refused = set(refused)
        self.offers: list[tuple[str, str]] = []
        self.asked: list[tuple[str, str]] = []

    def agents(self):
        return [a for a, r in self._free.items() if r]

    def free(self, agent_id):
        return self._free[agent_id]

    def may_offer(self, framework_id, agent_id):
        self.asked.append((framework_id, agent_id))
        return bool(self._free[agent_id]) and (framework_id, agent_id) not in self.refused

    def offer(self, framework_id, agent_id):
        res = self._free[agent_id]
        self._free[agent_id] = Resources()
        self.offers.append((framework_id, agent_id))
        self.allocator.allocated(framework_id, res)


@pytest.fixture
def fake_cycle():
    return FakeCycle


@pytest.fixture
def info():
    def make(name: str, role: str = "*") -> FrameworkInfo:
        return FrameworkInfo(name=name, role=role)

    return make
