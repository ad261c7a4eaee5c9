"""The isolator through mezzo's Containerizer, on the real kernel: limits measured with
TCP, reachability, live updates, usage, recovery after a crash, start-up checks.

Rates are payload (goodput) rates of one TCP connection. The limit counts whole
Ethernet frames, so a bulk transfer's payload reaches about 94-95 % of it.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading

import pytest
from pyroute2 import AsyncIPRoute

from mezzo.agent.containerizer import Containerizer, LaunchError
from mezzo.errors import ConfigError
from mezzo.resources import Resources
from mezzo_isolator_netbw import NetBandwidthIsolator, links, netns, shaping
from mezzo_isolator_netbw.links import Alias, Names
from mezzo_isolator_netbw.networks import owner_of

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0,
    reason="needs root: network namespaces, veth links and tc qdiscs need CAP_SYS_ADMIN and CAP_NET_ADMIN",
)

KEY = "agent.isolators.network/bandwidth"


def isolator(**settings) -> NetBandwidthIsolator:
    return NetBandwidthIsolator(settings, key=KEY)


def report(what: str, mbps: float) -> None:
    print(f"\n[netbw measured] {what}: {mbps:.2f} Mbit/s")


def test_a_limited_sender_gets_its_rate_and_an_unlimited_one_far_more(
    run, launcher, measurement, programs, python_argv
):
    iso = isolator()
    containerizer = Containerizer([iso])

    async def main():
        try:
            m = measurement()
            limited = await launcher.launch(containerizer, python_argv(programs.SENDER, m.port), net_mbps=10)
            # The process runs in the container's namespace, not the agent's.
            assert netns.inode_of_process(limited.container.pid) == netns.inode(
                Names.of(limited.container.container_id).netns
            )
            mbps = await asyncio.to_thread(m.result)
            report("limit 10 Mbit/s", mbps)
            assert 9.0 <= mbps <= 11.0
            usage = await iso.usage(limited.container)
            assert usage["net_limit_mbps"] == 10.0
            assert usage["net_tx_bytes"] >= 2.7 * 10e6 / 8 * 0.9  # at least the measured window
            await launcher.destroy(containerizer, limited)

            m = measurement(warmup=0.2, window=1.0)
            unlimited = await launcher.launch(containerizer, python_argv(programs.SENDER, m.port))
            mbps = await asyncio.to_thread(m.result)
            report("unlimited", mbps)
            assert mbps > 100
            assert (await iso.usage(unlimited.container))["net_limit_mbps"] == 0.0
        finally:
            await launcher.close()

    run(main())


def test_update_changes_the_limit_live(run, launcher, measurement, programs, python_argv):
    iso = isolator()
    containerizer = Containerizer([iso])

    async def main():
        try:
            first, second = measurement(window=2.2), measurement(window=2.2)
            launched = await launcher.launch(
                containerizer, python_argv(programs.SENDER, f"{first.port},{second.port}"), net_mbps=10
            )
            before = await asyncio.to_thread(first.result)
            await containerizer.update(launched.container, Resources(cpus=1, mem=64, net_mbps=20))
            after = await asyncio.to_thread(second.result)
            report("update: limit 10 Mbit/s", before)
            report("update: then 20 Mbit/s", after)
            assert 9.0 <= before <= 11.0
            assert 18.0 <= after <= 22.0
            assert (await iso.usage(launched.container))["net_limit_mbps"] == 20.0
        finally:
            await launcher.close()

    run(main())


def test_ingress_is_limited_when_asked(run, launcher, measurement, programs, python_argv):
    iso = isolator(ingress=True)
    containerizer = Containerizer([iso])

    async def main():
        try:
            m = measurement(send=True)
            launched = await launcher.launch(
                containerizer, python_argv(programs.SINK, m.port, 0.3, 2.7), net_mbps=10
            )
            status = await launched.running.wait()
            await asyncio.to_thread(m.result)
            assert status == 0, launched.stderr()
            mbps = float(launched.stdout().strip().removeprefix("mbps="))
            report("ingress limit 10 Mbit/s", mbps)
            assert 9.0 <= mbps <= 11.0
            usage = await iso.usage(launched.container)
            assert usage["net_rx_bytes"] > usage["net_tx_bytes"]
        finally:
            await launcher.close()

    run(main())


REACH = """
import socket, sys
# Say hello to each HOST:PORT given ("gw" is the default gateway) and expect it echoed.
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    try:
        s = socket.create_connection((gateway() if host == "gw" else host, int(port)), timeout=3)
        s.sendall(b"hello")
        print(target, "ok" if s.recv(5) == b"hello" else "garbled", flush=True)
    except OSError as exc:
        print(target, type(exc).__name__, flush=True)
