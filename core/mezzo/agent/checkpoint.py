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
Everything lives in ``<work_dir>/meta/journal``, an append-only log of records, next to
``meta/lock`` (an flock: one agent per work dir). Replayed in order into a
:class:`CheckpointState` it gives what the agent held when it stopped writing:

- the boot id (``/proc/sys/kernel/random/boot_id``) the journal was written under, the
  agent id and the port the agent bound;
- each framework's ``FrameworkInfo``, and whether it was being shut down;
- each task (``TaskInfo``) until its terminal update is acknowledged: whether it is a command
  task (its container id, sandbox, pid and process start time, from ``/proc/<pid>/stat``,
  which tells the process from a later one reusing its pid) or a custom executor's (and
  whether it was handed to the executor yet), its unacknowledged status updates in order,
  its latest update and the uuids of every update it had (to recognise an executor's
  retries);
- each custom executor run (``ExecutorInfo``, container id, sandbox, pid, start time).

Thrift structs are stored with the Thrift binary protocol (``TBinaryProtocol``; encoded
through its C accelerator); the scalars of a record are a small JSON header. A record is
``"MZ" | pad | header length | payload length | crc32(lengths + header) | crc32(payload)``
(20 bytes, little-endian) followed by the header and the payload.

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
logged as an error naming the file, the offset and the reason:

- a record cut short at the end of the file is the agent dying mid-write, and is dropped
  (logged at info level: it was never acted upon);
- a record whose header is damaged cannot be attributed: the bytes are skipped up to the
  next readable record, and the log says that whatever they held is lost. A task whose own
  record was lost that way, but which later records name, is treated as damaged;
- a record whose header is intact but whose payload is damaged marks the task, executor
  or framework it names as *damaged* (:attr:`TaskEntry.damaged` gives the reason): the
  agent kills what it can find of it and fails its tasks, never quietly drops them.

A write that fails (disk full, I/O error) is logged and retried as a full rewrite of the
journal at most once a second, so the journal is whole again once the disk recovers.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import struct
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

import structlog
from thrift.protocol.TBinaryProtocol import TBinaryProtocolAcceleratedFactory
from thrift.TSerialization import deserialize

from .. import is_terminal
from ..wire.ttypes import ExecutorInfo, FrameworkInfo, TaskInfo, TaskStatus

try:
    from thrift.protocol import fastbinary
except ImportError:  # pragma: no cover - thrift without its C extension
    fastbinary = None

log = structlog.get_logger("mezzo.agent", component="checkpoint")

META_DIR = "meta"
JOURNAL = "journal"
LOCK = "lock"
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"

MAGIC = b"MZ"
_PREFIX = struct.Struct("<2s2xIIII")
"""Magic, header length, payload length, crc32 of (lengths + header), crc32 of payload."""
_LENGTHS = struct.Struct("<II")
MAX_HEADER = 16 * 1024 * 1024
MAX_PAYLOAD = 256 * 1024 * 1024

COMPACT_MIN_RECORDS = 20_000
"""A journal is not compacted before it has this many records (and twice as many as live)."""
COMPACT_MIN_BYTES = 64 * 1024 * 1024
"""... or this many bytes beyond its size after the last compaction (and as many again)."""
RETRY_WRITE_INTERVAL = 1.0
"""Seconds between attempts to rewrite the journal after a failed write."""

_BLOBS: dict[str, type] = {
    "framework": FrameworkInfo,
    "task": TaskInfo,
    "update": TaskStatus,
    "latest": TaskStatus,
    "executor": ExecutorInfo,
}
_PROTOCOL = TBinaryProtocolAcceleratedFactory()
_JSON = json.JSONEncoder(separators=(",", ":"))

TASK = "task"
EXECUTOR = "executor"


def boot_id() -> str:
    """This boot's id; empty if the kernel does not say (then boots are not compared)."""
    try:
        with open(BOOT_ID_PATH) as f:
            return f.read().strip()
    except OSError:
        return ""


# -- the state a journal describes ---------------------------------------------


@dataclass
class ContainerEntry:
    """A container the agent started: where it lives and which process leads it."""

    container_id: str
    sandbox: str
    pid: int = 0
    start_time: int = 0
    """``/proc/<pid>/stat`` field 22 (clock ticks after boot); 0 while unknown."""


