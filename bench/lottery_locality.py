#!/usr/bin/env python3
"""Placement preferences (paper §4.3): contested preferred nodes split by weight.

Several frameworks with weights (by default 1 : 2 : 3) all prefer the same subset P
of the agents and always have work pending, so the demand for P exceeds its slots.
The real ``mezzo master`` runs as a process on loopback with an allocator chosen in
its TOML (``[master.allocator] name = ...`` and the allocator's weights table);
emulated agents (one ``cpus:1;mem:1024`` slot each, a ``python -m mezzo.emulation
agents`` process) "run" each task for the duration in its ``labels["duration"]``,
drawn Uniform(lo, hi), so P's slots free up continuously. The frameworks are real
scheduler drivers in this process: each launches one task on every offer of an agent
in P and turns down every other agent (see ``--prefer``).

The figure is, per framework, the time-average share of P's slots it held over a
window after a warm-up: the integral of its tasks' [launch, terminal update]
intervals clipped to the window, over |P| × window. The paper's target is
weight / Σ weights. Each allocator runs ``--runs`` times on a fresh cluster (seed
``seed + run``: the lottery's draws and the task durations), runs of the allocators
interleaved; medians over the runs.

Allocators compared (``--allocators``):

- ``lottery``: §4.3's proposal, every freed agent offered to a framework drawn with
  odds by weight among those the master may offer it to;
- ``drf``: weighted DRF, every freed agent offered to the framework with the lowest
  weighted dominant share among those the master may offer it to;
- ``lottery-unweighted``: the lottery with no weights table (equal odds), the
  baseline that shows what the weights change.

How a framework turns down agents outside P (``--prefer``): by default it declines
their offers with a short refuse filter (``--refuse``, 1 s). That is §4.3's premise:
the master does not know the preferences, it only sees offers come back, and the
lottery must reach the weighted split anyway. ``--prefer whitelist`` instead installs
a persistent agent whitelist of P (``set_filters``): the master then never offers
anything else, which takes the declines (and, under DRF, the short-lived offers
outside P that count toward a framework's share until declined) out of the picture.

Output: a line per run and a summary per allocator; unless ``--no-write``, the
section ``## Placement preferences`` of ``docs/benchmarks.md``, its subsection
``### Reading the placement-preference figures`` (generated from the figures, so
replaced on every run like the table), and ``docs/lottery_locality.png``.

Usage::

    python bench/lottery_locality.py                  # 3 allocators x 3 runs, writes docs/
    python bench/lottery_locality.py --runs 1 --window 8 --warmup 2 --preferred 12 \\
        --others 4 --duration 0.3,0.7 --no-write     # a toy size, ~30 s
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import mezzo
import mezzo.log
from _cluster import EmulatedCluster, machine
from _report import ROOT, pyplot, require_plotting, save_figure, write_section
from mezzo import Filters, FrameworkFilters, FrameworkInfo, Resources
from mezzo.emulation import emulated_task

ALLOCATORS = ("lottery", "drf", "lottery-unweighted")
SLOT = "cpus:1;mem:1024"
SLOT_RESOURCES = Resources.parse(SLOT)
"""One agent is one task slot, so one offer is one slot: the lottery offers an agent
whole, and a slot freed is an agent drawn for."""
HEADING = "## Placement preferences: the paper's §4.3"
READING = "### Reading the placement-preference figures"
PLOT = "lottery_locality.png"


# -- the frameworks -----------------------------------------------------------


@dataclass
class Interval:
    """One task's hold on a slot: launch to terminal update, ``time.monotonic()``."""

    start: float
    end: float | None = None


