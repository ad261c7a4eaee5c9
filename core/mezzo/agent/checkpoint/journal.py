"""The checkpoint journal file: the work dir's lock, appending records, compaction.

Everything lives in ``<work_dir>/meta/journal``, an append-only log of records
(:mod:`.records`), next to ``meta/lock`` (an flock: one agent per work dir). :class:`Checkpoint`
applies each record to its :class:`~.replay.CheckpointState` and appends it; :meth:`Checkpoint.load`
reads and replays what a previous agent left.

The agent writes a record *before* it acts on what the record says: before an update
goes to the master, before an executor's update is acknowledged to the executor, before
a task is handed to its executor, before a process is started. So whatever the agent did
is in the journal; at worst the journal holds something the agent was about to do.

Durability, and why there is no fsync: records go out with plain ``write(2)`` calls. A write
that returned is in the page cache, which outlives the agent process however it dies
(SIGKILL, OOM killer, a bug). Only a kernel crash or power loss drops it, and those take
every container down too: the boot id then differs and the whole checkpoint is discarded.
An fsync per record would cost milliseconds on most disks, and the agent writes several
records per task (500 tasks/s is the target). A journal rather than one file per entry for
the same reason: appending cost 2 µs (15 µs on a busy machine), while replacing a file
atomically (temporary file + ``os.replace``) cost ~220 µs on the ext4 disk this was measured
on, which flushes the data of a file renamed over another. Acknowledgements and pids, which
nothing is done on the strength of, are held back to share the next write (at the latest at
the end of the event loop's turn); a short command task then costs four writes. The journal
is compacted (rewritten with only what is live, through a temporary file and ``os.replace``)
when it has grown well past that.

Error handling: nothing here raises into the agent (but :meth:`Checkpoint.lock`, when
another agent holds the work dir). An unreadable journal, or a damaged record in it, is
logged as an error naming the file, the offset and the reason (see :mod:`.records` and
:mod:`.replay` for what becomes of each). A write that fails (disk full, I/O error) is
logged and retried as a full rewrite of the journal at most once a second, so the journal
is whole again once the disk recovers.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import time
from typing import Any

import structlog

from ...wire.ttypes import ExecutorInfo, FrameworkInfo, TaskInfo, TaskStatus
from .records import decode_all, encode
from .replay import CheckpointState, replay

log = structlog.get_logger("mezzo.agent", component="checkpoint")

META_DIR = "meta"
JOURNAL = "journal"
LOCK = "lock"
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"

COMPACT_MIN_RECORDS = 20_000
"""A journal is not compacted before it has this many records (and twice as many as live)."""
COMPACT_MIN_BYTES = 64 * 1024 * 1024
"""... or this many bytes beyond its size after the last compaction (and as many again)."""
RETRY_WRITE_INTERVAL = 1.0
"""Seconds between attempts to rewrite the journal after a failed write."""


def boot_id() -> str:
    """This boot's id; empty if the kernel does not say (then boots are not compared)."""
    try:
        with open(BOOT_ID_PATH) as f:
            return f.read().strip()
    except OSError:
        return ""


class WorkDirBusy(Exception):
    """Another live agent holds the work dir's lock; the message names its pid."""