@dataclass
class TaskEntry:
    framework_id: str
    task_id: str
    info: TaskInfo | None = None
    """None for a task known only by its updates (e.g. one the agent rejected)."""
    executor_id: str = ""
    """Empty for a command task."""
    launched: bool = False
    """Executor tasks: handed to the executor (``launch_task`` sent)."""
    container: ContainerEntry | None = None
    """Command tasks: their container."""
    updates: list[TaskStatus] = field(default_factory=list)
    """Unacknowledged updates, oldest (the one in flight) first."""
    latest: TaskStatus | None = None
    seen: set[str] = field(default_factory=set)
    """Uuids of every update the task had."""
    damaged: str | None = None
    """Why this entry cannot be trusted (a damaged record named it), else None."""


@dataclass
class ExecutorEntry:
    framework_id: str
    executor_id: str
    info: ExecutorInfo | None
    container: ContainerEntry
    damaged: str | None = None


@dataclass
class CheckpointState:
    """What a journal says, after replaying it."""

    boot_id: str = ""
    agent_id: str = ""
    port: int = 0
    frameworks: dict[str, FrameworkInfo] = field(default_factory=dict)
    shutting_down: set[str] = field(default_factory=set)
    """Frameworks being shut down: whatever is left of them is killed, nothing reported."""
    damaged_frameworks: dict[str, str] = field(default_factory=dict)
    tasks: dict[tuple[str, str], TaskEntry] = field(default_factory=dict)
    executors: dict[tuple[str, str], ExecutorEntry] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    """What went wrong reading the journal (each also logged)."""

    def empty(self) -> bool:
        return not (self.agent_id or self.frameworks or self.tasks or self.executors)

    # Replaying is applying each record in turn; the live journal applies what it
    # writes, so its state is always what a replay would give.

    def apply(self, kind: str, h: dict[str, Any], blob: Any) -> None:
        """Apply one record. Raises KeyError/TypeError/ValueError for one that does not fit."""
        if kind == "update":
            entry = self._task(h["f"], h["t"])
            entry.updates.append(blob)
            entry.latest = blob
            if blob.uuid:
                entry.seen.add(blob.uuid)
        elif kind == "ack":
            entry = self.tasks[(h["f"], h["t"])]
            if entry.updates and entry.updates[0].uuid == h["u"] and is_terminal(entry.updates.pop(0).state):
                del self.tasks[(h["f"], h["t"])]  # its end is reported: nothing left of it
        elif kind == "task_gone":
            self.tasks.pop((h["f"], h["t"]), None)
        elif kind == "pid":
            pid, start_time = int(h["pid"]), int(h["st"])
            if h["x"] == TASK:
                entry = self._task(h["f"], h["i"])
                if entry.container is None:
                    # Only after a damaged record: keep the process, to kill it.
                    entry.container = ContainerEntry("", "", pid, start_time)
                    entry.damaged = entry.damaged or "its task record is missing from the checkpoint"
                entry.container.pid, entry.container.start_time = pid, start_time
            else:
                ex = self.executors.get((h["f"], h["i"]))
                if ex is None:
                    ex = self.executors[(h["f"], h["i"])] = ExecutorEntry(
                        h["f"], h["i"], None, ContainerEntry("", ""),
                        damaged="its executor record is missing from the checkpoint")
                ex.container.pid, ex.container.start_time = pid, start_time
        elif kind == "task":
            entry = self._task(h["f"], h["t"])
            entry.info = blob
            entry.executor_id = h.get("e", "")
            entry.launched = bool(h.get("l", False))
            if h.get("c"):
                entry.container = ContainerEntry(h["c"], h["s"], int(h.get("pid", 0)), int(h.get("st", 0)))
            entry.seen.update(h.get("u", ()))
        elif kind == "launched":
            self.tasks[(h["f"], h["t"])].launched = True
        elif kind == "latest":
            entry = self._task(h["f"], h["t"])
            entry.latest = blob
            if blob.uuid:
                entry.seen.add(blob.uuid)
        elif kind == "executor":
            self.executors[(h["f"], h["e"])] = ExecutorEntry(
                h["f"], h["e"], blob, ContainerEntry(h["c"], h["s"], int(h.get("pid", 0)), int(h.get("st", 0))))
        elif kind == "executor_gone":
            self.executors.pop((h["f"], h["e"]), None)
        elif kind == "framework":
            self.frameworks[h["f"]] = blob
        elif kind == "framework_gone":
            self.frameworks.pop(h["f"], None)
            self.shutting_down.discard(h["f"])
        elif kind == "shutdown":
            self.shutting_down.add(h["f"])
        elif kind == "agent":
            self.agent_id = str(h["a"])
        elif kind == "boot":
            self.boot_id, self.agent_id, self.port = str(h["b"]), str(h.get("a", "")), int(h.get("p", 0))
        else:
            raise ValueError(f"unknown record kind {kind!r}")

    def damage(self, kind: str, h: dict[str, Any], reason: str) -> str | None:
        """A record of ``kind`` about what ``h`` names had an unreadable payload: mark
        that entity damaged. Returns what was marked (for the log), or None."""
        fid = h.get("f")
        if not isinstance(fid, str):
            return None
        if kind in ("task", "update", "latest") and isinstance(h.get("t"), str):
            entry = self._task(fid, h["t"])
            entry.damaged = entry.damaged or reason
            if kind == "task" and h.get("c"):
                entry.executor_id = h.get("e", "")
                entry.container = ContainerEntry(h["c"], h["s"], int(h.get("pid", 0)), int(h.get("st", 0)))
            return f"task {h['t']!r} of framework {fid!r}"
        if kind == "executor" and isinstance(h.get("e"), str):
            entry = ExecutorEntry(fid, h["e"], None, ContainerEntry(h["c"], h["s"], int(h.get("pid", 0)),
                                                                     int(h.get("st", 0))), damaged=reason)
            self.executors[(fid, h["e"])] = entry
            return f"executor {h['e']!r} of framework {fid!r}"
        if kind == "framework":
            self.damaged_frameworks[fid] = reason
            return f"framework {fid!r}"
        return None

    def _task(self, fid: str, tid: str) -> TaskEntry:
        if not isinstance(fid, str) or not isinstance(tid, str):
            raise TypeError("framework and task ids must be strings")
        entry = self.tasks.get((fid, tid))
        if entry is None:
            entry = self.tasks[(fid, tid)] = TaskEntry(fid, tid)
        return entry

    def records(self) -> list[tuple[str, dict[str, Any], Any]]:
        """Records that rebuild this state from nothing (what compaction writes)."""
        out: list[tuple[str, dict[str, Any], Any]] = [
            ("boot", {"b": self.boot_id, "a": self.agent_id, "p": self.port}, None)]
        for fid, info in self.frameworks.items():
            out.append(("framework", {"f": fid}, info))
        for fid in self.shutting_down:
            out.append(("shutdown", {"f": fid}, None))
        for (fid, eid), ex in self.executors.items():
            if ex.info is None:
                continue  # damaged: recovery has dealt with it
            c = ex.container
            out.append(("executor", {"f": fid, "e": eid, "c": c.container_id, "s": c.sandbox,
                                     "pid": c.pid, "st": c.start_time}, ex.info))
        for (fid, tid), t in self.tasks.items():
            if t.damaged:
                continue
            if t.info is not None:
                h: dict[str, Any] = {"f": fid, "t": tid, "e": t.executor_id, "l": t.launched,
                                     "u": sorted(t.seen)}
                if t.container is not None:
                    c = t.container
                    h.update(c=c.container_id, s=c.sandbox, pid=c.pid, st=c.start_time)
                out.append(("task", h, t.info))
            if t.latest is not None and not t.updates:
                out.append(("latest", {"f": fid, "t": tid}, t.latest))  # acknowledged already
            for status in t.updates:
                out.append(("update", {"f": fid, "t": tid}, status))
        return out


