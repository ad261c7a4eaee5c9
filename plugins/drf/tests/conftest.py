"""Test doubles for the DRF allocator's unit tests.

The allocation cycle is ``mezzo_scripted_cycle``, a fixture of mezzo's pytest plugin
(:class:`mezzo.testing.ScriptedCycle`). Handed out through fixtures so the tests work
under any pytest import mode.
"""

from __future__ import annotations

import pytest

from mezzo.wire.ttypes import FrameworkInfo


@pytest.fixture
def info():
    def make(name: str, role: str = "*") -> FrameworkInfo:
        return FrameworkInfo(name=name, role=role)

    return make
