"""Test harnesses for framework and plugin authors, and for mezzo itself.

- :class:`LocalProcessCluster`: a real cluster (master and agents) in subprocesses.
- :class:`ScriptedCycle`: an :class:`~mezzo.hookspecs.AllocationCycle` with fixed
  agents and refusals, for unit tests of allocator plugins.
- :class:`ZooKeeperServer`: a real standalone ZooKeeper (Debian's ``zookeeper``
  package) on a free loopback port with a throw-away data directory.
- :class:`Place`: where one of those processes runs. :data:`LOOPBACK` by default; a
  simulated host of :mod:`mezzo.testing.netsim` (a network namespace with an address
  of its own on a bridge) to test as a cluster of many machines is deployed.
- :class:`RawPeer` and :func:`largest_message`: a bare socket speaking the master's
  wire protocol, and the biggest message of a kind a frame admits, for tests and
  benchmarks that send a master hand-made (huge, hostile) messages.

In pytest they are fixtures, from the pytest plugin installed with mezzo
(``_mezzo_pytestplugin``): ``mezzo_cluster`` starts clusters and stops them when the
test ends, ``mezzo_zookeeper`` is a running ZooKeeperServer and
``mezzo_scripted_cycle`` is the ScriptedCycle class.

A real cluster:

    with LocalProcessCluster(agents=3, master={"allocation_interval": 0.01}) as cluster:
        driver = mezzo.SchedulerDriver(MyScheduler(), mezzo.FrameworkInfo(name="t"), cluster.master)
        ...
        cluster.state()          # the master's state as a dict

The master and every agent are separate ``python -m mezzo`` processes on
loopback (or each at its :class:`Place`), configured through a TOML file written for the run, exactly as an
operator would start them. Their logs go to files in the cluster's directory and
the tail of each is attached to start-up errors, so a failing test says why.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..config import TlsConfig
from ..hookspecs import AllocationCycle
from ..resources import Resources
from ..rpc.address import join_address
from ..rpc.codec import MalformedMessage, ServiceSchema
from ..rpc.framing import DEFAULT_MAX_FRAME, FrameDecoder
from ..services import MASTER, TOOL
from ..state_client import ANSWER_MAX_BYTES, MasterUnreachable, fetch_state


def wait_for(
    predicate: Callable[[], Any], timeout: float = 15.0, what: str = "condition", interval: float = 0.01
) -> Any:
    """Poll ``predicate`` until it returns something truthy and return that; raise
    ``AssertionError`` naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


async def wait_for_async(
    predicate: Callable[[], Any], timeout: float = 15.0, what: str = "condition", interval: float = 0.01
) -> Any:
    """:func:`wait_for` for code running on an event loop: sleeps without blocking it."""
    import asyncio

    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(interval)