# -- encoding --------------------------------------------------------------------


def encode(kind: str, header: dict[str, Any], blob: Any = None) -> bytes:
    """One record's bytes."""
    hb = _JSON.encode({**header, "k": kind}).encode()
    if blob is None:
        pb = b""
    elif fastbinary is not None:
        pb = fastbinary.encode_binary(blob, [type(blob), blob.thrift_spec])
    else:  # pragma: no cover
        from thrift.TSerialization import serialize

        pb = serialize(blob)
    lengths = _LENGTHS.pack(len(hb), len(pb))
    return b"".join((
        _PREFIX.pack(MAGIC, len(hb), len(pb), zlib.crc32(hb, zlib.crc32(lengths)), zlib.crc32(pb)), hb, pb))


@dataclass
class _Read:
    kind: str
    header: dict[str, Any]
    blob: Any
    offset: int
    damaged: str | None = None


def decode_all(data: bytes, path: str) -> tuple[list[_Read], list[tuple[str, bool]]]:
    """Parse a journal's bytes into records; never raises.

    Also returns the problems met, as ``(sentence naming path and offset, is_error)``;
    a record cut short at the very end is not an error (the agent died writing it)."""
    records: list[_Read] = []
    problems: list[tuple[str, bool]] = []
    off, n = 0, len(data)
    size = _PREFIX.size

    def cut_short(what: str) -> None:
        message = (f"{path}: {what} at offset {off} is incomplete, cut short when the agent died "
                   "writing it: dropped (it was never acted upon)")
        problems.append((message, False))

    while off < n:
        if n - off < size:
            cut_short("the last record")
            break
        magic, hlen, plen, hcrc, pcrc = _PREFIX.unpack_from(data, off)
        hstart = off + size
        pstart = hstart + hlen
        sane = magic == MAGIC and hlen <= MAX_HEADER and plen <= MAX_PAYLOAD
        if sane and pstart > n and _resync(data, off + 1) is None:
            cut_short("the last record")
            break
        if not (sane and pstart <= n and zlib.crc32(data[hstart:pstart], zlib.crc32(_LENGTHS.pack(hlen, plen))) == hcrc):
            nxt = _resync(data, off + 1)
            end = n if nxt is None else nxt
            message = (f"{path}: bytes {off}-{end} are not a readable record (damaged header): whatever "
                       "they recorded is lost")
            problems.append((message + ("" if nxt is None else "; reading on after them"), True))
            if nxt is None:
                break
            off = nxt
            continue
        try:
            header = json.loads(data[hstart:pstart])
            kind = header.pop("k")
            if not isinstance(kind, str):
                raise TypeError("the record kind is not a string")
        except (ValueError, KeyError, AttributeError, TypeError) as exc:
            problems.append((f"{path}: the record at offset {off} has an invalid header ({exc}): skipped", True))
            off = min(pstart + plen, n)
            continue
        if pstart + plen > n:
            cut_short(f"the last record ({kind})")
            break
        payload = data[pstart:pstart + plen]
        rec = _Read(kind, header, None, off)
        if zlib.crc32(payload) != pcrc:
            rec.damaged = f"its {kind} record at offset {off} of {path} is damaged (checksum mismatch)"
        elif kind in _BLOBS:
            try:
                rec.blob = deserialize(_BLOBS[kind](), payload, _PROTOCOL)
            except Exception as exc:  # noqa: BLE001 - any decoding failure is damage
                rec.damaged = f"its {kind} record at offset {off} of {path} cannot be decoded ({exc!r})"
        records.append(rec)
        off = pstart + plen
    return records, problems


