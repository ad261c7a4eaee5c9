"""Delay a simulated host's outgoing packets, without ``tc netem``.

The kernels this project runs on were built without netem (``CONFIG_NET_SCH_NETEM``),
and without the ``fq`` qdisc that a BPF timestamp would need. They do have netfilter's
userspace queue, so a delay is made there: an ``iptables`` rule in the host's network
namespace sends every packet leaving ``eth0`` to NFQUEUE number :data:`QUEUE`, and this
process, running in that namespace, gives each packet its verdict (accept) ``delay``
seconds after it was queued, in the order they came, so TCP sees latency and no
reordering.

    python -m mezzo.testing.netdelay 0.1 [JITTER]    # in the host's namespace

It speaks the ``nfnetlink_queue`` protocol over a netlink socket itself (no C library),
copying only each packet's metadata, never its bytes. ``--queue-bypass`` on the rule
lets packets through should this process die, and the kernel holds at most
:data:`QUEUE_MAX` of them: past that, packets pass undelayed rather than being dropped
(``FAIL_OPEN``). :meth:`mezzo.testing.netsim.SimHost.delay` starts it and adds the rule.
"""

from __future__ import annotations

import heapq
import math
import os
import random
import select
import signal
import socket
import struct
import sys
import time

QUEUE = 7
"""The NFQUEUE number a host's delayed packets go to (one queue per namespace)."""
QUEUE_MAX = 4096
"""Packets the kernel holds for this process at most; more pass at once."""

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN, NFQA_CFG_MASK, NFQA_CFG_FLAGS = 1, 2, 3, 4, 5
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NFQA_CFG_F_FAIL_OPEN, NFQA_CFG_F_GSO = 1, 4
SOL_NETLINK, NETLINK_NO_ENOBUFS = 270, 5
SO_RCVBUFFORCE = 33
NF_ACCEPT = 1
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
_HEADER = struct.Struct("=IHHII")  # struct nlmsghdr, host order
_NFGEN = struct.Struct("=BBH")  # struct nfgenmsg; res_id is big-endian (packed below)


def _attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (-length % 4)


def _message(kind: int, attrs: bytes, seq: int, *, ack: bool = False) -> bytes:
    body = _NFGEN.pack(socket.AF_UNSPEC, 0, socket.htons(QUEUE)) + attrs
    flags = NLM_F_REQUEST | (NLM_F_ACK if ack else 0)
    return _HEADER.pack(_HEADER.size + len(body), (NFNL_SUBSYS_QUEUE << 8) | kind, flags, seq, 0) + body


def _config_messages() -> list[bytes]:
    """Bind the queue; copy metadata only; bound the queue, failing open past it."""
    return [
        _message(
            NFQNL_MSG_CONFIG, _attr(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_BIND, 0)), 1, ack=True
        ),
        _message(
            NFQNL_MSG_CONFIG,
            _attr(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META))
            + _attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", QUEUE_MAX))
            # GSO: a large send is queued as one packet, not one per segment.
            + _attr(NFQA_CFG_MASK, struct.pack("!I", NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO))
            + _attr(NFQA_CFG_FLAGS, struct.pack("!I", NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO)),
            2,
            ack=True,
        ),
    ]


def verdict(packet_id: int, seq: int) -> bytes:
    """The message accepting queued packet ``packet_id``."""
    return _message(NFQNL_MSG_VERDICT, _attr(NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, packet_id)), seq)


def packet_ids(data: bytes, errors: list[int] | None = None) -> list[int]:
    """The ids of the queued packets in one read from the socket (several messages).
    A netlink error answer raises :class:`OSError`, or with ``errors`` is added to it
    and the rest of the read parsed still."""
    ids = []
    offset = 0
    while offset + _HEADER.size <= len(data):
        length, kind, _flags, _seq, _pid = _HEADER.unpack_from(data, offset)
        if length < _HEADER.size:
            break
        if kind == NLMSG_ERROR:
            (code,) = struct.unpack_from("=i", data, offset + _HEADER.size)
            if code != 0 and errors is not None:
                errors.append(-code)
            elif code != 0:
                raise OSError(-code, os.strerror(-code))
        elif kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
            attr = offset + _HEADER.size + _NFGEN.size
            end = offset + length
            while attr + 4 <= end:
                size, atype = struct.unpack_from("=HH", data, attr)
                if size < 4:
                    break
                if atype & 0x7FFF == NFQA_PACKET_HDR:
                    ids.append(struct.unpack_from("!I", data, attr + 4)[0])
                attr += (size + 3) & ~3
        offset += (length + 3) & ~3
    return ids


def serve(delay: float, jitter: float = 0.0) -> None:
    """Hold each packet of queue :data:`QUEUE` ``delay`` (plus up to ``jitter``)
    seconds, never releasing one before an earlier one; until SIGTERM."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)  # past rmem_max (root)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    # An overrun loses those packets' ids (the kernel lets them pass at the queue's
    # bound, FAIL_OPEN); it must not end the delay with an error.
    sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
    sock.bind((0, 0))
    for message in _config_messages():
        sock.send(message)
        packet_ids(sock.recv(65536))  # the acknowledgement; raises if refused
    print("queue bound", flush=True)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    due: list[tuple[float, int]] = []
    last_due = 0.0
    seq = 10
    while not stopping:
        now = time.monotonic()
        while due and due[0][0] <= now:
            _, packet_id = heapq.heappop(due)
            seq += 1
            sock.send(verdict(packet_id, seq))
        # At most 0.1 s: select is resumed after SIGTERM's handler, which only notes it.
        wait = min(0.1, max(0.0, due[0][0] - now)) if due else 0.1
        readable, _, _ = select.select([sock], [], [], wait)
        if not readable:
            continue
        arrived = time.monotonic()
        for packet_id in _read_ids(sock):
            # In order: a packet is never due before the one queued ahead of it.
            last_due = max(last_due, arrived + delay + (random.uniform(0, jitter) if jitter else 0.0))
            heapq.heappush(due, (last_due, packet_id))
    # Let what is held go, and what was queued but not read yet.
    sock.setblocking(False)
    while True:
        try:
            more = _read_ids(sock)
        except BlockingIOError:
            break
        due.extend((math.inf, packet_id) for packet_id in more)  # after the held ones, in order
    for _, packet_id in sorted(due):
        seq += 1
        sock.send(verdict(packet_id, seq))


def _read_ids(sock: socket.socket) -> list[int]:
    """The packet ids of one read; an error answer (a verdict for a packet the kernel
    no longer holds) is reported and skipped, not fatal."""
    errors: list[int] = []
    ids = packet_ids(sock.recv(1 << 16), errors)
    for code in errors:
        print(f"netdelay: the kernel answered an error: {os.strerror(code)}", file=sys.stderr, flush=True)
    return ids


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 2):
        print("usage: python -m mezzo.testing.netdelay SECONDS [JITTER_SECONDS]", file=sys.stderr)
        return 2
    try:
        delay, jitter = float(args[0]), float(args[1]) if len(args) == 2 else 0.0
    except ValueError:
        print(f"netdelay: not a number of seconds: {' '.join(args)}", file=sys.stderr)
        return 2
    if not (0 < delay <= 10 and 0 <= jitter <= 10):
        print(
            "netdelay: the delay is from 0 to 10 s (exclusive of 0), the jitter from 0 to 10 s",
            file=sys.stderr,
        )
        return 2
    serve(delay, jitter)
    return 0


if __name__ == "__main__":
    sys.exit(main())
