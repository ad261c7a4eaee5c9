"""OfferBook: outstanding offers by id and on their records, expiry in creation order."""

from __future__ import annotations

import math

from mezzo.master.offers import OfferBook
from mezzo.master.records import AgentRecord, FrameworkRecord
from mezzo.resources import Resources
from mezzo.wire.ttypes import AgentInfo, FrameworkInfo


def fw(fid="fw-1") -> FrameworkRecord:
    return FrameworkRecord(id=fid, info=FrameworkInfo(name=fid, framework_id=fid), conn=None)


def ag(aid="ag-1") -> AgentRecord:
    total = Resources(cpus=4, mem=1024)
    return AgentRecord(id=aid, info=AgentInfo(agent_id=aid, hostname=f"{aid}.example", port=5051,
                                                resources=total), conn=None, total=total, free=total)


def test_create_records_and_indexes_the_offer():
    book = OfferBook("m1", timeout=30)
    f, a = fw(), ag()
    res = Resources(cpus=4, mem=1024)
    o = book.create(f, a, res, now=100.0)
    assert o.id == "m1-O1"
    assert (o.framework_id, o.agent_id, o.resources, o.expires_at) == ("fw-1", "ag-1", res, 130.0)
    assert book.get("m1-O1") is o and len(book) == 1
    assert f.offers == {"m1-O1": o} and a.offers == {"m1-O1": o}


def test_ids_are_unique_and_increasing():
    book = OfferBook("p", timeout=1)
    f, a = fw(), ag()
    ids = [book.create(f, a, Resources(cpus=1), now=0).id for _ in range(5)]
    assert ids == [f"p-O{i}" for i in range(1, 6)]
    book.remove(book.get("p-O5"), f, a)
    assert book.create(f, a, Resources(cpus=1), now=0).id == "p-O6"  # never reused


def test_remove_unindexes_and_is_idempotent():
    book = OfferBook("m", timeout=30)
    f, a = fw(), ag()
    o1 = book.create(f, a, Resources(cpus=1), now=0)
    o2 = book.create(f, a, Resources(cpus=2), now=0)
    book.remove(o1, f, a)
    assert book.get(o1.id) is None and len(book) == 1
    assert o1.id not in f.offers and o1.id not in a.offers
    assert f.offers == {o2.id: o2} and a.offers == {o2.id: o2}
    book.remove(o1, f, a)  # second removal: nothing happens
    assert len(book) == 1 and f.offers == {o2.id: o2}


def test_remove_with_records_gone():
    book = OfferBook("m", timeout=30)
    f, a = fw(), ag()
    o = book.create(f, a, Resources(cpus=1), now=0)
    book.remove(o, None, None)
    assert len(book) == 0
    assert o.id in f.offers  # the caller said the records were gone: they are not touched


def test_expired_in_creation_order_skipping_removed():
    book = OfferBook("m", timeout=10)
    f, a, b = fw(), ag("ag-1"), ag("ag-2")
    o1 = book.create(f, a, Resources(cpus=1), now=0)
    o2 = book.create(f, b, Resources(cpus=1), now=1)
    o3 = book.create(f, a, Resources(cpus=1), now=2)
    o4 = book.create(f, a, Resources(cpus=1), now=5)
    book.remove(o2, f, b)
    assert book.next_expiry() == 10
    assert book.expired(9.99) == []
    assert book.expired(12) == [o1, o3]
    # expired offers stay outstanding until the caller removes them
    assert book.get(o1.id) is o1
    assert book.expired(12) == []  # each is reported once
    assert book.next_expiry() == 15
    book.remove(o4, f, a)
    assert book.next_expiry() is None
    assert book.expired(100) == []


def test_next_expiry_skips_removed_head():
    book = OfferBook("m", timeout=10)
    f, a = fw(), ag()
    o1 = book.create(f, a, Resources(cpus=1), now=0)
    book.create(f, a, Resources(cpus=1), now=3)
    book.remove(o1, f, a)
    assert book.next_expiry() == 13


def test_zero_or_negative_timeout_never_expires():
    for timeout in (0, -1):
        book = OfferBook("m", timeout=timeout)
        o = book.create(fw(), ag(), Resources(cpus=1), now=5)
        assert o.expires_at == math.inf
        assert book.next_expiry() is None
        assert book.expired(1e12) == []
        assert len(book) == 1


def test_offers_of_several_frameworks_are_indexed_separately():
    book = OfferBook("m", timeout=30)
    f1, f2, a = fw("fw-1"), fw("fw-2"), ag()
    o1 = book.create(f1, a, Resources(cpus=1), now=0)
    o2 = book.create(f2, a, Resources(cpus=2), now=0)
    assert f1.offers == {o1.id: o1} and f2.offers == {o2.id: o2}
    assert set(a.offers) == {o1.id, o2.id}
