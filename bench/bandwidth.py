#!/usr/bin/env python3
"""How exactly ``network/bandwidth`` holds a container to its rate: 1, 10 and 100 Mbit/s.

The agent's own containerizer with ``agent.isolation = ["posix",
"network/bandwidth"]`` starts a container whose resources hold ``net_mbps``; in
it, a sender pushes TCP data as fast as it can to a receiver in this process, at
the container's gateway (the host side of its veth). The receiver counts payload
bytes over a window after a warm-up. An unlimited container is measured too, for
scale. The limit counts whole Ethernet frames, headers included, as ``tc`` does,
so a bulk TCP transfer's payload reaches about 94-95 % of it.

Usage::

    python bench/bandwidth.py                   # needs root; writes docs/benchmarks.md
    python bench/bandwidth.py --runs 1 --window 2 --no-write
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
import uuid

import mezzo.log
from _cluster import machine
from _report import write_section
from mezzo import Resources
from mezzo.agent.containerizer import Containerizer
from mezzo.config import AgentConfig
from mezzo.hookspecs import Container, ContainerLaunch
from mezzo.plugins import load_plugins

RATES = [1, 10, 100, 0]  # Mbit/s; 0 = unlimited

SENDER = """
import socket, struct, sys
with open("/proc/net/route") as f:  # the default gateway: the host side of the veth
    gw = next(socket.inet_ntoa(struct.pack("<L", int(l.split()[2], 16)))
              for l in list(f)[1:] if l.split()[1] == "00000000")
s = socket.create_connection((gw, int(sys.argv[1])), timeout=10)
buf = b"x" * 65536
try:
    while True:
        s.sendall(buf)
except OSError:
    pass
"""


def receive(srv: socket.socket, warmup: float, window: float, out: list[float]) -> None:
    conn, _ = srv.accept()
    with conn:
        t0 = time.monotonic()
        start, total = None, 0
        while True:
            data = conn.recv(1 << 20)
            now = time.monotonic()
            if not data:
                raise RuntimeError("the sender stopped early")
            if start is None and now - t0 >= warmup:
                start, total = now, 0
            elif start is not None:
                total += len(data)
            if now - t0 >= warmup + window:
                assert start is not None, "the window ended before the warm-up"
                out.append(total * 8 / (now - start) / 1e6)
                return


async def measure(
    containerizer: Containerizer, work: str, mbps: float, warmup: float, window: float
) -> float:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", 0))
    srv.listen(1)
    srv.settimeout(20)
    out: list[float] = []
    receiver = threading.Thread(target=receive, args=(srv, warmup, window, out), daemon=True)
    receiver.start()
    cid = uuid.uuid4().hex
    sandbox = os.path.join(work, cid)
    os.makedirs(sandbox)
    resources = Resources(cpus=1, mem=128, net_mbps=mbps) if mbps else Resources(cpus=1, mem=128)
    container = Container(
        container_id=cid,
        framework_id="bench",
        executor_id=cid,
        resources=resources,
        sandbox=sandbox,
        launch=ContainerLaunch(
            argv=[sys.executable, "-c", SENDER, str(srv.getsockname()[1])],
            env={"PATH": os.environ["PATH"]},
            cwd=sandbox,
        ),
    )
    running = await containerizer.launch(
        container, stdout=os.path.join(sandbox, "out"), stderr=os.path.join(sandbox, "err")
    )
    try:
        await asyncio.to_thread(receiver.join, warmup + window + 20)
    finally:
        srv.close()
        running.kill()
        await running.wait()
        await containerizer.destroy(container)
    if not out:
        raise RuntimeError(f"no measurement at {mbps} Mbit/s; see {sandbox}/err")
    return out[0]


async def run(args: argparse.Namespace) -> dict[float, list[float]]:
    results: dict[float, list[float]] = {r: [] for r in RATES}
    with tempfile.TemporaryDirectory(prefix="bandwidth-") as work:
        containerizer = Containerizer.from_config(
            AgentConfig(isolation=["posix", "network/bandwidth"], work_dir=work), load_plugins()
        )
        await containerizer.recover([])
        try:
            for i in range(args.runs):
                for mbps in RATES:
                    got = await measure(containerizer, work, mbps, args.warmup, args.window)
                    results[mbps].append(got)
                    print(
                        f"run {i + 1}: limit {mbps or 'none'} Mbit/s: {got:,.2f} Mbit/s of payload",
                        flush=True,
                    )
        finally:
            containerizer.close()
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--warmup", type=float, default=1.0, help="seconds before counting (TCP ramp-up)")
    p.add_argument("--window", type=float, default=5.0, help="seconds counted")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    mezzo.log.configure("warning")
    if "network/bandwidth" not in load_plugins().registry.names("isolator") or os.geteuid() != 0:
        raise SystemExit("needs root and the network/bandwidth isolator (pip install -e isolators/netbw)")
    results = asyncio.run(run(args))
    lines = [
        f"`python bench/bandwidth.py` ({machine()}). A container under `network/bandwidth` with "
        "`net_mbps` set sends TCP data as fast as it can to a receiver on the host, which counts payload "
        f"over {args.window:g} s after {args.warmup:g} s of warm-up. Medians of {args.runs} runs. The limit "
        "counts whole frames (headers included, as `tc` does): bulk TCP payload reaches about 94-95 % of it.",
        "",
        "| limit | payload received (median) | of the limit | runs |",
        "|---|---|---|---|",
    ]
    for mbps, got in results.items():
        med = statistics.median(got)
        share = f"{med / mbps * 100:.1f} %" if mbps else "-"
        lines.append(
            f"| {f'{mbps} Mbit/s' if mbps else 'none'} | {med:,.2f} Mbit/s | {share} | "
            f"{' / '.join(f'{x:,.2f}' for x in got)} |"
        )
    print("\n".join(lines))
    if not args.no_write:
        write_section("## Bandwidth limits: accuracy", lines)


if __name__ == "__main__":
    main()
