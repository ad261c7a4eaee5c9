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
- :mod:`.fair`: :class:`FairJobsScheduler`, many jobs at once (maps and reduces)
  sharing slots fairly, with delay scheduling for the maps (the paper's §6.1);
- :mod:`.mix`: the §6.1 workloads for it, :func:`facebook_mix` and :func:`large_mix`;
- ``python -m examples.delay_scheduling --help``: run it against a cluster.

README.md in this directory walks through the design.
"""

from .fair import FairJob, FairJobsScheduler, JobSpec
from .jobs import Job, MapTask, random_placement
from .mix import FACEBOOK_BINS, Submission, facebook_mix, large_mix
from .policy import REFUSE_MAX, REFUSE_MIN, Decision, DelayPolicy, refuse_seconds_for
from .scheduler import JobStream, LocalityScheduler, TaskDurations, slots_in

__all__ = [
    "FACEBOOK_BINS",
    "REFUSE_MAX",
    "REFUSE_MIN",
    "Decision",
    "DelayPolicy",
    "FairJob",
    "FairJobsScheduler",
    "Job",
    "JobSpec",
    "JobStream",
    "LocalityScheduler",
    "MapTask",
    "Submission",
    "TaskDurations",
    "facebook_mix",
    "large_mix",
    "random_placement",
    "refuse_seconds_for",
    "slots_in",
]
