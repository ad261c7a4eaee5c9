"""Simulated hosts on one machine: network namespaces with addresses of their own on a
bridge, for testing mezzo as it is deployed (many machines on a network that fails).

    with SimNetwork() as net:                       # a bridge with 10.77.K.1 on it
        zk_host = net.add_host("zk")                # namespace, veth, 10.77.K.2
        hosts = [net.add_host(f"h{i}") for i in range(1, 9)]
        with ZooKeeperServer(place=zk_host.place) as zk:
            ...                                     # LocalProcessCluster(places=...)
        net.partition([hosts[0]], hosts[1:])        # faults: see below
        net.heal()

Each :class:`SimHost` is a network namespace ``mzsim-<tag>-<name>`` holding ``lo``
and ``eth0``, one end of a veth pair whose other end is a port of the bridge
``mzs<tag>b`` in this machine's own namespace. The bridge has the subnet's first
address, so the test process itself reaches every host (and fetches a master's state)
without entering anything. Hosts reach each other through the bridge only; nothing is
routed to the outside.

Faults, each undone by :meth:`SimNetwork.heal`:

- :meth:`SimHost.cut` sets the host's bridge port down: no packet in or out.
- :meth:`SimNetwork.partition` drops, inside each host of one group, every packet
  from the other group (both ways); :meth:`SimNetwork.one_way` only from ``source``
  to ``target`` (``target`` drops what ``source`` sends, ``source`` hears ``target``).
- :meth:`SimHost.lose` drops that share of the packets the host receives (nftables
  ``numgen random``).
- :meth:`SimHost.delay` holds every packet the host sends for that long. The kernels
  here have no ``netem`` qdisc (``CONFIG_NET_SCH_NETEM`` is not set), so an
  ``iptables`` NFQUEUE rule hands the packets to a process on the host that releases
  them late (:mod:`mezzo.testing.netdelay`).

Why iproute2 and nftables commands rather than netlink from Python: a fault schedule
is then a list of commands a person can replay by hand (:attr:`SimNetwork.log` keeps
them), and the test process never moves a thread into another namespace. Processes
are started in a namespace with ``nsenter --net`` (:class:`~mezzo.testing.Place`).

Names never start with ``mezzo-net-``, which the netbw isolator owns and sweeps.
:func:`sweep` removes what a killed test left behind: namespaces, bridges and the
processes still running in them, for every tag whose creating process is gone.
Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), ``ip``, ``nsenter`` and ``nft``; delay
needs ``iptables`` too (``make setup`` installs it).
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from . import Place

NETNS_DIR = Path("/run/netns")
NS_PREFIX = "mzsim-"
LINK_PREFIX = "mzs"
DEFAULT_SUPERNET = "10.77.0.0/16"
"""Networks take a free /24 of it (10.77.K.0/24); the netbw isolator uses 10.213.0.0/16."""
LOCK_PATH = "/run/mezzo-netsim.lock"
"""Held while a network picks its /24, so that two test processes never pick the same."""
TABLE = "mezzo_netsim"
"""The nftables table (family ``inet``) each host's faults are rules of."""
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")
_counter = itertools.count()


class NetsimError(RuntimeError):
    """A command building or changing the simulated network failed; says which and why."""


def available() -> str | None:
    """None when simulated hosts can be built here, else why not (for a skip reason)."""
    if os.geteuid() != 0:
        return "simulated hosts need root (network namespaces, bridges, nftables)"
    for tool in ("ip", "nsenter", "nft"):
        if not any(Path(d, tool).exists() for d in ("/usr/sbin", "/usr/bin", "/sbin", "/bin")):
            return f"simulated hosts need the {tool!r} command"
    return None


def _run(argv: list[str], *, stdin: str | None = None, log: list[str] | None = None) -> str:
    if log is not None:
        log.append(" ".join(argv) + ("" if stdin is None else f" <<'EOF'\n{stdin}EOF"))
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise NetsimError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


def _owner_pid(tag: str) -> int | None:
    """The pid that made the network ``tag`` (its last character is a counter)."""
    try:
        return int(tag[:-1], 36)
    except ValueError:
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def processes_in(netns: str) -> list[int]:
    """The pids of the processes whose network namespace is the named one."""
    try:
        inode = os.stat(NETNS_DIR / netns).st_ino
    except OSError:
        return []
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}/ns/net").st_ino == inode:
                pids.append(int(entry))
        except OSError:
            continue
    return pids


