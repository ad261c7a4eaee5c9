"""End to end: real master and agent processes with ``network/bandwidth`` switched on.

A command task asking ``net_mbps: 10`` pushes data to the test over TCP and is
held to 10 Mbit/s; a custom executor runs in its own namespace and still reaches
its agent (or fails at once, saying why, when it cannot); an agent SIGKILLed and
restarted keeps its running task's network and sweeps the rest; nothing is left
once the tasks ended and the cluster stopped.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import textwrap
import threading

import pytest
from pyroute2 import AsyncIPRoute

import mezzo
from mezzo import CommandInfo, ExecutorInfo, Filters, Resources, TaskInfo, TaskState
from mezzo.testing import LocalProcessCluster, wait_for
from mezzo_isolator_netbw import links, netns
from mezzo_isolator_netbw.addressing import Subnet
from mezzo_isolator_netbw.links import Alias, Names
from mezzo_isolator_netbw.networks import owner_of

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0,
    reason="needs root: network namespaces, veth links and tc qdiscs need CAP_SYS_ADMIN and CAP_NET_ADMIN",
)

ISOLATION = {"isolation": ["posix", "network/bandwidth"]}


class OneTask(mezzo.Scheduler):
    """Launches ``task(offer)`` on the first offer that fits, records its statuses."""

    def __init__(self, make_task) -> None:
        self.make_task = make_task
        self.launched = False
        self.statuses: list[mezzo.TaskStatus] = []
        self.done = threading.Event()

    def resource_offers(self, driver, offers):
        for offer in offers:
            task = None if self.launched else self.make_task(offer)
            if task is None or not task.resources.fits_in(offer.resources):
                driver.decline_offer(offer.offer_id, Filters(refuse_seconds=60 if self.launched else 0.1))
                continue
            self.launched = True
            driver.launch_tasks([offer.offer_id], [task])

    def status_update(self, driver, status):
        self.statuses.append(status)
        if mezzo.is_terminal(status.state):
            self.done.set()

    def final(self) -> mezzo.TaskStatus:
        assert self.done.wait(60), (
            f"the task did not end: {[mezzo.state_name(s.state) for s in self.statuses]}"
        )
        return self.statuses[-1]


def run_framework(cluster: LocalProcessCluster, scheduler: OneTask) -> mezzo.TaskStatus:
    driver = mezzo.SchedulerDriver(scheduler, mezzo.FrameworkInfo(name="netbw-test"), cluster.master)
    driver.start()
    try:
        return scheduler.final()
    finally:
        driver.stop()


def test_a_command_task_is_held_to_its_net_mbps(tmp_path, measurement, programs, no_leftovers):
    with LocalProcessCluster(
        1,
        agent=ISOLATION,
        agent_resources="cpus:2;mem:512;net_mbps:100",
        master={"allocation_interval": 0.05},
        directory=str(tmp_path / "cluster"),
    ) as cluster:
        (agent,) = cluster.state()["agents"]
        assert agent["resources"]["net_mbps"] == 100  # a custom scalar, offered as given
        m = measurement()
        command = shlex.join([sys.executable, "-c", programs.SENDER, str(m.port)])
        scheduler = OneTask(
            lambda offer: TaskInfo(
                task_id="sender",
                name="sender",
                agent_id=offer.agent_id,
                resources=Resources(cpus=0.5, mem=64, net_mbps=10),
                command=CommandInfo(value=command),
            )
        )
        status = run_framework(cluster, scheduler)
        mbps = m.result()
        print(f"\n[netbw measured] end to end through an agent, net_mbps 10: {mbps:.2f} Mbit/s")
        assert status.state == TaskState.TASK_FINISHED, status.message
        assert 9.0 <= mbps <= 11.0
        # The agent cleaned up after the task.
        wait_for(lambda: no_leftovers() == [], 10, "the container's network to be removed")
    assert no_leftovers() == []


EXECUTOR = textwrap.dedent("""
    import socket, threading
    import mezzo
    from mezzo import TaskState, TaskStatus

    def my_address():
        # The address this container's traffic to the host leaves from.
        with open("/proc/net/route") as f:
            gw = [l.split()[2] for l in list(f)[1:] if l.split()[1] == "00000000"][0]
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.connect((socket.inet_ntoa(bytes.fromhex(gw)[::-1]), 9))
        return s.getsockname()[0]

    class Report(mezzo.Executor):
        def launch_task(self, driver, task):
            driver.send_status_update(TaskStatus(task_id=task.task_id, state=TaskState.TASK_FINISHED,
                                                 data=my_address().encode()))

    mezzo.ExecutorDriver(Report()).run()
