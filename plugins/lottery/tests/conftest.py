"""Test doubles for the lottery allocator's tests.

The allocation cycle is ``mezzo_scripted_cycle``, a fixture of mezzo's pytest plugin
(:class:`mezzo.testing.ScriptedCycle`); ``filtered_cycle`` is the same with the refused
pairs ruled out by ``may_offer`` only (as an offer filter or a disconnection would),
not listed by ``refusing``. Handed out through fixtures so the tests work under any
pytest import mode.
"""

from __future__ import annotations

import pytest

from mezzo.testing import ScriptedCycle


class FilteredCycle(ScriptedCycle):
    def refusing(self, agent_id):
        return frozenset()


@pytest.fixture
def filtered_cycle():
    return FilteredCycle
