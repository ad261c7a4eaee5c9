"""The master's counters (:meth:`mezzo.master.master.Master.metrics`) as operators'
tools read them: a flat snapshot under Apache Mesos' metric names, and Prometheus text.

Where Mesos has a metric for the same fact, the snapshot uses its name
(``master/elected``, ``master/tasks_running``, ``allocator/mesos/allocation_runs``, ...),
so ``mesos_exporter`` and dashboards built on ``/metrics/snapshot`` read mezzo as
they read Mesos; every other counter is there as ``mezzo/<name>``, nested ones
joined with ``/`` (``mezzo/connections/open``). Values are numbers (booleans 1 or
0); text is left out. ``allocator/mesos/allocation_run_ms`` is the mean cycle since
the master started (Mesos reports its last cycle there).

The Prometheus names are the snapshot's with every character other than a letter,
digit or ``_`` turned into ``_``, under ``mezzo_`` (``mezzo_master_elected``), all
gauges: a scrape reads the same numbers as the snapshot, at the same cost.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

PROMETHEUS_CONTENT_TYPE = CONTENT_TYPE_LATEST

_MESOS_NAMES = {
    "uptime_seconds": "master/uptime_secs",
    "agents": "master/slaves_active",
    "agents_connected": "master/slaves_connected",
    "frameworks": "master/frameworks_active",
    "frameworks_connected": "master/frameworks_connected",
    "offers_outstanding": "master/outstanding_offers",
    "tasks_running": "master/tasks_running",
    "allocation_cycles": "allocator/mesos/allocation_runs",
}
"""mezzo's counter -> Apache Mesos' name for the same fact."""


def snapshot(metrics: Mapping[str, Any]) -> dict[str, float]:
    """``metrics`` flattened under Mesos' names where they exist (see the module docstring)."""
    out: dict[str, float] = {"master/elected": 1.0 if metrics.get("leading") else 0.0}
    for key, value in metrics.items():
        _flatten(out, _MESOS_NAMES.get(key, f"mezzo/{key}"), value)
    if "agents" in metrics and "agents_connected" in metrics:
        out["master/slaves_disconnected"] = float(metrics["agents"] - metrics["agents_connected"])
    if "frameworks" in metrics and "frameworks_connected" in metrics:
        out["master/frameworks_disconnected"] = float(metrics["frameworks"] - metrics["frameworks_connected"])
    cycles = metrics.get("allocation_cycles") or 0
    if cycles:
        out["allocator/mesos/allocation_run_ms"] = round(
            metrics.get("allocation_seconds", 0.0) / cycles * 1000, 3
        )
    return out


def _flatten(out: dict[str, float], name: str, value: Any) -> None:
    if isinstance(value, bool):
        out[name] = 1.0 if value else 0.0
    elif isinstance(value, (int, float)):
        if math.isfinite(value):
            out[name] = float(value)
    elif isinstance(value, Mapping):
        for key, inner in value.items():
            _flatten(out, f"{name}/{key}", inner)


_UNFIT = re.compile(r"[^a-zA-Z0-9_]")


def prometheus_name(name: str) -> str:
    """``master/elected`` -> ``mezzo_master_elected``; ``mezzo/x`` -> ``mezzo_x``."""
    flat = _UNFIT.sub("_", name)
    return flat if flat.startswith("mezzo_") else f"mezzo_{flat}"


class _Snapshot:
    """A one-scrape collector of a snapshot."""

    def __init__(self, values: Mapping[str, float]) -> None:
        self._values = values

    def collect(self) -> Iterator[GaugeMetricFamily]:
        for name, value in sorted(self._values.items()):
            yield GaugeMetricFamily(prometheus_name(name), f"mezzo metric {name}", value=value)


def prometheus_text(values: Mapping[str, float]) -> bytes:
    """A snapshot in Prometheus' text exposition format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(values))
    return generate_latest(registry)