@dataclasses.dataclass(frozen=True)
class Place:
    """Where a harness process runs: the address it binds and peers reach it at, and
    the network namespace it runs in (None: this process's own).

    A namespace is entered with ``nsenter --net``, which changes nothing else (the
    mounts stay, so cgroups and work directories are where they were) and execs the
    command, so the process's pid is the command's own.
    """

    address: str = "127.0.0.1"
    netns: str | None = None

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` as run at this place."""
        if self.netns is None:
            return list(argv)
        return ["nsenter", f"--net=/run/netns/{self.netns}", "--", *argv]


LOOPBACK = Place()
"""Every process on 127.0.0.1 of this machine's own namespace."""


_handed_out: set[int] = set()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now, and not one this process was given
    before: the kernel may offer a port again as soon as its probe socket closes, and
    two daemons of one cluster, given the same one, would fight over it."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise ClusterError("no free TCP port on 127.0.0.1 that this process was not given already")


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{ " + ", ".join(f'"{k}" = {_toml_value(x)}' for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {v!r} as TOML")


def to_toml(tables: Mapping[str, Mapping[str, Any]]) -> str:
    """Write ``{"master": {...}, "master.allocator": {...}}`` as TOML (flat tables only)."""
    out = []
    for table, keys in tables.items():
        out.append(f"[{table}]")
        out += [f"{k} = {_toml_value(v)}" for k, v in keys.items()]
        out.append("")
    return "\n".join(out)


class ClusterError(RuntimeError):
    pass


class LocalProcessCluster:
    """A master and ``agents`` agents as subprocesses; see the module docstring.

    ``master`` and ``agent`` are extra keys for the ``[master]`` and ``[agent]``
    tables; ``tables`` adds whole tables (e.g. ``{"master.allocator": {"name": ...}}``).
    ``agent_resources`` is one resource string for every agent or a list, one per agent.
    The agents start beside the master and redial it every 0.1 s until it listens
    (``reconnect_interval``, unless ``agent`` sets it).

    With ``zk`` (a ``zk://`` URL, e.g. from :class:`ZooKeeperServer`) it runs
    ``masters`` masters named ``master-1``..., each on its own port, electing a
    leader there; agents and :attr:`master` then use the ``zk://`` URL, and
    :meth:`leader` names the master leading now.

    With ``tls`` every process speaks TLS with a certificate of its own, made for
    the run by :mod:`mezzo.certs` in ``<dir>/tls``: the master's (principal
    ``master``), the agents' (``agent``), and :attr:`tls`, the test's own
    (``operator``), which :meth:`state` uses; :meth:`client_tls` makes one for a
    framework.

    ``places`` puts processes elsewhere than :data:`LOOPBACK`, by name (``master`` or
    ``master-1``..., ``agent-1``...): each binds its place's address and runs in its
    namespace (see :mod:`mezzo.testing.netsim`), and agents advertise that address.
    """

    def __init__(
        self,
        agents: int = 3,
        *,
        masters: int = 1,
        zk: str | None = None,
        master: Mapping[str, Any] | None = None,
        agent: Mapping[str, Any] | None = None,
        tables: Mapping[str, Mapping[str, Any]] | None = None,
        agent_resources: str | list[str] = "cpus:4;mem:4096;disk:10000",
        directory: str | None = None,
        start_timeout: float = 20.0,
        tls: bool = False,
        places: Mapping[str, Place] | None = None,
    ) -> None:
        self.n_agents = agents
        self.places = dict(places or {})
        self.dir = Path(directory or tempfile.mkdtemp(prefix="mezzo-cluster-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        if masters != 1 and zk is None:
            raise ValueError("several masters need a zk:// URL to elect a leader")
        self.port = free_port()
        self.zk = zk
        self.master_ports = (
            {"master": self.port}
            if zk is None
            else {f"master-{i}": free_port() for i in range(1, masters + 1)}
        )
        self.master = join_address(self.place("master").address, self.port) if zk is None else zk
        """What agents and frameworks are given: the master's address, or the zk:// URL."""
        self.agent_resources = (
            [agent_resources] * agents if isinstance(agent_resources, str) else list(agent_resources)
        )
        if len(self.agent_resources) != agents:
            raise ValueError("agent_resources needs one entry per agent")
        master_keys = {"listen": self.master} if zk is None else {"zk": zk}
        config = {
            "master": {**master_keys, **(master or {})},
            # Agents start beside the master (:meth:`start`) and redial it soon.
            "agent": {
                "master": self.master,
                "listen": "127.0.0.1:0",
                "reconnect_interval": 0.1,
                **(agent or {}),
            },
            "log": {"level": "info", "format": "console"},
            **(tables or {}),
        }
        self.config_path = self.dir / "mezzo.toml"
        self.agent_config_path = self.config_path
        self.tls: TlsConfig | None = None
        """The test's own ``[tls]`` (principal ``operator``) when the cluster runs TLS."""
        if tls:
            if "acls" not in config["master"]:
                # The default deny of a TLS master, opened to this harness's principals:
                # the agents register as agents, any certified client runs frameworks.
                from ..acls import single_tenant

                acls = single_tenant(agents=["agent"], operators=["operator"])
                config["master"] = {**config["master"], "acls": acls}
            self.tls = self.client_tls("operator")
            extra = dict(config.get("tls", {}))  # e.g. handshake_timeout from ``tables``
            config["tls"] = {**self._tls_table("master"), **extra}
            self.agent_config_path = self.dir / "agent.toml"
            self.agent_config_path.write_text(
                to_toml({**config, "tls": {**self._tls_table("agent"), **extra}})
            )
        self.config_path.write_text(to_toml(config))
        self.start_timeout = start_timeout
        self.procs: dict[str, subprocess.Popen] = {}
        self.expected_dead: set[str] = set()
        """Processes the test killed on purpose (not an error while waiting)."""

    def place(self, name: str) -> Place:
        """Where process ``name`` runs."""
        return self.places.get(name, LOOPBACK)

    def client_tls(self, principal: str) -> TlsConfig:
        """A ``[tls]`` with a certificate for ``principal`` signed by this cluster's CA
        (made on first use), for a framework's driver or a tool."""
        from ..certs import principal_tls

        return principal_tls(self.dir / "tls", principal)

    def _tls_table(self, principal: str) -> dict[str, Any]:
        """:meth:`client_tls` as a table of the cluster's TOML files."""
        return dataclasses.asdict(self.client_tls(principal))

    # -- processes --------------------------------------------------------

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen:
        logf = open(self.dir / f"{name}.log", "ab")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        config = self.agent_config_path if name.startswith("agent") else self.config_path
        proc = subprocess.Popen(
            self.place(name).command([sys.executable, "-m", "mezzo", *args, "--config", str(config)]),
            stdout=logf,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        logf.close()
        self.procs[name] = proc
        self.expected_dead.discard(name)
        return proc

    def start_master(self, name: str = "master") -> None:
        """Start one master (with zk: ``master-1``..., or all of them for "master")."""
        self._spawn_master(name)
        self._wait_for_master()

    def _spawn_master(self, name: str) -> None:
        if self.zk is None:
            self._spawn("master", ["master"])
            return
        for n in self.master_ports if name == "master" else [name]:
            listen = join_address(self.place(n).address, self.master_ports[n])
            self._spawn(n, ["master", "--listen", listen])

    def _wait_for_master(self) -> None:
        if self.zk is None:
            self._wait(lambda s: True, "the master to answer")
        else:
            self._wait(lambda s: s["master"]["leading"], "a master to lead")

    def leader(self, timeout: float = 15.0) -> str:
        """The name of the master leading now (it answers ``mezzo state`` as leader)."""
        # By port: a master may advertise another host than the one it bound.
        by_port = {port: n for n, port in self.master_ports.items()}
        state = self._wait(lambda s: s["master"]["leading"], "a master to lead", timeout)
        return by_port[int(state["master"]["address"].rpartition(":")[2])]

    def start_agent(self, i: int) -> None:
        name = f"agent-{i}"
        args = [
            "agent",
            "--resources",
            self.agent_resources[i - 1],
            "--work-dir",
            str(self.dir / name),
            "--hostname",
            name,
        ]
        if name in self.places:  # else the TOML's agent.listen (a test may set it)
            args += ["--listen", join_address(self.place(name).address, 0)]
        self._spawn(name, args)

    def start(self) -> LocalProcessCluster:
        # Agents start beside the master, not after it: their start-up (the
        # interpreter, imports) overlaps the master's, and they dial it once it listens.
        self._spawn_master("master")
        for i in range(1, self.n_agents + 1):
            self.start_agent(i)
        self._wait_for_master()
        self.wait_for_agents(self.n_agents)
        return self

    def wait_for_agents(self, n: int) -> dict:
        return self._wait(lambda s: sum(a["connected"] for a in s["agents"]) >= n, f"{n} agents to register")

    def _wait(self, predicate, what: str, timeout: float | None = None) -> dict:
        deadline = time.monotonic() + (timeout or self.start_timeout)
        last: Exception | None = None
        while time.monotonic() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None and name not in self.expected_dead:
                    raise ClusterError(
                        f"{name} exited with {p.returncode} while waiting for {what}\n{self.log_tail(name)}"
                    )
            try:
                s = fetch_state(self.master, timeout=2.0, tls=self.tls)
                if predicate(s):
                    return s
            except MasterUnreachable as exc:
                last = exc
            time.sleep(0.05)
        raise ClusterError(
            f"timed out waiting for {what} ({last})\n" + "\n".join(self.log_tail(n) for n in self.procs)
        )

    def state(self) -> dict:
        return fetch_state(self.master, timeout=5.0, tls=self.tls)

    def kill(self, name: str, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        p = self.procs.get(name)
        self.expected_dead.add(name)
        if p is None or p.poll() is not None:
            return
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            return
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()

    def stop(self) -> None:
        masters = [n for n in self.procs if n.startswith("master")]
        for name in [n for n in self.procs if n not in masters] + masters:
            self.kill(name)
        self._kill_leftovers()

    def _kill_leftovers(self) -> None:
        """SIGKILL any process still working in the cluster's directory: tasks of an agent
        a test SIGKILLed and never restarted run on in their own sessions, and a failed
        test must not leave them behind."""
        root = str(self.dir.resolve())
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                cwd = os.readlink(f"/proc/{entry}/cwd")
            except OSError:
                continue
            if cwd == root or cwd.startswith(root + os.sep):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(entry), signal.SIGKILL)

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.dir / f"{name}.log"
        if not path.exists():
            return f"--- {name}: no log"
        text = path.read_text(errors="replace").splitlines()[-lines:]
        return f"--- {name} (last {len(text)} lines)\n" + "\n".join(text)

    def __enter__(self) -> LocalProcessCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


class RawPeer:
    """A bare connection to a master, for sending it hand-made messages.

    Calls are encoded as the master's (:meth:`send`) or sent as given
    (:meth:`send_frame`); replies are decoded with ``answers`` (the service this
    peer plays, e.g. ``SCHEDULER``), or as ``Tool`` calls (``metrics``, ``state``)
    when they are not that. :meth:`expect` answers the master's pings itself.
    With ``tls`` it speaks TLS with that ``[tls]``'s certificate (an attacker with a
    certificate of its own). Blocking, one thread at a time.
    """

    def __init__(
        self,
        address: str,
        answers: ServiceSchema,
        *,
        max_frame: int = DEFAULT_MAX_FRAME,
        timeout: float = 60.0,
        tls: TlsConfig | None = None,
    ) -> None:
        host, port = address.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:  # as a peer with that certificate would (the handshake happens here)
            from ..rpc.tls import client_tls

            sock = client_tls(tls).context.wrap_socket(sock, server_hostname=host)
        self.sock = sock
        self.answers = answers
        self.frames = FrameDecoder(max_frame)
        self.received: deque[tuple[str, tuple]] = deque()

    def send(self, method: str, *args: Any) -> None:
        self.sock.sendall(MASTER.encode(method, args, {}))

    def send_frame(self, message: bytes) -> None:
        self.sock.sendall(message)

    def _decode(self, payload: bytes) -> tuple[str, tuple]:
        try:
            return self.answers.decode(payload, ANSWER_MAX_BYTES)
        except MalformedMessage:
            return TOOL.decode(payload, ANSWER_MAX_BYTES)

    def expect(self, method: str) -> tuple:
        """The arguments of the next ``method`` call from the master (others are
        skipped). Raises :class:`RuntimeError` if the master answers ``error`` or
        closes the connection first."""
        while True:
            while self.received:
                name, args = self.received.popleft()
                if name == method:
                    return args
                if name == "ping":  # the master's health check of a quiet peer
                    self.send("pong")
                if name == "error":
                    raise RuntimeError(f"the master answered error while {method} was awaited: {args}")
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise RuntimeError(f"the master closed the connection while {method} was awaited")
            self.received.extend(self._decode(payload) for payload in self.frames.feed(chunk))

    def close(self) -> None:
        self.sock.close()


def largest_message(
    method: str, make: Callable[[int], tuple], limit: int, n: int = 1000
) -> tuple[int, bytes]:
    """The master's ``method`` called with ``make(n)``'s arguments, for the largest
    ``n`` whose frame fits in ``limit`` bytes; returns ``n`` and the frame. The items
    ``n`` counts must be of one size (fixed-width ids), so that two small messages
    tell the size of any."""
    small, double = (len(MASTER.encode(method, make(k), {})) for k in (n, 2 * n))
    item = (double - small) / n
    n += int((limit - small) / item)
    message = MASTER.encode(method, make(n), {})
    assert limit - 2 * item < len(message) <= limit, (len(message), limit)
    return n, message


class ScriptedCycle(AllocationCycle):
    """An allocation cycle for allocator unit tests: ``free`` maps agent ids to their
    free resources, ``refused`` holds (framework id, agent id) pairs that refuse
    filters rule out (``may_offer`` says no, ``refusing`` lists them). ``offer`` behaves like the master's: it empties the agent and calls
    ``allocator.allocated`` before returning. ``offers`` and ``asked`` record what
    happened, in order.
    """

    def __init__(self, allocator, free: Mapping[str, Resources], refused=()) -> None:
        self.allocator = allocator
        self._free = dict(free)
        self.refused = set(refused)
        self._refusing: dict[str, set[str]] = {}
        for f, a in self.refused:
            self._refusing.setdefault(a, set()).add(f)
        self.offers: list[tuple[str, str]] = []
        self.asked: list[tuple[str, str]] = []

    def agents(self):
        return [a for a, r in self._free.items() if r]

    def free(self, agent_id):
        return self._free[agent_id]

    def may_offer(self, framework_id, agent_id):
        self.asked.append((framework_id, agent_id))
        return bool(self._free[agent_id]) and (framework_id, agent_id) not in self.refused

    def refusing(self, agent_id):
        return self._refusing.get(agent_id, frozenset())

    def offer(self, framework_id, agent_id):
        res = self._free[agent_id]
        self._free[agent_id] = Resources()
        self.offers.append((framework_id, agent_id))
        self.allocator.allocated(framework_id, res)


ZOOKEEPER_CLASSPATH = (
    "/etc/zookeeper/conf",
    "/usr/share/java/zookeeper.jar",
    "/usr/share/java/slf4j-simple.jar",
)
"""Where Debian's ``zookeeper`` package puts the server (``make setup`` installs it)."""


class ZooKeeperServer:
    """A standalone ZooKeeper server for tests, started as a Java process.

    ``tick_ms`` is small by default because the server clamps session timeouts to
    2-20 ticks: with 200 ms ticks a 2 s session is allowed, so a test can watch a
    crashed leader's session expire in about 2 s.

        with ZooKeeperServer() as zk:
            url = zk.url("/mezzo")          # "zk://127.0.0.1:PORT/mezzo"
            ...
    """

    def __init__(self, workdir: Path | None = None, *, tick_ms: int = 200, place: Place = LOOPBACK) -> None:
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="mezzo-zk-")
            workdir = Path(self._tmp.name)
        self.workdir = Path(workdir)
        self.tick_ms = tick_ms
        self.place = place
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def hosts(self) -> str:
        return join_address(self.place.address, self.port)

    def url(self, path: str = "/mezzo") -> str:
        return f"zk://{self.hosts}{path}"

    def start(self, timeout: float = 30.0) -> ZooKeeperServer:
        missing = [p for p in ZOOKEEPER_CLASSPATH[1:] if not Path(p).exists()]
        if missing:
            raise ClusterError(
                f"ZooKeeper is not installed ({', '.join(missing)} missing): "
                "run `make setup` or `apt-get install zookeeper`"
            )
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        cfg = self.workdir / "zoo.cfg"
        cfg.write_text(
            f"tickTime={self.tick_ms}\ndataDir={data}\nclientPort={self.port}\n"
            f"clientPortAddress={self.place.address}\nadmin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr\n"
            f"minSessionTimeout={2 * self.tick_ms}\nmaxSessionTimeout={20 * self.tick_ms}\n"
        )
        self._log = open(self.workdir / "zookeeper.log", "wb")
        self.process = subprocess.Popen(
            self.place.command(
                [
                    "java",
                    "-Xmx256m",
                    "-cp",
                    ":".join(ZOOKEEPER_CLASSPATH),
                    "org.apache.zookeeper.server.ZooKeeperServerMain",
                    str(cfg),
                ]
            ),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while not self._ruok():
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = (self.workdir / "zookeeper.log").read_text(errors="replace")[-2000:]
                self.stop()
                raise ClusterError(f"ZooKeeper did not start on {self.hosts}:\n{tail}")
            time.sleep(0.1)
        return self

    def _ruok(self) -> bool:
        try:
            with socket.create_connection((self.place.address, self.port), timeout=1) as s:
                s.sendall(b"ruok")
                return s.recv(16) == b"imok"
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process is not None:
            self._log.close()
        self.process = None

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
