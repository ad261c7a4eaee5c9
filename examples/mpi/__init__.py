"""An MPI framework: gang-scheduled MPI jobs on a mezzo cluster (the paper's §5 port).

An MPI job of N ranks needs all N at once: a rank started alone only waits for the
others. So the framework *gathers* offers, holding them unanswered, until together
they fit N ranks (:class:`~.gang.Gang`); then it starts MPICH's ``mpiexec`` with
its manual launcher beside the scheduler, which prints the command of one Hydra proxy
per rank, and launches each as a task (:mod:`.launcher`). The proxies dial mpiexec back
and run the ranks; the job's output comes out of mpiexec.

Two jobs gathering at once could each hold part of what both need and wait forever.
A gang that gains no slot for ``hold_timeout`` seconds before it is complete gives back
everything it holds and stops taking offers for a random time that grows with each try (randomised
backoff, as on an Ethernet), then asks for offers again: sooner or later one job finds
the resources free while the other is away, and takes them all.

A rank that ends other than ``TASK_FINISHED`` (its process died, its agent was lost,
the master refused it) fails the job: the other ranks are killed and mpiexec stopped.

    python -m examples.mpi --master 127.0.0.1:5050 --ranks 4 -- ./pi

See ``docs/writing-a-framework.md`` ("An MPI framework").
"""

from .gang import Gang, ranks_in
from .launcher import LaunchError, MpiexecLauncher
from .scheduler import JobOutcome, MpiScheduler

__all__ = ["Gang", "JobOutcome", "LaunchError", "MpiScheduler", "MpiexecLauncher", "ranks_in"]
