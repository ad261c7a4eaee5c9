"""RecordIO, the framing of Mesos' v1 event streams (``docs/recordio.md`` in Apache Mesos).

A record is its length in bytes as decimal digits, a line feed, then the record's
bytes; nothing separates one record from the next::

    frame(b'{"type":"HEARTBEAT"}')  ->  b'20\\n{"type":"HEARTBEAT"}'

An HTTP stream's chunks need not line up with records (a proxy may re-chunk it), so
:class:`RecordReader` takes bytes as they come and hands back the records they
complete. Standard library only: a command-line client imports this module.
"""

from __future__ import annotations

MAX_LENGTH_DIGITS = 20
"""The longest length prefix: a uint64 has at most 20 decimal digits."""


def frame(record: bytes) -> bytes:
    """``record`` with its length prefix, ready to write to a stream."""
    return b"%d\n" % len(record) + record


class RecordReader:
    """Incremental RecordIO decoder: :meth:`feed` it bytes, get complete records.

    Linear in what it is fed, however it is cut: the buffer is a ``bytearray`` with a
    read offset, a length prefix is looked for only in bytes not yet looked at, and
    consumed bytes are dropped only once they are at least half of the buffer (so each
    byte is moved O(1) times). Fed one byte at a time it does O(1) work per byte.

    A bad length prefix (not decimal digits, more than :data:`MAX_LENGTH_DIGITS` of
    them, or a length above ``max_record``) raises ``ValueError`` saying which; the
    stream cannot be resynchronised after that, so every later :meth:`feed` raises
    the same error.
    """

    def __init__(self, max_record: int = 16 << 20) -> None:
        self.max_record = max_record
        self._buffer = bytearray()
        self._offset = 0
        """Where the unconsumed bytes begin."""
        self._scanned = 0
        """How far the current length prefix has been checked (always >= ``_offset``)."""
        self._need: int | None = None
        """The length of the record being read, once its prefix is complete."""
        self._broken = ""
        """Why the stream cannot be read on, once a length prefix was bad."""

    def feed(self, data: bytes) -> list[bytes]:
        """The records that ``data`` completes, in order (often none, maybe several)."""
        if self._broken:
            raise ValueError(self._broken)
        self._buffer += data
        records: list[bytes] = []
        try:
            while self._advance(records):
                pass
        except ValueError as exc:
            self._broken = str(exc)
            raise
        self._compact()
        return records

    def _advance(self, records: list[bytes]) -> bool:
        """Read one length prefix or one record; False when more bytes are needed."""
        buffer = self._buffer
        if self._need is None:
            newline = buffer.find(b"\n", self._scanned)
            end = len(buffer) if newline < 0 else newline
            # Only bytes not checked yet, and never past the longest prefix: a prefix fed one
            # byte at a time costs O(1) per byte, a megabyte without a line feed O(1) in all.
            fresh = bytes(buffer[self._scanned : min(end, self._offset + MAX_LENGTH_DIGITS + 1)])
            if fresh and not fresh.isdigit():
                raise ValueError(f"RecordIO: length prefix {self._prefix(end)!r} is not decimal digits")
            if end - self._offset > MAX_LENGTH_DIGITS:
                raise ValueError(
                    f"RecordIO: length prefix {self._prefix(end)!r}... is longer than "
                    f"{MAX_LENGTH_DIGITS} digits"
                )
            self._scanned = end
            if newline < 0:
                return False
            if newline == self._offset:
                raise ValueError("RecordIO: empty length prefix (a blank line between records)")
            length = int(buffer[self._offset : newline])
            if length > self.max_record:
                raise ValueError(f"RecordIO: a record of {length} bytes is larger than {self.max_record}")
            self._need = length
            self._offset = self._scanned = newline + 1
        need = self._need
        if len(buffer) - self._offset < need:
            return False
        records.append(bytes(buffer[self._offset : self._offset + need]))
        self._offset += need
        self._scanned = self._offset
        self._need = None
        return True

    def _prefix(self, end: int) -> bytes:
        return bytes(self._buffer[self._offset : min(end, self._offset + MAX_LENGTH_DIGITS + 1)])

    def _compact(self) -> None:
        # Dropping consumed bytes moves the rest: done only when the rest is no larger
        # than what is dropped, so that moves cost at most as much as the bytes consumed.
        if self._offset and self._offset * 2 >= len(self._buffer):
            del self._buffer[: self._offset]
            self._scanned -= self._offset
            self._offset = 0
