"""Fixtures for driver tests: scripted peers on loopback and drivers stopped after each test."""

from __future__ import annotations

import pytest
from scripted_peers import PeerLoop, ScriptedAgent, ScriptedMaster


@pytest.fixture
def peer_loop():
    loop = PeerLoop()
    yield loop
    loop.close()


@pytest.fixture
def master(peer_loop):
    m = ScriptedMaster(peer_loop).start()
    yield m
    m.stop()


@pytest.fixture
def agent(peer_loop):
    a = ScriptedAgent(peer_loop).start()
    yield a
    a.stop()


@pytest.fixture
def cleanup():
    """``cleanup(driver)`` registers a driver to be aborted when the test ends."""
    drivers = []
    yield drivers.append
    for d in drivers:
        d.abort()
