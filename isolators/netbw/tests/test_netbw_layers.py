"""The namespace, veth and qdisc layers on the real kernel, checked with ``ip``/``tc``."""

from __future__ import annotations

import os
import subprocess

import pytest
from pyroute2 import AsyncIPRoute

from mezzo_isolator_netbw import links, netns, shaping
from mezzo_isolator_netbw.addressing import Subnet
from mezzo_isolator_netbw.links import Alias, Names

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0,
    reason="needs root: network namespaces, veth links and tc qdiscs need CAP_SYS_ADMIN and CAP_NET_ADMIN",
)


def ip(*args: str) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=True).stdout


def tc(*args: str) -> str:
    return subprocess.run(["tc", *args], capture_output=True, text=True, check=True).stdout


def tc_inside(name: str, *args: str) -> str:
    return ip("netns", "exec", name, "tc", *args)


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def namespace_of_a_child(fd: int) -> str:
    """``/proc/self/ns/net`` of a child that entered namespace ``fd`` before exec."""
    return subprocess.run(
        ["readlink", "/proc/self/ns/net"],
        preexec_fn=netns.entering(fd),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_namespace_create_list_remove(run, no_leftovers):
    name = "mezzo-net-layer-test"

    async def main():
        await netns.create(name)
        assert name in ip("netns", "list")
        assert netns.names("mezzo-net-") == [name]
        with pytest.raises(OSError, match="already exists"):
            await netns.create(name)
        assert netns.inode(name) is not None
        assert netns.inode(name) != netns.inode_of_process(os.getpid())  # not ours
        await netns.remove(name)
        await netns.remove(name)  # idempotent

    run(main())
    assert name not in ip("netns", "list")
    assert no_leftovers() == []


def test_veth_addresses_and_qdiscs(run, no_leftovers):
    names = Names.of("layer-test-container")
    block = Subnet("10.213.0.0/16").block(3)

    async def main():
        await netns.create(names.netns)
        try:
            async with AsyncIPRoute() as host:
                index = await links.create_pair(
                    host, names, block, Alias("layer-test-container", names.netns, "1:1")
                )
                await shaping.shape(host, index, 30)
                assert await shaping.rate_mbps(host, index) == pytest.approx(30)
                (found,) = [link for link in await links.host_links(host) if link.ifname == names.host_if]
                assert found.alias == Alias("layer-test-container", names.netns, "1:1")
            async with links.inside(names.netns) as inside:
                eth = await links.configure_inside(inside, block)
                await shaping.shape(inside, eth, 10)
                assert await shaping.rate_mbps(inside, eth) == pytest.approx(10)
                await shaping.shape(inside, eth, 25)  # changed in place
                assert await shaping.rate_mbps(inside, eth) == pytest.approx(25)

            # What the kernel says, through iproute2.
            host_side = ip("-o", "addr", "show", "dev", names.host_if)
            assert "inet 10.213.0.13/30" in host_side
            assert "mezzo network/bandwidth container=layer-test-container" in ip(
                "link", "show", names.host_if
            )
            assert read(f"/proc/sys/net/ipv4/conf/{names.host_if}/forwarding").strip() == "1"
            inside_addr = ip("-n", names.netns, "-o", "addr", "show")
            assert "eth0    inet 10.213.0.14/30" in inside_addr
            assert "lo    inet 127.0.0.1/8" in inside_addr
            assert "default via 10.213.0.13 dev eth0" in ip("-n", names.netns, "route")
            assert "rate 25Mbit ceil 25Mbit" in tc_inside(names.netns, "class", "show", "dev", "eth0")
            assert "rate 30Mbit" in tc("class", "show", "dev", names.host_if)

            async with links.inside(names.netns) as inside:
                eth0 = await links.index_of(inside, "eth0")
                assert eth0 is not None
                await shaping.shape(inside, eth0, 0)  # unlimited: the qdisc goes
                assert await shaping.rate_mbps(inside, eth0) == 0.0
            assert "htb" not in tc_inside(names.netns, "qdisc", "show", "dev", "eth0")

            async with AsyncIPRoute() as host:
                counters = await links.counters(host, names.host_if)
                assert counters is not None
                received, sent = counters
                assert received >= 0 and sent >= 0
                assert await links.delete_link(host, names.host_if) is True
                assert await links.delete_link(host, names.host_if) is False
                assert await links.counters(host, names.host_if) is None
        finally:
            async with AsyncIPRoute() as host:
                await links.delete_link(host, names.host_if)
            await netns.remove(names.netns)

    run(main())
    assert no_leftovers() == []


def test_entering_moves_a_child_into_the_namespace(run, tmp_path):
    name = "mezzo-net-enter-test"

    async def main():
        await netns.create(name)
        fd = netns.open_fd(name)
        try:
            assert namespace_of_a_child(fd) == f"net:[{netns.inode(name)}]"
        finally:
            os.close(fd)
            await netns.remove(name)

    run(main())


def test_sweep_keeps_a_live_agents_namespace_even_when_its_veth_is_out_of_sight(run):
    """An agent on a simulated host (a network namespace of its own) makes its veths
    there, where another agent's sweep cannot see them; the namespaces themselves are
    host-wide. The owner file tells the sweep whose a namespace is: kept while that
    agent lives, removed (file and all) once it is gone."""
    from mezzo_isolator_netbw import networks

    other_agent = subprocess.Popen(["sleep", "60"])
    name = Names.of(f"elsewhere-{os.getpid()}").netns
    try:
        run(netns.create(name))
        run(networks._record_owner(name, networks.owner_of(other_agent.pid)))
        sweeper = networks.ContainerNetworks(Subnet("10.213.0.0/16"), ingress=False)
        run(sweeper.sweep(keep=[]))
        assert netns.exists(name), "a live agent's namespace was swept"
        other_agent.kill()
        other_agent.wait()
        run(sweeper.sweep(keep=[]))
        assert not netns.exists(name)
        assert not os.path.exists(os.path.join(networks.OWNERS_DIR, name))
    finally:
        other_agent.kill()
        other_agent.wait()
        run(netns.remove(name))
        run(networks._forget_owner(name))
