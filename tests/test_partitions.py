"""Partitions on simulated hosts (mezzo.testing.netsim): what frameworks and masters do
when the network, not a process, fails. Real namespaces, nftables rules and daemons.

- An agent cut off from its master is declared lost after ``agent_ping_timeout``: its
  tasks become TASK_LOST, or TASK_UNREACHABLE for a partition-aware framework. Healed,
  it comes back under its id: the partition-aware framework's task is kept (and
  reported TASK_RUNNING again), the other one is killed without another word.
- A leading master cut off from ZooKeeper (but not from its agents) steps down before
  its session can expire and another master be elected: there is never a moment with
  two masters leading. The agents follow the new leader; healed, the old master
  stands by.
"""

from __future__ import annotations

import time

import pytest

import mezzo
from mezzo import CommandInfo, Filters, Resources, TaskInfo
from mezzo.state_client import MasterUnreachable, fetch_state
from mezzo.testing import netsim
from mezzo.testing.simcluster import SimCluster

from .conftest import Recorder, wait_for

pytestmark = pytest.mark.skipif(
    netsim.available() is not None, reason=f"{netsim.available()} (CI runs as root)"
)

HEALTH = {"allocation_interval": 0.02, "agent_ping_interval": 0.2, "agent_ping_timeout": 1.5}


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def launcher(task_id: str, pidfile, launched: list[str]):
    """An ``on_offers`` launching one long task on agent-1 (its pid into ``pidfile``)."""

    def on_offers(driver, offers):
        for o in offers:
            if not launched and o.hostname == "agent-1":
                launched.append(o.agent_id)
                task = TaskInfo(
                    task_id=task_id,
                    agent_id=o.agent_id,
                    resources=Resources(cpus=0.5, mem=64),
                    command=CommandInfo(value=f"echo $$ > {pidfile}; exec sleep 120"),
                )
                driver.launch_tasks(o.offer_id, [task], Filters(refuse_seconds=0))
            else:
                driver.decline_offer(o.offer_id, Filters(refuse_seconds=0.2))

    return on_offers


def test_an_agent_cut_off_is_unreachable_and_on_its_return_keeps_only_partition_aware_tasks(
    tmp_path, drivers
):
    with SimCluster(
        agents=2,
        masters=1,
        directory=str(tmp_path / "cluster"),
        master=HEALTH,
        agent={"reconnect_interval": 0.1},
        agent_resources="cpus:2;mem:512",
    ) as sim:
        assert sim.cluster is not None and sim.net is not None
        lossy_pid, aware_pid = tmp_path / "lossy.pid", tmp_path / "aware.pid"
        lossy_on, aware_on = [], []
        lossy = Recorder(launcher("lossy-task", lossy_pid, lossy_on))
        aware = Recorder(launcher("aware-task", aware_pid, aware_on))
        drivers(lossy, "lossy", sim.master)
        aware_driver = drivers(aware, "aware", sim.master, capabilities=["PARTITION_AWARE"])
        for rec, task, pidfile in ((lossy, "lossy-task", lossy_pid), (aware, "aware-task", aware_pid)):

            def running(rec=rec, task=task, pidfile=pidfile):
                return (
                    "TASK_RUNNING" in rec.states_of(task) and pidfile.exists() and pidfile.read_text().strip()
                )

            wait_for(running, 20, f"{task} to run")
        pids = {name: int(f.read_text()) for name, f in (("lossy", lossy_pid), ("aware", aware_pid))}
        (agent_id,) = set(lossy_on + aware_on)

        sim.net.partition([sim.host("agent-1")], [sim.host("master-1")])
        cut_at = time.monotonic()
        final = wait_for(lambda: lossy.final("lossy-task"), 15, "TASK_LOST")
        lost_after = time.monotonic() - cut_at
        assert mezzo.state_name(final.state) == "TASK_LOST" and final.reason == "agent_removed"
        unreachable = wait_for(
            lambda: next(
                (s for s in aware.statuses if mezzo.state_name(s.state) == "TASK_UNREACHABLE"), None
            ),
            5,
            "TASK_UNREACHABLE for the partition-aware framework",
        )
        assert unreachable.reason == "agent_unreachable" and "no answer to pings" in unreachable.message
        assert agent_id in lossy.lost_agents and agent_id in aware.lost_agents
        state = sim.cluster.state()
        assert [a["hostname"] for a in state["agents"]] == ["agent-2"]
        assert [t["id"] for t in state["unreachable_tasks"]] == ["aware-task"]
        assert all(alive(pid) for pid in pids.values()), "on the far side of the partition the tasks run on"
        # Declared lost after agent_ping_timeout of silence, counted from its last message
        # (up to a ping interval before the cut), and not much later.
        assert HEALTH["agent_ping_timeout"] - HEALTH["agent_ping_interval"] <= lost_after < 10

        # Reconciliation says the same while the partition lasts.
        aware_driver.reconcile_tasks([mezzo.TaskStatus(task_id="aware-task", agent_id=agent_id)])
        wait_for(lambda: aware.statuses[-1].reason == "reconciliation", 5, "a reconciliation answer")
        assert mezzo.state_name(aware.statuses[-1].state) == "TASK_UNREACHABLE"

        sim.net.heal()
        healed_at = time.monotonic()
        back = wait_for(
            lambda: next((s for s in aware.statuses if s.reason == "agent_reregistered"), None),
            30,
            "the partition-aware task to be back",
        )
        back_after = time.monotonic() - healed_at
        assert mezzo.state_name(back.state) == "TASK_RUNNING"
        state = sim.cluster.state()
        agent = next(a for a in state["agents"] if a["hostname"] == "agent-1")
        assert agent["id"] == agent_id and agent["tasks"] == 1, "back under its id, with the kept task"
        assert [t["id"] for t in state["tasks"]] == ["aware-task"] and state["unreachable_tasks"] == []
        wait_for(lambda: not alive(pids["lossy"]), 15, "the task reported lost to be killed")
        assert alive(pids["aware"])
        time.sleep(0.5)
        assert (
            lossy.states_of("lossy-task").count("TASK_LOST") == 1
            and mezzo.state_name(lossy.statuses[-1].state) == "TASK_LOST"
        ), "nothing more about a task reported lost"

        aware_driver.kill_task("aware-task")
        final = wait_for(lambda: aware.final("aware-task"), 15, "TASK_KILLED")
        assert mezzo.state_name(final.state) == "TASK_KILLED"
        print(f"lost after {lost_after:.2f} s of partition; back {back_after:.2f} s after the heal")


