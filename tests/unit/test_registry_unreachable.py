"""A lone master's registry: agents declared lost for their silence are welcome back."""

from __future__ import annotations

from mezzo.master import registry as reg
from mezzo.master.registry import REFUSE, UNREACHABLE, WELCOME, MemoryRegistry


def test_unreachable_agents_come_back_removed_ones_do_not() -> None:
    r = MemoryRegistry()
    done: list[bool] = []
    r.admit("a1", "agent", done.append)
    r.admit("a2", None, done.append)
    r.mark_unreachable("a1")
    r.remove("a2")
    assert (r.verdict("a1"), r.verdict("a2"), r.verdict("a3")) == (UNREACHABLE, REFUSE, WELCOME)
    assert r.owner("a1") == "agent", "only its owner may bring it back"
    r.admit("a1", "someone-else", done.append)
    assert r.verdict("a1") == WELCOME and r.owner("a1") == "agent" and not r.unreachable
    assert done == [True, True, True]


def test_the_unreachable_list_is_bounded_and_the_oldest_are_refused(monkeypatch) -> None:
    monkeypatch.setattr(reg, "MAX_UNREACHABLE", 3)
    r = MemoryRegistry()
    forgotten = []
    for i in range(5):
        r.admit(f"a{i}", None, lambda ok: None)
        forgotten += r.mark_unreachable(f"a{i}")
    assert list(r.unreachable) == ["a2", "a3", "a4"] and forgotten == ["a0", "a1"]
    assert [r.verdict(f"a{i}") for i in range(5)] == [REFUSE, REFUSE, UNREACHABLE, UNREACHABLE, UNREACHABLE]
