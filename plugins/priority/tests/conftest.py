"""Test doubles for the strict-priority allocator's unit tests.

``fake_cycle`` is :class:`mezzo.testing.ScriptedCycle`, the allocation cycle mezzo
ships for allocator unit tests.
"""

from __future__ import annotations

import pytest

from mezzo.testing import ScriptedCycle


@pytest.fixture
def fake_cycle():
    return ScriptedCycle
