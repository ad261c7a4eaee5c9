"""RefuseFilters: refusals per (framework, agent) that always cover the agent's free
pool, lapse when the pool grows past them, add up part by part, and expire. The
last tests decline offers through a master (no sockets, a clock of their own)."""

from __future__ import annotations

import math

import pytest

from mezzo import AgentInfo, CommandInfo, Filters, FrameworkInfo, TaskInfo, TaskState, TaskStatus
from mezzo.config import MasterConfig
from mezzo.master import Master
from mezzo.master.ports import ManualClock
from mezzo.master.refusals import RefuseFilters
from mezzo.plugins import load_plugins
from mezzo.resources import Resources
from mezzo.wire.ttypes import RunningTask

R4 = Resources(cpus=4, mem=1024)
R2 = Resources(cpus=2, mem=512)


def test_no_refusal_means_not_refused():
    f = RefuseFilters()
    assert len(f) == 0
    assert not f.refuses("fw", "ag", now=0)
    assert f.next_expiry() is None
    assert f.of_agent("ag") is None


def test_refusal_holds_until_expiry():
    f = RefuseFilters()
    f.add("fw", "ag", R4, until=5.0, free=R4)
    assert len(f) == 1
    assert f.refuses("fw", "ag", now=0)
    assert f.refuses("fw", "ag", now=4.999)
    assert not f.refuses("fw", "ag2", now=0)  # other agent
    assert not f.refuses("fw2", "ag", now=0)  # other framework
    assert not f.refuses("fw", "ag", now=5.0)  # expired exactly at until
    assert len(f) == 1  # look-ups do not mutate; expire() drops in bulk
    assert f.expire(5.0) == 1 and len(f) == 0


def test_a_refusal_that_does_not_cover_the_free_pool_is_not_kept():
    f = RefuseFilters()
    # The agent has more free (R4 + R2) than the framework declined (R2): offer it again.
    f.add("fw", "ag", R2, until=10, free=R4 + R2)
    assert len(f) == 0 and not f.refuses("fw", "ag", now=1)


def test_refusals_lapse_when_the_free_pool_grows_past_them():
    f = RefuseFilters()
    f.add("small", "ag", R2, until=10, free=R2)
    f.add("big", "ag", R4 + R2, until=10, free=R2)
    f.free_grew("ag", R2)  # within every refusal: nothing lapses
    assert len(f) == 2
    f.free_grew("ag", R4)  # beyond the small refusal, within the big one
    assert not f.refuses("small", "ag", now=1)
    assert f.refuses("big", "ag", now=1)
    f.free_grew("ag", R4 + R2 + Resources(gpus=1))  # a new resource: beyond both
    assert len(f) == 0 and f.of_agent("ag") is None


def test_second_refusal_adds_up_and_each_part_keeps_its_expiry():
    f = RefuseFilters()
    f.add("fw", "ag", Resources(cpus=1), until=5, free=Resources(cpus=1))
    f.free_grew("ag", Resources(cpus=1, mem=100))  # the memory the framework gives back...
    f.add("fw", "ag", Resources(mem=100), until=3, free=Resources(cpus=1, mem=100))  # ...refused
    assert len(f) == 1
    assert f.of_agent("ag")["fw"] == (3, Resources(cpus=1, mem=100))  # the sum, until the first end
    assert f.refuses("fw", "ag", now=2)
    assert f.expire(3) == 1  # the cpu alone does not cover what is free: offer the agent again
    assert not f.refuses("fw", "ag", now=3) and len(f) == 0


def test_growth_beyond_the_sum_of_the_parts_ends_the_refusal():
    f = RefuseFilters()
    f.add("fw", "ag", R2, until=60, free=R2)
    f.free_grew("ag", R4)
    f.add("fw", "ag", R2, until=1, free=R4)
    f.free_grew("ag", R4 + Resources(cpus=1))
    assert len(f) == 0 and f.of_agent("ag") is None


# A framework holds two offers of one agent, each half of it (the second was made
# when the other half came free), and declines them: one for 60 s, the other for
# 1 s. The master puts the declined half back (free_grew) before refusing it (add).


def decline_both_halves(f: RefuseFilters, first: float, second: float) -> None:
    f.add("fw", "ag", R2, until=first, free=R2)  # the other half is still in an offer
    f.free_grew("ag", R4)
    f.add("fw", "ag", R2, until=second, free=R4)


def test_declining_the_rest_of_an_agent_refuses_the_whole_agent_until_the_shorter_refusal_ends():
    f = RefuseFilters()
    decline_both_halves(f, first=60, second=1)
    assert len(f) == 1 and f.refused_by_all("ag", frameworks=1)
    assert f.refuses("fw", "ag", now=0.5)
    assert f.next_expiry() == 1
    # The 60 s half alone does not cover the whole free agent: offered again, whole.
    assert f.expire(1) == 1
    assert not f.refuses("fw", "ag", now=1) and f.of_agent("ag") is None


