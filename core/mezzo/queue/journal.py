"""The queue's job list on disk: ``STATE_DIR/jobs.journal``, one JSON object a line.

Lines are appended as things change and replayed at start: ``{"job": {...}}`` is a
job's whole record (the last one of an id wins), ``{"framework_id": "..."}`` the id
the master gave the queue (to fail over into), ``{"next_submission": N}`` the next
submission's number. When the file holds many more lines than live records it is
rewritten (to a temporary file, synced, renamed over the old one), so it stays
proportional to what the queue holds.

Durability is write-ahead where it matters: a submission is synced before the user
is told its number, and a launch before its task goes to the master, so a crash can
never run a job twice from the queue's side (it may show a job still ``RUNNING`` that
ended meanwhile: reconciliation with the master settles those). Other changes (ends)
are flushed, not synced; a crash of the machine may lose the last of them, and
reconciliation recovers them too.

A last line cut short by a crash is dropped; any other line that is not a record
stops the start with an error naming the file and line (nothing is guessed).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from ..errors import MezzoError
from .jobs import Job, JobTable

JOURNAL_NAME = "jobs.journal"
LOCK_NAME = "lock"
COMPACT_SLACK = 10_000
"""Lines beyond twice the live records the journal may hold before it is rewritten."""


class JournalError(MezzoError):
    """The journal cannot be read or written; the message names the file."""


class Journal:
    """Appends to and replays ``state_dir/jobs.journal``; see the module docstring."""

    def __init__(self, state_dir: str | os.PathLike) -> None:
        self.directory = Path(state_dir)
        self.path = self.directory / JOURNAL_NAME
        self.framework_id: str | None = None
        self._file: IO[str] | None = None
        self._lock: int | None = None
        """The state directory's lock file, ``flock`` ed: one queue per directory."""
        self._lines = 0

    def load(self, table: JobTable) -> None:
        """Create the directory if needed, replay the journal into ``table`` and open it
        for appending."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._lock = os.open(self.directory / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise JournalError(f"queue state {self.directory}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock)
            self._lock = None
            raise JournalError(f"queue state {self.directory}: another queue uses it") from None
        try:
            text = self.path.read_text(encoding="utf-8") if self.path.exists() else ""
        except OSError as exc:
            raise JournalError(f"queue journal {self.path}: {exc.strerror or exc}") from None
        lines = text.split("\n")
        complete = lines[:-1]  # text after the last newline is a line cut short (or "")
        for number, line in enumerate(complete, 1):
            if line:
                self._replay(table, line, number)
        self._lines = len(complete)
        try:
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - held open
            if lines[-1]:
                self._file.truncate(len(text.encode()) - len(lines[-1].encode()))
        except OSError as exc:
            raise JournalError(f"queue journal {self.path}: {exc.strerror or exc}") from None
        if self._lines > 2 * len(table.jobs) + COMPACT_SLACK:
            self.compact(table)

    def _replay(self, table: JobTable, line: str, number: int) -> None:
        try:
            record = json.loads(line)
            if "job" in record:
                table.restore(Job.from_dict(record["job"]))
            elif "framework_id" in record:
                self.framework_id = str(record["framework_id"]) or None
            elif "next_submission" in record:
                table.next_submission = max(table.next_submission, int(record["next_submission"]))
            else:
                raise ValueError("no job, framework_id or next_submission")
        except (ValueError, TypeError, KeyError) as exc:
            raise JournalError(f"queue journal {self.path}, line {number}: not a record ({exc})") from None

    # -- writing -------------------------------------------------------------------

    def jobs_changed(self, jobs: Iterable[Job], *, sync: bool = False) -> None:
        """Record the current state of ``jobs``; with ``sync`` it is on disk on return."""
        self._write([{"job": job.to_dict()} for job in jobs], sync)

    def framework_registered(self, framework_id: str) -> None:
        """Record the queue's framework id ("" forgets it: the next registration is new)."""
        if (framework_id or None) != self.framework_id:
            self.framework_id = framework_id or None
            self._write([{"framework_id": framework_id}], sync=True)

    def maybe_compact(self, table: JobTable) -> None:
        """Rewrite the journal when it holds far more lines than ``table`` has records."""
        if self._lines > 2 * len(table.jobs) + COMPACT_SLACK:
            self.compact(table)

    def compact(self, table: JobTable) -> None:
        """Rewrite the journal as ``table`` holds it now (atomically)."""
        records: list[dict[str, Any]] = [{"next_submission": table.next_submission}]
        if self.framework_id:
            records.append({"framework_id": self.framework_id})
        records.extend({"job": job.to_dict()} for job in table.all_jobs())
        temporary = self.path.with_suffix(".compacting")
        try:
            with open(temporary, "w", encoding="utf-8") as out:
                out.writelines(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, self.path)
            directory = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(directory)  # the rename itself, or a crash could bring the old file back
            finally:
                os.close(directory)
            if self._file is not None:
                self._file.close()
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - held open
        except OSError as exc:
            raise JournalError(f"queue journal {self.path}: {exc.strerror or exc}") from None
        self._lines = len(records)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._lock is not None:
            os.close(self._lock)  # and with it the lock
            self._lock = None

    def _write(self, records: list[dict[str, Any]], sync: bool) -> None:
        """Append ``records``: all of them, or (a full disk, an I/O error) none, the file
        cut back to where it was so that no half line is left for the next start to refuse."""
        if self._file is None or not records:
            return
        data = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records).encode()
        fd = self._file.fileno()
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
            if sync:
                os.fsync(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            raise JournalError(f"queue journal {self.path}: {exc.strerror or exc}") from None
        self._lines += len(records)