""")


def test_a_custom_executor_in_its_namespace_reaches_its_agent(tmp_path, no_leftovers):
    program = tmp_path / "report_executor.py"
    program.write_text(EXECUTOR)
    agent = {**ISOLATION, "listen": "0.0.0.0:0"}  # executors dial the agent through their gateway
    with LocalProcessCluster(
        1,
        agent=agent,
        agent_resources="cpus:2;mem:512;net_mbps:100",
        master={"allocation_interval": 0.05},
        directory=str(tmp_path / "cluster"),
    ) as cluster:
        executor = ExecutorInfo(
            executor_id="report",
            name="report",
            command=CommandInfo(value=f"{sys.executable} {program}"),
            resources=Resources(cpus=0.1, mem=64, net_mbps=5),
        )
        scheduler = OneTask(
            lambda offer: TaskInfo(
                task_id="where",
                name="where",
                agent_id=offer.agent_id,
                executor=executor,
                resources=Resources(cpus=0.1, mem=32, net_mbps=5),
            )
        )
        status = run_framework(cluster, scheduler)
        assert status.state == TaskState.TASK_FINISHED, status.message
        assert status.data.decode().startswith("10.213."), status.data  # inside its own namespace
    assert no_leftovers() == []


def test_an_agent_on_loopback_fails_custom_executor_launches_with_the_fix(tmp_path, no_leftovers):
    program = tmp_path / "report_executor.py"
    program.write_text(EXECUTOR)
    with LocalProcessCluster(
        1,
        agent=ISOLATION,
        agent_resources="cpus:2;mem:512",
        master={"allocation_interval": 0.05},
        directory=str(tmp_path / "cluster"),
    ) as cluster:
        executor = ExecutorInfo(
            executor_id="report",
            name="report",
            command=CommandInfo(value=f"{sys.executable} {program}"),
            resources=Resources(cpus=0.1, mem=64),
        )
        scheduler = OneTask(
            lambda offer: TaskInfo(
                task_id="where",
                name="where",
                agent_id=offer.agent_id,
                executor=executor,
                resources=Resources(cpus=0.1, mem=32),
            )
        )
        status = run_framework(cluster, scheduler)
        assert status.state == TaskState.TASK_FAILED
        assert (
            "cannot reach the agent" in status.message and 'set agent.listen to "0.0.0.0:' in status.message
        )
    assert no_leftovers() == []


def test_an_agent_restarted_after_a_crash_keeps_its_tasks_networks_and_sweeps_the_rest(
    tmp_path, run, no_leftovers
):
    with LocalProcessCluster(
        1,
        agent={**ISOLATION, "reconnect_interval": 0.1},
        agent_resources="cpus:2;mem:512;net_mbps:100",
        master={"allocation_interval": 0.05},
        directory=str(tmp_path / "cluster"),
    ) as cluster:
        scheduler = OneTask(
            lambda offer: TaskInfo(
                task_id="sleeper",
                name="sleeper",
                agent_id=offer.agent_id,
                resources=Resources(cpus=0.5, mem=64, net_mbps=10),
                command=CommandInfo(value="sleep 60"),
            )
        )
        driver = mezzo.SchedulerDriver(scheduler, mezzo.FrameworkInfo(name="netbw-restart"), cluster.master)
        driver.start()
        try:
            wait_for(
                lambda: any(s.state == TaskState.TASK_RUNNING for s in scheduler.statuses),
                20,
                "the task to run",
            )
            (run_dir,) = (cluster.dir / "agent-1").glob("frameworks/*/executors/sleeper/runs/*")
            task = Names.of(run_dir.name)
            assert sorted(no_leftovers()) == sorted([f"netns {task.netns}", f"link {task.host_if}"])

            # What the agent had half-made for another container when it died.
            agent_pid = cluster.procs["agent-1"].pid
            orphan = Names.of("orphan-of-the-crash")

            async def half_made():
                await netns.create(orphan.netns)
                async with AsyncIPRoute() as host:
                    await links.create_pair(
                        host,
                        orphan,
                        Subnet("10.213.0.0/16").block(100),
                        Alias("orphan-of-the-crash", orphan.netns, owner_of(agent_pid)),
                    )

            run(half_made())
            cluster.kill("agent-1", signal.SIGKILL)
            cluster.start_agent(1)
            cluster.wait_for_agents(1)
            # The running task's network is kept (and now owned by the new agent); the orphan's is gone.
            wait_for(
                lambda: sorted(no_leftovers()) == sorted([f"netns {task.netns}", f"link {task.host_if}"]),
                10,
                "the restarted agent to sweep the leftovers",
            )
            new_owner = owner_of(cluster.procs["agent-1"].pid)
            assert (
                f"owner={new_owner}"
                in subprocess.run(
                    ["ip", "link", "show", task.host_if], capture_output=True, text=True, check=True
                ).stdout
            )
            driver.kill_task("sleeper")
            assert scheduler.final().state == TaskState.TASK_KILLED
            wait_for(lambda: no_leftovers() == [], 10, "the killed task's network to be removed")
        finally:
            driver.stop()
    assert no_leftovers() == []