def test_the_order_of_the_two_refusals_does_not_matter():
    f = RefuseFilters()
    decline_both_halves(f, first=1, second=60)
    assert f.refuses("fw", "ag", now=0.5)
    assert f.expire(1) == 1 and len(f) == 0


def test_the_longer_part_stays_while_it_alone_covers_what_is_free():
    f = RefuseFilters()
    f.add("fw", "ag", R2, until=60, free=R2)
    # Another framework is offered those R2 (free shrinks, unreported); the framework
    # gives back R2 it held in an older offer: R2 is free again.
    f.free_grew("ag", R2)
    f.add("fw", "ag", R2, until=1, free=R2)
    assert f.of_agent("ag")["fw"] == (1, R4)
    assert f.expire(1) == 0
    assert f.of_agent("ag")["fw"] == (60, R2)
    assert f.refuses("fw", "ag", now=30)
    f.free_grew("ag", R4)  # more than the 60 s part covers
    assert len(f) == 0


def test_growth_the_framework_did_not_give_back_is_not_taken_back():
    f = RefuseFilters()
    f.add("fw", "ag", R2, until=60, free=R2)
    f.free_grew("ag", R4)  # a task ended: the framework never saw these
    assert len(f) == 0
    f.free_grew("ag", R4 + R2)  # the framework gives R2 back: the ended refusal stays ended
    f.add("fw", "ag", R2, until=1, free=R4 + R2)
    assert len(f) == 0


def test_a_refusal_of_the_whole_free_pool_takes_no_ended_part_back():
    # The revocation monitor's hold: after a task's end grew the pool, every other
    # framework refuses all that is free. The growth ended fw's own refusal.
    f = RefuseFilters()
    f.add("fw", "ag", R2, until=60, free=R2)
    f.free_grew("ag", R4)
    f.add("fw", "ag", R4, until=5, free=R4)
    assert f.of_agent("ag")["fw"] == (5, R4)
    f.free_grew("ag", R4 + Resources(cpus=1))
    assert len(f) == 0


def test_infinite_and_nan_until_never_expire_and_are_not_queued():
    f = RefuseFilters()
    f.add("fw", "a1", R4, until=math.inf, free=R4)
    f.add("fw", "a2", R4, until=math.nan, free=R4)
    assert f.next_expiry() is None
    assert f.expire(1e18) == 0
    assert f.refuses("fw", "a1", now=1e18) and f.refuses("fw", "a2", now=1e18)


def test_expire_drops_due_refusals_and_counts_them():
    f = RefuseFilters()
    f.add("fw", "a1", R4, until=1, free=R4)
    f.add("fw", "a2", R4, until=2, free=R4)
    f.add("fw2", "a1", R4, until=3, free=R4)
    assert f.next_expiry() == 1
    assert f.expire(0.5) == 0
    assert f.expire(2) == 2
    assert len(f) == 1
    assert f.next_expiry() == 3
    assert f.refuses("fw2", "a1", now=2.5)
    assert f.expire(10) == 1
    assert len(f) == 0 and f.next_expiry() is None


def test_expire_skips_a_refusal_that_was_extended():
    f = RefuseFilters()
    f.add("fw", "ag", R2, until=1, free=R2)
    f.add("fw", "ag", R2, until=5, free=R2)  # extends: the heap entry for 1 is stale
    assert f.next_expiry() == 1  # stale entries are included, as documented
    assert f.expire(2) == 0
    assert f.refuses("fw", "ag", now=2)
    assert f.expire(5) == 1


def test_clear_framework_drops_all_its_refusals_only():
    f = RefuseFilters()
    f.add("fw", "a1", R4, until=10, free=R4)
    f.add("fw", "a2", R4, until=10, free=R4)
    f.add("fw2", "a1", R4, until=10, free=R4)
    f.clear_framework("fw")
    assert len(f) == 1
    assert not f.refuses("fw", "a1", now=0) and not f.refuses("fw", "a2", now=0)
    assert f.refuses("fw2", "a1", now=0)
    assert f.expire(100) == 1  # stale heap entries of the cleared framework are skipped
    f.clear_framework("never-seen")


def test_refusal_after_clear_framework_starts_afresh():
    f = RefuseFilters()
    f.add("fw", "a1", R4, until=10, free=R4)
    f.clear_framework("fw")
    f.add("fw", "a1", R2, until=20, free=R2)
    assert f.refuses("fw", "a1", now=15)
    assert f.expire(15) == 0  # the stale entry at 10 does not drop the new refusal
    f.free_grew("a1", R4)  # not widened by the cleared refusal: R4 is beyond it
    assert len(f) == 0


