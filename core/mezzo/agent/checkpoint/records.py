"""The journal's record format: one record to bytes and a journal's bytes back to records.

A record is what one event of the agent changes in its checkpoint (see
:mod:`.replay` for the kinds): a *kind* (``"task"``, ``"update"``, ``"ack"``, ...), a
*header* of scalars (ids, pids, flags) and, for the kinds in :data:`BLOBS`, one Thrift
struct. On disk::

    "MZ" | 2 pad bytes | header length | payload length | crc32(lengths + header) | crc32(payload)
    header (JSON, with the kind under "k") | payload (Thrift binary protocol, C accelerated)

(the 20-byte prefix little-endian). Two checksums so that a damaged payload can still be
attributed: with an intact header the reader knows which task, executor or framework the
lost record was about (:attr:`DecodedRecord.damaged`), and replay marks that entity
damaged rather than dropping it silently.

Both functions are pure: :func:`encode` never fails for a struct of a known kind, and
:func:`decode_all` never raises; it returns the problems it met as sentences naming the
file and offset, flagged as errors or not (a record cut short at the very end of the file
is the agent dying mid-write: it was never acted upon, so it is not an error).
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass
from typing import Any

from thrift.protocol.TBinaryProtocol import TBinaryProtocolAcceleratedFactory
from thrift.TSerialization import deserialize

from ...wire.ttypes import ExecutorInfo, FrameworkInfo, TaskInfo, TaskStatus

try:
    from thrift.protocol import fastbinary
except ImportError:  # pragma: no cover - thrift without its C extension
    fastbinary = None

MAGIC = b"MZ"
PREFIX = struct.Struct("<2s2xIIII")
"""Magic, header length, payload length, crc32 of (lengths + header), crc32 of payload."""
_LENGTHS = struct.Struct("<II")
MAX_HEADER = 16 * 1024 * 1024
MAX_PAYLOAD = 256 * 1024 * 1024

BLOBS: dict[str, type] = {
    "framework": FrameworkInfo,
    "task": TaskInfo,
    "update": TaskStatus,
    "latest": TaskStatus,
    "executor": ExecutorInfo,
}
"""The record kinds that carry a Thrift struct, and its type."""
_PROTOCOL = TBinaryProtocolAcceleratedFactory()
_JSON = json.JSONEncoder(separators=(",", ":"))

Problem = tuple[str, bool]
"""A problem met reading a journal: ``(sentence naming the file and offset, is_error)``."""


def encode(kind: str, header: dict[str, Any], blob: Any = None) -> bytes:
    """One record's bytes."""
    hb = _JSON.encode({**header, "k": kind}).encode()
    pb = _payload(blob)
    lengths = _LENGTHS.pack(len(hb), len(pb))
    return b"".join(
        (PREFIX.pack(MAGIC, len(hb), len(pb), zlib.crc32(hb, zlib.crc32(lengths)), zlib.crc32(pb)), hb, pb)
    )


def _payload(blob: Any) -> bytes:
    if blob is None:
        return b""
    if fastbinary is not None:
        return fastbinary.encode_binary(blob, [type(blob), blob.thrift_spec])
    from thrift.TSerialization import serialize  # pragma: no cover

    return serialize(blob)  # pragma: no cover


def header_size(kind: str, header: dict[str, Any]) -> int:
    """Bytes of a record's fixed prefix and header: its size, less its payload's."""
    return PREFIX.size + len(_JSON.encode({**header, "k": kind}).encode())


def payload_size(blob: Any) -> int:
    """Bytes of a record's payload (its Thrift struct)."""
    return len(_payload(blob))


@dataclass
class DecodedRecord:
    """One record read back from a journal."""

    kind: str
    header: dict[str, Any]
    blob: Any
    """The Thrift struct of a kind in :data:`BLOBS` (None for the others, or when damaged)."""
    offset: int
    """Where the record starts in the file."""
    damaged: str | None = None
    """Why its payload cannot be used (a sentence naming the kind, offset and file), else None."""


def decode_all(data: bytes, path: str) -> tuple[list[DecodedRecord], list[Problem]]:
    """Parse a journal's bytes into records; never raises.

    Also returns the problems met, as ``(sentence naming path and offset, is_error)``;
    a record cut short at the very end is not an error (the agent died writing it)."""
    records: list[DecodedRecord] = []
    problems: list[Problem] = []
    off, n = 0, len(data)
    size = PREFIX.size

    def cut_short(what: str) -> None:
        message = (
            f"{path}: {what} at offset {off} is incomplete, cut short when the agent died "
            "writing it: dropped (it was never acted upon)"
        )
        problems.append((message, False))

    while off < n:
        if n - off < size:
            cut_short("the last record")
            break
        magic, hlen, plen, hcrc, pcrc = PREFIX.unpack_from(data, off)
        hstart = off + size
        pstart = hstart + hlen
        sane = magic == MAGIC and hlen <= MAX_HEADER and plen <= MAX_PAYLOAD
        if sane and pstart > n and _resync(data, off + 1) is None:
            cut_short("the last record")
            break
        if not (
            sane
            and pstart <= n
            and zlib.crc32(data[hstart:pstart], zlib.crc32(_LENGTHS.pack(hlen, plen))) == hcrc
        ):
            nxt = _resync(data, off + 1)
            end = n if nxt is None else nxt
            message = (
                f"{path}: bytes {off}-{end} are not a readable record (damaged header): whatever "
                "they recorded is lost"
            )
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
            problems.append(
                (f"{path}: the record at offset {off} has an invalid header ({exc}): skipped", True)
            )
            off = min(pstart + plen, n)
            continue
        if pstart + plen > n:
            cut_short(f"the last record ({kind})")
            break
        payload = data[pstart : pstart + plen]
        rec = DecodedRecord(kind, header, None, off)
        if zlib.crc32(payload) != pcrc:
            rec.damaged = f"its {kind} record at offset {off} of {path} is damaged (checksum mismatch)"
        elif kind in BLOBS:
            try:
                rec.blob = deserialize(BLOBS[kind](), payload, _PROTOCOL)
            except Exception as exc:  # noqa: BLE001 - any decoding failure is damage
                rec.damaged = f"its {kind} record at offset {off} of {path} cannot be decoded ({exc!r})"
        records.append(rec)
        off = pstart + plen
    return records, problems


def _resync(data: bytes, start: int) -> int | None:
    """Offset of the next record with a valid header at or after ``start``."""
    size = PREFIX.size
    pos = data.find(MAGIC, start)
    while pos != -1 and pos + size <= len(data):
        _magic, hlen, plen, hcrc, _ = PREFIX.unpack_from(data, pos)
        if (
            hlen <= MAX_HEADER
            and plen <= MAX_PAYLOAD
            and pos + size + hlen <= len(data)
            and zlib.crc32(data[pos + size : pos + size + hlen], zlib.crc32(_LENGTHS.pack(hlen, plen)))
            == hcrc
        ):
            return pos
        pos = data.find(MAGIC, pos + 1)
    return None