class PreferringScheduler(mezzo.Scheduler):
    """Launches one task on every offer of an agent in ``preferred`` (hostnames), turns
    down every other offer, and records when each task held its slot.

    Never runs out of work: every offer of P is used. Callbacks run on the shared
    driver thread; :meth:`intervals` may be read from another thread (a copy under
    the lock).
    """

    def __init__(
        self,
        name: str,
        preferred: frozenset[str],
        duration: tuple[float, float],
        seed: int,
        refuse_seconds: float,
        whitelist: bool,
    ) -> None:
        self.name = name
        self.preferred = preferred
        self.duration = duration
        self.rng = random.Random(seed)
        self.refuse = Filters(refuse_seconds=refuse_seconds)
        self.whitelist = whitelist
        self.lock = threading.Lock()
        self._held: dict[str, Interval] = {}
        self.registered_event = threading.Event()
        self.declined = 0
        self.failed = 0
        self._ids = 0

    def registered(self, driver, framework_id, master):
        if self.whitelist:
            # The master then never offers an agent outside P to this framework.
            driver.set_filters(FrameworkFilters(agents=sorted(self.preferred)))
        self.registered_event.set()

    def resource_offers(self, driver, offers):
        for offer in offers:
            if offer.hostname not in self.preferred or not SLOT_RESOURCES.fits_in(offer.resources):
                self.declined += 1
                driver.decline_offer(offer.offer_id, self.refuse)
                continue
            self._ids += 1
            task_id = f"{self.name}-{self._ids}"
            seconds = self.rng.uniform(*self.duration)
            with self.lock:
                self._held[task_id] = Interval(time.monotonic())
            # Nothing is left of a one-slot agent; refuse 0 so a leftover never sticks.
            driver.launch_tasks(
                offer.offer_id,
                [emulated_task(task_id, offer.agent_id, SLOT_RESOURCES, seconds)],
                Filters(refuse_seconds=0),
            )

    def status_update(self, driver, status):
        if not mezzo.is_terminal(status.state):
            return
        with self.lock:
            held = self._held.get(status.task_id)
            if held is not None and held.end is None:
                held.end = time.monotonic()
        if mezzo.state_name(status.state) != "TASK_FINISHED":
            self.failed += 1

    def intervals(self) -> list[Interval]:
        with self.lock:
            return [Interval(i.start, i.end) for i in self._held.values()]


def held_share(intervals: list[Interval], start: float, end: float, slots: int) -> float:
    """Time-average share of ``slots`` slots held over [start, end]: the overlap of each
    interval with the window (an open interval counts up to ``end``) / (slots × length)."""
    total = 0.0
    for i in intervals:
        hi = end if i.end is None else min(i.end, end)
        total += max(0.0, hi - max(i.start, start))
    return total / (slots * (end - start))


# -- one run ------------------------------------------------------------------


@dataclass
class Setup:
    """What one run needs beyond its allocator and seed (all from the command line)."""

    names: list[str]
    weights: list[float]
    preferred: int
    others: int
    duration: tuple[float, float]
    warmup: float
    window: float
    prefer: str
    refuse: float
    allocation_interval: float


@dataclass
class RunResult:
    allocator: str
    seed: int
    shares: dict[str, float]
    """Per framework: share of P's slot-time held in the window."""
    held: float
    """Share of P's slot-time held by anyone: the shares added up (see ``table_lines``)."""
    won: dict[str, int]
    """Per framework: tasks launched in the window (slots of P it won)."""
    tasks: int
    """Tasks launched in the window, all frameworks."""
    declined: int
    failed: int


def master_toml(allocator: str, setup: Setup, seed: int) -> str:
    """The master's TOML: the allocator and its weights by framework name.

    ``lottery`` takes ``weights = { frameworks = ... }``; ``drf`` takes ``frameworks``
    straight in its table (the two plugins' documented shapes).
    """
    table = ", ".join(f'"{n}" = {w:g}' for n, w in zip(setup.names, setup.weights, strict=True))
    lines = [
        "[master]",
        f"allocation_interval = {setup.allocation_interval:g}",
        "",
        "[master.allocator]",
        f'name = "{allocator.split("-")[0]}"',
        "",
    ]
    if allocator == "lottery":
        lines += [
            "[master.allocator.lottery]",
            f"seed = {seed}",
            f"weights = {{ frameworks = {{ {table} }} }}",
        ]
    elif allocator == "lottery-unweighted":
        lines += ["[master.allocator.lottery]", f"seed = {seed}"]
    elif allocator == "drf":
        lines += ["[master.allocator.drf]", f"frameworks = {{ {table} }}"]
    else:
        raise ValueError(f"unknown allocator {allocator!r} (known: {', '.join(ALLOCATORS)})")
    return "\n".join(lines) + "\n"


