"""Configured guarantees (``[master.allocator.drf] guarantees``): what
``guaranteed_share`` returns, as the cluster changes, and through a real master."""

from __future__ import annotations

import contextlib
import threading

import pytest
import structlog

import mezzo
from mezzo import Resources
from mezzo.testing import ClusterError, LocalProcessCluster
from mezzo_allocator_drf import DRFAllocator

KEY = "master.allocator.drf"
GUARANTEES = {"roles": {"mpi": 0.25}, "frameworks": {"nightly": 0.1}}
AGENT = Resources(cpus=8, mem=8192, disk=1000)


def make(info, guarantees=GUARANTEES, agents=(AGENT,)):
    a = DRFAllocator({"guarantees": guarantees}, key=KEY)
    for i, total in enumerate(agents):
        a.add_agent(f"a{i}", total)
    a.add_framework("mpi-1", info("solver", "mpi"))
    a.add_framework("nightly", info("nightly", "mpi"))  # the name beats the role
    a.add_framework("other", info("web", "services"))
    return a


def test_guarantee_by_name_then_role_then_none(info):
    a = make(info)
    assert a.guaranteed_share("mpi-1") == Resources(cpus=2, mem=2048, disk=250)
    assert a.guaranteed_share("nightly") == Resources(cpus=0.8, mem=819.2, disk=100)
    assert a.guaranteed_share("other") == Resources()
    assert a.guaranteed_share("ghost") == Resources()
    a.remove_framework("mpi-1")
    assert a.guaranteed_share("mpi-1") == Resources()


def test_guarantee_is_rounded_down_to_a_thousandth(info):
    a = make(info, {"roles": {"mpi": 1 / 3}}, agents=[Resources(cpus=1, mem=100)])
    assert a.guaranteed_share("mpi-1") == Resources(cpus=0.333, mem=33.333)


def test_guarantee_follows_the_cluster_total(info):
    a = make(info, agents=[])
    assert a.guaranteed_share("mpi-1") == Resources()
    a.add_agent("a1", Resources(cpus=4, mem=4096))
    assert a.guaranteed_share("mpi-1") == Resources(cpus=1, mem=1024)
    a.add_agent("a2", Resources(cpus=4, mem=4096, gpus=4))
    assert a.guaranteed_share("mpi-1") == Resources(cpus=2, mem=2048, gpus=1)
    a.remove_agent("a1", Resources(cpus=4, mem=4096))
    assert a.guaranteed_share("mpi-1") == Resources(cpus=1, mem=1024, gpus=1)
    a.remove_agent("a2", Resources(cpus=4, mem=4096, gpus=4))
    assert a.guaranteed_share("mpi-1") == Resources()


def test_without_guarantees_the_share_stays_weight_proportional(info):
    a = DRFAllocator({"roles": {"mpi": 3}}, key=KEY)
    a.add_agent("a1", Resources(cpus=8, mem=8192))
    a.add_framework("f1", info("solver", "mpi"))
    a.add_framework("f2", info("web"))
    assert a.guaranteed_share("f1") == Resources(cpus=6, mem=6144)
    assert a.guaranteed_share("f2") == Resources(cpus=2, mem=2048)


def test_frameworks_of_one_role_over_the_cluster_log_a_warning(info):
    a = DRFAllocator({"guarantees": {"roles": {"mpi": 0.4}}}, key=KEY)
    a.add_agent("a1", Resources(cpus=10))
    with structlog.testing.capture_logs() as logs:
        a.add_framework("f1", info("one", "mpi"))
        a.add_framework("f2", info("two", "mpi"))
    assert not [e for e in logs if e["log_level"] == "warning"]
    with structlog.testing.capture_logs() as logs:
        a.add_framework("f3", info("three", "mpi"))  # 1.2 of the cluster: still registered
    (warning,) = [e for e in logs if e["log_level"] == "warning"]
    assert "cannot all be met" in warning["event"]
    assert warning["total"] == pytest.approx(1.2)
    assert set(warning["frameworks"]) == {"one (f1)", "two (f2)", "three (f3)"}
    assert a.guaranteed_share("f3") == Resources(cpus=4)
    a.remove_framework("f1")
    with structlog.testing.capture_logs() as logs:
        a.add_framework("f4", info("four", "web"))  # no guarantee, 0.8 in all
    assert not [e for e in logs if e["log_level"] == "warning"]


# -- through a real master ----------------------------------------------------


class Quiet(mezzo.Scheduler):
    def __init__(self) -> None:
        self.registered_event = threading.Event()

    def registered(self, driver, framework_id, master):
        self.registered_event.set()

    def resource_offers(self, driver, offers):
        for offer in offers:
            driver.decline_offer(offer.offer_id, mezzo.Filters(refuse_seconds=60))


@pytest.mark.slow
def test_driver_guaranteed_share_returns_the_configured_guarantee(tmp_path):
    cluster = LocalProcessCluster(
        1,
        directory=str(tmp_path / "cluster"),
        agent_resources="cpus:4;mem:4096;disk:10000",
        tables={"master.allocator": {"name": "drf"}, "master.allocator.drf": {"guarantees": GUARANTEES}},
    )
    drivers = []
    try:
        cluster.start()
        answers = {}
        for name, role in (("solver", "mpi"), ("nightly", "mpi"), ("web", "services")):
            sched = Quiet()
            d = mezzo.SchedulerDriver(sched, mezzo.FrameworkInfo(name=name, role=role), cluster.master)
            d.start()
            drivers.append(d)
            assert sched.registered_event.wait(10), f"{name} did not register"
            answers[name] = d.guaranteed_share()
    finally:
        for d in drivers:
            with contextlib.suppress(Exception):
                d.stop()
        cluster.stop()
    assert answers == {
        "solver": Resources(cpus=1, mem=1024, disk=2500),
        "nightly": Resources(cpus=0.4, mem=409.6, disk=1000),
        "web": Resources(),
    }


def test_master_refuses_to_start_when_guarantees_do_not_fit(tmp_path):
    cluster = LocalProcessCluster(
        0,
        directory=str(tmp_path / "cluster"),
        tables={"master.allocator.drf": {"guarantees": {"roles": {"a": 0.6, "b": 0.6}}}},
        start_timeout=10,
    )
    try:
        with pytest.raises(ClusterError) as exc:
            cluster.start_master()
    finally:
        cluster.stop()
    assert "master.allocator.drf.guarantees" in str(exc.value)
    assert "cannot all be met at once" in str(exc.value)
