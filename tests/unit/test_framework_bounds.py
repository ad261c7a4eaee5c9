"""Two bounds on frameworks, in process on a manual clock (issue 14):

- a scheduler silent past ``master.framework_idle_timeout`` (pinged first after
  ``master.framework_ping_interval``) is disconnected, never one that answers its
  pings, and never for a stall of the master itself (mezzo.master.health);
- calls a framework makes on its own initiative are held to
  ``master.framework_call_rate`` and ``master.framework_call_burst``: over them,
  what is safe to lose is dropped, the rest refused with an error naming the
  setting and the framework disconnected; answers to offers, acknowledgements and
  first kills cost nothing (mezzo.master.call_rates, mezzo.master.service).

Real processes: tests/test_framework_bounds.py.
"""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from mezzo import AgentInfo, FrameworkInfo, Resources, TaskInfo
from mezzo.config import MasterConfig, from_dict
from mezzo.errors import ConfigError
from mezzo.master import Master
from mezzo.master.ports import ManualClock
from mezzo.plugins import load_plugins
from mezzo.wire.ttypes import CommandInfo

LIVENESS = dict(allocation_interval=0.01, framework_ping_interval=1.0, framework_idle_timeout=5.0)


class Link:
    """A peer's connection as the master sees it: who it is, when it was last heard
    from, and what the master sent it."""

    def __init__(self, name: str, clock: ManualClock) -> None:
        self.peer = name
        self.tag = None
        self.closed = False
        self.calls: list[tuple[str, tuple]] = []
        self._clock = clock
        self.last_received = clock.now()

    def heard(self) -> None:
        self.last_received = self._clock.now()

    def remote(self, schema):
        link = self

        class _Calls:
            def __getattr__(self, method):
                assert method in schema.methods, method
                return lambda *args: link.calls.append((method, args))

        return _Calls()

    def close(self) -> None:
        self.closed = True

    def called(self, method: str) -> list[tuple]:
        return [args for m, args in self.calls if m == method]


def leading_master(**config) -> tuple[Master, ManualClock]:
    clock = ManualClock()
    master = Master(MasterConfig(**config), load_plugins(), clock=clock)
    master.lead()
    return master, clock


def framework(master: Master, clock: ManualClock, name: str, **info) -> tuple[Link, str]:
    link = Link(name, clock)
    master.service.register_framework(link, FrameworkInfo(name=name, **info))
    ((fid, _),) = link.called("registered")
    return link, fid


def agents(master: Master, clock: ManualClock, count: int) -> Link:
    link = Link("agents", clock)
    for i in range(count):
        master.service.register_agent(
            link, AgentInfo(hostname=f"h{i}", port=5051, resources=Resources(cpus=1, mem=64))
        )
    return link


# -- silent schedulers ------------------------------------------------------------------


def test_a_silent_scheduler_is_pinged_then_disconnected_naming_the_setting():
    master, clock = leading_master(**LIVENESS)
    link, fid = framework(master, clock, "quiet")
    clock.advance(1.5)
    assert link.called("ping") and not link.closed
    with capture_logs() as logs:
        clock.advance(4.0)
    assert link.closed and link.tag is None
    assert fid not in master.state.frameworks  # failover_timeout 0: removed at once
    assert "master.framework_idle_timeout" in master.state.removed_frameworks[fid]
    (line,) = [e for e in logs if e["event"] == "framework disconnected by the master"]
    assert line["framework"] == fid and line["name"] == "quiet"
    assert "no answer to pings" in line["reason"] and line["log_level"] == "warning"
    assert master.metrics()["frameworks_found_silent"] == 1


def test_a_scheduler_that_answers_its_pings_is_kept_however_long_it_has_nothing_to_say():
    master, clock = leading_master(**LIVENESS)
    link, fid = framework(master, clock, "idle-but-alive")
    answered = 0
    for _ in range(600):  # ten minutes
        clock.advance(1.0)
        if len(link.called("ping")) > answered:  # the driver answers pong
            answered = len(link.called("ping"))
            link.heard()
    assert answered >= 100 and not link.closed
    assert master.state.frameworks[fid].conn is link


def test_a_busy_scheduler_is_never_pinged():
    master, clock = leading_master(**LIVENESS)
    link, _ = framework(master, clock, "busy")
    for _ in range(100):
        clock.advance(0.5)
        link.heard()  # anything it sends is a sign of life
    assert not link.called("ping") and not link.closed


def test_a_silent_framework_with_a_failover_timeout_keeps_its_tasks_for_a_successor():
    master, clock = leading_master(**LIVENESS)
    link, fid = framework(master, clock, "hung", failover_timeout=60.0)
    clock.advance(6.0)
    assert link.closed
    record = master.state.frameworks[fid]
    assert record.conn is None  # disconnected, not removed
    successor = Link("successor", clock)
    master.service.register_framework(successor, FrameworkInfo(name="hung", framework_id=fid))
    assert successor.called("reregistered") == [(fid, master.address)]


