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
the end of the event loop's turn); a short command task then costs four writes.

Size: every task adds records as it runs (a short command task: its ``task`` and ``pid``
records, three updates and three acknowledgements, about 1.3 KB), so the journal grows with
the agent's history until it is compacted: rewritten with only what is live (through a
temporary file and ``os.replace``), which takes time proportional to the live state. That
happens once it holds as much history as live state (at least :data:`COMPACT_MIN_BYTES`,
or a quarter of ``max_bytes`` if that is less; or :data:`COMPACT_MIN_RECORDS` records), so
the file stays within twice its live state (or that floor) and compaction costs O(1) per
record written. ``max_bytes`` (``agent.max_journal_bytes``) bounds the file: the live state
may take half of it, the other half being the room between compactions, and
:meth:`Checkpoint.room_for` tells the agent to refuse a task whose records would take the
live state past that half. What is live is tracked as records come
(:attr:`Checkpoint.live_bytes`, what a compaction would write now: each framework, executor
and task changed since the last check is sized again, without encoding its ``TaskInfo``
again), so the check costs O(1) a record. Only updates (which the agent cannot refuse: a running task's updates must reach its
framework) can take the live state past the half, while the master does not acknowledge
them; the journal is then compacted when it reaches ``max_bytes`` (or a quarter more than
its live state, whichever is more), and an error says so.

Trust: only the agent may be able to write here, or a forged journal could name any
process for a restarted agent to signal. ``meta/`` is created 0700 and the files 0600,
never through a symlink (``O_NOFOLLOW``); :meth:`Checkpoint.check_files` tells whether
what is there is the agent's own (the agent refuses to start otherwise).

Error handling: nothing here raises into the agent but :meth:`Checkpoint.lock` (another
agent holds the work dir) and :meth:`Checkpoint.check_files`. An unreadable journal, or a
damaged record in it, is logged as an error naming the file, the offset and the reason (see
:mod:`.records` and :mod:`.replay` for what becomes of each). A write that fails (disk full, I/O error) is
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

from ...config import DEFAULT_MAX_JOURNAL_BYTES, MIN_MAX_JOURNAL_BYTES
from ...wire.ttypes import ExecutorInfo, FrameworkInfo, TaskInfo, TaskStatus
from ..work_dir import check_entry, make_private_dir, open_no_follow
from .records import decode_all, encode, header_size, payload_size
from .replay import CheckpointState, Entity, entity_of, replay

log = structlog.get_logger("mezzo.agent", component="checkpoint")

META_DIR = "meta"
JOURNAL = "journal"
LOCK = "lock"
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"

