"""Every bad launch is answered with TASK_ERROR or TASK_DROPPED and a reason naming
the problem; the rest of the batch still launches; the master keeps serving."""

from __future__ import annotations

import math
import threading

import pytest

import mezzo
from mezzo import CommandInfo, Filters, Resources, TaskInfo
from mezzo.wire import ttypes

from .conftest import Recorder, wait_for


class OfferTaker(Recorder):
    """Keeps its offers so the test can answer them."""

    def __init__(self) -> None:
        super().__init__()
        self.offer_event = threading.Event()

    def resource_offers(self, driver, offers):
        super().resource_offers(driver, offers)
        self.offer_event.set()

    def take_offer(self, timeout=10):
        wait_for(lambda: self.offers, timeout, "an offer")
        with self.lock:
            _, offer = self.offers.pop(0)
        return offer


def _task(tid, offer, resources=None, **kw):
    if "command" not in kw and "executor" not in kw:
        kw["command"] = CommandInfo(value="sleep 30")
    return TaskInfo(task_id=tid, agent_id=offer.agent_id,
                    resources=resources if resources is not None else Resources(cpus=0.5, mem=32), **kw)


@pytest.fixture
def setup(make_cluster, drivers):
    cluster = make_cluster(1, master={"allocation_interval": 0.01, "offer_timeout": 1.0},
                           agent_resources="cpus:4;mem:1024")
    rec = OfferTaker()
    driver = drivers(rec, "validator", cluster.master)
    return cluster, rec, driver


def _final(rec, tid):
    wait_for(lambda: rec.final(tid) is not None, 10, f"a terminal status for {tid}")
    return rec.final(tid)


def test_task_bigger_than_offer(setup):
    cluster, rec, driver = setup
    offer = rec.take_offer()
    driver.launch_tasks([offer.offer_id], [_task("big", offer, Resources(cpus=5, mem=32))], Filters(refuse_seconds=0))
    s = _final(rec, "big")
    assert mezzo.state_name(s.state) == "TASK_ERROR"
    assert s.reason == "insufficient_resources"
    assert "cpus 5 > 4" in s.message


def test_unknown_offer(setup):
    cluster, rec, driver = setup
    offer = rec.take_offer()
    driver.launch_tasks(["no-such-offer"], [_task("orphan", offer)])
    s = _final(rec, "orphan")
    assert mezzo.state_name(s.state) == "TASK_DROPPED"
    assert s.reason == "offer_unknown" and "no-such-offer" in s.message


def test_rescinded_offer(setup):
    cluster, rec, driver = setup
    offer = rec.take_offer()
    wait_for(lambda: any(oid == offer.offer_id for _, oid in rec.rescinded), 10, "the offer to time out")
    driver.launch_tasks([offer.offer_id], [_task("late", offer)])
    s = _final(rec, "late")
    assert mezzo.state_name(s.state) == "TASK_DROPPED"
    assert s.reason == "offer_unknown"


def test_duplicate_task_ids(setup):
    cluster, rec, driver = setup
    offer = rec.take_offer()
    driver.launch_tasks([offer.offer_id], [_task("dup", offer), _task("dup", offer)], Filters(refuse_seconds=0))
    wait_for(lambda: "TASK_RUNNING" in rec.states_of("dup"), 10, "the first 'dup' to run")
    errors = [s for s in rec.statuses if s.task_id == "dup" and mezzo.state_name(s.state) == "TASK_ERROR"]
    assert len(errors) == 1 and errors[0].reason == "duplicate_task_id"
    # Re-using the id of a running task is refused too.
    offer2 = rec.take_offer()
    driver.launch_tasks([offer2.offer_id], [_task("dup", offer2)], Filters(refuse_seconds=0))
    wait_for(lambda: len([s for s in rec.statuses if s.task_id == "dup"
                          and mezzo.state_name(s.state) == "TASK_ERROR"]) == 2, 10, "second duplicate error")


def test_negative_resources_on_the_wire(setup):
    cluster, rec, driver = setup
    offer = rec.take_offer()
    negative = ttypes.Resources(scalars={"cpus": -500, "mem": 1000})
    driver.launch_tasks([offer.offer_id], [_task("neg", offer, negative)], Filters(refuse_seconds=0))
    s = _final(rec, "neg")
    assert mezzo.state_name(s.state) == "TASK_ERROR"
    assert s.reason == "invalid_resources" and "cpus" in s.message and "negative" in s.message


@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0])
def test_non_finite_or_negative_resources_are_refused_in_the_client(value):
    with pytest.raises(mezzo.InvalidResources, match="cpus"):
        Resources(cpus=value)


def test_task_for_an_unknown_agent(setup):
    cluster, rec, driver = setup
    offer = rec.take_offer()
    t = _task("lost", offer)
    t.agent_id = "no-such-agent"
    driver.launch_tasks([offer.offer_id], [t], Filters(refuse_seconds=0))
    s = _final(rec, "lost")
    assert mezzo.state_name(s.state) == "TASK_ERROR"
    assert s.reason == "wrong_agent" and "no-such-agent" in s.message


def test_task_without_command_or_executor(setup):
    cluster, rec, driver = setup
    offer = rec.take_offer()
    t = TaskInfo(task_id="empty", agent_id=offer.agent_id, resources=Resources(cpus=0.5))
    driver.launch_tasks([offer.offer_id], [t], Filters(refuse_seconds=0))
    s = _final(rec, "empty")
    assert mezzo.state_name(s.state) == "TASK_ERROR" and s.reason == "invalid_command"


def test_good_tasks_in_a_bad_batch_still_run(setup):
    cluster, rec, driver = setup
    offer = rec.take_offer()
    driver.launch_tasks([offer.offer_id], [
        _task("ok-1", offer),
        _task("too-big", offer, Resources(cpus=100)),
        _task("ok-2", offer),
    ], Filters(refuse_seconds=0))
    wait_for(lambda: "TASK_RUNNING" in rec.states_of("ok-1") and "TASK_RUNNING" in rec.states_of("ok-2"),
             10, "the good tasks to run")
    assert rec.states_of("too-big") == ["TASK_ERROR"]
    used = cluster.state()["agents"][0]["used"]
    assert used == {"cpus": 1.0, "mem": 64.0}


def test_task_data_over_the_limit_is_refused_and_never_reaches_the_agent(setup):
    cluster, rec, driver = setup
    offer = rec.take_offer()
    driver.launch_tasks([offer.offer_id], [
        _task("heavy", offer, data=b"x" * (1024 * 1024 + 1)),
        _task("light", offer, data=b"x" * 1024),
    ], Filters(refuse_seconds=0))
    heavy = _final(rec, "heavy")
    assert mezzo.state_name(heavy.state) == "TASK_ERROR" and heavy.reason == "task_data_too_large"
    assert "master.max_task_data_bytes" in heavy.message
    wait_for(lambda: "TASK_RUNNING" in rec.states_of("light"), 10, "the light task to run")
    assert [t["id"] for t in cluster.state()["tasks"]] == ["light"]
