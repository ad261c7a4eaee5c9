"""RefuseFilters: refusals per (framework, agent) that always cover the agent's free
pool, lapse when the pool grows past them, and expire."""

from __future__ import annotations

import math

from mezzo.master.refusals import RefuseFilters
from mezzo.resources import Resources

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


def test_second_refusal_widens_and_extends():
    f = RefuseFilters()
    f.add("fw", "ag", Resources(cpus=1), until=5, free=Resources(cpus=1))
    f.add("fw", "ag", Resources(mem=100), until=3, free=Resources(cpus=1, mem=100))
    assert len(f) == 1
    assert f.refuses("fw", "ag", now=4)  # both, until the later time
    f.free_grew("ag", Resources(cpus=1, mem=101))
    assert not f.refuses("fw", "ag", now=4)


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