def test_a_stalled_master_disconnects_no_scheduler():
    master, clock = leading_master(**LIVENESS)
    links = [framework(master, clock, f"f{i}")[0] for i in range(3)]
    clock.advance(0.5)
    for link in links:
        link.heard()
    clock.jump(20.0)  # four times framework_idle_timeout
    clock.advance(0)  # the health check runs first after the stall
    assert not any(link.closed for link in links)
    for _ in range(20):  # then judged on the time since: pinged, and kept as they answer
        clock.advance(0.5)
        for link in links:
            if link.called("ping"):
                link.heard()
    assert all(link.called("ping") for link in links) and not any(link.closed for link in links)
    assert len(master.state.frameworks) == 3


def test_framework_health_settings_are_checked_naming_the_key():
    assert from_dict({}).master.framework_idle_timeout == 300.0
    assert from_dict({}).master.framework_ping_interval == 15.0
    with pytest.raises(ConfigError) as ei:
        from_dict({"master": {"framework_ping_interval": 15, "framework_idle_timeout": 20}})
    assert ei.value.key == "master.framework_idle_timeout" and "twice" in str(ei.value)
    with pytest.raises(ConfigError) as ei:
        from_dict({"master": {"framework_idle_timeout": 7200}})
    assert ei.value.key == "master.framework_idle_timeout" and "at most 3600" in str(ei.value)
    assert from_dict({"master": {"framework_idle_timeout": 0}}).master.framework_idle_timeout == 0
    with pytest.raises(ConfigError) as ei:
        from_dict({"master": {"framework_call_burst": 0}})
    assert ei.value.key == "master.framework_call_burst"


# -- call rates ------------------------------------------------------------------------


RATES = dict(allocation_interval=0.01, framework_call_rate=10.0, framework_call_burst=100)


def test_a_framework_flooding_revives_is_refused_naming_the_setting_and_disconnected():
    master, clock = leading_master(**RATES)
    greedy, greedy_id = framework(master, clock, "greedy")
    calm, calm_id = framework(master, clock, "calm")
    service = master.service
    with capture_logs() as logs:
        for _ in range(101):
            if greedy.closed:
                break
            service.set_needs_offers(greedy, greedy_id, True)
    assert greedy.closed and greedy.tag is None
    (message,) = greedy.called("error")
    assert "set_needs_offers" in message[0] and "master.framework_call_rate" in message[0]
    assert greedy_id not in master.state.frameworks
    assert "master.framework_call_rate" in master.state.removed_frameworks[greedy_id]
    (line,) = [e for e in logs if e["event"] == "framework disconnected by the master"]
    assert line["framework"] == greedy_id and "set_needs_offers" in line["reason"]
    assert master.metrics()["framework_calls_refused"] == 1
    # The other framework's bucket is its own.
    for _ in range(50):
        service.set_needs_offers(calm, calm_id, False)
    assert not calm.closed and not calm.called("error")


def test_calls_safe_to_lose_are_dropped_without_a_word_then_refused_past_a_burst():
    master, clock = leading_master(**RATES)
    link, fid = framework(master, clock, "reconciler")
    service = master.service
    for _ in range(75):
        service.reconcile_tasks(link, fid, [])
        service.decline_offer(link, fid, ["no-such-offer"], None)
    assert not link.closed and not link.called("error")
    assert master.metrics()["framework_calls_dropped"] == 100  # 50 served: half the bucket for these
    for _ in range(50):  # the other half was kept for calls that must not be lost
        service.set_needs_offers(link, fid, True)
    assert not link.closed
    # A whole burst dropped, and still more: the flood costs the master its reading.
    service.reconcile_tasks(link, fid, [])
    assert link.closed and "reconcile_tasks" in link.called("error")[0][0]
    assert master.metrics()["framework_calls_refused"] == 1


def test_answers_to_offers_acknowledgements_and_first_kills_cost_nothing():
    master, clock = leading_master(allocation_interval=0.01, framework_call_rate=1.0, framework_call_burst=10)
    agents(master, clock, 40)
    link, fid = framework(master, clock, "busy")
    service = master.service
    clock.advance(0.05)
    offers = [o for (batch,) in link.called("resource_offers") for o in batch]
    assert len(offers) == 40
    for i, offer in enumerate(offers):  # one call per offer, four times the burst
        if i % 2:
            service.decline_offer(link, fid, [offer.offer_id], None)
        else:
            task = TaskInfo(
                task_id=f"t{i}",
                agent_id=offer.agent_id,
                resources=Resources(cpus=1, mem=64),
                command=CommandInfo(value="true"),
            )
            service.launch_tasks(link, fid, [offer.offer_id], [task], None)
    assert len(master.state.frameworks[fid].tasks) == 20
    for i in range(1000):
        service.acknowledge_status_update(link, fid, offers[0].agent_id, "t0", f"uuid-{i}")
    for i in range(0, 40, 2):
        service.kill_task(link, fid, f"t{i}")
    assert not link.closed and master.metrics()["framework_calls_dropped"] == 0
    assert master.service.call_rates.tokens(fid) == pytest.approx(10)
    # Kills again are retries: charged, and refused once the bucket is empty.
    for i in range(0, 40, 2):
        if not link.closed:
            service.kill_task(link, fid, f"t{i}")
    assert link.closed and "kill_task" in link.called("error")[0][0]


def test_rate_zero_turns_the_limit_off():
    master, clock = leading_master(allocation_interval=0.01, framework_call_rate=0.0, framework_call_burst=1)
    link, fid = framework(master, clock, "unlimited")
    for _ in range(1000):
        master.service.set_needs_offers(link, fid, True)
    assert not link.closed