def one_run(allocator: str, seed: int, setup: Setup) -> RunResult:
    """A fresh master with ``allocator``, the agents and the frameworks; the shares held
    over the window that follows ``setup.warmup`` seconds of the agents being up."""
    preferred = frozenset(f"emulated-{i}" for i in range(setup.preferred))  # the pool's hostnames
    scheds = [
        PreferringScheduler(
            n, preferred, setup.duration, seed * 1000 + k, setup.refuse, setup.prefer == "whitelist"
        )
        for k, n in enumerate(setup.names)
    ]
    toml = master_toml(allocator, setup, seed)
    with (
        tempfile.TemporaryDirectory(prefix=f"locality-{allocator}-") as tmp,
        EmulatedCluster(
            Path(tmp), setup.preferred + setup.others, agent_resources=SLOT, master_toml=toml
        ) as cluster,
    ):
        drivers = [mezzo.SchedulerDriver(s, FrameworkInfo(name=s.name), cluster.address) for s in scheds]
        try:
            for d in drivers:
                d.start()
            # All registered before any agent exists: the allocator splits P from the start.
            for s in scheds:
                if not s.registered_event.wait(30):
                    raise RuntimeError(f"{s.name} did not register")
            cluster.start_agents()
            time.sleep(setup.warmup)
            start = time.monotonic()
            time.sleep(setup.window)
            end = time.monotonic()
            cluster.check_alive()  # a master or agent pool that died would void the window
        finally:
            for d in drivers:
                d.stop()
    held = {s.name: s.intervals() for s in scheds}
    shares = {n: held_share(ivs, start, end, setup.preferred) for n, ivs in held.items()}
    won = {n: sum(start <= i.start < end for i in ivs) for n, ivs in held.items()}
    return RunResult(
        allocator,
        seed,
        shares,
        sum(shares.values()),
        won,
        tasks=sum(won.values()),
        declined=sum(s.declined for s in scheds),
        failed=sum(s.failed for s in scheds),
    )


# -- summaries ----------------------------------------------------------------


def targets(allocator: str, setup: Setup) -> dict[str, float]:
    """The share each framework should get: weight / Σ weights (equal without weights)."""
    ws = weights_of(allocator, setup)
    return {n: w / sum(ws) for n, w in zip(setup.names, ws, strict=True)}


def weights_of(allocator: str, setup: Setup) -> list[float]:
    return [1.0] * len(setup.names) if allocator == "lottery-unweighted" else setup.weights


def medians(runs: list[RunResult]) -> dict[str, float]:
    return {n: statistics.median(r.shares[n] for r in runs) for n in runs[0].shares}


def max_deviation(shares: dict[str, float], target: dict[str, float]) -> float:
    return max(abs(shares[n] - target[n]) for n in target)


def report_run(i: int, r: RunResult, setup: Setup) -> None:
    t = targets(r.allocator, setup)
    each = ", ".join(f"{n} {r.shares[n]:.3f} (target {t[n]:.3f}, won {r.won[n]})" for n in setup.names)
    print(
        f"{r.allocator} run {i + 1} seed {r.seed}: {each}; P held {r.held:.1%}; "
        f"max deviation {max_deviation(r.shares, t):.3f}; {r.tasks} tasks in the window, {r.declined} declined, "
        f"{r.failed} failed",
        flush=True,
    )


def report_summary(results: dict[str, list[RunResult]], setup: Setup) -> None:
    for allocator, runs in results.items():
        t, med = targets(allocator, setup), medians(runs)
        each = ", ".join(f"{n} {med[n]:.3f}" for n in setup.names)
        print(
            f"{allocator} median of {len(runs)}: {each}; max deviation from weight/sum "
            f"{max_deviation(med, t):.3f}; P held {statistics.median(r.held for r in runs):.1%}",
            flush=True,
        )


# -- docs ---------------------------------------------------------------------


def write_results(args: argparse.Namespace, setup: Setup, results: dict[str, list[RunResult]]) -> None:
    plotted = draw(results, setup, ROOT / "docs" / PLOT)
    write_section(HEADING, table_lines(args, setup, results, plotted))
    write_section(READING, reading_lines(setup, results))


