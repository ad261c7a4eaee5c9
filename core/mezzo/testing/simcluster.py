"""A mezzo cluster deployed on simulated hosts: ZooKeeper, masters and agents each on a
host of its own (:mod:`mezzo.testing.netsim`), as they would be on real machines.

    with SimCluster(agents=8, masters=3) as sim:
        driver = mezzo.SchedulerDriver(MyScheduler(), info, sim.master)   # the zk:// URL
        sim.net.partition([sim.host("master-1")], [sim.host("zk")])         # a fault
        sim.net.heal()

Every process binds its host's address and reaches the others through the bridge;
the test process (on the bridge's own address) reaches all of them. The processes
are :class:`~mezzo.testing.LocalProcessCluster`'s (``sim.cluster``: kill, restart,
state, logs) and the ZooKeeper server is ``sim.zk``.

For people, ``python -m mezzo.testing.simcluster --agents 8`` starts one, prints
where everything is and what to run against it, and tears it down on Ctrl-C;
``--sweep`` removes what a killed run left behind.
"""

from __future__ import annotations

import argparse
import ipaddress
import signal
import sys
from collections.abc import Mapping
from typing import Any

from . import LocalProcessCluster, Place, ZooKeeperServer
from .netsim import DEFAULT_SUPERNET, NetsimError, SimHost, SimNetwork, available, sweep


class SimCluster:
    """ZooKeeper on host ``zk``, masters ``master-1``... and agents ``agent-1``... on
    hosts of the same names. Other keyword arguments go to LocalProcessCluster."""

    def __init__(
        self,
        agents: int = 8,
        masters: int = 3,
        *,
        supernet: str = DEFAULT_SUPERNET,
        zk_tick_ms: int = 200,
        **cluster: Any,
    ) -> None:
        self.n_agents = agents
        self.n_masters = masters
        self.supernet = supernet
        self.zk_tick_ms = zk_tick_ms
        self.cluster_args = cluster
        self.net: SimNetwork | None = None
        self.zk: ZooKeeperServer | None = None
        self.cluster: LocalProcessCluster | None = None

    @property
    def master(self) -> str:
        """The zk:// URL frameworks and tools are given."""
        assert self.cluster is not None, "not started"
        return self.cluster.master

    def host(self, name: str) -> SimHost:
        assert self.net is not None, "not started"
        return self.net.hosts[name]

    def places(self) -> Mapping[str, Place]:
        assert self.net is not None, "not started"
        return {name: host.place for name, host in self.net.hosts.items() if name != "zk"}

    def start(self) -> SimCluster:
        try:
            self.net = SimNetwork(self.supernet)
            self.net.add_host("zk")
            for i in range(1, self.n_masters + 1):
                self.net.add_host(f"master-{i}")
            for i in range(1, self.n_agents + 1):
                self.net.add_host(f"agent-{i}")
            self.zk = ZooKeeperServer(tick_ms=self.zk_tick_ms, place=self.host("zk").place).start()
            self.cluster = LocalProcessCluster(
                self.n_agents,
                masters=self.n_masters,
                zk=self.zk.url("/mezzo"),
                places=self.places(),
                **self.cluster_args,
            ).start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
        if self.zk is not None:
            self.zk.stop()
        if self.net is not None:
            self.net.close()

    def __enter__(self) -> SimCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m mezzo.testing.simcluster",
        description="Run a mezzo cluster on simulated hosts (network namespaces on a bridge) "
        "until Ctrl-C. Needs root.",
    )
    p.add_argument("--agents", type=int, default=8, help="agents, each on a host of its own (default 8)")
    p.add_argument("--masters", type=int, default=3, help="masters, each on a host of its own (default 3)")
    p.add_argument("--resources", default="cpus:4;mem:4096;disk:10000", help="each agent's resources")
    p.add_argument("--dir", default=None, help="the cluster's directory (default: a new temporary one)")
    p.add_argument("--supernet", default=DEFAULT_SUPERNET, help="where the hosts' /24 is taken from")
    p.add_argument("--sweep", action="store_true", help="remove what killed runs left behind, then exit")
    args = p.parse_args(argv)
    problem = available()
    if problem:
        print(f"simcluster: {problem}", file=sys.stderr)
        return 2
    if args.sweep:
        for name in sweep():
            print(f"removed {name}")
        return 0
    if not 1 <= args.agents <= 200:
        p.error(f"--agents: between 1 and 200, not {args.agents}")
    if not 1 <= args.masters <= 9:
        p.error(f"--masters: between 1 and 9, not {args.masters}")
    try:
        supernet = ipaddress.ip_network(args.supernet)
    except ValueError:
        p.error(f"--supernet: an IPv4 network such as {DEFAULT_SUPERNET}, not {args.supernet!r}")
    if not isinstance(supernet, ipaddress.IPv4Network) or supernet.prefixlen > 24:
        p.error(f"--supernet: an IPv4 network of /24 or larger, not {args.supernet}")
    sim = SimCluster(
        args.agents, args.masters, supernet=args.supernet, agent_resources=args.resources, directory=args.dir
    )
    try:
        sim.start()
    except (NetsimError, RuntimeError) as exc:
        print(f"simcluster: could not start: {exc}", file=sys.stderr)
        return 1
    assert sim.net is not None and sim.cluster is not None
    for name, host in sim.net.hosts.items():
        print(f"{name:>10}  {host.address:<15} netns {host.netns}")
    print(f"\nmaster: {sim.master}\nlogs:   {sim.cluster.dir}")
    print(f"try:    mezzo state --master {sim.master}")
    print(f"        mezzo run --master {sim.master} -- hostname -I")
    print(f"a host: nsenter --net=/run/netns/{sim.host('agent-1').netns} bash\nCtrl-C stops it all.")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        signal.pause()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        sim.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
