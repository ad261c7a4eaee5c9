#!/usr/bin/env python3
"""What each isolator costs per container: set-up (prepare, spawn, isolate) and teardown.

The agent's own :class:`~mezzo.agent.Containerizer`, built from an ``agent.isolation``
list exactly as an agent builds it, runs ``--containers`` containers of ``/bin/true``
one after the other. For each it times:

- *set-up*: ``Containerizer.launch``, every isolator's ``prepare``, the fork and
  exec, every isolator's ``isolate``;
- *teardown*: ``Containerizer.destroy`` once the process has exited, every
  isolator's ``cleanup`` in reverse order;
- *whole*: launch to cleaned up, the process's run included (``lxc-execute``
  builds its container after the spawn, so only this figure shows lxc's cost).
 Configurations alternate, container by
container, so a busy machine slows them all alike. Isolators that are not
installed, or cannot run here (not root), are reported as skipped.

Usage::

    python bench/isolator_cost.py                     # writes docs/benchmarks.md
    python bench/isolator_cost.py --containers 20 --no-write
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid

import mezzo.log
from _cluster import isolation_unavailable, machine
from _report import write_section
from mezzo import Resources
from mezzo.agent.containerizer import Containerizer
from mezzo.config import AgentConfig
from mezzo.errors import MezzoError
from mezzo.hookspecs import Container, ContainerLaunch
from mezzo.plugins import load_plugins

CONFIGS = [
    ["posix"],
    ["posix", "cgroups/cpu"],
    ["posix", "cgroups/mem"],
    ["posix", "network/bandwidth"],
    ["lxc"],
]


def build(isolation: list[str], work: str) -> Containerizer | str:
    """The containerizer, or why it cannot run here."""
    why = isolation_unavailable(isolation)
    if why is not None:
        return why
    try:
        return Containerizer.from_config(AgentConfig(isolation=isolation, work_dir=work), load_plugins())
    except MezzoError as exc:
        return str(exc)


async def one(containerizer: Containerizer, work: str) -> tuple[float, float, float]:
    cid = uuid.uuid4().hex
    sandbox = os.path.join(work, cid)
    os.makedirs(sandbox)
    container = Container(
        container_id=cid,
        framework_id="bench",
        executor_id=cid,
        resources=Resources(cpus=1, mem=64),
        sandbox=sandbox,
        launch=ContainerLaunch(argv=["/bin/true"], env={"PATH": os.environ["PATH"]}, cwd=sandbox),
    )
    began = started = time.perf_counter()
    running = await containerizer.launch(
        container, stdout=os.path.join(sandbox, "stdout"), stderr=os.path.join(sandbox, "stderr")
    )
    setup = time.perf_counter() - started
    await running.wait()
    running.kill()
    started = time.perf_counter()
    errors = await containerizer.destroy(container)
    ended = time.perf_counter()
    teardown = ended - started
    if errors:
        raise RuntimeError(f"clean-up failed: {errors}")
    return setup, teardown, ended - began


async def measure(containers: int) -> tuple[dict[str, tuple[list[float], ...]], dict[str, str]]:
    with tempfile.TemporaryDirectory(prefix="isolator-cost-") as work:
        built: dict[str, Containerizer] = {}
        skipped: dict[str, str] = {}
        for isolation in CONFIGS:
            label = " + ".join(isolation)
            c = build(isolation, work)
            if isinstance(c, str):
                skipped[label] = c
                print(f"{label}: skipped ({c})")
            else:
                await c.recover([])
                built[label] = c
        times: dict[str, tuple[list[float], ...]] = {label: ([], [], []) for label in built}
        for _ in range(containers):
            for label, c in built.items():
                for series, value in zip(times[label], await one(c, work), strict=True):
                    series.append(value)
        for c in built.values():
            c.close()
        return times, skipped


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--containers", type=int, default=200, help="containers per configuration (default 200)")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    mezzo.log.configure("warning")
    times, skipped = asyncio.run(measure(args.containers))
    lines = [
        f"`python bench/isolator_cost.py` ({machine()}). The agent's containerizer runs {args.containers} "
        "containers of `/bin/true` per `agent.isolation` list, one after the other, configurations "
        "alternating. Set-up: prepare, fork and exec, isolate. Teardown: cleanup after the process "
        "exited. Whole: from launch until cleaned up, the process's run included; it is the "
        "figure to compare for `lxc`, whose container is made by `lxc-execute` after the spawn. "
        "Medians, with p90 in brackets.",
        "",
        "| `agent.isolation` | set-up | teardown | whole |",
        "|---|---|---|---|",
    ]
    for label, (setup, teardown, whole) in times.items():

        def fmt(xs: list[float]) -> str:
            q = statistics.quantiles(xs, n=10)[-1] if len(xs) >= 2 else xs[0]
            return f"{statistics.median(xs) * 1000:.1f} ms ({q * 1000:.1f})"

        lines.append(
            f"| {', '.join(f'`{n}`' for n in label.split(' + '))} | {fmt(setup)} | {fmt(teardown)} "
            f"| {fmt(whole)} |"
        )
    for label, why in skipped.items():
        lines.append(f"| {', '.join(f'`{n}`' for n in label.split(' + '))} | skipped: {why} | | |")
    print("\n".join(lines))
    if not args.no_write:
        write_section("## Container set-up and teardown per isolator", lines)


if __name__ == "__main__":
    main()
