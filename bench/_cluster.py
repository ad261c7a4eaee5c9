"""An emulated cluster as subprocesses, for the scale benchmarks.

The real ``mezzo master`` runs as its own process; emulated agents and emulated
frameworks (``python -m mezzo.emulation``) run as separate processes beside it, so
that the master's CPU, memory and message counts are its own. Each emulator prints
a JSON line of counters per second; a reader thread keeps the latest one.

    with EmulatedCluster(Path(tmp), agents=10_000) as cluster:
        cluster.start_frameworks(200)
        cluster.start_agents()
        cluster.wait_allocated(0.95, timeout=120)
        before = cluster.sample()
        ...

With ``masters`` > 1 the cluster also starts a ZooKeeper server (``zk_tick_ms``
ticks, so that short sessions are allowed) and that many masters electing a
leader through it (``zk_session``: their ZooKeeper session timeout, which bounds
how soon a dead leader is noticed); the emulators are given the ``zk://`` URL and
follow the leader. :meth:`EmulatedCluster.leader` names the leading master and
:meth:`EmulatedCluster.kill_leader` SIGKILLs it::

    with EmulatedCluster(Path(tmp), agents=1_000, masters=3, zk_session=1.0) as cluster:
        ...
        name, killed_at = cluster.kill_leader()
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from mezzo.acls import single_tenant
from mezzo.acls import to_toml as acls_toml
from mezzo.certs import principal_tls, tls_toml
from mezzo.config import TlsConfig
from mezzo.state_client import MasterUnreachable, fetch_metrics
from mezzo.testing import ZooKeeperServer, free_port

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


class Emulator:
    """One ``python -m mezzo.emulation`` process and its latest JSON line."""

    def __init__(self, argv: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self._err = open(log_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._err, text=True, env=env)
        self.latest: dict = {}
        self.first = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            try:
                self.latest = json.loads(line)
            except ValueError:
                continue
            self.first.set()

    def wait_first(self, timeout: float, what: str) -> dict:
        if not self.first.wait(timeout):
            raise TimeoutError(f"{what} not up within {timeout:g} s (exit status {self.proc.poll()})")
        return self.latest

    def stop(self) -> None:
        terminate(self.proc)
        self._err.close()


@dataclass
class Sample:
    """Counters of the master process and the emulators at one moment."""

    at: float
    cpu_seconds: float
    rss_bytes: int
    messages_received: int
    messages_sent: int
    running: int


class EmulatedCluster:
    """A master (or ``masters`` masters electing through ZooKeeper) plus ``agents``
    emulated agents of ``agent_resources`` each."""

    def __init__(
        self,
        workdir: Path,
        agents: int,
        *,
        agent_resources: str = "cpus:2;mem:2048",
        per_connection: int = 10,
        master_toml: str = "",
        masters: int = 1,
        zk_session: float = 1.0,
        zk_tick_ms: int = 100,
        tls: bool = False,
    ) -> None:
        self.workdir = workdir
        self.tls = tls
        self.operator_tls: TlsConfig | None = None
        """This process's own ``[tls]`` for asking the master (with ``tls``)."""
        self.agent_count = agents
        self.agent_resources = agent_resources
        self.per_connection = per_connection
        self.master_toml = master_toml
        self.zk_session = zk_session
        self.zk: ZooKeeperServer | None = None
        if masters > 1:
            self.zk = ZooKeeperServer(workdir / "zk", tick_ms=zk_tick_ms)
        self.master_addresses = (
            {"master": f"127.0.0.1:{free_port()}"}
            if self.zk is None
            else {f"master-{i}": f"127.0.0.1:{free_port()}" for i in range(1, masters + 1)}
        )
        self.address = self.master_addresses["master"] if self.zk is None else self.zk.url("/mezzo")
        """What the emulators are given: the master's address, or the ``zk://`` URL."""
        self.masters: dict[str, subprocess.Popen] = {}
        self.killed: set[str] = set()
        """Masters killed on purpose (not an error in :meth:`check_alive`)."""
        self.master: subprocess.Popen | None = None
        """The lone master, or the leader as of the last :meth:`leader`."""
        self.leader_address = self.address if self.zk is None else ""
        self.agents: Emulator | None = None
        self.frameworks: list[Emulator] = []
        self._logs: list = []

    def __enter__(self) -> EmulatedCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- start -------------------------------------------------------------

    def start(self) -> None:
        """Start ZooKeeper (if several masters) and the masters, and wait for one to lead;
        :meth:`start_agents` and :meth:`start_frameworks` follow."""
        if self.zk is not None:
            self.zk.start()
        toml = self.master_toml
        if self.zk is not None:
            line = f"zk_session_timeout = {self.zk_session}\n"
            toml = (
                toml.replace("[master]\n", "[master]\n" + line, 1)
                if "[master]\n" in toml
                else toml + "[master]\n" + line
            )
        if self.tls:
            toml += "\n" + tls_toml(principal_tls(self.workdir / "tls", "master"))
            toml += "\n" + acls_toml(
                single_tenant(agents=["agents"], operators=["operator"], frameworks=["frameworks"])
            )
            for role in ("agents", "frameworks"):
                (self.workdir / f"{role}.toml").write_text(
                    tls_toml(principal_tls(self.workdir / "tls", role))
                )
            self.operator_tls = principal_tls(self.workdir / "tls", "operator")
        config = self.workdir / "master.toml"
        config.write_text('[log]\nlevel = "warning"\n' + toml)
        self._config = config
        for name in self.master_addresses:
            self.start_master(name)
        if self.zk is None:
            self.master = self.masters["master"]
            self._wait_master(lambda m: True, "the master to start")
        else:
            self.leader()

    def _env(self, role: str) -> dict[str, str] | None:
        """An emulator's environment: with TLS, ``$MEZZO_CONFIG`` names its ``[tls]``."""
        if not self.tls:
            return None
        return {**os.environ, "MEZZO_CONFIG": str(self.workdir / f"{role}.toml")}

    def start_master(self, name: str) -> None:
        """Start (or restart, after :meth:`kill_leader`) the master ``name``."""
        log = open(self.workdir / f"{name}.log", "ab")
        self._logs.append(log)
        argv = [
            sys.executable,
            "-m",
            "mezzo.cli.main",
            "master",
            "--config",
            str(self._config),
            "--listen",
            self.master_addresses[name],
        ]
        if self.zk is not None:
            argv += ["--zk", self.address]
        self.masters[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.killed.discard(name)

    def _wait_master(self, predicate, what: str, timeout: float = 30.0) -> tuple[str, dict]:
        """Poll the masters' metrics until one satisfies ``predicate``; its name and metrics."""
        deadline = time.monotonic() + timeout
        while True:
            for name, address in self.master_addresses.items():
                proc = self.masters.get(name)
                if proc is None or name in self.killed:
                    continue
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"{name} exited ({proc.returncode}); see {self.workdir / (name + '.log')}"
                    )
                try:
                    metrics = fetch_metrics(address, timeout=2, tls=self.operator_tls)
                except MasterUnreachable:
                    continue
                if predicate(metrics):
                    return name, metrics
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}; see the logs in {self.workdir}")
            time.sleep(0.1)

    def leader(self, timeout: float = 30.0) -> str:
        """The name of the master leading now (asked of each master in turn); it also
        becomes :attr:`master` and :attr:`leader_address`."""
        if self.zk is None:
            return "master"
        name, _ = self._wait_master(lambda m: m.get("leading"), "a master to lead", timeout)
        self.master = self.masters[name]
        self.leader_address = self.master_addresses[name]
        return name

    def kill_leader(self) -> tuple[str, float]:
        """SIGKILL the leading master; its name and the ``time.time()`` of the kill."""
        name = self.leader()
        proc = self.masters[name]
        self.killed.add(name)
        killed_at = time.time()
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.master = None
        self.leader_address = ""
        return name, killed_at

    def start_agents(self, register_timeout: float = 300.0, report_every: float = 1.0) -> float:
        """Start the emulated agents; returns seconds until all registered."""
        started = time.monotonic()
        self.agents = Emulator(
            [
                sys.executable,
                "-m",
                "mezzo.emulation",
                "agents",
                "--master",
                self.address,
                "--count",
                str(self.agent_count),
                "--resources",
                self.agent_resources,
                "--per-connection",
                str(self.per_connection),
                "--register-timeout",
                str(register_timeout),
                "--report-every",
                str(report_every),
            ],
            self.workdir / "agents.log",
            self._env("agents"),
        )
        self.agents.wait_first(register_timeout + 10, f"{self.agent_count} emulated agents")
        return time.monotonic() - started

    def start_frameworks(
        self,
        count: int,
        *,
        task: str = "cpus:1;mem:1024",
        duration: float = 30.0,
        stddev: float = 10.0,
        processes: int = 1,
        seed: int = 1,
        extra: tuple[str, ...] = (),
        report_every: float = 1.0,
    ) -> None:
        """``count`` emulated frameworks over ``processes`` processes; returns once all registered."""
        per = [count // processes + (1 if i < count % processes else 0) for i in range(processes)]
        started = []
        for i, n in enumerate(per):
            em = Emulator(
                [
                    sys.executable,
                    "-m",
                    "mezzo.emulation",
                    "frameworks",
                    "--master",
                    self.address,
                    "--count",
                    str(n),
                    "--task",
                    task,
                    "--duration",
                    str(duration),
                    "--stddev",
                    str(stddev),
                    "--seed",
                    str(seed + i),
                    "--name-prefix",
                    f"emulated{i}",
                    "--report-every",
                    str(report_every),
                    *extra,
                ],
                self.workdir / f"frameworks-{i}.log",
                self._env("frameworks"),
            )
            started.append(em)
            self.frameworks.append(em)
        for em in started:
            em.wait_first(120, "emulated frameworks")

    # -- observe -----------------------------------------------------------

    @property
    def running(self) -> int:
        """Tasks running on the emulated agents (their own count)."""
        return int(self.agents.latest.get("running", 0)) if self.agents else 0

    def framework_counts(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for em in self.frameworks:
            for k, v in em.latest.items():
                if k != "t" and isinstance(v, int):
                    total[k] = total.get(k, 0) + v
        return total

    def first_offer_at(self) -> float | None:
        """``time.time()`` when the first emulated framework got its first offers."""
        times = [t for em in self.frameworks if (t := em.latest.get("first_offer_at")) is not None]
        return min(times) if times else None

    def wait_allocated(self, share: float, slots: int, timeout: float) -> float:
        """Wait until ``share`` of ``slots`` task slots run; returns the seconds it took."""
        started = time.monotonic()
        while self.running < share * slots:
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"only {self.running} of {slots} slots busy after {timeout:g} s")
            self.check_alive()
            time.sleep(0.2)
        return time.monotonic() - started

    def master_cpu_rss(self) -> tuple[float, int]:
        """The master process's CPU seconds (user + system) and resident bytes, from /proc."""
        pid = self.master.pid  # type: ignore[union-attr]
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
        with open(f"/proc/{pid}/statm") as f:
            rss = int(f.read().split()[1]) * PAGE
        return cpu, rss

    def sample(self, timeout: float = 30.0) -> Sample:
        """The counters now; ``timeout``: how long the master may take to answer."""
        cpu, rss = self.master_cpu_rss()
        m = fetch_metrics(self.leader_address or self.address, timeout=timeout, tls=self.operator_tls)
        return Sample(time.monotonic(), cpu, rss, m["messages_received"], m["messages_sent"], self.running)

    def check_alive(self) -> None:
        for name, proc in self.masters.items():
            if name not in self.killed and proc.poll() is not None:
                raise RuntimeError(f"{name} exited ({proc.returncode}); see {self.workdir / (name + '.log')}")
        for em in [self.agents, *self.frameworks]:
            if em is not None and em.proc.poll() is not None:
                raise RuntimeError(
                    f"an emulator exited ({em.proc.returncode}); see the logs in {self.workdir}"
                )

    # -- stop --------------------------------------------------------------

    def stop(self) -> None:
        for em in self.frameworks:
            em.stop()
        if self.agents is not None:
            self.agents.stop()
        for proc in self.masters.values():
            terminate(proc)
        for log in self._logs:
            log.close()
        if self.zk is not None:
            self.zk.stop()


def terminate(proc: subprocess.Popen, grace: float = 20.0) -> None:
    """SIGTERM, then SIGKILL if ``proc`` has not exited within ``grace`` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def machine() -> str:
    """One line naming the machine, for the tables."""
    import platform

    return f"{os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()} {platform.release()}"


def default_work_dir() -> str | None:
    """Where benchmarks that launch many short tasks put their clusters' directories:
    ``/dev/shm`` when it is a tmpfs, else the system's temporary directory (None).

    Not the disk, because of this VM's file system: ext4 *without a journal*, where the
    kernel's inode allocator skips, one by one, every inode deleted in the last minute
    or so (``recently_deleted`` in ``find_inode_bit``; longer while the inode's block is
    not yet written back). Each task makes a sandbox (three directories and three
    files); after a test run or an earlier benchmark deletes thousands of files,
    creating one costs 100-350 µs of kernel time instead of 25, and the figures measure
    what ran before, not mezzo (``docs/benchmarks.md``, the short-task and queue
    sections)."""
    try:
        with open("/proc/mounts") as mounts:
            if any(line.split()[1:3] == ["/dev/shm", "tmpfs"] for line in mounts):
                return "/dev/shm"
    except OSError:
        pass
    return None


def filesystem_of(directory: str | None) -> str:
    """``directory`` (None: the system's temporary directory) and the type of the file
    system it is on, for the tables: ```/dev/shm` (tmpfs)``."""
    path = os.path.realpath(directory or tempfile.gettempdir())
    best = ("", "?")
    try:
        with open("/proc/mounts") as mounts:
            for line in mounts:
                mount_point, fs_type = line.split()[1:3]
                if (path == mount_point or path.startswith(mount_point.rstrip("/") + "/")) and len(
                    mount_point
                ) >= len(best[0]):
                    best = (mount_point, fs_type)
    except OSError:
        pass
    return f"`{path}` ({best[1]})"


def isolation_unavailable(isolation: list[str]) -> str | None:
    """Why an ``agent.isolation`` list cannot run on this machine (an isolator not
    installed, or not root for anything beyond ``posix``), or None."""
    from mezzo.plugins import load_plugins

    installed = set(load_plugins().registry.names("isolator"))
    missing = [n for n in isolation if n not in installed]
    if missing:
        return f"not installed: {', '.join(missing)}"
    if any(n != "posix" for n in isolation) and os.geteuid() != 0:
        return "needs root"
    return None