DEFAULT_MAX_BYTES = DEFAULT_MAX_JOURNAL_BYTES
"""``agent.max_journal_bytes`` unless configured: 1 GiB."""
MIN_MAX_BYTES = MIN_MAX_JOURNAL_BYTES
"""The smallest ``agent.max_journal_bytes`` accepted (a smaller value counts as this)."""
COMPACT_MIN_RECORDS = 20_000
"""A journal is compacted once it has this many records since the last compaction
(and twice as many as it then held) ..."""
COMPACT_MIN_BYTES = 64 * 1024 * 1024
"""... or once what it holds beyond its live state reaches as much as the live state and
at least this many bytes (at most a quarter of ``max_bytes``)."""
TASK_ALLOWANCE = 1024
"""Bytes a new task is counted for beyond its ``TaskInfo`` (and a new executor's and
framework's info): its record's header and its first status updates."""
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

    def __init__(self, work_dir: str, *, enabled: bool = True, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.enabled = enabled
        self.dir = os.path.join(work_dir, META_DIR)
        self.path = os.path.join(self.dir, JOURNAL)
        self.max_bytes = max(int(max_bytes), MIN_MAX_BYTES)
        """The most the journal file may take (``agent.max_journal_bytes``)."""
        self.state = CheckpointState()
        self._fd: int | None = None
        self._records = 0
        """Records written since the last compaction."""
        self._bytes = 0
        """Bytes written since the last compaction."""
        self._base_bytes = 0
        """The journal's size right after the last compaction."""
        self._live = 0
        """Records written by the last compaction."""
        self._compact_at = 0
        """The journal size at which it is compacted (see :meth:`_next_compaction`)."""
        self._sizes: dict[Entity, int] = {}
        """What each framework, executor and task takes in a compacted journal."""
        self._blobs: dict[Entity, list[tuple[Any, int]]] = {}
        """The payloads last counted in ``_sizes``, with their sizes (not encoded again)."""
        self._live_bytes = 0
        self._dirty: set[Entity] = set()
        """Entities changed since they were last counted in ``_sizes``: counted when the
        live size is asked for, once however many records changed them."""
        self._over = False
        """The live state went over half of ``max_bytes`` (logged) and is not back under
        three quarters of that yet (logged too: no log line for each small change)."""
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
            make_private_dir(self.dir)
            # Not through a symlink: the lock is truncated and written below.
            fd = open_no_follow(path, os.O_RDWR | os.O_CREAT, 0o600)
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

    def check_files(self) -> None:
        """Raise :class:`~mezzo.agent.work_dir.UnsafePath` unless ``meta/``, the journal and
        its lock, where they exist, are the agent's own: a real directory or file, owned by
        its effective uid, not writable by group or others. A journal someone else could
        write could name any process for a restarted agent to kill."""
        if not self.enabled:
            return
        check_entry(self.dir, directory=True, missing_ok=True)
        for name in (JOURNAL, LOCK):
            check_entry(os.path.join(self.dir, name), directory=False, missing_ok=True)

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
            with os.fdopen(open_no_follow(self.path), "rb") as f:
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
        self._recount()
        records = self.state.records()
        data = b"".join(encode(kind, h, blob) for kind, h, blob in records)
        tmp = self.path + ".new"
        try:
            make_private_dir(self.dir)
            fd = open_no_follow(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
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
        self._compact_at = self._next_compaction()
        if self._failed_at is not None:
            log.info("checkpoint journal writable again", path=self.path)
        self._failed_at = None
        return True

    def _next_compaction(self) -> int:
        """The size at which the journal just compacted to ``_base_bytes`` is compacted
        again: once it holds as much history as live state (at least the floor), and
        at ``max_bytes`` at the latest, unless the live state alone is that close to it
        (then a quarter more than the live state, so compaction stays O(1) a record)."""
        base = self._base_bytes
        floor = min(COMPACT_MIN_BYTES, self.max_bytes // 4)
        return min(base + max(base, floor), max(self.max_bytes, base + max(base // 4, floor // 4)))

    # -- what is live ---------------------------------------------------------------

    @property
    def live_bytes(self) -> int:
        """What a compaction would write now (frameworks, executors and tasks held; an
        estimate within a few bytes a task)."""
        self._settle()
        return self._live_bytes

    def room_for(
        self, framework: FrameworkInfo, task: TaskInfo, executor: ExecutorInfo | None = None
    ) -> str | None:
        """None if the live state has room for ``task`` (of ``framework``, starting
        ``executor`` if not None), else why not, naming ``agent.max_journal_bytes``."""
        if not self.enabled:
            return None
        need = TASK_ALLOWANCE + payload_size(task)
        if executor is not None:
            need += payload_size(executor)
        if framework.framework_id not in self.state.frameworks:
            need += payload_size(framework)
        live = self.live_bytes
        if live + need <= self.max_bytes // 2:
            return None
        return (
            f"the agent's checkpoint journal has no room for this task: its live state "
            f"({live} bytes) and this task's ({need} bytes) would pass half of "
            f"agent.max_journal_bytes ({self.max_bytes}), the other half being room for what "
            "happens between compactions"
        )

    def _settle(self) -> None:
        """Count the entities changed since they were last counted."""
        if self._dirty:
            dirty, self._dirty = self._dirty, set()
            for entity in dirty:
                self._resize(entity)
        self._check_budget()

    def _recount(self) -> None:
        """Count every framework, executor and task afresh (the state was replaced)."""
        self._sizes.clear()
        self._dirty.clear()
        self._live_bytes = 0
        blobs, self._blobs = self._blobs, {}
        for entity in self.state.entities():
            self._resize(entity, blobs.get(entity))
        self._check_budget()

    def _resize(self, entity: Entity, blobs: list[tuple[Any, int]] | None = None) -> None:
        """Count again what ``entity`` takes (records about it were applied)."""
        known = self._blobs.pop(entity, None) if blobs is None else blobs
        counted: list[tuple[Any, int]] = []
        size = 0
        for kind, header, blob in self.state.records_of(entity, uuids=False):
            size += header_size(kind, header)
            if kind == "task":
                # Its uuids are counted, not encoded (`,"u":["a","b"]`): a chatty task
                # has up to SEEN_KEPT of them.
                entry = self.state.tasks[(entity[1], entity[2])]
                n = len(entry.seen_order)
                size += entry.seen_chars + 3 * n + 6 if n else 7
            if blob is not None:
                blob_size = next((n for b, n in known or () if b is blob), None)
                if blob_size is None:
                    blob_size = payload_size(blob)
                counted.append((blob, blob_size))
                size += blob_size
        old = self._sizes.pop(entity, 0)
        if size:
            self._sizes[entity] = size
            self._blobs[entity] = counted
        self._live_bytes += size - old

    def _check_budget(self) -> None:
        """Log when the live state goes over half of ``max_bytes``, and when it is back."""
        budget = self.max_bytes // 2
        crossed = self._live_bytes < budget * 3 // 4 if self._over else self._live_bytes > budget
        if crossed:
            self._over = not self._over
            if self._over:
                log.error(
                    "the checkpoint journal's live state is over half of agent.max_journal_bytes: "
                    "new tasks are refused until it shrinks",
                    path=self.path,
                    live_bytes=self._live_bytes,
                    max_journal_bytes=self.max_bytes,
                )
            else:
                log.info(
                    "the checkpoint journal's live state is well under half of agent.max_journal_bytes again",
                    path=self.path,
                    live_bytes=self._live_bytes,
                )

    def clear(self) -> None:
        """Forget everything (clean stop: every container was killed). Only a journal
        this object has taken over (:meth:`begin`) is removed."""
        self._held.clear()
        self.close()
        self.state = CheckpointState()
        self._recount()
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
        entity = entity_of(kind, header)
        if entity is not None:
            self._dirty.add(entity)  # counted when asked (live_bytes, room_for)
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
        if self._base_bytes + self._bytes >= self._compact_at or (
            self._records >> 10 != before >> 10 and self._records >= max(COMPACT_MIN_RECORDS, 2 * self._live)
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

    def executor(
        self, framework_id: str, info: ExecutorInfo, container_id: str, sandbox: str, token: str = ""
    ) -> None:
        """A custom executor is launched; ``token`` is the secret its process registers
        with, kept so that after a restart the agent still tells it from an impostor
        (the journal is the agent's own, 0600 in a 0700 directory)."""
        if self.enabled:
            header = {"f": framework_id, "e": info.executor_id, "c": container_id, "s": sandbox}
            if token:
                header["tok"] = token  # not "k": every record's header has its kind there
            self._append("executor", header, info)

    def executor_gone(self, framework_id: str, executor_id: str) -> None:
        if self.enabled and (framework_id, executor_id) in self.state.executors:
            self._append("executor_gone", {"f": framework_id, "e": executor_id})


def _write_all(fd: int, data: bytes) -> None:
    written = os.write(fd, data)
    if written < len(data):  # only on errors like a full disk; the next write raises
        view = memoryview(data)[written:]
        while view:
            view = view[os.write(fd, view) :]
