"""Offer mechanics through the real master: refuse filters, persistent filters,
rescinding on timeout, suppress and revive. Timeouts are configured short."""

from __future__ import annotations

import time

from mezzo import Filters, FrameworkFilters, Resources

from .conftest import Recorder, wait_for


def _agent_ids(cluster):
    return {a["hostname"]: a["id"] for a in cluster.state()["agents"]}


def test_decline_filter_holds_the_agent_back_for_refuse_seconds(make_cluster, drivers):
    cluster = make_cluster(1, master={"allocation_interval": 0.01})
    declined_at = []

    def decline(driver, offers):
        for o in offers:
            declined_at.append(time.monotonic())
            driver.decline_offer(o.offer_id, Filters(refuse_seconds=1.0))

    rec = Recorder(decline)
    drivers(rec, "decliner", cluster.master)
    wait_for(lambda: len(rec.offers) >= 3, 10, "three offers")
    times = [t for t, _ in rec.offers[:3]]
    # Each re-offer of the only agent came no sooner than the filter allowed.
    assert times[1] - declined_at[0] >= 0.95
    assert times[2] - declined_at[1] >= 0.95


def test_default_refuse_filter_comes_from_master_config(make_cluster, drivers):
    cluster = make_cluster(1, master={"allocation_interval": 0.01, "refuse_seconds": 0.5})

    def decline(driver, offers):
        for o in offers:
            driver.decline_offer(o.offer_id, None)  # no filters: the master's default

    rec = Recorder(decline)
    drivers(rec, "decliner", cluster.master)
    wait_for(lambda: len(rec.offers) >= 3, 10, "three offers")
    gaps = [b[0] - a[0] for a, b in zip(rec.offers, rec.offers[1:3])]
    assert all(0.45 <= g for g in gaps), gaps
    assert all(g < 4.0 for g in gaps), f"default filter was not the configured 0.5 s: {gaps}"


def test_declined_agent_goes_to_the_other_framework(make_cluster, drivers):
    cluster = make_cluster(1, master={"allocation_interval": 0.01})
    a = Recorder(lambda d, offers: [d.decline_offer(o.offer_id, Filters(refuse_seconds=30)) for o in offers])
    b = Recorder()  # holds its offers
    drivers(a, "a", cluster.master)
    wait_for(lambda: a.offers, 10, "a's first offer")
    drivers(b, "b", cluster.master)
    wait_for(lambda: b.offers, 10, "b to get the agent a declined")


def test_agent_list_filter(make_cluster, drivers):
    cluster = make_cluster(3, master={"allocation_interval": 0.01})
    ids = _agent_ids(cluster)
    chosen = ids["agent-2"]
    rec = Recorder(lambda d, offers: [d.decline_offer(o.offer_id, Filters(refuse_seconds=0.05)) for o in offers])
    driver = drivers(rec, "picky", cluster.master)
    rec.registered_event.wait(10)
    driver.set_filters(FrameworkFilters(agents=[chosen]))
    time.sleep(0.3)
    n = len(rec.offers)
    wait_for(lambda: len(rec.offers) >= n + 5, 10, "more offers")
    assert {o.agent_id for _, o in rec.offers[n:]} == {chosen}
    # The master says why the others were not offered.
    reasons = cluster.state()["frameworks"][0]["not_offered_last_cycle"]
    assert any("agent list" in r for r in reasons), reasons


def test_minimum_free_filter(make_cluster, drivers):
    cluster = make_cluster(3, master={"allocation_interval": 0.01},
                           agent_resources=["cpus:1;mem:512", "cpus:8;mem:512", "cpus:2;mem:512"])
    ids = _agent_ids(cluster)
    rec = Recorder(lambda d, offers: [d.decline_offer(o.offer_id, Filters(refuse_seconds=0.05)) for o in offers])
    driver = drivers(rec, "big", cluster.master)
    rec.registered_event.wait(10)
    driver.set_filters(FrameworkFilters(min_free=Resources(cpus=4)))
    time.sleep(0.3)
    n = len(rec.offers)
    wait_for(lambda: len(rec.offers) >= n + 5, 10, "more offers")
    assert {o.agent_id for _, o in rec.offers[n:]} == {ids["agent-2"]}


def test_unanswered_offer_is_rescinded_and_reoffered(make_cluster, drivers):
    cluster = make_cluster(1, master={"allocation_interval": 0.01, "offer_timeout": 0.5})
    hoarder = Recorder()  # never answers
    drivers(hoarder, "hoarder", cluster.master)
    wait_for(lambda: hoarder.offers, 10, "the hoarder's offer")
    first_at, first = hoarder.offers[0]
    wait_for(lambda: hoarder.rescinded, 10, "the rescind")
    rescinded_at, offer_id = hoarder.rescinded[0]
    assert offer_id == first.offer_id
    assert rescinded_at - first_at >= 0.45
    # The resources go to a framework that will use them.
    other = Recorder()
    drivers(other, "other", cluster.master)
    wait_for(lambda: other.offers, 10, "the re-offer to another framework")
    assert other.offers[0][1].agent_id == first.agent_id


def test_suppress_and_revive(make_cluster, drivers):
    cluster = make_cluster(1, master={"allocation_interval": 0.01})
    rec = Recorder(lambda d, offers: [d.decline_offer(o.offer_id, Filters(refuse_seconds=0.05)) for o in offers])
    driver = drivers(rec, "moody", cluster.master)
    wait_for(lambda: len(rec.offers) >= 2, 10, "offers")
    driver.set_needs_offers(False)
    time.sleep(0.3)  # let in-flight offers land
    n = len(rec.offers)
    time.sleep(1.0)
    assert len(rec.offers) == n, "offers kept coming while suppressed"
    assert cluster.state()["frameworks"][0]["active"] is False
    driver.set_needs_offers(True)
    wait_for(lambda: len(rec.offers) > n, 10, "offers after revive")


def test_revive_clears_refuse_filters(make_cluster, drivers):
    cluster = make_cluster(1, master={"allocation_interval": 0.01})
    rec = Recorder(lambda d, offers: [d.decline_offer(o.offer_id, Filters(refuse_seconds=3600)) for o in offers])
    driver = drivers(rec, "reviver", cluster.master)
    wait_for(lambda: len(rec.offers) == 1, 10, "the first offer")
    time.sleep(0.3)
    assert len(rec.offers) == 1
    driver.set_needs_offers(True)
    wait_for(lambda: len(rec.offers) == 2, 10, "a re-offer after revive")
