#!/usr/bin/env python3
"""Ramp-up and job completion of a framework entitled to k slots: the paper's §4.2, Table 2.

The paper's model: a cluster of n slots full of other frameworks' tasks, a framework f
entitled to k slots that starts with none, tasks of mean duration T that are either
constant or exponential. f acquires its k *preferred* slots as the tasks holding them
end, so its ramp-up takes about T (constant: every slot frees within T) or T ln k
(exponential: the last of k exponential residuals). Its job is βkT slot-seconds of work,
βT once it holds all k slots. An *elastic* job uses each slot as soon as it gets it;
a *rigid* one (MPI) holds the slots it gets and starts only once it has all k.
Table 2's completion times: elastic (1/2 + β)T and (1 + β)T, rigid (1 + β)T and
(ln k + β)T; rigid utilization β/(1/2 + β) and β/(ln k - 1 + β); elastic utilization 1.

Here, against the real ``mezzo master`` process (allocator ``drf``) on loopback:

- ``--agents`` n emulated agents of ``cpus:1;mem:1024``: one slot each, in their own process;
- a background framework (this process, the real scheduler driver) that launches a
  one-slot task on every offer, forever. Its task durations are constant T or
  Exponential(mean T). For constant durations its first task on each slot lasts
  Uniform(0, T), the residual life of a slot in steady state, so slots do not all
  free at once; exponential durations are memoryless and need no such start;
- once the background holds every slot and one T has passed, the measured framework f
  registers (t0). With two frameworks of equal weight, DRF's guarantee for f is half the
  cluster, k = n/2 slots; the script asks the master (``guaranteed_share``) and stops if
  it says otherwise. DRF also offers every freed slot to f first while f holds fewer
  than k, because its share is the lower one. f prefers k particular agents (the
  paper's "all k of its preferred slots"): it takes those and declines the others with a
  one-hour refuse filter, so they go back to the background.
- elastic: f runs a worker on each slot from its TASK_RUNNING on; the job's βkT
  slot-seconds drain at one per worker-second, and when they are done (the paper's
  footnote 3: the last tasks on all slots end together) f stops and its tasks are killed.
  Rigid: f holds each slot with a waiting task; once all k run, the job runs βT more.
  A task is "held" from the TASK_RUNNING f receives for it.

Ramp-up (t0 until f sees its k-th TASK_RUNNING) is taken from the rigid runs, which
always wait for all k slots (an elastic job with exponential durations often ends
before its last slot arrives). Every figure is in units of T. Beside the paper's
formula, each row gives the median of the paper's own model sampled here (residuals
Uniform(0, T) or Exponential(T), instant hand-over): ln k is an approximation of
the harmonic number H_k, and a fluid job may end before its last slots arrive.

Usage::

    python bench/rampup.py                 # 40 agents (k = 20), T = 2 s, β = 2: about 6 minutes
    python bench/rampup.py --agents 8 --mean 0.5 --beta 1 --runs 1 --exp-runs 1 --no-write
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import mezzo.log
from _cluster import EmulatedCluster, machine
from _report import ROOT, pyplot, require_plotting, save_figure, write_section
from mezzo import is_terminal
from mezzo.driver import Scheduler, SchedulerDriver
from mezzo.emulation import EmulatedScheduler, emulated_task
from mezzo.resources import Resources
from mezzo.wire.ttypes import Filters, FrameworkInfo, Offer, TaskState, TaskStatus

SLOT = "cpus:1;mem:1024"
DISTRIBUTIONS = ("constant", "exponential")
MODES = ("elastic", "rigid")
HOLD_SECONDS = 3600.0
"""Duration label of f's tasks: they end when f stops, never on their own."""
REFUSE_SECONDS = 3600.0
"""f's refuse filter on agents it does not prefer: they are never offered to it again."""
POLL_SECONDS = 0.005
MODEL_SAMPLES = 20_000


# -- the paper's formulas and model --------------------------------------------------


