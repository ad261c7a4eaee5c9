"""Test doubles for the DRF allocator's unit tests.

``fake_cycle`` is :class:`mezzo.testing.ScriptedCycle`, the allocation cycle mezzo
ships for allocator unit tests. Handed out through fixtures so the tests work
under any pytest import mode.
"""

from __future__ import annotations

import pytest

from mezzo.testing import ScriptedCycle
from mezzo.wire.ttypes import FrameworkInfo


@pytest.fixture
def fake_cycle():
    return ScriptedCycle


@pytest.fixture
def info():
    def make(name: str, role: str = "*") -> FrameworkInfo:
        return FrameworkInfo(name=name, role=role)

    return make
