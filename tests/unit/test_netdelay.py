"""The netlink messages of mezzo.testing.netdelay, built and parsed without a kernel
(the delay itself is tested on real namespaces in tests/test_netsim.py)."""

from __future__ import annotations

import errno
import socket
import struct

import pytest

from mezzo.testing import netdelay as nd


def packet_message(packet_id: int) -> bytes:
    hdr = nd._attr(nd.NFQA_PACKET_HDR, struct.pack("!IHB", packet_id, 0x0800, 3))
    other = nd._attr(9, b"\x01\x02\x03")  # an attribute it does not read, unaligned
    body = nd._NFGEN.pack(socket.AF_INET, 0, socket.htons(nd.QUEUE)) + other + hdr
    kind = (nd.NFNL_SUBSYS_QUEUE << 8) | nd.NFQNL_MSG_PACKET
    return nd._HEADER.pack(nd._HEADER.size + len(body), kind, 0, 0, 0) + body


def test_packet_ids_are_read_from_several_messages_in_one_read():
    assert nd.packet_ids(packet_message(7) + packet_message(2**32 - 1)) == [7, 2**32 - 1]
    assert nd.packet_ids(b"") == [] and nd.packet_ids(b"\0" * 8) == []


def test_a_netlink_error_is_raised_and_an_acknowledgement_is_not():
    def error(code: int) -> bytes:
        body = struct.pack("=i", code) + b"\0" * 16
        return nd._HEADER.pack(nd._HEADER.size + len(body), nd.NLMSG_ERROR, 0, 1, 0) + body

    assert nd.packet_ids(error(0)) == []
    with pytest.raises(OSError) as raised:
        nd.packet_ids(error(-errno.EPERM))
    assert raised.value.errno == errno.EPERM
    # While serving, an error is noted and the packets after it in the read still count.
    errors: list[int] = []
    assert nd.packet_ids(error(-errno.ENOENT) + packet_message(3), errors) == [3]
    assert errors == [errno.ENOENT]


def test_a_verdict_accepts_the_packet_by_id_on_the_queue():
    message = nd.verdict(42, seq=5)
    length, kind, flags, seq, _ = nd._HEADER.unpack_from(message)
    assert length == len(message) and seq == 5 and flags & nd.NLM_F_REQUEST
    assert kind == (nd.NFNL_SUBSYS_QUEUE << 8) | nd.NFQNL_MSG_VERDICT
    _, _, res_id = nd._NFGEN.unpack_from(message, nd._HEADER.size)
    assert socket.ntohs(res_id) == nd.QUEUE
    size, atype = struct.unpack_from("=HH", message, nd._HEADER.size + nd._NFGEN.size)
    verdict, packet_id = struct.unpack_from("!II", message, nd._HEADER.size + nd._NFGEN.size + 4)
    assert (size, atype, verdict, packet_id) == (12, nd.NFQA_VERDICT_HDR, nd.NF_ACCEPT, 42)


@pytest.mark.parametrize("argv", [[], ["x"], ["0"], ["11"], ["0.1", "-1"], ["1", "2", "3"]])
def test_bad_arguments_are_one_line_and_exit_2(argv, capsys):
    assert nd.main(argv) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