def _kill_all(pids: Iterable[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _remove_namespace(netns: str, log: list[str] | None = None) -> None:
    """Kill what runs in ``netns`` and delete it (its veth ends go with it)."""
    pids = processes_in(netns)
    _kill_all(pids)
    deadline = time.monotonic() + 5
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if _alive(p) and not _zombie(p)]
        time.sleep(0.02)
    with contextlib.suppress(NetsimError):
        _run(["ip", "netns", "delete", netns], log=log)


def _drain(stream: IO[bytes], log: list[str], prefix: str) -> None:
    for line in stream:
        log.append(prefix + line.decode(errors="replace").rstrip())


def _read_line(stream: IO[bytes], timeout: float) -> bytes:
    """One line of a child's output, or what came before ``timeout`` (b"" if nothing)."""
    import select

    deadline = time.monotonic() + timeout
    line = b""
    fd = stream.fileno()
    while not line.endswith(b"\n") and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(fd, 1)
        if not chunk:
            break
        line += chunk
    return line


def _forwarding(sys_port: Path) -> bool:
    """Whether a bridge port is up and forwarding (brport state 3)."""
    try:
        return (sys_port / "operstate").read_text().strip() == "up" and (
            sys_port / "brport" / "state"
        ).read_text().strip() == "3"
    except OSError:
        return False


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def sweep(only_dead: bool = True) -> list[str]:
    """Remove the namespaces and bridges of simulated networks whose creating process
    is gone (all of them with ``only_dead=False``), killing what still runs in them.
    Returns what was removed."""
    removed = []
    namespaces = sorted(p.name for p in NETNS_DIR.glob(NS_PREFIX + "*")) if NETNS_DIR.exists() else []
    for netns in namespaces:
        tag = netns[len(NS_PREFIX) :].split("-", 1)[0]
        pid = _owner_pid(tag)
        if only_dead and pid is not None and _alive(pid):
            continue
        _remove_namespace(netns)
        removed.append(netns)
    for link in Path("/sys/class/net").iterdir():
        name = link.name
        if not (name.startswith(LINK_PREFIX) and name.endswith("b") and (link / "bridge").exists()):
            continue
        pid = _owner_pid(name[len(LINK_PREFIX) : -1])
        if only_dead and pid is not None and _alive(pid):
            continue
        with contextlib.suppress(NetsimError):
            _run(["ip", "link", "delete", name])
            removed.append(name)
    return removed


class SimHost:
    """One simulated machine: a namespace with ``eth0`` at :attr:`address`."""

    def __init__(self, network: SimNetwork, name: str, address: str, port: str) -> None:
        self.network = network
        self.name = name
        self.address = address
        self.netns = f"{NS_PREFIX}{network.tag}-{name}"
        self.port = port
        """The bridge port (root side of the veth pair) in this machine's namespace."""
        self._delayer: subprocess.Popen | None = None

    @property
    def place(self) -> Place:
        """Where to run a process on this host (for LocalProcessCluster, ZooKeeperServer)."""
        return Place(address=self.address, netns=self.netns)

    def command(self, argv: list[str]) -> list[str]:
        return self.place.command(argv)

    def run(self, argv: list[str], stdin: str | None = None) -> str:
        """Run a command on this host and return its output; :class:`NetsimError` on failure."""
        return _run(self.command(argv), stdin=stdin, log=self.network.log)

    def processes(self) -> list[int]:
        return processes_in(self.netns)

    # -- faults ---------------------------------------------------------------------

    def cut(self) -> None:
        """Take the host off the network: its bridge port goes down."""
        _run(["ip", "link", "set", self.port, "down"], log=self.network.log)

    def reconnect(self, timeout: float = 5.0) -> None:
        """Undo :meth:`cut`; returns once the port forwards again (the veth's carrier
        comes back a moment after the command)."""
        _run(["ip", "link", "set", self.port, "up"], log=self.network.log)
        sys_port = Path("/sys/class/net", self.port)
        deadline = time.monotonic() + timeout
        while not _forwarding(sys_port):
            if time.monotonic() > deadline:
                raise NetsimError(
                    f"bridge port {self.port} of {self.name} not forwarding after {timeout:g} s"
                )
            time.sleep(0.01)

    def drop_from(self, sources: Iterable[SimHost]) -> None:
        """Drop every packet arriving from ``sources`` (their replies included)."""
        rules = "".join(
            f"add rule inet {TABLE} input ip saddr {s.address} drop\n" for s in sources if s is not self
        )
        if rules:
            self.run(["nft", "-f", "-"], stdin=rules)

    def lose(self, percent: float) -> None:
        """Drop ``percent`` % of the packets arriving (at random, each on its own)."""
        if not 0 < percent <= 100:
            raise ValueError(f"percent: between 0 and 100, not {percent}")
        per_mille = round(percent * 10)
        match = "" if per_mille >= 1000 else f"numgen random mod 1000 < {per_mille} "
        self.run(["nft", "-f", "-"], stdin=f"add rule inet {TABLE} input {match}drop\n")

    def delay(self, seconds: float, jitter: float = 0.0, timeout: float = 5.0) -> None:
        """Hold every packet the host sends on ``eth0`` for ``seconds`` (plus up to
        ``jitter``, never reordering them): a link that far away. Another call replaces
        the delay; :meth:`undelay` (or :meth:`SimNetwork.heal`) ends it."""
        if not 0 < seconds <= 10 or not 0 <= jitter <= 10:
            raise ValueError(f"delay: seconds in (0, 10] and jitter in [0, 10], not {seconds}, {jitter}")
        if shutil.which("iptables") is None:
            raise NetsimError("delay needs iptables (apt-get install iptables; make setup installs it)")
        self.undelay()
        from .netdelay import QUEUE

        argv = [sys.executable, "-m", "mezzo.testing.netdelay", f"{seconds:g}", f"{jitter:g}"]
        self.network.log.append(" ".join(self.command(argv)))
        delayer = subprocess.Popen(self.command(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self._delayer = delayer
        # The queue is bound before a packet goes to it: with none bound the rule's
        # --queue-bypass lets them through, undelayed.
        assert delayer.stdout is not None
        ready = _read_line(delayer.stdout, timeout)
        if ready != b"queue bound\n":
            self.undelay()
            rest = delayer.stdout.read().decode(errors="replace")[-2000:]
            raise NetsimError(f"the delay process of {self.name} did not start: {ready!r}\n{rest}")
        # What it says from now on (kernel errors) goes to the network's log, and its
        # pipe never fills.
        threading.Thread(
            target=_drain, args=(delayer.stdout, self.network.log, f"netdelay {self.name}: "), daemon=True
        ).start()
        try:
            self.run(["iptables", "-t", "mangle", "-A", "OUTPUT", "-o", "eth0", "-j", "NFQUEUE",
                      "--queue-num", str(QUEUE), "--queue-bypass"])  # fmt: skip
        except NetsimError:
            self.undelay()
            raise

    def undelay(self) -> None:
        """End :meth:`delay`: packets go out at once again (the held ones too)."""
        delayer, self._delayer = self._delayer, None
        if delayer is None:
            return
        with contextlib.suppress(NetsimError):
            self.run(["iptables", "-t", "mangle", "-F", "OUTPUT"])
        delayer.terminate()
        try:
            delayer.wait(5)
        except subprocess.TimeoutExpired:
            delayer.kill()
            delayer.wait()

    def clear_rules(self) -> None:
        self.run(["nft", "flush", "chain", "inet", TABLE, "input"])

    def _install_table(self) -> None:
        self.run(
            ["nft", "-f", "-"],
            stdin=f"table inet {TABLE} {{\n chain input {{ type filter hook input priority 0; }}\n}}\n",
        )

    def __repr__(self) -> str:
        return f"SimHost({self.name!r}, {self.address})"


class SimNetwork:
    """A bridge and the simulated hosts on it; see the module docstring.

    ``supernet`` is where its /24 is picked (the first one no address of this
    machine is in). :meth:`close` (or leaving the ``with``) kills every process on
    the hosts and removes them and the bridge.
    """

    def __init__(self, supernet: str = DEFAULT_SUPERNET) -> None:
        problem = available()
        if problem:
            raise NetsimError(problem)
        self.tag = _base36(os.getpid()) + _base36(next(_counter) % 36)
        self.bridge = f"{LINK_PREFIX}{self.tag}b"
        self.log: list[str] = []
        """Every command that built or changed the network, in order (replayable)."""
        self.hosts: dict[str, SimHost] = {}
        self._closed = False
        with _locked():
            self.subnet = _free_subnet(ipaddress.ip_network(supernet))
            self.gateway = str(self.subnet.network_address + 1)
            try:
                _run(["ip", "link", "add", self.bridge, "type", "bridge"], log=self.log)
                _run(
                    ["ip", "addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge],
                    log=self.log,
                )
                _run(["ip", "link", "set", self.bridge, "up"], log=self.log)
            except BaseException:
                self.close()
                raise
        self._addresses = (str(a) for a in itertools.islice(self.subnet.hosts(), 1, None))

    def add_host(self, name: str) -> SimHost:
        """A new host named ``name`` (lower-case letters, digits, dashes; unique here)."""
        if not _NAME.match(name):
            raise ValueError(f"host name {name!r}: lower-case letters, digits and dashes, at most 32")
        if name in self.hosts:
            raise ValueError(f"host name {name!r}: already on this network")
        address = next(self._addresses, None)
        if address is None:
            raise NetsimError(f"network {self.subnet} is full ({len(self.hosts)} hosts)")
        host = SimHost(self, name, address, f"{LINK_PREFIX}{self.tag}v{len(self.hosts)}")
        self.hosts[name] = host
        _run(["ip", "netns", "add", host.netns], log=self.log)
        _run(
            ["ip", "link", "add", host.port, "type", "veth", "peer", "name", "eth0", "netns", host.netns],
            log=self.log,
        )
        _run(["ip", "link", "set", host.port, "master", self.bridge, "up"], log=self.log)
        host.run(
            ["ip", "-batch", "-"],
            stdin=(
                f"addr add {address}/{self.subnet.prefixlen} dev eth0\nlink set eth0 up\nlink set lo up\n"
            ),
        )
        host._install_table()
        return host

    # -- faults ---------------------------------------------------------------------

    def partition(self, group_a: Iterable[SimHost], group_b: Iterable[SimHost]) -> None:
        """No packet between a host of ``group_a`` and one of ``group_b``, either way."""
        a, b = list(group_a), list(group_b)
        for host in a:
            host.drop_from(b)
        for host in b:
            host.drop_from(a)

    def one_way(self, source: Iterable[SimHost], target: Iterable[SimHost]) -> None:
        """Packets from ``source`` hosts to ``target`` hosts are dropped; the other way
        they pass (so TCP between them stalls, while ``source`` still hears ``target``'s
        datagrams)."""
        sources = list(source)
        for host in target:
            host.drop_from(sources)

    def heal(self) -> None:
        """Undo every fault: all bridge ports up, every drop rule and delay gone."""
        for host in self.hosts.values():
            host.reconnect()
            host.clear_rules()
            host.undelay()

    # -- teardown -------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for host in self.hosts.values():
            host.undelay()
            _remove_namespace(host.netns, log=self.log)
        with contextlib.suppress(NetsimError):
            _run(["ip", "link", "delete", self.bridge], log=self.log)

    def __enter__(self) -> SimNetwork:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    with open(LOCK_PATH, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _free_subnet(supernet: ipaddress.IPv4Network | ipaddress.IPv6Network) -> ipaddress.IPv4Network:
    """The first /24 of ``supernet`` that no address of this machine's namespace is in."""
    if not isinstance(supernet, ipaddress.IPv4Network) or supernet.prefixlen > 24:
        raise ValueError(f"supernet {supernet}: an IPv4 network of /24 or larger")
    used = []
    for line in _run(["ip", "-o", "-4", "addr", "show"]).splitlines():
        fields = line.split()
        if "inet" in fields:
            used.append(ipaddress.ip_interface(fields[fields.index("inet") + 1]).network)
    for subnet in supernet.subnets(new_prefix=24):
        if not any(subnet.overlaps(u) for u in used):
            return subnet
    raise NetsimError(f"no free /24 left in {supernet}")
