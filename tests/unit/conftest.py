"""Fixtures shared by the master's unit tests."""

from __future__ import annotations

import pytest

from mezzo.config import MasterConfig
from mezzo.master import Master
from mezzo.master.ports import ManualClock
from mezzo.plugins import load_plugins


@pytest.fixture
def taking_over_master():
    """A master that has just become leader, on a ManualClock, no sockets: it knows
    no agent yet, so a re-registering agent is one it adopts (as after a failover),
    and it holds recovery for 60 s."""
    m = Master(
        MasterConfig(allocation_interval=0.01, recovery_hold_timeout=60, framework_recovery_timeout=60),
        load_plugins(),
        clock=ManualClock(),
    )
    m.lead()
    yield m
    m.term.close()
