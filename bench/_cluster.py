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
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from mezzo.state_client import MasterUnreachable, fetch_metrics
from mezzo.testing import free_port

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


class Emulator:
    """One ``python -m mezzo.emulation`` process and its latest JSON line."""

    def __init__(self, argv: list[str], log_path: Path) -> None:
        self._err = open(log_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._err, text=True)
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
    """A master plus ``agents`` emulated agents of ``agent_resources`` each."""

    def __init__(self, workdir: Path, agents: int, *, agent_resources: str = "cpus:2;mem:2048",
                 per_connection: int = 10, master_toml: str = "") -> None:
        self.workdir = workdir
        self.agent_count = agents
        self.agent_resources = agent_resources
        self.per_connection = per_connection
        self.address = f"127.0.0.1:{free_port()}"
        self.master_toml = master_toml
        self.master: subprocess.Popen | None = None
        self.agents: Emulator | None = None
        self.frameworks: list[Emulator] = []

    def __enter__(self) -> EmulatedCluster:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- start -------------------------------------------------------------

    def start(self) -> None:
        """Start the master; :meth:`start_agents` and :meth:`start_frameworks` follow."""
        config = self.workdir / "master.toml"
        config.write_text('[log]\nlevel = "warning"\n' + self.master_toml)
        self._master_log = open(self.workdir / "master.log", "wb")
        self.master = subprocess.Popen(
            [sys.executable, "-m", "mezzo.cli.main", "master", "--config", str(config), "--listen", self.address],
            stdout=self._master_log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                fetch_metrics(self.address, timeout=2)
                break
            except MasterUnreachable:
                if time.monotonic() > deadline or self.master.poll() is not None:
                    raise RuntimeError(f"master did not start; see {self.workdir / 'master.log'}") from None
                time.sleep(0.1)

    def start_agents(self, register_timeout: float = 300.0) -> float:
        """Start the emulated agents; returns seconds until all registered."""
        started = time.monotonic()
        self.agents = Emulator(
            [sys.executable, "-m", "mezzo.emulation", "agents", "--master", self.address,
             "--count", str(self.agent_count), "--resources", self.agent_resources,
             "--per-connection", str(self.per_connection), "--register-timeout", str(register_timeout)],
            self.workdir / "agents.log")
        self.agents.wait_first(register_timeout + 10, f"{self.agent_count} emulated agents")
        return time.monotonic() - started

    def start_frameworks(self, count: int, *, task: str = "cpus:1;mem:1024", duration: float = 30.0,
                         stddev: float = 10.0, processes: int = 1, seed: int = 1,
                         extra: tuple[str, ...] = (), report_every: float = 1.0) -> None:
        """``count`` emulated frameworks over ``processes`` processes; returns once all registered."""
        per = [count // processes + (1 if i < count % processes else 0) for i in range(processes)]
        started = []
        for i, n in enumerate(per):
            em = Emulator(
                [sys.executable, "-m", "mezzo.emulation", "frameworks", "--master", self.address,
                 "--count", str(n), "--task", task, "--duration", str(duration), "--stddev", str(stddev),
                 "--seed", str(seed + i), "--name-prefix", f"emulated{i}",
                 "--report-every", str(report_every), *extra],
                self.workdir / f"frameworks-{i}.log")
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
        times = [em.latest.get("first_offer_at") for em in self.frameworks]
        times = [t for t in times if t is not None]
        return min(times) if times else None

    def wait_allocated(self, share: float, slots: int, timeout: float) -> float:
        """Wait until ``share`` of ``slots`` task slots run; returns the seconds it took."""
        started = time.monotonic()
        while self.running < share * slots:
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"only {self.running} of {slots} slots busy after {timeout:g} s")
            self._check_alive()
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

    def sample(self) -> Sample:
        cpu, rss = self.master_cpu_rss()
        m = fetch_metrics(self.address, timeout=30)
        return Sample(time.monotonic(), cpu, rss, m["messages_received"], m["messages_sent"], self.running)

    def _check_alive(self) -> None:
        if self.master is not None and self.master.poll() is not None:
            raise RuntimeError(f"the master exited ({self.master.returncode}); see {self.workdir / 'master.log'}")
        for em in [self.agents, *self.frameworks]:
            if em is not None and em.proc.poll() is not None:
                raise RuntimeError(f"an emulator exited ({em.proc.returncode}); see the logs in {self.workdir}")

    # -- stop --------------------------------------------------------------

    def stop(self) -> None:
        for em in self.frameworks:
            em.stop()
        if self.agents is not None:
            self.agents.stop()
        if self.master is not None:
            terminate(self.master)
            self._master_log.close()


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
