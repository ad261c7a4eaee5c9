"""A locality-aware MapReduce-style framework on mezzo: delay scheduling.

The paper's §6.3 example (Fig. 8): a framework whose map tasks each read one
input block, stored on a few hosts, prefers to run each map on a host holding its
block. Mesos does not know about blocks; the framework gets there by choosing
which offers to take, and by *waiting* a little (``delay`` seconds) for an offer
of a host with its data before settling for another.

- :mod:`.jobs`: jobs, maps, block placement (pure bookkeeping);
- :mod:`.policy`: the delay-scheduling decision per offer and the refuse filter
  it sends (pure logic);
- :mod:`.scheduler`: :class:`LocalityScheduler`, the ``mezzo.Scheduler`` that
  wires them to the driver;
- ``python -m examples.delay_scheduling --help``: run it against a cluster.

README.md in this directory walks through the design.
"""

from .jobs import Job, MapTask, random_placement
from .policy import REFUSE_MAX, REFUSE_MIN, Decision, DelayPolicy, refuse_seconds_for
from .scheduler import JobStream, LocalityScheduler, TaskDurations, slots_in

__all__ = [
    "REFUSE_MAX",
    "REFUSE_MIN",
    "Decision",
    "DelayPolicy",
    "Job",
    "JobStream",
    "LocalityScheduler",
    "MapTask",
    "TaskDurations",
    "random_placement",
    "refuse_seconds_for",
    "slots_in",
]
