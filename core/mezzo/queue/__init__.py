"""The batch queue: ``mezzo submit`` and the long-lived framework that runs what it submits.

Like Slurm's ``sbatch`` or the Torque framework the paper ports (§5.2): a user hands a
command (or an array of them) to the queue and walks away; the queue is a framework of
its own that accepts offers while it has jobs waiting, suppresses them while it has
none, retries failed jobs, and keeps its job list in a file so that a restart of the
queue (within its failover timeout) loses nothing, running tasks included.

- :mod:`.jobs`: what a job is and the queue's bookkeeping (pure logic).
- :mod:`.journal`: the job list on disk (an append-only journal, compacted).
- :mod:`.framework`: the scheduler: offers in, tasks out, status updates back.
- :mod:`.api`: the HTTP API on a unix socket (who submits is the socket's peer uid).
- :mod:`.client`: the blocking client ``mezzo submit``, ``jobs`` and ``cancel`` use.
- :mod:`.daemon`: the whole queue as one daemon (``mezzo queue``, ``mezzo local --queue``).
"""
