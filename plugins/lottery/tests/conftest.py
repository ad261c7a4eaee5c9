"""Test doubles for the lottery allocator's tests.

``fake_cycle`` is :class:`mezzo.testing.ScriptedCycle`, the allocation cycle mezzo
ships for allocator unit tests; ``filtered_cycle`` is the same with the refused pairs
ruled out by ``may_offer`` only (as an offer filter or a disconnection would), not
listed by ``refusing``. Handed out through fixtures so the tests work under any
pytest import mode.
"""

from __future__ import annotations

import pytest

from mezzo.testing import ScriptedCycle


class FilteredCycle(ScriptedCycle):
    def refusing(self, agent_id):
        return frozenset()


@pytest.fixture
def fake_cycle():
    return ScriptedCycle


@pytest.fixture
def filtered_cycle():
    return FilteredCycle