def table_lines(args, setup: Setup, results: dict[str, list[RunResult]], plotted: bool) -> list[str]:
    lo, hi = setup.duration
    how = (
        "declines every offer outside P with `refuse_seconds = "
        f"{setup.refuse:g}`, so the master is never told which agents it prefers"
        if setup.prefer == "decline"
        else "installs a persistent agent whitelist of P (`set_filters`), so the master offers it nothing else"
    )
    lines = [
        (
            f"`{command(args)}` ({time.strftime('%Y-%m-%d')}, {machine()}; master, emulated agents and the "
            f"frameworks on this one machine). {len(setup.names)} frameworks of weights "
            f"{' : '.join(f'{w:g}' for w in setup.weights)} (by name in the allocator's weights table) all prefer the "
            f"same {setup.preferred} agents P of {setup.preferred + setup.others} (one task slot each) and always "
            f"have work: each launches a task of Uniform({lo:g} s, {hi:g} s) on every offer of P and {how}. "
            f"*Share* is the time-average share of P's slots a framework held (its tasks' launch to terminal "
            f"update) over a {setup.window:g} s window after {setup.warmup:g} s of warm-up; target = weight / "
            f"Σ weights (paper §4.3). `allocation_interval = {setup.allocation_interval:g}`. Medians of "
            f"{args.runs} runs per allocator, each on a fresh cluster, allocators interleaved."
        ),
        "",
        "| allocator | framework | weight | target share | measured share (median) | runs |",
        "|---|---|---|---|---|---|",
    ]
    for allocator, runs in results.items():
        t, med = targets(allocator, setup), medians(runs)
        for n, w in zip(setup.names, weights_of(allocator, setup), strict=True):
            label = f"{w:g}" if allocator != "lottery-unweighted" else "none (1)"
            each = " / ".join(f"{r.shares[n]:.3f}" for r in runs)
            lines.append(f"| `{allocator}` | {n} | {label} | {t[n]:.3f} | {med[n]:.3f} | {each} |")
    lines.append("")
    lines.append(
        "| allocator | max \\|median − target\\| | per run | P held (median) "
        "| tasks launched in the window (median) |"
    )
    lines.append("|---|---|---|---|---|")
    for allocator, runs in results.items():
        t, med = targets(allocator, setup), medians(runs)
        per = " / ".join(f"{max_deviation(r.shares, t):.3f}" for r in runs)
        lines.append(
            f"| `{allocator}` | {max_deviation(med, t):.3f} "
            f"| {per} | {statistics.median(r.held for r in runs):.1%} "
            f"| {statistics.median(r.tasks for r in runs):,.0f} |"
        )
    lines.append("")
    lines.append(
        "*P held*: the frameworks' shares added up. A slot counts from its task's launch to the "
        "terminal update reaching the scheduler, which arrives after the master has freed the "
        "slot, so this is about 100 % whenever freed slots are taken again at once."
    )
    if plotted:
        lines += ["", f"![Placement preferences: share of the preferred agents per framework]({PLOT})"]
    return lines


def reading_lines(setup: Setup, results: dict[str, list[RunResult]]) -> list[str]:
    """The prose under the tables, generated from the figures so that it stays true
    when they are measured again: numbers, and what each policy does."""
    lines = []
    spread: dict[str, float] = {}
    for allocator, runs in results.items():
        t, med = targets(allocator, setup), medians(runs)
        worst = max(t, key=lambda n: abs(med[n] - t[n]))
        spread[allocator] = max(
            max(r.shares[n] for r in runs) - min(r.shares[n] for r in runs) for n in setup.names
        )
        lines.append(
            f"- **`{allocator}`**: medians within {max_deviation(med, t):.3f} of the targets "
            f"(largest gap: {worst}, {med[worst]:.3f} against {t[worst]:.3f}); one framework's "
            f"share differed by up to {spread[allocator]:.3f} between runs."
        )
    lines.append(
        "- **The lottery.** Every framework accepts every agent of P, so each freed slot of P is drawn "
        "among all of them, framework *i* winning with probability wᵢ / Σ w whatever it already holds. "
        f"A run's share is therefore close to the fraction of the "
        f"{statistics.median(r.tasks for rs in results.values() for r in rs):,.0f} draws of its window "
        "(median) that it won, and scatters around the target by binomial noise."
    )
    drf_note = (
        "- **DRF.** Each freed agent goes to the framework with the lowest dominant share / weight "
        "among those that may take it. Here every framework wants every agent of P and runs nothing "
        "elsewhere, so that is the framework furthest below its weighted share of P: each freed slot pulls "
        "the holdings back toward weight-proportional, and DRF needs no knowledge of the preferences "
        "either in this setting. It would differ if a framework also ran tasks outside P (they count "
        "in its dominant share) or if frameworks preferred different agents. An offer outside P "
        "counts toward its framework's share until it is declined."
    )
    lines.append(drf_note)
    if "drf" in spread and "lottery" in spread:
        lines.append(
            f"- Largest run-to-run difference of one framework's share: `drf` {spread['drf']:.3f}, "
            f"`lottery` {spread['lottery']:.3f}."
        )
    if "lottery-unweighted" in results:
        med = medians(results["lottery-unweighted"])
        weighted = {n: w / sum(setup.weights) for n, w in zip(setup.names, setup.weights, strict=True)}
        lines.append(
            f"- **Without weights** the lottery's medians are {max_deviation(med, weighted):.3f} from the "
            f"weighted targets at worst: the frameworks demand the same, and the split of P follows the "
            f"configured weights, not demand."
        )
    declined = statistics.median(r.declined for rs in results.values() for r in rs)
    ok = all(r.failed == 0 for rs in results.values() for r in rs)
    lines.append(
        f"- Offers outside P declined per run (all frameworks together, median): {declined:,.0f}. "
        + ("No task failed." if ok else "**Some tasks failed** (see the script's output).")
    )
    return lines


