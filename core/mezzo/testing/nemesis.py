"""Faults over time against a :class:`~mezzo.testing.simcluster.SimCluster`, Jepsen style:
a seeded random schedule of faults, each held for a while and then healed.

    nemesis = Nemesis(sim, seed=7)
    print(nemesis.describe(60))        # the schedule, printed before it runs
    nemesis.start(60)                  # a thread plays it over 60 s
    nemesis.join()                     # until it has played out
    nemesis.stop()                     # (stops early if need be) everything is healed
    nemesis.log                        # (seconds, "start"/"heal", fault) as it happened

The same seed and duration always give the same schedule (names of hosts and
processes, not of what leads at the time: a fault aimed at "the leader" picks it when
it starts). Only one fault is active at a time, and the network and every process are
healed between two faults, so each fault's effect is its own.

Kinds (:data:`KINDS`):

- ``cut``: an agent's host goes off the network (its bridge port down);
- ``partition``: a random group of agents from the masters (both ways);
- ``one_way``: what one agent sends a master is dropped (the other way passes);
- ``loss``: an agent's host drops a share of what it receives;
- ``delay``: an agent's or a master's host sends everything late (50 ms to 1 s);
- ``freeze``: an agent or a master is stopped (SIGSTOP) and later continued;
- ``kill``: an agent or a standby master is killed (SIGKILL) and started again
  (an agent with the same work directory: it recovers its tasks);
- ``leader_zk``: the leading master is cut off from ZooKeeper but not from its agents.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .simcluster import SimCluster

KINDS = ("cut", "partition", "one_way", "loss", "delay", "freeze", "kill", "leader_zk")


@dataclass(frozen=True)
class Fault:
    """One fault: its kind, at what (host or process names), held how long."""

    kind: str
    targets: tuple[str, ...]
    at: float
    """Seconds from the start of the schedule."""
    hold: float
    amount: float = 0.0
    """``loss``: percent of packets dropped; ``delay``: seconds each packet is held."""

    def describe(self) -> str:
        what = ", ".join(self.targets) if self.targets else "the leader"
        extra = {"loss": f" {self.amount:g}%", "delay": f" {self.amount * 1000:g}ms"}.get(self.kind, "")
        return f"{self.at:6.1f}s  {self.kind}{extra} {what} for {self.hold:.1f}s"


class Nemesis:
    """Plays a seeded schedule of faults against ``sim``; see the module docstring.

    ``hold`` and ``gap`` are the ranges (seconds) a fault lasts and the quiet time
    between two; ``kinds`` limits the faults drawn.
    """

    def __init__(
        self,
        sim: SimCluster,
        seed: int,
        *,
        kinds: tuple[str, ...] = KINDS,
        hold: tuple[float, float] = (1.0, 4.0),
        gap: tuple[float, float] = (1.0, 3.0),
    ) -> None:
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise ValueError(f"kinds: unknown {sorted(unknown)} (known: {', '.join(KINDS)})")
        self.sim = sim
        self.seed = seed
        self.kinds = kinds
        self.hold = hold
        self.gap = gap
        self.log: list[tuple[float, str, Fault]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started_at = 0.0
        self.error: BaseException | None = None

    # -- the schedule ---------------------------------------------------------------

    def schedule(self, duration: float) -> list[Fault]:
        """The faults of a ``duration``-second run (the same for the same seed)."""
        rng = random.Random(self.seed)
        agents = [f"agent-{i}" for i in range(1, self.sim.n_agents + 1)]
        masters = [f"master-{i}" for i in range(1, self.sim.n_masters + 1)]
        faults: list[Fault] = []
        at = rng.uniform(*self.gap)
        while True:
            hold = rng.uniform(*self.hold)
            if at + hold > duration:
                return faults
            kind = rng.choice(self.kinds)
            amount = 0.0
            if kind in ("cut", "loss"):
                targets: tuple[str, ...] = (rng.choice(agents),)
                amount = rng.choice((20.0, 50.0, 80.0)) if kind == "loss" else 0.0
            elif kind == "delay":
                targets = (rng.choice(agents + masters),)
                amount = rng.choice((0.05, 0.2, 1.0))
            elif kind == "partition":
                size = rng.randint(1, max(1, len(agents) // 4))
                targets = tuple(sorted(rng.sample(agents, size)))
            elif kind == "one_way":
                targets = (rng.choice(agents), rng.choice(masters))
            elif kind == "freeze":
                targets = (rng.choice(agents + masters),)
            elif kind == "kill":
                targets = (rng.choice(agents + ["standby"] * (len(masters) > 1)),)
            else:  # leader_zk: the leader of the moment
                targets = ()
            faults.append(Fault(kind, targets, round(at, 2), round(hold, 2), amount))
            at += hold + rng.uniform(*self.gap)

    def describe(self, duration: float) -> str:
        lines = [f"nemesis seed {self.seed}, {duration:g} s:"]
        lines += ["  " + f.describe() for f in self.schedule(duration)]
        return "\n".join(lines)

    # -- playing it -----------------------------------------------------------------

    def start(self, duration: float) -> None:
        self._started_at = time.monotonic()
        self._thread = threading.Thread(
            target=self._play, args=(self.schedule(duration),), name="nemesis", daemon=True
        )
        self._thread.start()

    def join(self, timeout: float | None = None) -> bool:
        """Wait until the schedule has played out (True) or ``timeout`` passed (False)."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def stop(self) -> None:
        """Stop (early, if it still runs) with everything healed."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.error is not None:
            raise RuntimeError(f"the nemesis failed: {self.error!r}") from self.error

    def _now(self) -> float:
        return time.monotonic() - self._started_at

    def _play(self, faults: list[Fault]) -> None:
        try:
            for fault in faults:
                if self._stop.wait(max(0.0, fault.at - self._now())):
                    return
                heal = self._apply(fault)
                self.log.append((round(self._now(), 2), "start", fault))
                self._stop.wait(fault.hold)
                heal()
                self.log.append((round(self._now(), 2), "heal", fault))
                if self._stop.is_set():
                    return
        except BaseException as exc:  # noqa: BLE001 (reported by stop())
            self.error = exc
            self._heal_all()

    def _heal_all(self) -> None:
        assert self.sim.net is not None and self.sim.cluster is not None
        self.sim.net.heal()
        for proc in self.sim.cluster.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)

    def _apply(self, fault: Fault):  # noqa: ANN202 (returns the healing callable)
        sim = self.sim
        net, cluster = sim.net, sim.cluster
        assert net is not None and cluster is not None
        masters = [sim.host(f"master-{i}") for i in range(1, sim.n_masters + 1)]
        kind, targets = fault.kind, fault.targets
        if kind == "cut":
            host = sim.host(targets[0])
            host.cut()
            return host.reconnect
        if kind == "partition":
            net.partition([sim.host(t) for t in targets], masters)
            return net.heal
        if kind == "one_way":
            net.one_way([sim.host(targets[0])], [sim.host(targets[1])])
            return net.heal
        if kind == "loss":
            host = sim.host(targets[0])
            host.lose(fault.amount)
            return host.clear_rules
        if kind == "delay":
            host = sim.host(targets[0])
            host.delay(fault.amount)
            return host.undelay
        if kind == "freeze":
            proc = cluster.procs[targets[0]]
            proc.send_signal(signal.SIGSTOP)
            return lambda: proc.send_signal(signal.SIGCONT)
        if kind == "kill":
            name = targets[0]
            if name == "standby":
                leader = cluster.leader()
                name = next(m for m in cluster.master_ports if m != leader)
            cluster.kill(name, signal.SIGKILL)
            if name.startswith("agent-"):
                index = int(name.split("-")[1])
                return lambda: cluster.start_agent(index)
            return lambda: cluster.start_master(name)
        if kind == "leader_zk":
            net.partition([sim.host(cluster.leader())], [sim.host("zk")])
            return net.heal
        raise ValueError(f"unknown fault kind {kind!r}")
