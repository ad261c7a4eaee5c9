"""Shared pieces of the network/bandwidth tests: a TCP receiver on the host that
measures a rate, the programs containers run, launching through mezzo's
Containerizer, and a check after every test that nothing is left behind.

Handed out through fixtures so that the tests work under any pytest import mode.
The tests use the real kernel (namespaces, veth, tc) and need root; modules say
so with ``pytestmark``.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass

import pytest

from mezzo.agent.containerizer import Containerizer, RunningContainer
from mezzo.hookspecs import Container, ContainerLaunch
from mezzo.resources import Resources

GATEWAY_SNIPPET = """
import socket, struct
def gateway():
    # The container's default gateway (the host side of its veth), from /proc/net/route.
    with open("/proc/net/route") as f:
        for line in list(f)[1:]:
            fields = line.split()
            if fields[1] == "00000000":
                return socket.inet_ntoa(struct.pack("<L", int(fields[2], 16)))
    raise SystemExit("no default route")
"""

SENDER = (
    GATEWAY_SNIPPET
    + """
import sys
# For each port of PORT[,PORT...]: connect to it on HOST (default: the gateway) and
# push data until the receiver hangs up.
host = sys.argv[2] if len(sys.argv) > 2 else gateway()
buf = b"x" * 65536
for port in sys.argv[1].split(","):
    s = socket.create_connection((host, int(port)), timeout=10)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
    try:
        while True:
            s.sendall(buf)
    except OSError:
        s.close()
"""
)

SINK = (
    GATEWAY_SNIPPET
    + """
import sys, time
# Connect to PORT on the gateway, read for WARMUP + WINDOW seconds and print the
# payload rate over the window in Mbit/s; then hang up.
port, warmup, window = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
s = socket.create_connection((gateway(), port), timeout=10)
t0 = time.monotonic()
start = None
total = 0
while True:
    data = s.recv(1 << 20)
    now = time.monotonic()
    if not data:
        raise SystemExit("the sender stopped before the window ended")
    if start is None and now - t0 >= warmup:
        start, total = now, 0
    elif start is not None:
        total += len(data)
    if now - t0 >= warmup + window:
        break
print(f"mbps={total * 8 / (now - start) / 1e6}", flush=True)
"""
)


@dataclass
class Measurement:
    """A TCP server on the host for one connection from a container.

    Receiving (default): the payload rate over ``window`` seconds after ``warmup``,
    then it hangs up. Sending (``send=True``, for ingress): it pushes data until the
    container hangs up; the container measures (:data:`SINK`)."""

    warmup: float = 0.3
    window: float = 2.7
    send: bool = False
    port: int = 0
    mbps: float | None = None
    error: BaseException | None = None
    _thread: threading.Thread | None = None

    def start(self) -> Measurement:
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("0.0.0.0", 0))
        srv.listen(1)
        srv.settimeout(15)
        self.port = srv.getsockname()[1]
        self._thread = threading.Thread(target=self._run, args=(srv,), daemon=True)
        self._thread.start()
        return self

    def _run(self, srv: socket.socket) -> None:
        try:
            conn, _ = srv.accept()
        except OSError as exc:
            self.error = exc
            return
        finally:
            srv.close()
        try:
            if self.send:
                self._flood(conn)
            else:
                self.mbps = self._receive(conn)
        except OSError as exc:
            self.error = exc
        finally:
            conn.close()

    def _receive(self, conn: socket.socket) -> float:
        t0 = time.monotonic()
        start = None
        total = 0
        while True:
            data = conn.recv(1 << 20)
            now = time.monotonic()
            if not data:
                raise OSError("the sender stopped before the window ended")
            if start is None and now - t0 >= self.warmup:
                start, total = now, 0
            elif start is not None:
                total += len(data)
            if now - t0 >= self.warmup + self.window:
                assert start is not None, "the window ended before the warm-up"
                return total * 8 / (now - start) / 1e6

    @staticmethod
    def _flood(conn: socket.socket) -> None:
        buf = b"x" * 65536
        try:
            while True:
                conn.sendall(buf)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the container measured and hung up

    def result(self, timeout: float = 20) -> float | None:
        assert self._thread is not None
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the measurement did not end"
        if self.error is not None:
            raise AssertionError(f"measurement failed: {self.error!r}")
        if not self.send:
            assert self.mbps is not None, "no measurement (did the container connect?)"
        return self.mbps


@pytest.fixture
def measurement():
    """``measurement(send=False, warmup=0.3, window=2.7)`` -> a started :class:`Measurement`."""
    return lambda **kw: Measurement(**kw).start()


@pytest.fixture
def programs():
    """The programs containers run: ``programs.SENDER`` (argv: PORT[,PORT...] [HOST]) and
    ``programs.SINK`` (argv: PORT WARMUP WINDOW, prints ``mbps=<rate>``); both dial
    the container's gateway (the host) unless told otherwise."""
    return type("Programs", (), {"SENDER": SENDER, "SINK": SINK, "GATEWAY": GATEWAY_SNIPPET})


