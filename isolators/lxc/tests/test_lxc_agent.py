"""The lxc isolator in a real agent: command tasks run in real LXC containers (root,
Debian's lxc package), with their exit status, memory limit and kill; an agent where
LXC cannot run refuses to start, saying why. Each test ends by checking that no cgroup,
container directory or lock file was left behind."""

from __future__ import annotations

import asyncio
import glob
import os
import subprocess
import sys
import time

import mezzo
from mezzo.hookspecs import Container, ContainerLaunch
from mezzo.state_client import fetch_agent_statistics
from mezzo.testing import wait_for
from mezzo_isolator_lxc import LxcIsolator

MB = 1024 * 1024


def _payload(controller: str) -> str | None:
    found = glob.glob(f"/sys/fs/cgroup/{controller}/lxc.payload.mezzo-*")
    return found[0] if len(found) == 1 else None


def _read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def test_a_command_runs_in_an_lxc_container_with_its_limits_and_exit_status(lxc_cluster, run_task):
    cluster = lxc_cluster()
    task = run_task(cluster, 'readlink /proc/self/ns/pid; echo "pid $$"; sleep 1; exit 3', cpus=0.5, mem=64)
    memory = wait_for(lambda: _payload("memory"), 15, "the container's payload cgroup")
    # lxc creates the cgroup before it writes the limits: wait for them, a moment at most.
    wait_for(lambda: _read(f"{memory}/memory.limit_in_bytes") == str(64 * MB), 5, "the memory limit")
    wait_for(lambda: _read(f"{_payload('cpu')}/cpu.shares") == "512", 5, "the cpu shares")
    (agent,) = cluster.state()["agents"]
    stats = wait_for(lambda: fetch_agent_statistics(f"127.0.0.1:{agent['port']}"), 10, "usage")
    assert stats[0]["statistics"]["mem_limit_bytes"] == 64 * MB
    assert stats[0]["statistics"]["cpu_seconds"] >= 0

    final = task.final()
    assert mezzo.state_name(final.state) == "TASK_FAILED" and final.exit_code == 3, final
    namespace, pid = final.data.decode().split("\n")[:2]
    assert namespace != os.readlink("/proc/self/ns/pid")  # a pid namespace of its own
    assert int(pid.split()[1]) < 10  # the shell is pid 2 (3 under the agent's exit wrapper)


def test_a_task_of_another_user_runs_as_that_user_inside_its_container(lxc_cluster, run_task):
    """``agent.switch_user`` (the agent is root): lxc-execute and the exit wrapper run as
    root, and the command, inside the container, as the framework's user, with no
    capability left; the container's limits apply to it as to any."""
    cluster = lxc_cluster()
    task = run_task(
        cluster,
        "id -un; readlink /proc/self/ns/pid; grep CapEff /proc/self/status; sleep 1",
        user="nobody",
        mem=64,
    )
    memory = wait_for(lambda: _payload("memory"), 15, "the container's payload cgroup")
    wait_for(lambda: _read(f"{memory}/memory.limit_in_bytes") == str(64 * MB), 5, "the memory limit")
    final = task.final()
    assert mezzo.state_name(final.state) == "TASK_FINISHED", final
    user, namespace, caps = final.data.decode().split("\n")[:3]
    assert user == "nobody"
    assert namespace != os.readlink("/proc/self/ns/pid")
    assert caps.split() == ["CapEff:", "0000000000000000"]


def test_a_task_over_its_memory_limit_fails_with_reason_memory_limit(lxc_cluster, run_task):
    cluster = lxc_cluster()
    task = run_task(cluster, f"{sys.executable} -c 'x = bytearray(300 * 2**20)'", mem=64)
    final = task.final()
    assert mezzo.state_name(final.state) == "TASK_FAILED", final
    assert final.reason == "memory_limit", final
    assert "memory limit of 64 MB reached" in final.message and final.exit_code == 137


