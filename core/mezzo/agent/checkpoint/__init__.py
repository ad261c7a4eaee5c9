"""Agent checkpointing: what the agent runs, on disk, so that a restarted agent takes it back.

Usage (the agent does this; ``enabled=False`` makes every call a no-op)::

    cp = Checkpoint(config.work_dir, enabled=config.checkpoint)
    state = cp.load()               # what a crashed agent left; empty on a first start
    ...                             # bind state.port, rebuild tasks and executors from state
    cp.begin(port)                  # a fresh journal holding exactly what was recovered
    cp.task(fid, task_info, ...)    # then one record per event, written before acting on it
    cp.update(status); cp.ack(fid, tid, uuid); cp.task_gone(fid, tid)
    cp.clear()                      # clean stop: the containers are gone, nothing to recover

Contract
--------
Replayed in order into a :class:`CheckpointState`, the journal gives what the agent held
when it stopped writing:

- the boot id (``/proc/sys/kernel/random/boot_id``) the journal was written under, the
  agent id and the port the agent bound (a journal from another boot is discarded: its
  processes died with that boot);
- each framework's ``FrameworkInfo``, and whether it was being shut down;
- each task (``TaskInfo``) until its terminal update is acknowledged: whether it is a command
  task (its container id, sandbox, pid and process start time, from ``/proc/<pid>/stat``,
  which tells the process from a later one reusing its pid) or a custom executor's (and
  whether it was handed to the executor yet), its unacknowledged status updates in order,
  its latest update and the uuids of every update it had (to recognise an executor's
  retries);
- each custom executor run (``ExecutorInfo``, container id, sandbox, pid, start time).

Three modules, one concern each:

- :mod:`.records`: the bytes of one record, and a journal's bytes back to records (pure);
- :mod:`.replay`: :class:`CheckpointState` and how each kind of record changes it, damaged
  records included (pure);
- :mod:`.journal`: the file: the work dir's lock, appending, compaction, loading
  (:class:`Checkpoint`).
"""

from __future__ import annotations

from .journal import (
    BOOT_ID_PATH,
    COMPACT_MIN_BYTES,
    COMPACT_MIN_RECORDS,
    JOURNAL,
    LOCK,
    META_DIR,
    RETRY_WRITE_INTERVAL,
    Checkpoint,
    WorkDirBusy,
    boot_id,
)
from .records import DecodedRecord, decode_all, encode
from .replay import EXECUTOR, TASK, CheckpointState, ContainerEntry, ExecutorEntry, TaskEntry, replay

__all__ = [
    "BOOT_ID_PATH",
    "COMPACT_MIN_BYTES",
    "COMPACT_MIN_RECORDS",
    "EXECUTOR",
    "JOURNAL",
    "LOCK",
    "META_DIR",
    "RETRY_WRITE_INTERVAL",
    "TASK",
    "Checkpoint",
    "CheckpointState",
    "ContainerEntry",
    "DecodedRecord",
    "ExecutorEntry",
    "TaskEntry",
    "WorkDirBusy",
    "boot_id",
    "decode_all",
    "encode",
    "replay",
]