class Checkpoint:
    """The agent's journal. See the package and module docstrings."""

    def __init__(self, work_dir: str, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self.dir = os.path.join(work_dir, META_DIR)
        self.path = os.path.join(self.dir, JOURNAL)
        self.state = CheckpointState()
        self._fd: int | None = None
        self._records = 0
        self._bytes = 0
        self._base_bytes = 0
        self._live = 0
        self._failed_at: float | None = None
        self._write_errors = 0
        self._lock_fd: int | None = None
        self._began = False
        self._held: list[bytes] = []
        self._flush_scheduled = False

    # -- the work dir's lock ------------------------------------------------

    def lock(self) -> None:
        """Take ``meta/lock`` (an flock the kernel drops when this process dies), so
        that two agents never recover from and write to one journal.

        Raises :class:`WorkDirBusy` if another agent holds it. Other errors are
        logged: the agent then runs unlocked."""
        if not self.enabled or self._lock_fd is not None:
            return
        path = os.path.join(self.dir, LOCK)
        try:
            os.makedirs(self.dir, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            log.error(
                "cannot create the work dir's lock; running without it",
                path=path,
                error=exc.strerror or str(exc),
            )
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise WorkDirBusy(f"another agent (pid {holder}) is using it (lock {path})") from None
        except OSError as exc:
            log.error(
                "cannot lock the work dir; running without the lock",
                path=path,
                error=exc.strerror or str(exc),
            )
            os.close(fd)
            return
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- reading ----------------------------------------------------------

    def load(self) -> CheckpointState:
        """Read and replay the journal a previous agent left (if enabled and present).

        Never raises: problems are logged and listed in ``state.problems``. A journal
        written under another boot is discarded (its processes died with that boot).
        """
        self.state = CheckpointState()
        if not self.enabled:
            return self.state
        try:
            os.unlink(self.path + ".new")  # a compaction the agent died in
        except OSError:
            pass
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return self.state
        except OSError as exc:
            self._problem(
                f"cannot read the checkpoint {self.path}: {exc.strerror or exc}; "
                "starting without it (tasks and executors it recorded are not recovered)",
                error=True,
            )
            return self.state
        records, unreadable = decode_all(data, self.path)
        state, unfit = replay(records, self.path)
        self.state = state
        for message, is_error in unreadable + unfit:
            self._problem(message, error=is_error)
        now = boot_id()
        if state.boot_id and now and state.boot_id != now:
            log.info(
                "the machine rebooted since the checkpoint was written: its containers are gone; "
                "starting afresh",
                checkpoint=self.path,
                written_under=state.boot_id,
                boot=now,
            )
            self.state = CheckpointState()
        elif not state.boot_id and not state.empty():
            self._problem(
                f"{self.path}: the journal has no boot record; the processes it names are checked "
                "by pid and start time only",
                error=False,
            )
        return self.state

    def _problem(self, message: str, *, error: bool) -> None:
        self.state.problems.append(message)
        (log.error if error else log.info)("checkpoint: " + message)

    # -- writing ----------------------------------------------------------

    def begin(self, port: int, agent_id: str | None = None) -> None:
        """Start writing: a fresh journal holding the current state under this boot."""
        if not self.enabled:
            return
        self._began = True
        self.state.boot_id = boot_id()
        self.state.port = port
        if agent_id is not None:
            self.state.agent_id = agent_id
        self.compact()

    def compact(self) -> bool:
        """Rewrite the journal with only what is live (temporary file + ``os.replace``)."""
        if not self.enabled:
            return True
        records = self.state.records()
        data = b"".join(encode(kind, h, blob) for kind, h, blob in records)
        tmp = self.path + ".new"
        try:
            os.makedirs(self.dir, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o600)
            try:
                _write_all(fd, data)
            except BaseException:
                os.close(fd)
                raise
            os.replace(tmp, self.path)
        except OSError as exc:
            self._write_failed(exc)
            return False
        if self._fd is not None:
            os.close(self._fd)
        self._fd = fd
        self._held.clear()  # their effect is in the state just written
        self._records = 0
        self._bytes = 0
        self._base_bytes = len(data)
        self._live = len(records)
        if self._failed_at is not None:
            log.info("checkpoint journal writable again", path=self.path)
        self._failed_at = None
        return True

    def clear(self) -> None:
        """Forget everything (clean stop: every container was killed). Only a journal
        this object has taken over (:meth:`begin`) is removed."""
        self._held.clear()
        self.close()
        self.state = CheckpointState()
        if self.enabled and self._began:
            for path in (self.path, self.path + ".new"):
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    log.error("cannot remove the checkpoint", path=path, error=exc.strerror or str(exc))

    def close(self) -> None:
        self.flush()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def flush(self) -> None:
        """Write the records held back (see :meth:`_append`)."""
        self._flush_scheduled = False
        if self._held:
            held, self._held = self._held, []
            self._write(b"".join(held), len(held))

    def _append(self, kind: str, header: dict[str, Any], blob: Any = None, *, hold: bool = False) -> None:
        """Apply a record and write it.

        ``hold``: the record may wait until the next record is written or this turn of
        the event loop ends, so that several share one write(2). Only for records
        nothing is done on the strength of (acknowledgements, pids): lost in a crash,
        they cost a re-sent update (recognised by its uuid) or a search for the pid.
        """
        state = self.state
        try:
            state.apply(kind, header, blob)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            # The agent recorded something about an entity the journal does not have:
            # a bug of ours. Keep the journal consistent with what a replay would give.
            log.error(
                "checkpoint record does not fit the journal; not written",
                kind=kind,
                header=header,
                error=f"{type(exc).__name__}: {exc}",
            )
            return
        if self._fd is None:
            if self._failed_at is not None and time.monotonic() - self._failed_at >= RETRY_WRITE_INTERVAL:
                self.compact()
            return
        data = encode(kind, header, blob)
        if hold:
            self._held.append(data)
            if not self._flush_scheduled:
                try:
                    asyncio.get_running_loop().call_soon(self.flush)
                    self._flush_scheduled = True
                except RuntimeError:  # no event loop: write at once
                    self.flush()
            return
        if self._held:
            self._held.append(data)
            held, self._held = self._held, []
            self._write(b"".join(held), len(held))
        else:
            self._write(data, 1)

    def _write(self, data: bytes, records: int) -> None:
        if self._fd is None:
            return
        try:
            _write_all(self._fd, data)
        except OSError as exc:
            self._write_failed(exc)
            return
        before = self._records
        self._records += records
        self._bytes += len(data)
        if self._records >> 10 != before >> 10 or self._bytes > COMPACT_MIN_BYTES:
            self._maybe_compact()

    def _maybe_compact(self) -> None:
        if self._records >= max(COMPACT_MIN_RECORDS, 2 * self._live) or self._bytes >= max(
            COMPACT_MIN_BYTES, self._base_bytes
        ):
            self.compact()

    def _write_failed(self, exc: OSError) -> None:
        self._write_errors += 1
        if self._failed_at is None or self._write_errors % 1000 == 1:
            log.error(
                "cannot write the checkpoint journal; a crash now would lose what is not in it. "
                "Retrying as a full rewrite",
                path=self.path,
                error=exc.strerror or str(exc),
                retry_every=RETRY_WRITE_INTERVAL,
            )
        self._failed_at = time.monotonic()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # -- records (each applied to ``state`` and appended) ---------------------

    def agent(self, agent_id: str) -> None:
        if self.enabled and agent_id != self.state.agent_id:
            self._append("agent", {"a": agent_id})

    def framework(self, info: FrameworkInfo) -> None:
        if self.enabled and self.state.frameworks.get(info.framework_id) != info:
            self._append("framework", {"f": info.framework_id}, info)

    def framework_gone(self, framework_id: str) -> None:
        if self.enabled and (
            framework_id in self.state.frameworks or framework_id in self.state.shutting_down
        ):
            self._append("framework_gone", {"f": framework_id})

    def shutdown(self, framework_id: str) -> None:
        if self.enabled:
            self._append("shutdown", {"f": framework_id})

    def task(
        self,
        framework_id: str,
        info: TaskInfo,
        *,
        executor_id: str = "",
        launched: bool = False,
        container_id: str = "",
        sandbox: str = "",
    ) -> None:
        if not self.enabled:
            return
        h: dict[str, Any] = {"f": framework_id, "t": info.task_id, "e": executor_id, "l": launched}
        if container_id:
            h.update(c=container_id, s=sandbox)
        self._append("task", h, info)

    def launched(self, framework_id: str, task_id: str) -> None:
        if self.enabled and (framework_id, task_id) in self.state.tasks:
            self._append("launched", {"f": framework_id, "t": task_id})

    def pid(self, framework_id: str, ident: str, kind: str, pid: int, start_time: int) -> None:
        """``kind`` is :data:`~.replay.TASK` (a command task's container) or :data:`~.replay.EXECUTOR`."""
        if self.enabled:
            self._append(
                "pid", {"f": framework_id, "i": ident, "x": kind, "pid": pid, "st": start_time}, hold=True
            )

    def update(self, status: TaskStatus) -> None:
        if self.enabled:
            self._append("update", {"f": status.framework_id, "t": status.task_id}, status)

    def ack(self, framework_id: str, task_id: str, uuid: str) -> None:
        if self.enabled and (framework_id, task_id) in self.state.tasks:
            self._append("ack", {"f": framework_id, "t": task_id, "u": uuid}, hold=True)

    def task_gone(self, framework_id: str, task_id: str) -> None:
        if self.enabled and (framework_id, task_id) in self.state.tasks:
            self._append("task_gone", {"f": framework_id, "t": task_id})

    def damage_settled(self, framework_id: str, task_id: str) -> None:
        """A task whose entry is damaged has been dealt with on recovery (failed, its
        failure in its updates): from now on it is journaled like any other. Changes the
        state only; :meth:`begin` writes it."""
        entry = self.state.tasks.get((framework_id, task_id))
        if entry is not None:
            entry.damaged = None

    def executor(self, framework_id: str, info: ExecutorInfo, container_id: str, sandbox: str) -> None:
        if self.enabled:
            self._append(
                "executor", {"f": framework_id, "e": info.executor_id, "c": container_id, "s": sandbox}, info
            )

    def executor_gone(self, framework_id: str, executor_id: str) -> None:
        if self.enabled and (framework_id, executor_id) in self.state.executors:
            self._append("executor_gone", {"f": framework_id, "e": executor_id})


def _write_all(fd: int, data: bytes) -> None:
    written = os.write(fd, data)
    if written < len(data):  # only on errors like a full disk; the next write raises
        view = memoryview(data)[written:]
        while view:
            view = view[os.write(fd, view) :]