def leading(address: str) -> bool | None:
    """Whether the master at ``address`` says it leads (None: no answer)."""
    try:
        return bool(fetch_state(address, timeout=1.0)["master"]["leading"])
    except MasterUnreachable:
        return None


def test_a_master_cut_off_from_zookeeper_steps_down_before_another_is_elected(tmp_path):
    session = 2.0
    with SimCluster(
        agents=2,
        masters=2,
        directory=str(tmp_path / "cluster"),
        master={**HEALTH, "zk_session_timeout": session},
    ) as sim:
        cluster = sim.cluster
        assert cluster is not None and sim.net is not None
        old = cluster.leader()
        new = next(n for n in cluster.master_ports if n != old)
        address = {n: f"{sim.host(n).address}:{port}" for n, port in cluster.master_ports.items()}

        sim.net.partition([sim.host(old)], [sim.host("zk")])
        cut_at = time.monotonic()
        samples: list[tuple[float, bool | None, bool | None]] = []
        stepped_down = elected = None
        while time.monotonic() - cut_at < 4 * session:
            now = time.monotonic() - cut_at
            samples.append((now, leading(address[old]), leading(address[new])))
            if stepped_down is None and samples[-1][1] is False:
                stepped_down = now
            if elected is None and samples[-1][2]:
                elected = now
            if stepped_down is not None and elected is not None:
                break
            time.sleep(0.02)
        assert not [s for s in samples if s[1] and s[2]], f"two leaders at once: {samples}"
        assert stepped_down is not None and stepped_down < session, (stepped_down, samples[-5:])
        assert elected is not None and elected > stepped_down
        print(
            f"session {session:g} s: stepped down after {stepped_down:.2f} s, another elected after {elected:.2f} s"
        )
        cluster.wait_for_agents(2)  # through ZooKeeper, the agents found the new leader
        assert cluster.leader() == new

        sim.net.heal()
        wait_for(lambda: leading(address[old]) is False, 10, "the old master to answer again")
        time.sleep(2 * session)  # it has its ZooKeeper session back by now: it stands by
        assert leading(address[old]) is False and leading(address[new]) is True
