"""The ZooKeeper registry's znode names: an agent id and the principal that registered it."""

from __future__ import annotations

import pytest
from mezzo.master.registry import node_name, parse_node_name


@pytest.mark.parametrize("owner", ["agent", "agent-7.example.com", "ops@corp", "CN with / and %", None])
def test_a_name_gives_back_the_id_and_owner_it_was_made_from(owner) -> None:
    name = node_name("c0ffee-S12-abcdef", owner)
    assert "/" not in name  # a znode name cannot hold one
    assert parse_node_name(name) == ("c0ffee-S12-abcdef", owner)


def test_a_name_written_before_owners_were_recorded_has_none() -> None:
    assert parse_node_name("c0ffee-S12-abcdef") == ("c0ffee-S12-abcdef", None)