def command(args: argparse.Namespace) -> str:
    """The command line that reproduces the figures (defaults left out)."""
    parts = ["python bench/lottery_locality.py"]
    for key, default in DEFAULTS.items():
        value = getattr(args, key)
        if value != default:
            text = ",".join(f"{v:g}" for v in value) if isinstance(value, tuple) else value
            parts.append(f"--{key.replace('_', '-')} {text}")
    return " ".join(parts)


def draw(results: dict[str, list[RunResult]], setup: Setup, path: Path) -> bool:
    """Grouped bars: median share of P per framework and allocator, min-max over runs as
    error bars, the targets as markers. False (and no file) without matplotlib."""
    plt = pyplot()
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=120)
    width = 0.8 / len(results)
    xs = range(len(setup.names))
    for k, (allocator, runs) in enumerate(results.items()):
        med = medians(runs)
        ys = [med[n] for n in setup.names]
        lo = [y - min(r.shares[n] for r in runs) for y, n in zip(ys, setup.names, strict=True)]
        hi = [max(r.shares[n] for r in runs) - y for y, n in zip(ys, setup.names, strict=True)]
        pos = [x - 0.4 + width * (k + 0.5) for x in xs]
        ax.bar(pos, ys, width, yerr=[lo, hi], capsize=3, ecolor="dimgray", label=allocator)
        t = targets(allocator, setup)
        ax.scatter(
            pos,
            [t[n] for n in setup.names],
            marker="D",
            s=18,
            color="crimson",
            zorder=3,
            label="target (weight / Σ)" if k == 0 else None,
        )
    ax.set_xticks(list(xs), [f"{n} (w={w:g})" for n, w in zip(setup.names, setup.weights, strict=True)])
    ax.set_ylabel("share of P's slots held")
    ax.set_ylim(0, max(0.6, max(max(r.shares.values()) for rs in results.values() for r in rs) + 0.05))
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    save_figure(fig, path)
    return True


# -- main ---------------------------------------------------------------------


def pair(text: str) -> tuple[float, float]:
    lo, hi = (float(x) for x in text.split(","))
    if not 0 < lo <= hi:
        raise argparse.ArgumentTypeError(f"need 0 < lo <= hi, got {text}")
    return lo, hi


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--allocators", default=",".join(ALLOCATORS), help="comma-separated, from: " + ", ".join(ALLOCATORS)
    )
    p.add_argument("--weights", default="1,2,3", help="one weight per framework, comma-separated")
    p.add_argument("--preferred", type=int, default=48, help="agents in P (one slot each)")
    p.add_argument("--others", type=int, default=16, help="agents outside P, which nobody wants")
    p.add_argument("--duration", type=pair, default=(1.0, 3.0), help="task seconds, Uniform(lo,hi): 'lo,hi'")
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--window", type=float, default=25.0)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--seed", type=int, default=1, help="run i uses seed + i")
    p.add_argument(
        "--prefer",
        choices=("decline", "whitelist"),
        default="decline",
        help="how a framework turns down agents outside P",
    )
    p.add_argument("--refuse", type=float, default=1.0, help="refuse_seconds of a decline")
    p.add_argument("--allocation-interval", type=float, default=0.1)
    p.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md and the plot")
    return p


DEFAULTS = {k: v for k, v in vars(parser().parse_args([])).items() if k not in ("no_write",)}


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)
    require_plotting(p, not args.no_write)
    mezzo.log.configure("warning")
    weights = [float(w) for w in args.weights.split(",")]
    setup = Setup(
        names=[f"fw{k + 1}" for k in range(len(weights))],
        weights=weights,
        preferred=args.preferred,
        others=args.others,
        duration=args.duration,
        warmup=args.warmup,
        window=args.window,
        prefer=args.prefer,
        refuse=args.refuse,
        allocation_interval=args.allocation_interval,
    )
    allocators = args.allocators.split(",")
    results: dict[str, list[RunResult]] = {a: [] for a in allocators}
    for i in range(args.runs):
        # Interleaved, so that a machine busier at one time weighs on every allocator.
        for allocator in allocators:
            r = one_run(allocator, args.seed + i, setup)
            results[allocator].append(r)
            report_run(i, r, setup)
    report_summary(results, setup)
    if not args.no_write:
        write_results(args, setup, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
