"""DRFSorter: order by weighted dominant share, incremental updates equal a full sort."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mezzo_allocator_drf import DRFSorter


def cluster(**total: int) -> DRFSorter:
    s = DRFSorter()
    s.add_total(total)
    return s


def test_orders_by_dominant_share():
    s = cluster(cpus=10_000, mem=100_000)
    for fid in ("a", "b", "c"):
        s.add(fid)
    s.allocated("a", {"cpus": 2_000, "mem": 1_000})  # dominant: cpus 0.2
    s.allocated("b", {"mem": 50_000})  # dominant: mem 0.5
    assert s.order() == ["c", "a", "b"]
    assert s.dominant_share("a") == 0.2
    assert s.dominant_share("b") == 0.5
    assert s.dominant_share("c") == 0.0
    s.recovered("b", {"mem": 45_000})  # b drops to 0.05
    assert s.order() == ["c", "b", "a"]


def test_weights_change_the_order():
    s = cluster(cpus=10_000)
    s.add("light", weight=1.0)
    s.add("heavy", weight=4.0)
    s.allocated("light", {"cpus": 2_000})  # 0.2 / 1
    s.allocated("heavy", {"cpus": 5_000})  # 0.5 / 4 = 0.125
    assert s.order() == ["heavy", "light"]
    assert s.dominant_share("heavy") == 0.5  # unweighted


def test_ties_go_to_registration_order_and_tiers_come_first():
    s = cluster(cpus=10)
    for fid in ("z", "y", "x"):
        s.add(fid)
    assert s.order() == ["z", "y", "x"]
    s.add("w", tier=-1)
    s.allocated("w", {"cpus": 10})
    assert s.order()[0] == "w"


def test_ranges_and_resources_without_total_are_ignored():
    s = cluster(cpus=1_000)
    s.add("a")
    s.allocated("a", {"gpus": 1_000})
    assert s.dominant_share("a") == 0.0


def test_inactive_clients_keep_allocation_but_leave_the_order():
    s = cluster(cpus=1_000)
    s.add("a")
    s.add("b")
    s.allocated("a", {"cpus": 100})
    s.deactivate("a")
    assert s.order() == ["b"]
    s.allocated("a", {"cpus": 800})
    s.allocated("b", {"cpus": 500})
    assert s.dominant_share("a") == 0.9
    s.activate("a")
    assert s.order() == ["b", "a"]


def test_unknown_ids_are_ignored():
    s = cluster(cpus=1_000)
    s.allocated("ghost", {"cpus": 1})
    s.recovered("ghost", {"cpus": 1})
    s.remove("ghost")
    s.activate("ghost")
    s.deactivate("ghost")
    assert s.order() == [] and s.dominant_share("ghost") == 0.0


def test_total_changes_resort_lazily_once():
    s = DRFSorter()
    for i in range(50):
        s.add(f"f{i}")
        s.allocated(f"f{i}", {"cpus": 1_000 * (50 - i)})
    order_list = s.order()
    assert order_list == [f"f{i}" for i in range(50)]  # no total yet: all shares 0
    for _ in range(5_000):  # agents registering between two cycles
        s.add_total({"cpus": 4_000, "mem": 8_000})
    assert s.resorts == 0
    assert s.order() == [f"f{i}" for i in reversed(range(50))]
    assert s.resorts == 1
    s.order()
    assert s.resorts == 1
    assert s.order() is order_list  # same list object, rewritten in place


def test_recovery_floors_at_zero():
    s = cluster(cpus=1_000)
    s.add("a")
    s.allocated("a", {"cpus": 100})
    s.recovered("a", {"cpus": 500})
    assert s.allocation("a") == {}


# ---------------------------------------------------------------- property


IDS = [f"f{i}" for i in range(6)]
RES = ["cpus", "mem", "gpus"]
amounts = st.dictionaries(st.sampled_from(RES), st.integers(1, 5_000), max_size=3)
op = st.one_of(
    st.tuples(
        st.just("add"), st.sampled_from(IDS), st.sampled_from([0.5, 1.0, 2.0, 3.0]), st.sampled_from([0, -1])
    ),
    st.tuples(st.just("remove"), st.sampled_from(IDS)),
    st.tuples(st.just("activate"), st.sampled_from(IDS)),
    st.tuples(st.just("deactivate"), st.sampled_from(IDS)),
    st.tuples(st.just("allocated"), st.sampled_from(IDS), amounts),
    st.tuples(st.just("recovered"), st.sampled_from(IDS), amounts),
    st.tuples(st.just("add_total"), amounts),
    st.tuples(st.just("remove_total"), amounts),
    st.tuples(st.just("order")),
)


class Model:
    """The obvious, from-scratch version: recompute every key and sort."""

    def __init__(self) -> None:
        self.clients: dict[str, dict] = {}
        self.total: dict[str, int] = {}
        self.seq = 0

    def apply(self, o) -> None:
        kind = o[0]
        c = self.clients.get(o[1]) if len(o) > 1 and isinstance(o[1], str) else None
        if kind == "add":
            if c is None:
                self.clients[o[1]] = {"w": o[2], "t": o[3], "seq": self.seq, "alloc": {}, "active": True}
                self.seq += 1
            else:
                c["w"], c["t"] = o[2], o[3]
                c["active"] = True
        elif kind == "remove":
            self.clients.pop(o[1], None)
        elif kind in ("activate", "deactivate") and c is not None:
            c["active"] = kind == "activate"
        elif kind in ("allocated", "recovered") and c is not None:
            sign = 1 if kind == "allocated" else -1
            for r, m in o[2].items():
                c["alloc"][r] = max(0, c["alloc"].get(r, 0) + sign * m)
        elif kind in ("add_total", "remove_total"):
            sign = 1 if kind == "add_total" else -1
            for r, m in o[1].items():
                self.total[r] = max(0, self.total.get(r, 0) + sign * m)

    def share(self, c) -> float:
        return max([m / self.total[r] for r, m in c["alloc"].items() if self.total.get(r)] or [0.0])

    def order(self) -> list[str]:
        active = [(f, c) for f, c in self.clients.items() if c["active"]]
        return [
            f
            for f, c in sorted(
                active, key=lambda fc: (fc[1]["t"], self.share(fc[1]) / fc[1]["w"], fc[1]["seq"])
            )
        ]


@settings(max_examples=300, deadline=None)
@given(st.lists(op, max_size=60))
def test_incremental_order_equals_full_sort(ops):
    s, model = DRFSorter(), Model()
    for o in ops:
        model.apply(o)
        kind = o[0]
        if kind == "add":
            s.add(o[1], weight=o[2], tier=o[3])
        elif kind == "order":
            assert s.order() == model.order()
        elif kind in ("add_total", "remove_total", "allocated", "recovered") and len(o) == 2:
            getattr(s, kind)(o[1])
        elif kind in ("allocated", "recovered"):
            getattr(s, kind)(o[1], o[2])
        else:
            getattr(s, kind)(o[1])
    assert s.order() == model.order()
    for fid, c in model.clients.items():
        assert s.dominant_share(fid) == model.share(c)
