"""TlsStream over real loopback sockets: what the protocol above sees, and what a peer sees."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl

import pytest
from mezzo.certs import principal_tls
from mezzo.rpc.tls import client_tls, server_tls
from mezzo.rpc.tls_stream import TlsStream, accept_tls, dial_tls


def run(coro, timeout: float = 10.0):
    async def bounded():
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


class Recorder(asyncio.Protocol):
    """The protocol above: keeps what it is given."""

    def __init__(self) -> None:
        self.transport = None
        self.data = bytearray()
        self.chunks = 0
        self.lost: asyncio.Future = asyncio.get_running_loop().create_future()
        self.grew = asyncio.Event()

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.data += data
        self.chunks += 1
        self.grew.set()

    def connection_lost(self, exc) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)

    async def wait_for(self, size: int) -> None:
        while len(self.data) < size:
            self.grew.clear()
            await asyncio.wait_for(self.grew.wait(), 5)


@pytest.fixture(scope="module")
def contexts(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    server = server_tls(principal_tls(d, "master")).context
    client = client_tls(principal_tls(d, "alice")).context
    return server, client


async def listen(server_ctx, handshake_timeout: float = 5.0):
    """A TLS server on loopback; returns (port, list of server-side Recorders, list of handshake futures)."""
    loop = asyncio.get_running_loop()
    apps: list[Recorder] = []
    shakes: list[asyncio.Future] = []

    def make() -> TlsStream:
        def app() -> Recorder:
            apps.append(Recorder())
            return apps[-1]

        stream = TlsStream(server_ctx, app, server_side=True, handshake_timeout=handshake_timeout, loop=loop)
        shakes.append(stream.handshake)
        return stream

    server = await loop.create_server(make, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], apps, shakes


async def made(apps: list, n: int = 1) -> Recorder:
    """The n-th server-side protocol, once its handshake is done (TLS 1.3: after the client's)."""
    for _ in range(500):
        if len(apps) >= n:
            return apps[n - 1]
        await asyncio.sleep(0.01)
    raise AssertionError(f"no server-side protocol number {n}")


def test_messages_bigger_than_a_record_and_many_small_ones_arrive_whole_and_in_order(contexts) -> None:
    server_ctx, client_ctx = contexts

    async def main():
        server, port, apps, _ = await listen(server_ctx)
        client = await dial_tls(asyncio.get_running_loop(), Recorder, "127.0.0.1", port, client_ctx, 5)
        big = os.urandom(1_000_000)  # 62 records
        small = b"".join(i.to_bytes(4, "big") for i in range(2_000))
        client.transport.write(big)
        for i in range(2_000):
            client.transport.write(i.to_bytes(4, "big"))
        await (await made(apps)).wait_for(len(big) + len(small))
        assert bytes(apps[0].data) == big + small
        # and back the other way
        apps[0].transport.write(big)
        await client.wait_for(len(big))
        assert bytes(client.data) == big
        client.transport.close()
        server.close()

    run(main())


def test_the_peer_certificate_names_the_principal_only_after_the_handshake(contexts) -> None:
    server_ctx, client_ctx = contexts

    async def main():
        server, port, apps, _ = await listen(server_ctx)
        client = await dial_tls(asyncio.get_running_loop(), Recorder, "127.0.0.1", port, client_ctx, 5)
        await made(apps)
        seen = apps[0].transport.get_extra_info("peercert")
        assert ((("commonName", "alice"),),) == tuple(r for r in seen["subject"] if r[0][0] == "commonName")
        assert isinstance(apps[0].transport.get_extra_info("ssl_object"), ssl.SSLObject)
        assert apps[0].transport.get_extra_info("peername")[0] == "127.0.0.1"
        client.transport.close()
        server.close()

    run(main())


def test_close_says_close_notify_and_the_peer_sees_a_clean_end(contexts) -> None:
    server_ctx, _ = contexts

    async def main():
        server, port, apps, _ = await listen(server_ctx)
        # The peer is an ordinary blocking ssl socket that does not forgive a ragged EOF.
        raw = socket.create_connection(("127.0.0.1", port))
        ctx = contexts[1]
        peer = await asyncio.to_thread(
            ctx.wrap_socket, raw, server_hostname="127.0.0.1", suppress_ragged_eofs=False
        )  # its handshake blocks: not on the loop that serves the other side
        peer.sendall(b"hello")
        await (await made(apps)).wait_for(5)
        apps[0].transport.write(b"bye")
        apps[0].transport.close()
        got = await asyncio.to_thread(peer.recv, 100)
        assert got == b"bye"
        # SSLEOFError here would mean the socket closed without close_notify.
        assert await asyncio.to_thread(peer.recv, 100) == b""
        assert await asyncio.wait_for(apps[0].lost, 5) is None
        peer.close()
        server.close()

    run(main())


def test_a_tampered_record_ends_the_session_and_the_server_serves_on(contexts) -> None:
    server_ctx, client_ctx = contexts

    async def main():
        server, port, apps, _ = await listen(server_ctx)
        raw = socket.create_connection(("127.0.0.1", port))
        peer = await asyncio.to_thread(client_ctx.wrap_socket, raw, server_hostname="127.0.0.1")
        peer.sendall(b"fine")
        await (await made(apps)).wait_for(4)
        # An application-data record of the right shape whose contents were not sealed with the session's key.
        raw_view = socket.socket(fileno=os.dup(peer.fileno()))
        raw_view.sendall(b"\x17\x03\x03\x00\x40" + os.urandom(0x40))
        exc = await asyncio.wait_for(apps[0].lost, 5)
        assert bytes(apps[0].data) == b"fine"  # nothing forged reached the protocol above
        assert isinstance(exc, ssl.SSLError)  # the protocol above is told why
        raw_view.close()
        peer.close()
        # The server is fine: a new client gets through.
        client = await dial_tls(asyncio.get_running_loop(), Recorder, "127.0.0.1", port, client_ctx, 5)
        client.transport.write(b"again")
        await (await made(apps, 2)).wait_for(5)
        client.transport.close()
        server.close()

    run(main())


def test_a_handshake_not_finished_in_time_fails_with_timeout_and_closes_the_socket(contexts) -> None:
    server_ctx, _ = contexts

    async def main():
        server, port, apps, shakes = await listen(server_ctx, handshake_timeout=0.3)
        raw = socket.create_connection(("127.0.0.1", port))  # says nothing
        while not shakes:
            await asyncio.sleep(0.01)
        with pytest.raises(TimeoutError, match="longer than 0.3 s"):
            await shakes[0]
        raw.settimeout(5)
        assert await asyncio.to_thread(raw.recv, 10) == b""  # closed on it
        assert apps == []  # no protocol was ever made for it
        raw.close()
        server.close()

    run(main())


def test_plaintext_and_an_untrusted_client_fail_the_handshake_with_openssls_reason(
    contexts, tmp_path
) -> None:
    server_ctx, _ = contexts
    stranger = client_tls(principal_tls(tmp_path / "other-ca", "mallory")).context
    stranger.check_hostname = False
    stranger.verify_mode = ssl.CERT_NONE  # it does not care who the server is; the server cares who it is

    async def main():
        server, port, apps, shakes = await listen(server_ctx)
        raw = socket.create_connection(("127.0.0.1", port))
        raw.sendall(b"\x00\x00\x00\x10" + b"not a handshake!")
        while not shakes:
            await asyncio.sleep(0.01)
        with pytest.raises(ssl.SSLError) as plain:
            await shakes[0]
        assert plain.value.reason == "WRONG_VERSION_NUMBER"
        raw.close()
        try:
            client = await dial_tls(asyncio.get_running_loop(), Recorder, "127.0.0.1", port, stranger, 5)
        except ssl.SSLError as exc:  # TLS 1.2: the client learns in its handshake
            told = exc
        else:  # TLS 1.3: the client finishes first, and learns from the alert that follows
            told = await asyncio.wait_for(client.lost, 5)
        assert isinstance(told, ssl.SSLError) and told.reason == "TLSV1_ALERT_UNKNOWN_CA"
        with pytest.raises(ssl.SSLError) as untrusted:
            await shakes[1]
        assert untrusted.value.reason in ("CERTIFICATE_VERIFY_FAILED", "TLSV1_ALERT_UNKNOWN_CA")
        assert apps == []
        server.close()

    run(main())


def test_reading_paused_by_the_protocol_above_holds_the_data_until_resumed(contexts) -> None:
    server_ctx, client_ctx = contexts

    async def main():
        server, port, apps, _ = await listen(server_ctx)
        client = await dial_tls(asyncio.get_running_loop(), Recorder, "127.0.0.1", port, client_ctx, 5)
        client.transport.write(b"one")
        await (await made(apps)).wait_for(3)
        apps[0].transport.pause_reading()
        client.transport.write(b"two")
        await asyncio.sleep(0.2)
        assert bytes(apps[0].data) == b"one"
        apps[0].transport.resume_reading()
        await apps[0].wait_for(6)
        assert bytes(apps[0].data) == b"onetwo"
        client.transport.close()
        server.close()

    run(main())


def test_an_accepted_socket_whose_handshake_fails_is_closed(contexts) -> None:
    server_ctx, _ = contexts

    async def main():
        loop = asyncio.get_running_loop()
        listener = socket.create_server(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        raw = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        accepted.setblocking(False)
        raw.sendall(b"GET / HTTP/1.1\r\n\r\n")
        with pytest.raises(ssl.SSLError):
            await accept_tls(loop, Recorder, accepted, server_ctx, 5)
        raw.settimeout(5)
        assert await asyncio.to_thread(_drain, raw) == b""
        raw.close()
        listener.close()

    run(main())


def _drain(sock: socket.socket) -> bytes:
    """Reads until the peer closes (an alert may come first); b"" once closed."""
    while True:
        try:
            data = sock.recv(4096)
        except ConnectionResetError:
            return b""
        if not data:
            return data
