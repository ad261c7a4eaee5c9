"""Pure logic: address blocks, ownership notes, settings, the executor endpoint. No root needed."""

from __future__ import annotations

import socket

import pytest

from mezzo.errors import ConfigError
from mezzo.resources import Resources
from mezzo_isolator_netbw import NetBandwidthIsolator
from mezzo_isolator_netbw.addressing import Subnet, SubnetFull
from mezzo_isolator_netbw.endpoint import agent_endpoint_inside, check_agent_reachable
from mezzo_isolator_netbw.errors import NetworkSetupError
from mezzo_isolator_netbw.links import HOST_LINK, Alias, Names
from mezzo_isolator_netbw.networks import owner_alive, owner_id
from mezzo_isolator_netbw.shaping import burst_bytes, rate_bytes

KEY = "agent.isolators.network/bandwidth"


def test_blocks_of_a_subnet():
    subnet = Subnet("10.213.0.0/16")
    assert subnet.size == 16384
    b = subnet.block(0)
    assert (b.gateway, b.address, b.prefixlen, str(b.network)) == (
        "10.213.0.1",
        "10.213.0.2",
        30,
        "10.213.0.0/30",
    )
    b = subnet.block(65)
    assert (b.gateway, b.address) == ("10.213.1.5", "10.213.1.6")
    assert subnet.index_of("10.213.1.6") == 65 and subnet.index_of("10.213.1.4") == 65
    assert subnet.index_of("10.214.0.1") is None and subnet.index_of("::1") is None
    assert subnet.blocks_in_use(["10.213.0.1", "127.0.0.1", "10.213.0.9"]) == {0, 2}
    assert subnet.first_free({0, 2}) == 1 and subnet.first_free({0, 1, 2}) == 3
    with pytest.raises(IndexError):
        subnet.block(16384)


def test_a_full_subnet_says_so():
    subnet = Subnet("192.168.7.0/29")
    assert subnet.size == 2
    with pytest.raises(SubnetFull, match="all 2 /30 blocks of 192.168.7.0/29 are in use"):
        subnet.first_free({0, 1})


@pytest.mark.parametrize(
    "cidr, problem",
    [
        ("10.213.0.1/16", "host bits set"),
        ("10.213.0.0/31", "smaller than one /30"),
        ("fd00::/64", "not an IPv4 network"),
        ("nonsense", "does not appear to be"),
    ],
)
def test_bad_subnets(cidr, problem):
    with pytest.raises(ValueError, match=problem):
        Subnet(cidr)


def test_overlaps():
    subnet = Subnet("10.213.0.0/16")
    assert subnet.overlaps("10.213.7.9", 24) and subnet.overlaps("10.0.0.1", 8)
    assert not subnet.overlaps("10.214.0.1", 16) and not subnet.overlaps("fd00::1", 64)


def test_alias_round_trip():
    alias = Alias("c0ffee", "mezzo-net-c0ffee", "123:456")
    assert str(alias) == "mezzo network/bandwidth container=c0ffee netns=mezzo-net-c0ffee owner=123:456"
    assert Alias.parse(str(alias)) == alias
    assert Alias.parse(None) is None and Alias.parse("someone else's link") is None
    assert Alias.parse("mezzo network/bandwidth container=x") is None


def test_owner_is_this_process_while_it_lives():
    me = owner_id()
    assert me.startswith(f"{__import__('os').getpid()}:")
    assert owner_alive(me)
    pid, _, start = me.partition(":")
    assert not owner_alive(f"{pid}:{int(start) + 1}")  # same pid, another process
    assert not owner_alive("garbage")


def test_rates():
    assert rate_bytes(10) == 1_250_000
    assert burst_bytes(rate_bytes(10)) == 16 * 1024
    assert burst_bytes(rate_bytes(10_000)) == 2_500_000


@pytest.mark.parametrize(
    "settings, key, problem",
    [
        ({"subnet": "10.0.0.0/33"}, f"{KEY}.subnet", "10.0.0.0/33"),
        ({"subnet": 10}, f"{KEY}.subnet", "expected a str"),
        ({"default_mbps": -1}, f"{KEY}.default_mbps", "a number >= 0"),
        ({"default_mbps": "fast"}, f"{KEY}.default_mbps", "a number >= 0"),
        ({"default_mbps": True}, f"{KEY}.default_mbps", "a number >= 0"),
        ({"ingress": "yes"}, f"{KEY}.ingress", "expected a bool"),
        (
            {"rate": 10},
            f"{KEY}.rate",
            "unknown setting for isolator 'network/bandwidth' (known: subnet, default_mbps, ingress)",
        ),
    ],
)
def test_settings_are_checked_before_anything_else(settings, key, problem):
    with pytest.raises(ConfigError) as info:
        NetBandwidthIsolator(settings, key=KEY)
    assert info.value.key == key
    assert problem in info.value.problem


def test_limit_comes_from_the_resources_else_the_default():
    iso = NetBandwidthIsolator.__new__(NetBandwidthIsolator)  # no probe: pure arithmetic
    iso.default_mbps = 0.0
    assert iso.limit_mbps(Resources(cpus=1)) == 0.0
    assert iso.limit_mbps(Resources(cpus=1, net_mbps=12.5)) == 12.5
    iso.default_mbps = 40.0
    assert iso.limit_mbps(Resources(cpus=1)) == 40.0
    assert iso.limit_mbps(Resources(cpus=1, net_mbps=5)) == 5.0


def test_executor_endpoint_seen_from_a_container():
    # Not loopback: reachable through the default route as it is.
    check_agent_reachable("192.0.2.7:5051")
    assert agent_endpoint_inside("192.0.2.7:5051", "10.213.0.1") == "192.0.2.7:5051"
    # Loopback: the gateway with the same port ...
    assert agent_endpoint_inside("127.0.0.1:5051", "10.213.0.1") == "10.213.0.1:5051"
    assert agent_endpoint_inside("[::1]:5051", "10.213.0.1") == "10.213.0.1:5051"
    # ... which works when the agent listens on every address,
    with socket.socket() as wildcard:
        wildcard.bind(("0.0.0.0", 0))
        wildcard.listen()
        check_agent_reachable(f"127.0.0.1:{wildcard.getsockname()[1]}")
    # and must fail the launch, saying how to fix it, when it listens on loopback only.
    with socket.socket() as loopback_only:
        loopback_only.bind(("127.0.0.1", 0))
        loopback_only.listen()
        port = loopback_only.getsockname()[1]
        with pytest.raises(NetworkSetupError, match=f'set agent.listen to "0.0.0.0:{port}"'):
            check_agent_reachable(f"127.0.0.1:{port}")


def test_names_fit_the_kernel_limit():
    names = Names.of("0123456789abcdef0123456789abcdef")
    assert names.netns == "mezzo-net-0123456789abcdef0123456789abcdef"
    assert len(names.host_if) == 15 and HOST_LINK.fullmatch(names.host_if)
    assert Names.of("0123456789abcdef0123456789abcdef") == names  # derived from the id alone
    odd = Names.of("a/b c")
    assert "/" not in odd.netns and " " not in odd.netns
