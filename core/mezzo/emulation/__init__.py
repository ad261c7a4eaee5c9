"""Emulated agents and frameworks for the scale and failover benchmarks.

The paper's 50,000-node experiment (§6.5) ran emulated slaves on 99 machines; we
run them, and the frameworks keeping them busy, as a few processes on one host.
Both sides speak the real protocol to the real, unmodified master:

- :mod:`.agents`: :class:`EmulatedAgentPool`, many agents per process (several per
  connection), tasks "run" as event-loop timers.
- :mod:`.frameworks`: :class:`EmulatedFrameworkPool`, many real scheduler drivers per
  process following the paper's workload, and :class:`ProbeFramework` /
  :func:`run_probe`, the test framework whose task latency Fig. 10 plots.

``python -m mezzo.emulation agents|frameworks --help`` runs either side as a
process that prints its counters as one JSON line per second (the benchmarks in
``bench/`` read them).
"""

from .agents import EmulatedAgent, EmulatedAgentPool, task_duration
from .frameworks import (
    EmulatedFrameworkPool,
    EmulatedScheduler,
    ProbeFramework,
    emulated_task,
    normal_duration,
    run_probe,
)

__all__ = [
    "EmulatedAgent",
    "EmulatedAgentPool",
    "EmulatedFrameworkPool",
    "EmulatedScheduler",
    "ProbeFramework",
    "emulated_task",
    "normal_duration",
    "run_probe",
    "task_duration",
]
