"""RefuseFilters: per (framework, agent) refusals covering what was refused, with expiry."""

from __future__ import annotations

import math

from mezzo.master.refusals import RefuseFilters
from mezzo.resources import Resources

R4 = Resources(cpus=4, mem=1024)
R2 = Resources(cpus=2, mem=512)


def test_no_refusal_means_not_refused():
    f = RefuseFilters()
    assert len(f) == 0
    assert not f.refuses("fw", "ag", R4, now=0)
    assert f.next_expiry() is None


def test_refusal_covers_the_refused_resources_until_expiry():
    f = RefuseFilters()
    f.add("fw", "ag", R4, until=5.0)
    assert len(f) == 1
    assert f.refuses("fw", "ag", R4, now=0)
    assert f.refuses("fw", "ag", R2, now=4.999)  # less than was refused: still refused
    assert not f.refuses("fw", "ag2", R4, now=0)  # other agent
    assert not f.refuses("fw2", "ag", R4, now=0)  # other framework
    assert not f.refuses("fw", "ag", R4, now=5.0)  # expired exactly at until
    assert len(f) == 1  # look-ups do not mutate; expire() drops in bulk
    assert f.expire(5.0) == 1 and len(f) == 0


def test_more_free_than_refused_is_offered_again():
    f = RefuseFilters()
    f.add("fw", "ag", R2, until=10)
    assert not f.refuses("fw", "ag", R4, now=1)
    assert not f.refuses("fw", "ag", Resources(cpus=2, mem=512, gpus=1), now=1)
    assert not f.refuses("fw", "ag", Resources(ranges={"ports": [(1, 1)]}) + R2, now=1)
    assert len(f) == 1  # not dropped: it still covers R2
    assert f.refuses("fw", "ag", R2, now=1)


def test_second_refusal_widens_and_extends():
    f = RefuseFilters()
    f.add("fw", "ag", Resources(cpus=1), until=5)
    f.add("fw", "ag", Resources(mem=100), until=3)
    assert len(f) == 1
    assert f.refuses("fw", "ag", Resources(cpus=1, mem=100), now=4)  # both, until the later time
    assert not f.refuses("fw", "ag", Resources(cpus=1, mem=101), now=4)
    f2 = RefuseFilters()
    f2.add("fw", "ag", Resources(cpus=1), until=3)
    f2.add("fw", "ag", Resources(cpus=1), until=8)
    assert f2.refuses("fw", "ag", Resources(cpus=2), now=7)  # widened: 1 + 1 cpus
    assert not f2.refuses("fw", "ag", Resources(cpus=2), now=8)


def test_infinite_and_nan_until_never_expire_and_are_not_queued():
    f = RefuseFilters()
    f.add("fw", "a1", R4, until=math.inf)
    f.add("fw", "a2", R4, until=math.nan)
    assert f.next_expiry() is None
    assert f.expire(1e18) == 0
    assert f.refuses("fw", "a1", R4, now=1e18)
    assert f.refuses("fw", "a2", R4, now=1e18)


def test_expire_drops_due_refusals_and_counts_them():
    f = RefuseFilters()
    f.add("fw", "a1", R4, until=1)
    f.add("fw", "a2", R4, until=2)
    f.add("fw2", "a1", R4, until=3)
    assert f.next_expiry() == 1
    assert f.expire(0.5) == 0
    assert f.expire(2) == 2
    assert len(f) == 1
    assert f.next_expiry() == 3
    assert f.refuses("fw2", "a1", R4, now=2.5)
    assert f.expire(10) == 1
    assert len(f) == 0 and f.next_expiry() is None


def test_expire_skips_a_refusal_that_was_extended():
    f = RefuseFilters()
    f.add("fw", "ag", R2, until=1)
    f.add("fw", "ag", R2, until=5)  # extends: the heap entry for 1 is stale
    assert f.next_expiry() == 1  # stale entries are included, as documented
    assert f.expire(2) == 0
    assert f.refuses("fw", "ag", R4, now=2)
    assert f.expire(5) == 1


def test_clear_framework_drops_all_its_refusals_only():
    f = RefuseFilters()
    f.add("fw", "a1", R4, until=10)
    f.add("fw", "a2", R4, until=10)
    f.add("fw2", "a1", R4, until=10)
    f.clear_framework("fw")
    assert len(f) == 1
    assert not f.refuses("fw", "a1", R4, now=0) and not f.refuses("fw", "a2", R4, now=0)
    assert f.refuses("fw2", "a1", R4, now=0)
    assert f.expire(100) == 1  # stale heap entries of the cleared framework are skipped
    f.clear_framework("never-seen")


def test_refusal_after_clear_framework_works():
    f = RefuseFilters()
    f.add("fw", "a1", R4, until=10)
    f.clear_framework("fw")
    f.add("fw", "a1", R2, until=20)
    assert f.refuses("fw", "a1", R2, now=15)
    assert not f.refuses("fw", "a1", R4, now=15)  # not widened by the cleared refusal
    assert f.expire(15) == 0  # the stale entry at 10 does not drop the new refusal
    assert len(f) == 1


def test_clear_agent_drops_all_its_refusals():
    f = RefuseFilters()
    f.add("fw", "a1", R4, until=10)
    f.add("fw2", "a1", R4, until=10)
    f.add("fw", "a2", R4, until=10)
    f.clear_agent("a1")
    assert len(f) == 1
    assert f.refuses("fw", "a2", R4, now=0)
    f.clear_framework("fw")
    assert len(f) == 0


def test_refused_by_all_needs_every_framework_and_covering_refusals():
    f = RefuseFilters()
    f.add("a", "ag", R4, until=10)
    assert not f.refused_by_all("ag", R4, frameworks=2)  # "b" has not refused
    f.add("b", "ag", R2, until=10)
    assert f.refused_by_all("ag", R2, frameworks=2)
    assert not f.refused_by_all("ag", R4, frameworks=2)  # b refused only R2
    assert not f.refused_by_all("ag", R2, frameworks=3)  # a third framework may take it
    f.clear_framework("b")
    assert f.refused_by_all("ag", R4, frameworks=1)  # only a's refusal (of R4) is left
    f.expire(10)
    assert not f.refused_by_all("ag", R4, frameworks=1)
    assert f.of_agent("ag") is None
