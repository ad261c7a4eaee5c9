"""The master's counters under Mesos' names and as Prometheus names (pure logic)."""

from __future__ import annotations

import math

from mezzo.http.metrics import prometheus_name, prometheus_text, snapshot


def test_counters_take_mesos_names_and_the_rest_are_flattened_numbers() -> None:
    snap = snapshot(
        {
            "leading": True,
            "agents": 5,
            "agents_connected": 3,
            "frameworks": 2,
            "frameworks_connected": 2,
            "allocation_cycles": 4,
            "allocation_seconds": 0.02,
            "connections": {"open": 7, "closed": {"first_frame_timeout": 1}},
            "recovering": False,
            "loop_lag_seconds": math.nan,
            "address": "not a number",
        }
    )
    assert snap["master/elected"] == 1.0
    assert snap["master/slaves_active"] == 5.0 and snap["master/slaves_disconnected"] == 2.0
    assert snap["master/frameworks_disconnected"] == 0.0
    assert snap["allocator/mesos/allocation_runs"] == 4.0
    assert snap["allocator/mesos/allocation_run_ms"] == 5.0
    assert snap["mezzo/connections/closed/first_frame_timeout"] == 1.0
    assert snap["mezzo/recovering"] == 0.0
    assert "mezzo/loop_lag_seconds" not in snap and "mezzo/address" not in snap


def test_prometheus_names_and_text() -> None:
    assert prometheus_name("master/elected") == "mezzo_master_elected"
    assert prometheus_name("mezzo/connections/open") == "mezzo_connections_open"
    text = prometheus_text({"master/elected": 1.0}).decode()
    assert "# TYPE mezzo_master_elected gauge" in text and "mezzo_master_elected 1.0" in text


def test_flags_hide_the_zookeeper_password_and_count_the_acls() -> None:
    from types import SimpleNamespace

    from mezzo.acls import parse, single_tenant
    from mezzo.config import MasterConfig
    from mezzo.http.master_api import settings_of
    from mezzo.zk import parse_zk_url

    acls = parse(single_tenant(agents=["a"], operators=["op"]), "master.acls")
    config = MasterConfig(zk="zk://mezzo:s3cret@127.0.0.1:2181/mezzo")
    view = SimpleNamespace(config=config, zk_url=parse_zk_url(config.zk), acls=acls)
    flags = settings_of(view)  # type: ignore[arg-type]
    assert "s3cret" not in str(flags) and flags["zk"].startswith("zk://mezzo:***@")
    assert flags["acls"]["rules"]["register_agents"] == 1