def test_clear_agent_drops_all_its_refusals():
    f = RefuseFilters()
    f.add("fw", "a1", R4, until=10, free=R4)
    f.add("fw2", "a1", R4, until=10, free=R4)
    f.add("fw", "a2", R4, until=10, free=R4)
    f.clear_agent("a1")
    assert len(f) == 1
    assert f.refuses("fw", "a2", now=0)
    f.clear_framework("fw")
    assert len(f) == 0


def test_refused_by_all_counts_frameworks():
    f = RefuseFilters()
    f.add("a", "ag", R4, until=10, free=R2)
    assert not f.refused_by_all("ag", frameworks=2)  # "b" has not refused
    f.add("b", "ag", R2, until=10, free=R2)
    assert f.refused_by_all("ag", frameworks=2)
    assert not f.refused_by_all("ag", frameworks=3)  # a third framework may take it
    assert set(f.of_agent("ag")) == {"a", "b"}
    f.free_grew("ag", R4)  # beyond b's refusal
    assert not f.refused_by_all("ag", frameworks=2) and f.refused_by_all("ag", frameworks=1)
    f.expire(10)
    assert f.of_agent("ag") is None


# ----------------------------------------------------------- through the master


class Recorder:
    """Stands in for a connection: keeps the offers the master sends on it."""

    def __init__(self, name: str) -> None:
        self.peer = name
        self.tag = None
        self.offers: list = []

    def remote(self, schema):
        recorder = self

        class _Calls:
            def __getattr__(self, method):
                assert method in schema.methods, method
                if method == "resource_offers":
                    return recorder.offers.extend
                return lambda *args: None

        return _Calls()

    def close(self) -> None:
        pass

    def take(self) -> list[tuple[str, float]]:
        """(offer id, cpus) of the offers made since the last call."""
        made, self.offers = self.offers, []
        return [(o.offer_id, o.resources.get("cpus")) for o in made]


@pytest.fixture
def master():
    # No pings: this test's links do not say when they last heard from their agent.
    m = Master(MasterConfig(allocation_interval=0.01, agent_ping_interval=0), load_plugins(), clock=ManualClock())
    m.lead()
    yield m
    m.term.close()


def two_halves(master: Master) -> tuple[Recorder, str, str]:
    """Framework F1 holds two offers of agent A1's 4 cpus, 2 cpus each: the first made
    while another framework's task held the other half, the second when it ended."""
    sched, agent = Recorder("scheduler"), Recorder("agent")
    master.service.register_framework(sched, FrameworkInfo(name="f", framework_id="F1"))
    task = TaskInfo(task_id="t", agent_id="A1", resources=Resources(cpus=2, mem=64),
                    command=CommandInfo(value="sleep 60"))
    running = RunningTask(framework_id="G", task=task,
                          latest=TaskStatus(task_id="t", state=TaskState.TASK_RUNNING, uuid="u1"))
    master.service.reregister_agent(agent, AgentInfo(agent_id="A1", hostname="h", port=5051,
                                             resources=Resources(cpus=4, mem=1024)),
                            [running], [], [FrameworkInfo(name="g", framework_id="G")])
    master.term.allocation.run()
    master.service.status_update(agent, TaskStatus(task_id="t", state=TaskState.TASK_FINISHED, framework_id="G",
                                           agent_id="A1", uuid="u2"))
    master.term.allocation.run()
    (first, cpus1), (second, cpus2) = sched.take()
    assert cpus1 == cpus2 == 2.0
    return sched, first, second


def test_declining_both_halves_keeps_the_agent_until_the_shorter_refusal_ends(master):
    sched, first, second = two_halves(master)
    master.service.decline_offer(sched, "F1", [first], Filters(refuse_seconds=60))
    master.service.decline_offer(sched, "F1", [second], Filters(refuse_seconds=1))
    master.term.allocation.run()
    assert sched.take() == []  # it declined all of the agent
    master.clock.advance(0.999)
    master.term.allocation.run()
    assert sched.take() == []
    master.clock.advance(0.001)
    master.term.allocation.run()  # what the 60 s refusal covers is less than what is free
    assert [cpus for _, cpus in sched.take()] == [4.0]


def test_declining_both_halves_at_once_refuses_the_whole_agent(master):
    sched, first, second = two_halves(master)
    master.service.decline_offer(sched, "F1", [first, second], Filters(refuse_seconds=5))
    master.term.allocation.run()
    assert sched.take() == []
    master.clock.advance(5)
    master.term.allocation.run()
    assert [cpus for _, cpus in sched.take()] == [4.0]