"""

ECHO = """
import socket
# Echo the first 5 bytes of each connection on port 7000 (the container's own namespace).
srv = socket.socket()
srv.bind(("0.0.0.0", 7000))
srv.listen()
print("listening", flush=True)
while True:
    c, _ = srv.accept()
    c.sendall(c.recv(5))
    c.close()
"""


class EchoServer:
    """An echo server on the host, in a thread."""

    def __init__(self, host: str) -> None:
        self.sock = socket.socket()
        self.sock.bind((host, 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            c.sendall(c.recv(5))
            c.close()

    def close(self) -> None:
        self.sock.close()


async def wait_for_output(launched, text: str, timeout: float = 10) -> None:
    for _ in range(int(timeout / 0.02)):
        if text in launched.stdout():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{text!r} not in the container's output; stderr: {launched.stderr()}")


def test_a_container_reaches_the_host_and_other_containers_but_not_host_loopback(
    run, launcher, programs, python_argv
):
    iso = isolator()
    containerizer = Containerizer([iso])
    on_host = EchoServer("0.0.0.0")
    host_loopback_only = EchoServer("127.0.0.1")

    async def main():
        try:
            async with AsyncIPRoute() as host:
                elsewhere = [
                    a
                    for _i, a, _p in await links.host_addresses(host)
                    if not a.startswith("127.") and iso.subnet.index_of(a) is None
                ]
            server = await launcher.launch(containerizer, python_argv(ECHO))
            await wait_for_output(server, "listening")
            server_address = server.container.state[iso.name]["address"]
            targets = [
                f"gw:{on_host.port}",  # the host, at the veth's host side
                f"{server_address}:7000",  # another container, through the host
                f"127.0.0.1:{host_loopback_only.port}",
            ]  # loopback is the container's own
            targets += [f"{a}:{on_host.port}" for a in elsewhere[:1]]  # the host at another of its addresses
            client = await launcher.launch(containerizer, python_argv(programs.GATEWAY + REACH, *targets))
            assert await client.running.wait() == 0, client.stderr()
            said = dict(line.split() for line in client.stdout().splitlines())
            assert client.container.state[iso.name]["address"] != server_address
            assert said == {
                targets[0]: "ok",
                targets[1]: "ok",
                targets[2]: "ConnectionRefusedError",
                **{t: "ok" for t in targets[3:]},
            }
        finally:
            await launcher.close()
            on_host.close()
            host_loopback_only.close()

    run(main())


def test_a_failed_prepare_leaves_nothing_and_cleanup_is_idempotent(run, launcher, no_leftovers):
    iso = isolator(subnet="10.213.250.0/30")  # room for one container

    async def main():
        first, second = launcher.container([]), launcher.container([])
        await iso.prepare(first)
        with pytest.raises(
            Exception,
            match="no address left for the container: all 1 /30 blocks of 10.213.250.0/30 are in use",
        ):
            await iso.prepare(second)
        assert [x for x in no_leftovers() if Names.of(second.container_id).netns in x] == []
        assert len(no_leftovers()) == 2  # the first's namespace and link
        await iso.cleanup(first)
        await iso.cleanup(first)
        await iso.cleanup(second)  # never prepared: nothing to do, no error

    run(main())


def test_a_launch_whose_process_cannot_start_cleans_up(run, launcher, no_leftovers):
    containerizer = Containerizer([isolator()])

    async def main():
        with pytest.raises(LaunchError):
            await launcher.launch(containerizer, ["/nonexistent/program"])

    run(main())
    assert no_leftovers() == []


def test_recover_removes_what_a_crashed_agent_left(run, launcher, no_leftovers):
    crashed = isolator()
    other_agent = subprocess.Popen(["sleep", "60"])

    async def main():
        kept, lost1, lost2 = (launcher.container([]) for _ in range(3))
        for c in (kept, lost1, lost2):
            await crashed.prepare(c)
            os.close(c.state[crashed.name].pop("fd"))  # a crashed agent's descriptors die with it
        # A namespace made just before the crash, its veth not yet.
        await netns.create("mezzo-net-half-made")
        # A veth a dead agent owned (pid 1 is alive, but started at another time than this).
        dead = launcher.container([])
        dead_names = Names.of(dead.container_id)
        await netns.create(dead_names.netns)
        async with AsyncIPRoute() as host:
            await links.create_pair(
                host,
                dead_names,
                crashed.subnet.block(200),
                Alias(dead.container_id, dead_names.netns, "1:12345"),
            )
        # And one of another agent that is still running: not ours to remove.
        alive = launcher.container([])
        alive_names = Names.of(alive.container_id)
        await netns.create(alive_names.netns)
        other_owner = owner_of(other_agent.pid)
        async with AsyncIPRoute() as host:
            await links.create_pair(
                host,
                alive_names,
                crashed.subnet.block(201),
                Alias(alive.container_id, alive_names.netns, other_owner),
            )

        restarted = isolator()
        await restarted.recover([kept])
        left = no_leftovers()
        assert sorted(left) == sorted(
            [
                f"netns {Names.of(kept.container_id).netns}",
                f"link {Names.of(kept.container_id).host_if}",
                f"netns {alive_names.netns}",
                f"link {alive_names.host_if}",
            ]
        )
        # The kept container's network is intact and usable.
        assert (await restarted.usage(kept))["net_limit_mbps"] == 0.0
        await restarted.update(kept, Resources(cpus=1, net_mbps=5))
        async with links.inside(Names.of(kept.container_id).netns) as inside:
            eth = await links.index_of(inside, "eth0")
            assert eth is not None
            assert await shaping.rate_mbps(inside, eth) == 5.0

        # Once the other agent is gone, its leftovers are fair game too.
        other_agent.kill()
        other_agent.wait()
        await restarted.recover([kept])
        assert sorted(no_leftovers()) == sorted(
            [f"netns {Names.of(kept.container_id).netns}", f"link {Names.of(kept.container_id).host_if}"]
        )
        await restarted.recover([])
        assert no_leftovers() == []

    try:
        run(main())
    finally:
        other_agent.kill()
        other_agent.wait()


def test_an_overlapping_subnet_is_refused_at_start_up():
    with pytest.raises(ConfigError) as info:
        isolator(subnet="127.0.0.0/8")
    assert info.value.key == KEY
    assert "cannot run on this host: subnet 127.0.0.0/8 overlaps 127.0.0.1/8 on lo" in str(info.value)


def test_an_agent_without_the_privileges_refuses_to_start(tmp_path):
    # Root without CAP_SYS_ADMIN and CAP_NET_ADMIN, as in an unprivileged container.
    proc = subprocess.run(
        [
            "setpriv",
            "--bounding-set=-sys_admin,-net_admin",
            "--inh-caps=-sys_admin,-net_admin",
            sys.executable,
            "-m",
            "mezzo",
            "agent",
            "--isolation",
            "posix,network/bandwidth",
            "--work-dir",
            str(tmp_path),
            "--master",
            "127.0.0.1:1",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert (
        "mezzo agent: agent.isolators.network/bandwidth: the network/bandwidth isolator cannot run on this "
        "host: it needs CAP_SYS_ADMIN and CAP_NET_ADMIN to create network namespaces and links (run the agent "
        "as root)"
    ) in proc.stderr


def test_concurrent_prepares_of_two_agents_get_distinct_addresses(run, launcher, no_leftovers):
    # Two isolators stand for two agents on one host: the host-wide lock keeps
    # "find a free /30, claim it" atomic between them as well as within each.
    first, second = isolator(), isolator()

    async def main():
        containers = [launcher.container([]) for _ in range(8)]
        await asyncio.gather(
            *(iso.prepare(c) for iso, c in zip([first, second] * 4, containers, strict=True))
        )
        addresses = [c.state[first.name]["address"] for c in containers]
        assert len(set(addresses)) == 8
        assert len(no_leftovers()) == 16
        await asyncio.gather(
            *(iso.cleanup(c) for iso, c in zip([first, second] * 4, containers, strict=True))
        )

    run(main())
    assert no_leftovers() == []