def formulas(k: int, beta: float) -> dict[tuple[str, str], float]:
    """Table 2 in units of T, keyed by (metric, configuration)."""
    ln = math.log(k)
    return {
        ("ramp-up", "constant"): 1.0,
        ("ramp-up", "exponential"): ln,
        ("completion", "elastic constant"): 0.5 + beta,
        ("completion", "elastic exponential"): 1.0 + beta,
        ("completion", "rigid constant"): 1.0 + beta,
        ("completion", "rigid exponential"): ln + beta,
        ("utilization", "rigid constant"): beta / (0.5 + beta),
        ("utilization", "rigid exponential"): beta / (ln - 1.0 + beta),
    }


def fluid_completion(arrivals: Sequence[float], work: float) -> float:
    """When ``work`` slot-seconds are done by slots joining at ``arrivals`` (any order),
    each working from its arrival on; slots arriving after that moment are unused.

    Contract: ``arrivals`` is not empty and ``work`` > 0. Adding an arrival never moves
    the answer earlier than that arrival (a slot arriving after the answer adds nothing).
    """
    ordered = sorted(arrivals)
    total = 0.0
    answer = math.inf
    for m, a in enumerate(ordered, start=1):
        if a >= answer:
            break
        total += a
        # With the first m slots: m·C - Σa = work.
        answer = (work + total) / m
    return answer


def model_sample(dist: str, k: int, beta: float, rng: random.Random) -> dict[tuple[str, str], float]:
    """One draw of the paper's model (T = 1): the residuals of f's k preferred slots,
    handed over instantly; the same metrics as :func:`formulas`."""
    if dist == "constant":
        arrivals = [rng.random() for _ in range(k)]
    else:
        arrivals = [rng.expovariate(1.0) for _ in range(k)]
    ramp = max(arrivals)
    rigid = ramp + beta
    return {
        ("ramp-up", dist): ramp,
        ("completion", f"elastic {dist}"): fluid_completion(arrivals, beta * k),
        ("completion", f"rigid {dist}"): rigid,
        ("utilization", f"rigid {dist}"): beta * k / sum(rigid - a for a in arrivals),
    }


def model_medians(
    k: int, beta: float, seed: int, samples: int = MODEL_SAMPLES
) -> dict[tuple[str, str], float]:
    """Median of each metric over ``samples`` draws of :func:`model_sample` per distribution."""
    rng = random.Random(seed)
    out: dict[tuple[str, str], float] = {}
    for dist in DISTRIBUTIONS:
        draws = [model_sample(dist, k, beta, rng) for _ in range(samples)]
        for key in draws[0]:
            out[key] = statistics.median(d[key] for d in draws)
    return out


# -- the frameworks -------------------------------------------------------------------


class BackgroundDurations:
    """Task durations of the background framework: constant ``mean`` or Exponential(mean).

    For constant durations, the first ``slots`` tasks last Uniform(0, mean): a slot's
    residual task life in steady state, so that the slots do not all free at the same
    instant (they would stay in lockstep forever with constant durations).
    """

    def __init__(self, dist: str, mean: float, slots: int, seed: int) -> None:
        if dist not in DISTRIBUTIONS:
            raise ValueError(f"distribution must be one of {DISTRIBUTIONS}, got {dist!r}")
        self.dist = dist
        self.mean = mean
        self.staggered_left = slots if dist == "constant" else 0
        self.rng = random.Random(seed)

    def __call__(self) -> float:
        if self.dist == "exponential":
            return self.rng.expovariate(1.0 / self.mean)
        if self.staggered_left > 0:
            self.staggered_left -= 1
            return self.rng.uniform(0.0, self.mean)
        return self.mean


