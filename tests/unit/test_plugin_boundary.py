"""The master's one boundary for plugin calls (mezzo.plugin_guard), in process and
without sockets: an allocator that raises mid-cycle has the cycle rolled back and its
resources offered at the next cycle; an offer filter that raises is "broken", not
"no"; a failing notification or revocation policy is counted and contained.

End to end, with the allocator installed as a package and a real cluster, in
tests/test_plugin_boundary.py.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from mezzo import AgentInfo, FrameworkInfo, Resources, hookimpl
from mezzo.config import from_dict
from mezzo.hookspecs import OfferFilter
from mezzo.master import Master
from mezzo.master.ports import ManualClock
from mezzo.plugins import load_plugins

from .test_master_connections import RecordingConnection

FLAKY = Path(__file__).resolve().parents[1] / "plugins" / "flaky_allocator" / "mezzo_test_flaky_allocator.py"


def flaky_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mezzo_test_flaky_allocator", FLAKY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BrokenFilter(OfferFilter):
    name = "broken"

    def refuse(self, framework, agent, free):
        if agent.hostname == "h1":
            raise KeyError("bug")
        return "never h2" if agent.hostname == "h2" else None


class BrokenFilterPlugin:
    @hookimpl
    def mezzo_register_components(self, registry):
        registry.add(BrokenFilter)


def make_master(**master) -> Master:
    config = from_dict({"master": {"allocation_interval": 0.05, **master}}).master
    m = Master(config, load_plugins(extra=(flaky_module(), BrokenFilterPlugin())), clock=ManualClock())
    m.lead()
    return m


def offers(conn: RecordingConnection) -> list:
    return [o for (batch,) in conn.called("resource_offers") for o in batch]


def setup(master: Master, agents: int = 2) -> RecordingConnection:
    for i in range(agents):
        master.service.register_agent(RecordingConnection(f"a{i}"), AgentInfo(
            hostname=f"h{i}", port=5051, resources=Resources(cpus=4, mem=1024)))
    sched = RecordingConnection("scheduler")
    master.service.register_framework(sched, FrameworkInfo(name="f"))
    return sched


def test_an_allocator_failing_mid_cycle_has_its_offers_rolled_back_and_made_at_the_next_cycle():
    master = make_master(allocator={"name": "flaky", "flaky": {"fail_at_offers": [1]}}, offer_timeout=60)
    sched = setup(master)
    state = master.state

    master.term.allocation.run()  # offers one agent, then raises
    assert offers(sched) == []  # nothing was sent ...
    assert len(state.offer_book) == 0  # ... and nothing stays booked
    assert all(a.free == a.total for a in state.agents.values())
    assert master.metrics()["plugin_failures"] == {"allocator/flaky.allocate": 1}
    assert master.metrics()["allocation_cycles_failed"] == 1

    master.clock.advance(0.05)  # the next cycle, which the failed one asked for; not offer_timeout
    assert sorted(o.hostname for o in offers(sched)) == ["h0", "h1"]
    assert all(not a.free for a in state.agents.values())


def test_a_broken_offer_filter_is_an_error_not_a_reason_and_fails_closed():
    master = make_master(offer_filters=["broken"])
    sched = setup(master, agents=3)
    master.term.allocation.run()
    assert [o.hostname for o in offers(sched)] == ["h0"]
    fid = next(iter(master.state.frameworks))
    assert master.term.allocation.last_cycle["not_offered"][fid] == {"broken: error": 1, "broken: never h2": 1}
    assert master.metrics()["plugin_failures"] == {"offer_filter/broken.refuse": 1}


def test_a_failing_allocator_notification_is_counted_and_the_master_stays_consistent(monkeypatch):
    master = make_master()
    drf = master.state.allocator.inner

    def broken(framework_id, resources):
        raise ValueError("bug in allocated")

    monkeypatch.setattr(drf, "allocated", broken)
    sched = setup(master, agents=1)
    master.term.allocation.run()
    (offer,) = offers(sched)  # the offer is made and sent all the same
    assert offer.offer_id in master.state.offer_book.offers
    assert master.metrics()["plugin_failures"] == {"allocator/drf.allocated": 1}


def test_a_failing_revocation_policy_is_counted_and_revocation_carries_on(monkeypatch):
    master = make_master(revocation_delay=1, allocator={"drf": {"guarantees": {"frameworks": {"S": 0.5}}}})
    policy = master.revocation_policy

    def broken(starved, holders):
        raise RuntimeError("policy bug")

    monkeypatch.setattr(policy, "select", broken)
    master.service.register_agent(RecordingConnection("a"), AgentInfo(hostname="h", port=5051,
                                                                       resources=Resources(cpus=4, mem=1024)))
    starved = RecordingConnection("starved")
    master.service.register_framework(starved, FrameworkInfo(name="S", framework_id="S"))
    master.term.revocation.waiting_since["S"] = master.state.now() - 5
    assert master.term.revocation.check() == []
    assert master.term.revocation.check() == []
    assert master.metrics()["plugin_failures"] == {"revocation_policy/fair-share.select": 2}


@pytest.mark.parametrize("hook", ["add_framework", "add_agent"])
def test_a_failing_registration_notification_still_registers(monkeypatch, hook):
    master = make_master()

    def broken(*args):
        raise RuntimeError(f"bug in {hook}")

    monkeypatch.setattr(master.state.allocator.inner, hook, broken)
    sched = setup(master, agents=1)
    assert len(master.state.agents) == 1 and len(master.state.frameworks) == 1
    assert sched.called("registered")
    assert master.metrics()["plugin_failures"] == {f"allocator/drf.{hook}": 1}