@dataclass
class Launched:
    container: Container
    running: RunningContainer

    def stderr(self) -> str:
        return self.read("stderr")

    def stdout(self) -> str:
        return self.read("stdout")

    def read(self, name: str) -> str:
        with open(os.path.join(self.container.sandbox, name), errors="replace") as f:
            return f.read()


class Launcher:
    """Launches containers through a real Containerizer; kills and destroys them at the end."""

    def __init__(self, tmp_path) -> None:
        self.tmp_path = tmp_path
        self.launched: list[tuple[Containerizer, Launched]] = []

    def container(self, argv: list[str], **resources: float) -> Container:
        cid = uuid.uuid4().hex
        sandbox = self.tmp_path / cid
        sandbox.mkdir()
        return Container(
            container_id=cid,
            framework_id="fw",
            executor_id=f"task-{cid[:6]}",
            resources=Resources({"cpus": 1, "mem": 64, **resources}),
            sandbox=str(sandbox),
            launch=ContainerLaunch(argv=argv, env=dict(os.environ), cwd=str(sandbox)),
        )

    async def launch(self, containerizer: Containerizer, argv: list[str], **resources: float) -> Launched:
        c = self.container(argv, **resources)
        running = await containerizer.launch(c, stdout=f"{c.sandbox}/stdout", stderr=f"{c.sandbox}/stderr")
        launched = Launched(c, running)
        self.launched.append((containerizer, launched))
        return launched

    async def destroy(self, containerizer: Containerizer, launched: Launched) -> None:
        launched.running.kill()
        await launched.running.wait()
        errors = await containerizer.destroy(launched.container)
        assert errors == []
        self.launched = [(z, x) for z, x in self.launched if x is not launched]

    async def close(self) -> None:
        for containerizer, launched in list(self.launched):
            await self.destroy(containerizer, launched)


@pytest.fixture
def launcher(tmp_path):
    """A :class:`Launcher`; call ``await launcher.close()`` at the end of the test's coroutine."""
    return Launcher(tmp_path)


@pytest.fixture
def python_argv():
    def argv(program: str, *args: object) -> list[str]:
        return [sys.executable, "-c", program, *map(str, args)]

    return argv


# -- nothing left behind -------------------------------------------------------------

HOST_LINK = re.compile(r"^\d+: (mz[0-9a-f]{12}h)[@:]", re.MULTILINE)


def leftovers() -> list[str]:
    """Every namespace and host link this isolator could have made, as ``ip`` sees them."""
    found = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    found += [f"netns {line.split()[0]}" for line in netns.splitlines() if line.startswith("mezzo-net-")]
    link = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    found += [f"link {name}" for name in HOST_LINK.findall(link)]
    return found


def sweep() -> None:
    for item in leftovers():
        kind, name = item.split()
        subprocess.run(
            ["ip", "link", "del", name] if kind == "link" else ["ip", "netns", "del", name],
            capture_output=True,
            check=False,
        )


@pytest.fixture
def no_leftovers():
    """``no_leftovers()`` lists what is left (``[]`` when nothing)."""
    return leftovers


@pytest.fixture(autouse=True)
def nothing_left_behind():
    """After every test: no ``mezzo-net-*`` namespace and no ``mz<hash>h`` link remains. A
    test that leaves some fails, and they are removed so that the next one starts clean."""
    yield
    if os.geteuid() != 0:
        return
    left = leftovers()
    if left:
        sweep()
        pytest.fail(f"left behind: {', '.join(left)}")


@pytest.fixture
def run():
    """``run(coro)``: asyncio.run with a timeout, so a hang fails the test instead of the suite."""

    def run_(coro, timeout: float = 60):
        return asyncio.run(asyncio.wait_for(coro, timeout))

    return run_