def test_kill_task_ends_the_container_within_the_grace_period(lxc_cluster, run_task):
    cluster = lxc_cluster()
    task = run_task(cluster, "sleep 300 & sleep 300")
    wait_for(lambda: "TASK_RUNNING" in task.states(), 15, "the task to run")
    memory = wait_for(lambda: _payload("memory"), 15, "the container's payload cgroup")
    pids = wait_for(
        lambda: (
            (found := [int(p) for p in _read(f"{memory}/cgroup.procs").split()]) and len(found) >= 4 and found
        ),
        10,
        "init, the shell and both sleeps",
    )
    asked = time.monotonic()
    task.driver.kill_task("t")
    final = task.final(10)
    assert mezzo.state_name(final.state) == "TASK_KILLED", final
    assert time.monotonic() - asked < 2.0  # lxc passed the SIGTERM on: no wait for the grace period
    assert not [p for p in pids if os.path.exists(f"/proc/{p}")]


def test_an_agent_without_lxc_execute_refuses_to_start_saying_why(tmp_path):
    cfg = tmp_path / "agent.toml"
    cfg.write_text(
        f'[agent]\nisolation = ["lxc"]\nwork_dir = "{tmp_path}/w"\n'
        '[agent.isolators.lxc]\nlxc_execute = "/nonexistent/lxc-execute"\n'
    )
    r = subprocess.run(
        [sys.executable, "-m", "mezzo", "agent", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 2, r.stderr
    assert (
        "mezzo agent: agent.isolators.lxc.lxc_execute: '/nonexistent/lxc-execute' not found: the lxc "
        "isolator needs lxc-execute from Debian's lxc package (apt-get install lxc)"
    ) in r.stderr


def test_an_lxc_that_cannot_run_a_container_stops_the_agent(lxc_host, tmp_path):
    cfg = tmp_path / "agent.toml"
    cfg.write_text(
        f'[agent]\nisolation = ["lxc"]\nwork_dir = "{tmp_path}/w"\n'
        '[agent.isolators.lxc]\nconfig = ["lxc.no.such.key = 1"]\n'
    )
    r = subprocess.run(
        [sys.executable, "-m", "mezzo", "agent", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 2, r.stderr
    assert "agent.isolators.lxc: the lxc isolator cannot run containers here: a trial container" in r.stderr
    assert "lxc.no.such.key" in r.stderr  # lxc's own complaint is quoted


def test_recover_removes_the_leftovers_of_containers_it_is_not_given(lxc_host):
    iso = LxcIsolator({}, key="agent.isolators.lxc")
    stale, kept, siblings = "mezzo-0badc0ffee00", "mezzo-0badc0ffee01", "mezzo-0badc0ffee02"
    made = []
    for name in (stale, kept, siblings):
        os.makedirs(os.path.join(iso.lxc_path, name))
        for controller in ("memory", "cpu"):
            for kind in ("lxc.payload.", "lxc.monitor."):
                made.append(f"/sys/fs/cgroup/{controller}/{kind}{name}")
                os.mkdir(made[-1])
    with open(os.path.join(iso.lxc_path, siblings, "owner"), "w") as f:
        f.write(iso.owner)  # made by an agent process that is alive (this one): not a leftover

    def container(name):
        return Container(
            container_id=name[len("mezzo-") :] + "0" * 20,
            framework_id="f",
            executor_id="e",
            resources=mezzo.Resources(),
            sandbox="/",
            launch=ContainerLaunch(argv=[], env={}, cwd="/"),
        )

    try:
        asyncio.run(iso.recover([container(kept)]))
        assert not os.path.exists(os.path.join(iso.lxc_path, stale))
        assert not [p for p in made if stale in p and os.path.exists(p)]
        for name in (kept, siblings):
            assert os.path.isdir(os.path.join(iso.lxc_path, name))
            assert all(os.path.isdir(p) for p in made if name in p)
    finally:
        for name in (kept, siblings):
            asyncio.run(iso.cleanup(container(name)))
    assert not [p for p in made if os.path.exists(p)]
    assert not [n for n in (stale, kept, siblings) if os.path.exists(os.path.join(iso.lxc_path, n))]
