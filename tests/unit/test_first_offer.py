"""A framework that just registered is offered at the next prompt cycle, not at the end
of the allocation interval that another cycle began (in-process master, ManualClock)."""

from __future__ import annotations

import pytest

from mezzo import AgentInfo, FrameworkInfo, Resources
from mezzo.config import MasterConfig
from mezzo.master import Master
from mezzo.master.allocation_timer import PROMPT_FRACTION
from mezzo.master.ports import ManualClock, RecordingOutbox
from mezzo.plugins import load_plugins

from .test_operator_actions import Link

INTERVAL = 1.0


@pytest.fixture
def one_agent():
    """A leading master whose one agent's registration cycle has run (nobody to offer
    to, but a cycle all the same): ``(master, clock, outbox, cycles so far)``."""
    outbox, clock = RecordingOutbox(), ManualClock()
    master = Master(MasterConfig(allocation_interval=INTERVAL), load_plugins(), clock=clock, outbox=outbox)
    master.lead()
    master.service.register_agent(Link("a"), AgentInfo(hostname="a", port=5051, resources=Resources(cpus=4)))
    clock.advance(0)
    cycles = master.metrics()["allocation_cycles"]
    assert cycles >= 1
    yield master, clock, outbox, cycles
    master.term.close()


def test_a_new_framework_waits_a_tenth_of_the_interval_at_most_not_all_of_it(one_agent) -> None:
    master, clock, outbox, cycles = one_agent
    scheduler = Link("s")
    master.service.register_framework(scheduler, FrameworkInfo(name="f"))
    clock.advance(INTERVAL * PROMPT_FRACTION)
    assert len(outbox.calls(scheduler, "resource_offers")) == 1, "offered within a tenth of the interval"
    assert master.metrics()["allocation_cycles"] == cycles + 1


def test_registrations_in_a_burst_share_prompt_cycles(one_agent) -> None:
    """Prompt is still paced: ten frameworks registering at once get one cycle, not ten."""
    master, clock, outbox, cycles = one_agent
    schedulers = [Link(f"s{i}") for i in range(10)]
    for scheduler in schedulers:
        master.service.register_framework(scheduler, FrameworkInfo(name=scheduler.peer))
    clock.advance(INTERVAL * PROMPT_FRACTION)
    assert master.metrics()["allocation_cycles"] == cycles + 1
    assert sum(len(outbox.calls(s, "resource_offers")) for s in schedulers) == 1  # one agent, one offer
