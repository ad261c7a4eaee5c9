"""A broken allocator plugin, installed as a package and run by a real master: the cycle
it breaks is rolled back, its resources are offered at the next cycle (not after
``offer_timeout``), and the failure shows in the master's state by plugin name.

The same boundary for every other kind of plugin call, in process, in
tests/unit/test_plugin_boundary.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import Recorder, installed_for_daemons, wait_for

PACKAGE = Path(__file__).resolve().parent / "plugins" / "flaky_allocator"


@pytest.fixture(scope="module")
def flaky_installed(tmp_path_factory):
    """The broken allocator installed for the daemons of this test (see installed_for_daemons)."""
    with installed_for_daemons(PACKAGE, tmp_path_factory.mktemp("site")):
        yield


def test_a_cycle_the_allocator_breaks_is_rolled_back_and_offered_at_the_next(flaky_installed, make_cluster,
                                                                            drivers):
    cluster = make_cluster(2, master={"allocation_interval": 0.05, "offer_timeout": 120},
                           tables={"master.allocator": {"name": "flaky"},
                                   "master.allocator.flaky": {"fail_at_offers": [1]}})
    rec = Recorder()  # declines what it is offered, for the default 5 s
    drivers(rec, "f", cluster.master)
    # Were the broken cycle's offer kept, one agent would stay booked to the framework,
    # unsent, for offer_timeout (2 minutes).
    wait_for(lambda: len({o.agent_id for _, o in rec.offers}) == 2, 10, "offers of both agents")
    state = cluster.state()
    assert state["plugin_failures"] == {"allocator/flaky.allocate": 1}
    assert state["master"]["leading"]
