"""Deployed as docs/deploying.md says: wheels from ``make dist`` in a clean venv, ZooKeeper,
a master and an agent started with the command lines of ``deploy/systemd``'s units and the
settings of ``deploy/etc``, then a task run and an agent upgraded under it.

The files are used as shipped but for what names a host: paths (/opt/mezzo, /etc/mezzo,
/var/lib/...) move into the test's directory, and addresses to loopback ports. Every
process runs as root here (the units' ``User=`` is not applied).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from mezzo.testing import free_port, wait_for

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
ZK_HOSTS = "10.0.0.1:2181,10.0.0.2:2181,10.0.0.3:2181"


def _unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root: the agent runs tasks under cgroups as the unit does (CI runs as root)"
    try:
        from mezzo_isolator_cgroups import v1

        v1.require({"cpu": ["cpu.shares"], "memory": ["memory.limit_in_bytes"]})
    except v1.CgroupsUnavailable as exc:
        return f"needs cgroup v1 cpu and memory, as deploy/etc/agent.toml asks: {exc}"
    return None


def unit_service(path: Path) -> dict[str, list[str]]:
    """The ``[Service]`` settings of a systemd unit, each key with its values in order."""
    settings: dict[str, list[str]] = {}
    section = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
        elif section == "[Service]":
            key, _, value = line.partition("=")
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


class Host:
    """The test's stand-in for one host's file system: /opt/mezzo, /etc/mezzo, /var/lib."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.opt = root / "opt" / "mezzo"
        self.etc = root / "etc" / "mezzo"
        self.var = root / "var" / "lib"
        self.etc.mkdir(parents=True)
        (self.var / "zookeeper").mkdir(parents=True)
        self.procs: dict[str, subprocess.Popen] = {}

    def place(self, text: str, **ports: int) -> str:
        """Shipped text with this host's paths, and loopback for the example addresses."""
        text = text.replace("/opt/mezzo", str(self.opt)).replace("/etc/mezzo", str(self.etc))
        text = text.replace("/var/lib/", f"{self.var}/")
        text = text.replace(ZK_HOSTS, f"127.0.0.1:{ports['zk']}")
        text = text.replace("clientPort=2181", f"clientPort={ports['zk']}\nclientPortAddress=127.0.0.1")
        # The restore below waits out the backed-up leader's session: 2 s, not 10, here.
        text = text.replace("zk_session_timeout = 10.0", "zk_session_timeout = 2.0")
        text = text.replace('"0.0.0.0:5050"', f'"127.0.0.1:{ports["master"]}"')
        return text.replace('"0.0.0.0:5051"', f'"127.0.0.1:{ports["agent"]}"')

    def start_unit(self, name: str, **ports: int) -> subprocess.Popen:
        """Run ``deploy/systemd/<name>.service``'s ExecStart with its Environment."""
        service = unit_service(DEPLOY / "systemd" / f"{name}.service")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MEZZO", "VIRTUAL_ENV"))}
        env["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin"  # not the test's venv
        for assignment in service.get("Environment", []):
            key, _, value = self.place(assignment, **ports).partition("=")
            env[key] = value
        (exec_start,) = service["ExecStart"]
        log = open(self.root / f"{name}.log", "ab")
        proc = subprocess.Popen(
            shlex.split(self.place(exec_start, **ports)),
            cwd=self.root,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.procs[name] = proc
        return proc

    def stop_unit(self, name: str) -> int:
        """What ``systemctl stop`` does with KillSignal=SIGTERM and KillMode=process: a
        SIGTERM to the main process alone."""
        proc = self.procs.pop(name)
        proc.send_signal(signal.SIGTERM)
        return proc.wait(30)

    def log(self, name: str) -> str:
        return (self.root / f"{name}.log").read_text(errors="replace")

    def mezzo(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """The installed command line, as an operator runs it (client.toml)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MEZZO", "VIRTUAL_ENV"))}
        env["MEZZO_CONFIG"] = str(self.etc / "client.toml")
        return subprocess.run(
            [str(self.opt / "bin" / "mezzo"), *argv],
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def close(self) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        # Tasks the agent left running (keep_tasks_on_stop) work in its sandboxes.
        root = str(self.root)
        for entry in os.listdir("/proc"):
            with contextlib.suppress(OSError):
                if entry.isdigit() and os.readlink(f"/proc/{entry}/cwd").startswith(root + os.sep):
                    os.kill(int(entry), signal.SIGKILL)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> list[Path]:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(["make", "-s", "dist", f"DIST_DIR={out}"], cwd=REPO, check=True, capture_output=True)
    return sorted(out.glob("*.whl"))


def test_make_dist_builds_a_wheel_of_every_distribution(wheels):
    names = {w.name.split("-")[0] for w in wheels}
    assert names == {
        "mezzo",
        "mezzo_allocator_drf",
        "mezzo_allocator_priority",
        "mezzo_allocator_lottery",
        "mezzo_isolator_cgroups",
        "mezzo_isolator_lxc",
        "mezzo_isolator_netbw",
    }
    assert all(w.name.endswith("-py3-none-any.whl") for w in wheels)


def test_units_pass_systemd_analyze(tmp_path):
    if not Path("/usr/bin/systemd-analyze").exists():
        pytest.skip("needs systemd-analyze (Debian's systemd package)")
    fake_mezzo = tmp_path / "opt" / "mezzo" / "bin" / "mezzo"
    fake_mezzo.parent.mkdir(parents=True)
    fake_mezzo.write_text("#!/bin/sh\n")
    fake_mezzo.chmod(0o755)
    for unit in (DEPLOY / "systemd").glob("*.service"):
        (tmp_path / unit.name).write_text(
            unit.read_text().replace("/opt/mezzo", str(tmp_path / "opt" / "mezzo"))
        )
    units = sorted(str(p) for p in tmp_path.glob("*.service"))
    assert len(units) == 3
    checked = subprocess.run(["systemd-analyze", "verify", *units], capture_output=True, text=True)
    # Users the units name that this machine lacks are fine; anything else is a mistake.
    problems = [line for line in checked.stderr.splitlines() if "user" not in line.lower()]
    assert checked.returncode == 0 and not problems, checked.stderr
    agent = unit_service(DEPLOY / "systemd" / "mezzo-agent.service")
    assert agent["KillMode"] == ["process"]  # the tasks outlive the agent's restart


def test_installed_from_wheels_a_cluster_runs_and_an_agent_upgrades_under_its_tasks(wheels, tmp_path):
    if reason := _unavailable():
        pytest.skip(reason)
    host = Host(tmp_path)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(host.opt)], check=True)
        installed = subprocess.run(
            [str(host.opt / "bin" / "pip"), "install", "-q", *map(str, wheels)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert installed.returncode == 0, installed.stderr[-3000:]
        where = subprocess.run(
            [str(host.opt / "bin" / "python"), "-c",
             "import mezzo; from thrift.protocol import fastbinary; print(mezzo.__file__)"],  # fmt: skip
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        # The wheel, not this checkout; and Thrift's C codec, which the master's speed needs.
        assert where.startswith(str(host.opt)), where

        ports = {"zk": free_port(), "master": free_port(), "agent": free_port()}
        for name in ("master.toml", "agent.toml", "client.toml", "zoo.cfg"):
            (host.etc / name).write_text(host.place((DEPLOY / "etc" / name).read_text(), **ports))
        principals = [arg for name in ("master", "agent", "operator") for arg in ("--principal", name)]
        certs = host.mezzo("certs", str(host.etc / "tls"), *principals, "--host", "127.0.0.1")
        assert certs.returncode == 0, certs.stderr

        host.start_unit("mezzo-zookeeper", **ports)
        host.start_unit("mezzo-master", **ports)
        host.start_unit("mezzo-agent", **ports)
        wait_for(
            lambda: (r := host.mezzo("agents")).returncode == 0 and " active " in r.stdout,
            60,
            "the agent to register through ZooKeeper",
        )
        assert "CHANGE-ME" not in host.log("mezzo-agent") + host.log("mezzo-master")  # the password stays out

        ran = host.mezzo("run", "--user", "nobody", "--", "sh", "-c", "echo deployed; cat /proc/self/cgroup")
        assert ran.returncode == 0 and "deployed" in ran.stdout, (ran.stdout, ran.stderr)
        assert re.search(r":cpu[,:].*mezzo", ran.stdout), ran.stdout  # under the unit's isolation

        # A long task, then the agent's upgrade (systemctl restart) under it.
        long_run = subprocess.Popen(
            [str(host.opt / "bin" / "mezzo"), "run", "--name", "long", "--user", "nobody", "--",
             "sh", "-c", "echo $$ >> pids; exec sleep 600"],  # fmt: skip
            cwd=tmp_path,
            env={**os.environ, "MEZZO_CONFIG": str(host.etc / "client.toml")},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        host.procs["mezzo-run"] = long_run
        pids = wait_for(
            lambda: list(host.var.glob("mezzo/agent/frameworks/*/executors/*/runs/*/pids")),
            30,
            "the long task to start",
        )
        before = host.mezzo("ps", "--json")
        assert host.stop_unit("mezzo-agent") == 0
        assert "leaving tasks running for the next agent" in host.log("mezzo-agent")
        (pid,) = pids[0].read_text().split()
        assert Path(f"/proc/{pid}").exists(), "the task died with the agent"

        host.start_unit("mezzo-agent", **ports)  # the upgraded agent
        wait_for(
            lambda: "re-registered with the master" in host.log("mezzo-agent"),
            30,
            "the agent to come back with its task",
        )
        after = host.mezzo("ps", "--json")
        assert after.returncode == 0 and "TASK_RUNNING" in after.stdout, after
        assert _task_ids(after.stdout) == _task_ids(before.stdout) != []
        killed = host.mezzo("kill", _task_ids(after.stdout)[0])
        assert killed.returncode == 0, killed.stderr
        out, _ = long_run.communicate(timeout=30)
        assert "TASK_KILLED" in out and "TASK_LOST" not in out and "TASK_FAILED" not in out, out
        assert pids[0].read_text().split() == [pid]  # adopted, never started again
        del host.procs["mezzo-run"]

        # ZooKeeper backed up while it runs, lost, and restored as docs/deploying.md says:
        # the agent is still admitted (a registry lost would refuse it and kill its tasks).
        zk_data = host.var / "zookeeper"
        subprocess.run(["tar", "-C", str(zk_data), "-czf", str(tmp_path / "zk.tgz"), "version-2"], check=True)
        host.stop_unit("mezzo-master")
        host.stop_unit("mezzo-zookeeper")
        shutil.rmtree(zk_data / "version-2")
        subprocess.run(["tar", "-C", str(zk_data), "-xzf", str(tmp_path / "zk.tgz")], check=True)
        host.start_unit("mezzo-zookeeper", **ports)
        host.start_unit("mezzo-master", **ports)
        wait_for(lambda: host.log("mezzo-agent").count("re-registered with the master") == 2, 60,
                 "the agent to re-register with the master of the restored ZooKeeper")
        assert "declared this agent lost" not in host.log("mezzo-agent")
    finally:
        host.close()


def _task_ids(ps_json: str) -> list[str]:
    import json

    return [t["id"] for t in json.loads(ps_json)["tasks"]]