def _resync(data: bytes, start: int) -> int | None:
    """Offset of the next record with a valid header at or after ``start``."""
    size = _PREFIX.size
    pos = data.find(MAGIC, start)
    while pos != -1 and pos + size <= len(data):
        _magic, hlen, plen, hcrc, _ = _PREFIX.unpack_from(data, pos)
        if (hlen <= MAX_HEADER and plen <= MAX_PAYLOAD and pos + size + hlen <= len(data)
                and zlib.crc32(data[pos + size:pos + size + hlen], zlib.crc32(_LENGTHS.pack(hlen, plen))) == hcrc):
            return pos
        pos = data.find(MAGIC, pos + 1)
    return None


# -- the journal -------------------------------------------------------------------


class WorkDirBusy(Exception):
    """Another live agent holds the work dir's lock; the message names its pid."""



class Checkpoint:
    """The agent's journal. See the module docstring."""

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
            log.error("cannot create the work dir's lock; running without it", path=path,
                      error=exc.strerror or str(exc))
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise WorkDirBusy(f"another agent (pid {holder}) is using it (lock {path})") from None
        except OSError as exc:
            log.error("cannot lock the work dir; running without the lock", path=path,
                      error=exc.strerror or str(exc))
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
            self._problem(f"cannot read the checkpoint {self.path}: {exc.strerror or exc}; "
                          "starting without it (tasks and executors it recorded are not recovered)", error=True)
            return self.state
        records, problems = decode_all(data, self.path)
        for message, is_error in problems:
            self._problem(message, error=is_error)
        state = self.state
        for i, rec in enumerate(records):
            if rec.damaged is not None:
                what = state.damage(rec.kind, rec.header, rec.damaged)
                self._problem(f"{rec.damaged}: " + (f"{what} is treated as lost" if what else
                                                     "whatever it recorded is lost"), error=True)
                continue
            try:
                state.apply(rec.kind, rec.header, rec.blob)
            except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
                self._problem(f"{self.path}: record {i} ({rec.kind}, offset {rec.offset}) does not fit what came "
                              f"before it ({type(exc).__name__}: {exc}): ignored", error=True)
        now = boot_id()
        if state.boot_id and now and state.boot_id != now:
            log.info("the machine rebooted since the checkpoint was written: its containers are gone; "
                     "starting afresh", checkpoint=self.path, written_under=state.boot_id, boot=now)
            self.state = CheckpointState()
        elif not state.boot_id and not state.empty():
            self._problem(f"{self.path}: the journal has no boot record; the processes it names are checked "
                          "by pid and start time only", error=False)
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
            log.error("checkpoint record does not fit the journal; not written", kind=kind, header=header,
                      error=f"{type(exc).__name__}: {exc}")
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
        if self._records >= max(COMPACT_MIN_RECORDS, 2 * self._live) or \
                self._bytes >= max(COMPACT_MIN_BYTES, self._base_bytes):
            self.compact()

    def _write_failed(self, exc: OSError) -> None:
        self._write_errors += 1
        if self._failed_at is None or self._write_errors % 1000 == 1:
            log.error("cannot write the checkpoint journal; a crash now would lose what is not in it. "
                      "Retrying as a full rewrite", path=self.path, error=exc.strerror or str(exc),
                      retry_every=RETRY_WRITE_INTERVAL)
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
        if self.enabled and (framework_id in self.state.frameworks or framework_id in self.state.shutting_down):
            self._append("framework_gone", {"f": framework_id})

    def shutdown(self, framework_id: str) -> None:
        if self.enabled:
            self._append("shutdown", {"f": framework_id})

    def task(self, framework_id: str, info: TaskInfo, *, executor_id: str = "", launched: bool = False,
             container_id: str = "", sandbox: str = "") -> None:
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
        """``kind`` is :data:`TASK` (a command task's container) or :data:`EXECUTOR`."""
        if self.enabled:
            self._append("pid", {"f": framework_id, "i": ident, "x": kind, "pid": pid, "st": start_time},
                         hold=True)

    def update(self, status: TaskStatus) -> None:
        if self.enabled:
            self._append("update", {"f": status.framework_id, "t": status.task_id}, status)

    def ack(self, framework_id: str, task_id: str, uuid: str) -> None:
        if self.enabled and (framework_id, task_id) in self.state.tasks:
            self._append("ack", {"f": framework_id, "t": task_id, "u": uuid}, hold=True)

    def task_gone(self, framework_id: str, task_id: str) -> None:
        if self.enabled and (framework_id, task_id) in self.state.tasks:
            self._append("task_gone", {"f": framework_id, "t": task_id})

    def executor(self, framework_id: str, info: ExecutorInfo, container_id: str, sandbox: str) -> None:
        if self.enabled:
            self._append("executor", {"f": framework_id, "e": info.executor_id, "c": container_id, "s": sandbox},
                         info)

    def executor_gone(self, framework_id: str, executor_id: str) -> None:
        if self.enabled and (framework_id, executor_id) in self.state.executors:
            self._append("executor_gone", {"f": framework_id, "e": executor_id})


def _write_all(fd: int, data: bytes) -> None:
    written = os.write(fd, data)
    if written < len(data):  # only on errors like a full disk; the next write raises
        view = memoryview(data)[written:]
        while view:
            view = view[os.write(fd, view):]
