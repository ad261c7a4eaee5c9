"""mezzo.guarantees: what meeting, being above and being short of a guarantee mean
(paper §3.3): the dominant share measured against the guarantee, scalars only."""

from __future__ import annotations

import math

import pytest
from mezzo.guarantees import above_guarantee, guarantee_ratio, meets_guarantee, shortfall
from mezzo.resources import Resources

R = Resources.parse


def test_ratio_is_the_largest_scalar_ratio_over_what_the_guarantee_names():
    g = R("cpus:2;mem:1024")
    assert guarantee_ratio(R("cpus:1;mem:256"), g) == pytest.approx(0.5)  # max(0.5, 0.25)
    assert guarantee_ratio(R("cpus:1;mem:2048"), g) == pytest.approx(2.0)  # max(0.5, 2)
    assert guarantee_ratio(R("cpus:3;mem:1024"), g) == pytest.approx(1.5)
    assert guarantee_ratio(Resources(), g) == 0.0
    # Resources the guarantee does not name do not count, however much is held.
    assert guarantee_ratio(R("cpus:1;disk:100000;gpus:8"), g) == pytest.approx(0.5)
    assert guarantee_ratio(R("disk:100000"), g) == 0.0
    # Exact (thousandths): no float drift.
    assert guarantee_ratio(R("cpus:0.3"), R("cpus:0.1")) == pytest.approx(3.0)
    assert guarantee_ratio(Resources(cpus=0.1) + Resources(cpus=0.2), R("cpus:0.3")) == 1.0


def test_ranges_are_ignored_on_both_sides():
    g = R("cpus:2;ports:[31000-31009]")
    # Holding every port, or none, changes nothing: only cpus count.
    assert guarantee_ratio(R("cpus:1;ports:[31000-31999]"), g) == pytest.approx(0.5)
    assert guarantee_ratio(R("cpus:1"), g) == pytest.approx(0.5)
    assert guarantee_ratio(R("cpus:2"), g) == 1.0 and meets_guarantee(R("cpus:2"), g)
    assert not above_guarantee(R("cpus:2;ports:[1-60000]"), g)
    # A guarantee of ports only guarantees nothing.
    ports_only = R("ports:[31000-31009]")
    assert guarantee_ratio(Resources(), ports_only) == math.inf
    assert meets_guarantee(Resources(), ports_only) and above_guarantee(Resources(), ports_only)


def test_an_empty_guarantee_is_met_and_exceeded_by_anything():
    for held in (Resources(), R("cpus:1"), R("ports:[1-2]")):
        assert guarantee_ratio(held, Resources()) == math.inf
        assert meets_guarantee(held, Resources())
        assert above_guarantee(held, Resources())


def test_exactly_at_the_guarantee_is_met_but_not_above():
    g = R("cpus:2;mem:1024")
    for held in (R("cpus:2;mem:1024"), R("cpus:2"), R("mem:1024"), R("cpus:1;mem:1024")):
        assert guarantee_ratio(held, g) == 1.0, held
        assert meets_guarantee(held, g), held
        assert not above_guarantee(held, g), held
    # A thousandth more in any named resource is above; a thousandth less in the
    # only resource at the guarantee is below.
    assert above_guarantee(R("cpus:2.001;mem:1024"), g)
    assert above_guarantee(R("cpus:1;mem:1024.001"), g)
    below = R("cpus:1.999;mem:1023.999")
    assert not meets_guarantee(below, g) and not above_guarantee(below, g)
    assert guarantee_ratio(below, g) < 1.0


def test_a_cpu_heavy_holder_is_above_a_cpus_and_mem_guarantee():
    # Cpu-heavy, memory-light tasks: below the guarantee in memory, far above it in
    # cpus. It must be revocable (above), not immune (the old "fits in every resource").
    g = R("cpus:4;mem:8192")
    held = R("cpus:16;mem:1024")
    assert not g.fits_in(held)  # what the old rule looked at
    assert guarantee_ratio(held, g) == pytest.approx(4.0)
    assert meets_guarantee(held, g) and above_guarantee(held, g)
    # ... and what it keeps after losing a task still meets the guarantee.
    assert meets_guarantee(held - R("cpus:8;mem:512"), g)
    assert not meets_guarantee(held - R("cpus:13;mem:512"), g)


def test_shortfall_is_guarantee_minus_held_in_scalars_only():
    g = R("cpus:4;mem:1024;ports:[31000-31009]")
    assert shortfall(R("cpus:1;mem:256"), g) == R("cpus:3;mem:768")
    # Ranges dropped: whether or not the ports are held.
    assert shortfall(Resources(), g) == R("cpus:4;mem:1024")
    assert shortfall(R("ports:[31000-31009]"), g) == R("cpus:4;mem:1024")
    assert not shortfall(Resources(), g).ranges
    # Zero entries dropped: a resource held in full (or more) is not short.
    short = shortfall(R("cpus:6;mem:256"), g)
    assert short == R("mem:768") and set(short.scalars) == {"mem"}
    assert shortfall(R("cpus:4;mem:1024"), g) == Resources()
    assert not shortfall(R("cpus:9;mem:9999;ports:[1-2]"), g)
    # Resources the guarantee does not name never appear.
    assert set(shortfall(R("disk:5;gpus:1"), g).scalars) == {"cpus", "mem"}
    assert shortfall(R("cpus:1"), Resources()) == Resources()


def test_shortfall_does_not_alias_its_arguments():
    g = R("cpus:4;mem:1024;ports:[31000-31009]")
    held = R("cpus:1")
    short = shortfall(held, g)
    short.scalars["cpus"] = 0
    assert g == R("cpus:4;mem:1024;ports:[31000-31009]") and held == R("cpus:1")


def test_getting_any_one_resource_of_the_shortfall_meets_the_guarantee():
    g = R("cpus:4;mem:1024")
    held = R("cpus:1;mem:256")
    short = shortfall(held, g)
    assert not meets_guarantee(held, g)
    for name in short.scalars:
        got = held + Resources._raw({name: short.milli(name)}, {})
        assert meets_guarantee(got, g), name
        assert not above_guarantee(got, g), name