class Background(EmulatedScheduler):
    """The other frameworks' tasks: one task on every offer, forever (infinite demand).

    Also notes, per agent, when it last saw a task there end (``time.monotonic()``), so
    that the hand-over of a slot to f can be timed, and when it was offered which agent
    (``offers_seen``: (time, hostname)), so that slots f preferred but the background got
    can be counted. Written on the driver thread.
    """

    def __init__(self, durations: BackgroundDurations) -> None:
        super().__init__("background", Resources.parse(SLOT), durations)
        self.freed_at: dict[str, float] = {}
        self.offers_seen: list[tuple[float, str]] = []

    def resource_offers(self, driver: SchedulerDriver, offers: list[Offer]) -> None:
        now = time.monotonic()
        self.offers_seen.extend((now, o.hostname) for o in offers)
        super().resource_offers(driver, offers)

    def status_update(self, driver: SchedulerDriver, status: TaskStatus) -> None:
        if is_terminal(status.state):
            self.freed_at[status.agent_id] = time.monotonic()
        super().status_update(driver, status)


@dataclass
class Slot:
    """One of f's preferred slots: when it was freed by the background, offered to f and
    running f's task (``time.monotonic()``)."""

    agent_id: str
    freed: float | None
    offered: float
    running: float | None = None


class EntitledFramework(Scheduler):
    """The framework f: takes one slot on each of its preferred agents, declines the rest.

    ``deadline`` (``time.monotonic()``, None until known) is when f's job completes given
    the slots running so far; the caller stops f once it has passed. Elastic: the fluid
    drain of ``beta``·k·T slot-seconds over the slots from their TASK_RUNNING on (it only
    moves earlier as slots arrive, never into the past). Rigid: βT after the k-th
    TASK_RUNNING. Callbacks run on the driver thread; ``deadline`` is one attribute
    write, read by the caller without locking.
    """

    def __init__(
        self, mode: str, preferred: set[str], k: int, mean: float, beta: float, background: Background
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.preferred = preferred
        self.k = k
        self.mean = mean
        self.beta = beta
        self.background = background
        self.slots: dict[str, Slot] = {}
        """By task id."""
        self.deadline: float | None = None
        self.all_running_at: float | None = None
        self.declined = 0
        self.lost: list[str] = []
        """Tasks that ended before f stopped (must stay empty)."""

    def resource_offers(self, driver: SchedulerDriver, offers: list[Offer]) -> None:
        now = time.monotonic()
        taken = {s.agent_id for s in self.slots.values()}
        for offer in offers:
            if offer.hostname not in self.preferred or offer.agent_id in taken:
                self.declined += 1
                driver.decline_offer(offer.offer_id, Filters(refuse_seconds=REFUSE_SECONDS))
                continue
            task_id = f"f-{len(self.slots) + 1}"
            self.slots[task_id] = Slot(offer.agent_id, self.background.freed_at.get(offer.agent_id), now)
            taken.add(offer.agent_id)
            driver.launch_tasks(
                offer.offer_id, [emulated_task(task_id, offer.agent_id, Resources.parse(SLOT), HOLD_SECONDS)]
            )

    def status_update(self, driver: SchedulerDriver, status: TaskStatus) -> None:
        slot = self.slots.get(status.task_id)
        if slot is None:
            return
        if status.state == TaskState.TASK_RUNNING and slot.running is None:
            slot.running = time.monotonic()
            self._replan()
        elif is_terminal(status.state) and self.deadline is None:
            self.lost.append(f"{status.task_id}: state {status.state}")

    def running_times(self) -> list[float]:
        return sorted(s.running for s in self.slots.values() if s.running is not None)

    def _replan(self) -> None:
        running = self.running_times()
        if len(running) == self.k and self.all_running_at is None:
            self.all_running_at = running[-1]
        if self.mode == "elastic":
            self.deadline = fluid_completion(running, self.beta * self.k * self.mean)
        elif self.all_running_at is not None:
            self.deadline = self.all_running_at + self.beta * self.mean


# -- one run -----------------------------------------------------------------------


@dataclass
class Run:
    """What one run measured; times in seconds from t0 (f's driver start)."""

    dist: str
    mode: str
    k: int
    mean: float
    guaranteed_cpus: float
    held: int
    ramp_up: float | None
    completion: float
    running: list[float]
    handoff: list[float] = field(default_factory=list)
    """Per slot f got: the background's task end seen -> f's TASK_RUNNING seen (seconds)."""
    offer_wait: list[float] = field(default_factory=list)
    """Per slot f got: the background's task end seen -> the offer to f (seconds)."""
    utilization: float | None = None
    lost: list[str] = field(default_factory=list)
    passed_over: int = 0
    """Preferred slots offered to the background after t0 while f held fewer than k: a
    DRF tie (both frameworks at k - 1 when two slots free in one allocation cycle) goes to
    the framework registered first, the background; f waits a whole task more for it."""


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``predicate`` every POLL_SECONDS; TimeoutError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(POLL_SECONDS)


def one_run(args: argparse.Namespace, dist: str, mode: str, seed: int) -> Run:
    """A fresh master and agents; the background fills them; f registers and runs its job."""
    n, k, mean, beta = args.agents, args.agents // 2, args.mean, args.beta
    with (
        tempfile.TemporaryDirectory(prefix="rampup-") as tmp,
        EmulatedCluster(
            Path(tmp), n, agent_resources=SLOT, master_toml='[master.allocator]\nname = "drf"\n'
        ) as cluster,
    ):
        cluster.start_agents()
        background = Background(BackgroundDurations(dist, mean, n, seed))
        bg_driver = SchedulerDriver(background, FrameworkInfo(name="background"), cluster.address)
        bg_driver.start()
        f = EntitledFramework(mode, {f"emulated-{i}" for i in range(k)}, k, mean, beta, background)
        f_driver = SchedulerDriver(f, FrameworkInfo(name="entitled"), cluster.address)
        f_started = False
        try:
            wait_for(lambda: background.running >= n, 60, f"the background to fill {n} slots")
            time.sleep(args.settle * mean)  # the first wave of task ends: steady churn
            t0 = time.monotonic()
            f_driver.start()
            f_started = True
            guaranteed = f_driver.guaranteed_share(timeout=10).get("cpus")
            if guaranteed != k:
                raise RuntimeError(f"DRF guarantees f {guaranteed:g} cpus, not k = {k}")
            bound = (math.log(k) + 4 * beta + 10) * mean + 30  # far beyond any plausible run
            wait_for(
                lambda: f.deadline is not None and time.monotonic() >= f.deadline,
                bound,
                f"f's {mode} job to complete",
            )
            done = time.monotonic()
            held = len(f.running_times())
            lost = list(f.lost)
        finally:
            if f_started:  # stopping f kills its tasks (the elastic job's workers, the rigid gang)
                f_driver.stop()
                f_driver.join()
            bg_driver.stop()
            bg_driver.join()
    return measured(f, dist, mode, k, mean, float(guaranteed), t0, done, held, lost)


def measured(
    f: EntitledFramework,
    dist: str,
    mode: str,
    k: int,
    mean: float,
    guaranteed: float,
    t0: float,
    done: float,
    held: int,
    lost: list[str],
) -> Run:
    """The :class:`Run` record of f's slots, from t0 to ``done``."""
    # (slot, when it ran f's task) for the slots f got by ``done``
    got = [(s, s.running) for s in f.slots.values() if s.running is not None and s.running <= done]
    run = Run(
        dist,
        mode,
        k,
        mean,
        guaranteed,
        held,
        None if f.all_running_at is None else f.all_running_at - t0,
        done - t0,
        sorted(running - t0 for _, running in got),
        lost=lost,
    )
    # A slot already free at t0 was freed before f existed: its wait starts at t0.
    run.handoff = [running - max(s.freed or t0, t0) for s, running in got]
    run.offer_wait = [s.offered - max(s.freed or t0, t0) for s, _ in got]
    short_until = f.all_running_at if f.all_running_at is not None else done
    run.passed_over = sum(
        1 for at, host in f.background.offers_seen if t0 < at < short_until and host in f.preferred
    )
    if mode == "rigid":
        run.utilization = f.beta * k * mean / sum(done - running for _, running in got)
    return run


def describe(run: Run, index: int) -> str:
    """One printed line per run (the smoke test reads them)."""
    T = run.mean
    ramp = "not reached" if run.ramp_up is None else f"{run.ramp_up / T:.2f} T ({run.ramp_up:.2f} s)"
    util = "" if run.utilization is None else f", utilization {run.utilization:.2f}"
    handoff = f"{statistics.median(run.handoff):.3f} s" if run.handoff else "-"
    return (
        f"{run.dist} {run.mode} run {index}: DRF guarantee {run.guaranteed_cpus:g} cpus; "
        f"reached {run.held}/{run.k} slots; ramp-up {ramp}; job {run.completion / T:.2f} T "
        f"({run.completion:.2f} s){util}; hand-over median {handoff}; "
        f"preferred slots passed to the background {run.passed_over}; lost {len(run.lost)}"
    )


# -- summary and report ------------------------------------------------------------------


def rows(runs: list[Run], k: int, beta: float, model: dict) -> list[dict]:
    """Table rows: per (metric, configuration), the measured values (units of T; utilization
    as a fraction), their median, the formula and the model median."""
    values: dict[tuple[str, str], list[float]] = {}
    for r in runs:
        if r.mode == "rigid" and r.ramp_up is not None:
            values.setdefault(("ramp-up", r.dist), []).append(r.ramp_up / r.mean)
        values.setdefault(("completion", f"{r.mode} {r.dist}"), []).append(r.completion / r.mean)
        if r.utilization is not None:
            values.setdefault(("utilization", f"{r.mode} {r.dist}"), []).append(r.utilization)
    out = []
    for key, formula in formulas(k, beta).items():
        got = values.get(key)
        if not got:
            continue
        med = statistics.median(got)
        out.append(
            {
                "metric": key[0],
                "config": key[1],
                "values": got,
                "median": med,
                "formula": formula,
                "model": model[key],
                "ratio": med / formula,
                "model_ratio": med / model[key],
            }
        )
    return out


def print_rows(table: list[dict]) -> None:
    for row in table:
        unit = "" if row["metric"] == "utilization" else " T"
        print(
            f"{row['metric']} {row['config']}: median {row['median']:.2f}{unit} over {len(row['values'])} runs; "
            f"formula {row['formula']:.2f}{unit} (ratio {row['ratio']:.2f}); "
            f"model median {row['model']:.2f}{unit} (ratio {row['model_ratio']:.2f})",
            flush=True,
        )


def representative(runs: list[Run], dist: str) -> Run | None:
    """The rigid run of ``dist`` whose ramp-up is the median one (lower middle if even)."""
    timed = [(r.ramp_up, r) for r in runs if r.dist == dist and r.mode == "rigid" and r.ramp_up is not None]
    timed.sort(key=lambda pair: pair[0])
    return timed[(len(timed) - 1) // 2][1] if timed else None


def write_results(args: argparse.Namespace, runs: list[Run], table: list[dict]) -> None:
    k, T, beta = args.agents // 2, args.mean, args.beta
    plotted = draw(runs, k, ROOT / "docs" / "rampup.png")
    handoff = [h for r in runs for h in r.handoff]
    offer_wait = [w for r in runs for w in r.offer_wait]
    passed = sum(r.passed_over for r in runs)
    lines = [
        f"`python bench/rampup.py{command_args(args)}` ({time.strftime('%Y-%m-%d')}, {machine()}; "
        "master, emulated agents and both frameworks on this one machine, loopback). Paper §4.2, Table 2: "
        f"{args.agents} emulated agents of one slot (`{SLOT}`); a background framework keeps every slot "
        f"busy with tasks of constant T = {T:g} s (each slot's first task Uniform(0, T), the steady-state "
        f"residual) or Exponential(mean T). One T after the cluster is full, framework f registers: "
        f"with two frameworks of equal weight DRF guarantees it half the cluster, k = {k} slots (the "
        f"master's `guaranteed_share` said so in every run), and offers it each freed slot first while "
        f'it holds fewer. f takes its k preferred agents (the paper\'s "all k of its preferred slots") and '
        f"declines the others for an hour. Its job is βkT slot-seconds with β = {beta:g}: elastic uses each "
        f"slot from its TASK_RUNNING and ends when the work is drained (footnote 3: all slots finish "
        f"together); rigid holds its slots and runs βT once all k run. Ramp-up is f's driver start to its "
        f"k-th TASK_RUNNING, taken from the rigid runs (elastic jobs with exponential tasks often end "
        f"first). Completion is from f's driver start. Figures in units of T; *model* is the median of the "
        f"paper's own model sampled {MODEL_SAMPLES:,} times (residuals Uniform(0, T) or Exponential(T), "
        f"instant hand-over, exact H_k instead of ln k).",
        "",
        "| metric | configuration | measured median | paper formula | measured / formula "
        "| model median | measured / model | runs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in table:
        unit = "" if row["metric"] == "utilization" else " T"
        lines.append(
            f"| {row['metric']} | {row['config']} | {row['median']:.2f}{unit} | "
            f"{formula_text(row['metric'], row['config'], beta)} = {row['formula']:.2f}{unit} | "
            f"{row['ratio']:.2f} | {row['model']:.2f}{unit} | {row['model_ratio']:.2f} | "
            f"{len(row['values'])} |"
        )
    lines += [
        "",
        f"Elastic utilization is 1 by construction (a worker works from its TASK_RUNNING to the end). "
        f"Hand-over of a slot, over all {len(handoff)} slots f got: the background's task end (as its "
        f"scheduler saw it) to f's TASK_RUNNING, median {statistics.median(handoff) * 1000:.0f} ms "
        f"(p90 {quantile(handoff, 0.9) * 1000:.0f} ms, {statistics.median(handoff) / T:.3f} T), of which "
        f"the offer to f came after a median {statistics.median(offer_wait) * 1000:.0f} ms. "
        f"Preferred slots offered to the background while f held fewer than k (a DRF tie, "
        f"both at k - 1, goes to the framework registered first): {passed} in "
        f"{sum(1 for r in runs if r.passed_over)} of {len(runs)} runs. "
        f"ln k = {math.log(k):.2f}, H_k = {harmonic(k):.2f}. Tasks of f lost: "
        f"{sum(len(r.lost) for r in runs)}.",
    ]
    if plotted:
        lines += ["", "![Ramp-up: fraction of k slots held vs. time / T](rampup.png)"]
    write_section("## Ramp-up and job completion: the paper's §4.2, Table 2", lines)


def formula_text(metric: str, config: str, beta: float) -> str:
    """Table 2's expression for a row, with β written out."""
    b = f"{beta:g}"
    return {
        ("ramp-up", "constant"): "T",
        ("ramp-up", "exponential"): "T ln k",
        ("completion", "elastic constant"): f"(1/2 + {b})T",
        ("completion", "elastic exponential"): f"(1 + {b})T",
        ("completion", "rigid constant"): f"(1 + {b})T",
        ("completion", "rigid exponential"): f"(ln k + {b})T",
        ("utilization", "rigid constant"): f"{b}/(1/2 + {b})",
        ("utilization", "rigid exponential"): f"{b}/(ln k - 1 + {b})",
    }[(metric, config)]


def command_args(args: argparse.Namespace) -> str:
    """The non-default arguments of this run, to print the command that reproduces it."""
    out = []
    for name, default in DEFAULTS.items():
        value = getattr(args, name)
        if value != default:
            out.append(f"--{name.replace('_', '-')} {value:g}")
    return "".join(" " + o for o in out)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def harmonic(k: int) -> float:
    return sum(1.0 / i for i in range(1, k + 1))


def draw(runs: list[Run], k: int, path: Path) -> bool:
    """Fraction of k held vs. time / T for the representative rigid run of each
    distribution, with the model's expectation and the T and T ln k marks. False
    without matplotlib."""
    plt = pyplot()
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(6.4, 3.8), dpi=120)
    horizon = 1.2 * harmonic(k) + 1.0
    colors = {"constant": "tab:blue", "exponential": "tab:orange"}
    for dist in DISTRIBUTIONS:
        run = representative(runs, dist)
        if run is None:
            continue
        xs = [0.0] + [t / run.mean for t in run.running]
        ys = [i / k for i in range(len(xs))]
        ax.step(xs, ys, where="post", color=colors[dist], label=f"{dist} (measured, median run)")
        horizon = max(horizon, xs[-1] * 1.1)
    grid = [horizon * i / 200 for i in range(201)]
    ax.plot(grid, [min(1.0, x) for x in grid], ":", color=colors["constant"], linewidth=1, label="model: t/T")
    ax.plot(
        grid,
        [1 - math.exp(-x) for x in grid],
        ":",
        color=colors["exponential"],
        linewidth=1,
        label="model: 1 - exp(-t/T)",
    )
    ax.axvline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.axvline(math.log(k), color="grey", linestyle="-.", linewidth=1)
    # Above the legend (lower right), where no curve passes at these x.
    ax.text(1.0, 0.3, " T", color="grey", fontsize=8)
    ax.text(math.log(k), 0.3, " T ln k", color="grey", fontsize=8)
    ax.set_xlabel("time since f registered / T")
    ax.set_ylabel(f"fraction of k = {k} slots held")
    ax.set_xlim(0, horizon)
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=7)
    save_figure(fig, path)
    return True


DEFAULTS = {"agents": 40, "mean": 2.0, "beta": 2.0, "runs": 5, "exp_runs": 11, "settle": 1.0, "seed": 1}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--agents",
        type=int,
        default=DEFAULTS["agents"],
        help="one-slot emulated agents n (even); f is entitled to k = n/2",
    )
    p.add_argument("--mean", type=float, default=DEFAULTS["mean"], help="mean task duration T, seconds")
    p.add_argument("--beta", type=float, default=DEFAULTS["beta"], help="f's job is β·k·T slot-seconds")
    p.add_argument(
        "--runs", type=int, default=DEFAULTS["runs"], help="runs of each constant-duration configuration"
    )
    p.add_argument(
        "--exp-runs",
        type=int,
        default=DEFAULTS["exp_runs"],
        help="runs of each exponential configuration (random, so more)",
    )
    p.add_argument(
        "--settle",
        type=float,
        default=DEFAULTS["settle"],
        help="T's to wait after the cluster is full before f registers",
    )
    p.add_argument("--seed", type=int, default=DEFAULTS["seed"], help="seed of the background's durations")
    p.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md and the plot")
    args = p.parse_args(argv)
    require_plotting(p, not args.no_write)
    if args.agents < 2 or args.agents % 2:
        p.error("--agents must be an even number >= 2")
    mezzo.log.configure("warning")
    k = args.agents // 2
    print(f"{args.agents} agents, k = {k}, T = {args.mean:g} s, beta = {args.beta:g}", flush=True)
    runs: list[Run] = []
    seed = args.seed
    for dist in DISTRIBUTIONS:
        count = args.runs if dist == "constant" else args.exp_runs
        for mode in MODES:
            for i in range(1, count + 1):
                seed += 1
                run = one_run(args, dist, mode, seed)
                runs.append(run)
                print(describe(run, i), flush=True)
    table = rows(runs, k, args.beta, model_medians(k, args.beta, args.seed))
    print_rows(table)
    if args.no_write:
        print(json.dumps([r.__dict__ for r in runs], default=float))
    else:
        write_results(args, runs, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
