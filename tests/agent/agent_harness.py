"""Test harness for the agent: a scripted master on a real socket, and helpers.

The agent under test is the real one, with real processes; only its master is
scripted. :class:`ScriptedMaster` serves the ``Master`` service on loopback,
records every call the agent makes, answers registration and (by default)
acknowledges every status update, and lets a test send ``Agent`` calls back.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mezzo
from mezzo.agent import Agent
from mezzo.config import AgentConfig
from mezzo.plugins import Plugins, load_plugins
from mezzo.rpc import Connection, serve
from mezzo.services import AGENT, MASTER
from mezzo.testing import wait_for_async
from mezzo.wire.ttypes import CommandInfo, ExecutorInfo, FrameworkInfo, TaskInfo, TaskStatus

FRAMEWORK = FrameworkInfo(name="test-framework", framework_id="fw-1")
"""No user: an agent run as root runs its command tasks as ``nobody``."""
TIMEOUT = 10.0
PYTHON_USER = "root" if os.geteuid() == 0 else ""
"""Who runs the executors these tests start with this interpreter: root, since it may live
where only root may run it (a pyenv under /root); "" (the framework's, nobody) where the
agent does not run as root and switches no users. tests/agent/test_switch_user.py runs an
executor as another user."""


def run(coro, timeout: float = 30.0) -> Any:
    """Run one test's coroutine on a fresh event loop, bounded in time."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def wait_until(predicate: Callable[[], Any], timeout: float = TIMEOUT, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; return that."""
    return await wait_for_async(predicate, timeout, what)


def name(state: int) -> str:
    return mezzo.state_name(state)


@dataclass
class ScriptedMaster:
    """A master that does only what a test scripts."""

    port: int = 0
    agent_id: str = "agent-1"
    auto_ack: bool = True
    calls: list[tuple[str, tuple]] = field(default_factory=list)
    conns: list[Connection] = field(default_factory=list)
    agent_conn: Connection | None = None

    async def start(self) -> ScriptedMaster:
        self._server = await serve("127.0.0.1", self.port, MASTER, self)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def close(self) -> None:
        """Stop listening and drop every connection (the agent sees the master die)."""
        self._server.close()
        for conn in self.conns:
            conn.close()
        await self._server.wait_closed()
        self.agent_conn = None

    # -- Master service: the calls an agent makes ---------------------------

    def _record(self, conn: Connection, method: str, *args: Any) -> None:
        if conn not in self.conns:
            self.conns.append(conn)
        self.calls.append((method, args))

    def register_agent(self, conn: Connection, info: Any) -> None:
        self._record(conn, "register_agent", info)
        self.agent_conn = conn
        conn.remote(AGENT).registered(self.agent_id)

    def reregister_agent(self, conn: Connection, info: Any, tasks: Any, executors: Any,
                         frameworks: Any = None) -> None:
        self._record(conn, "reregister_agent", info, tasks, executors, frameworks)
        self.agent_conn = conn
        conn.remote(AGENT).reregistered(info.agent_id)

    def status_update(self, conn: Connection, status: TaskStatus) -> None:
        self._record(conn, "status_update", status)
        if self.auto_ack and status.uuid:
            conn.remote(AGENT).status_update_acknowledged(status.framework_id, status.task_id, status.uuid)

    def executor_exited(self, conn: Connection, *args: Any) -> None:
        self._record(conn, "executor_exited", *args)

    def executor_to_framework(self, conn: Connection, *args: Any) -> None:
        self._record(conn, "executor_to_framework", *args)

    # -- driving the agent -------------------------------------------------

    @property
    def agent(self) -> Any:
        """Stub for calling the registered agent's ``Agent`` service."""
        assert self.agent_conn is not None, "no agent registered"
        return self.agent_conn.remote(AGENT)

    def called(self, method: str) -> list[tuple]:
        return [args for m, args in self.calls if m == method]

    def updates(self, task_id: str | None = None) -> list[TaskStatus]:
        return [a[0] for a in self.called("status_update") if task_id is None or a[0].task_id == task_id]

    def states(self, task_id: str) -> list[str]:
        """State names of ``task_id`` in arrival order, retries collapsed by uuid."""
        seen, out = set(), []
        for s in self.updates(task_id):
            if s.uuid not in seen:
                seen.add(s.uuid)
                out.append(name(s.state))
        return out

    def final(self, task_id: str) -> TaskStatus | None:
        for s in reversed(self.updates(task_id)):
            if mezzo.is_terminal(s.state):
                return s
        return None

    async def wait_final(self, task_id: str, timeout: float = TIMEOUT) -> TaskStatus:
        return await wait_until(lambda: self.final(task_id), timeout, f"a terminal update of {task_id}")

    async def wait_state(self, task_id: str, state: str, timeout: float = TIMEOUT) -> None:
        await wait_until(lambda: state in self.states(task_id), timeout, f"{state} of {task_id}")


def agent_config(tmp_path: Path, master: str, **overrides: Any) -> AgentConfig:
    values: dict[str, Any] = {
        "master": master,
        "listen": "127.0.0.1:0",
        "hostname": "test-host",
        "work_dir": str(tmp_path / "work"),
        "resources": "cpus:4;mem:4096;disk:1000;ports:[31000-31099]",
        "kill_grace_period": 0.5,
        "executor_register_timeout": 5.0,
        "status_update_retry": 0.2,
        "reconnect_interval": 0.05,
    }
    values.update(overrides)
    return AgentConfig(**values)


@contextlib.asynccontextmanager
async def running_agent(config: AgentConfig, plugins: Plugins | None = None, *, register: bool = True):
    agent = Agent(config, plugins or load_plugins(entry_points=False))
    await agent.start()
    try:
        if register:
            await agent.wait_registered(TIMEOUT)
        yield agent
    finally:
        await agent.stop()


def command_task(task_id: str, command: str, **kw: Any) -> TaskInfo:
    return TaskInfo(
        task_id=task_id,
        name=task_id,
        agent_id="agent-1",
        resources=mezzo.Resources(cpus=0.1, mem=16),
        command=CommandInfo(value=command, **kw),
    )


def executor_task(task_id: str, script: Path, mode: str = "", executor_id: str = "exec-1") -> TaskInfo:
    return TaskInfo(
        task_id=task_id,
        name=task_id,
        agent_id="agent-1",
        resources=mezzo.Resources(cpus=0.1, mem=16),
        executor=ExecutorInfo(
            executor_id=executor_id,
            command=CommandInfo(value=sys.executable, arguments=["-u", str(script)], shell=False,
                                user=PYTHON_USER),
            resources=mezzo.Resources(cpus=0.1, mem=32),
            framework_id=FRAMEWORK.framework_id,
        ),
        data=mode.encode(),
    )


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def sandbox_of(agent: Agent, framework_id: str, executor_id: str) -> Path:
    runs = Path(agent.config.work_dir, "frameworks", framework_id, "executors", executor_id, "runs")
    dirs = sorted(p for p in runs.iterdir() if p.is_dir())  # beside each: its <id>.mezzo-exit
    assert len(dirs) == 1, dirs
    return dirs[0]


EXECUTOR_SCRIPT = r'''
"""A minimal executor speaking the Agent/Executor services with mezzo.rpc.

Task data selects behaviour: "finish" reports TASK_FINISHED at once, "exit"
makes the process exit 3, "stubborn" ignores kill_task; anything else just runs.
Every message received is appended to executor.log in the sandbox.
"""
import asyncio, os, uuid

from mezzo.rpc import connect, parse_address
from mezzo.services import AGENT, EXECUTOR
from mezzo.wire.ttypes import TaskState, TaskStatus

SANDBOX = os.environ["MEZZO_SANDBOX"]


class Executor:
    def __init__(self):
        self.done = asyncio.Event()
        self.stubborn = set()
        self.conn = None

    def note(self, *words):
        with open(os.path.join(SANDBOX, "executor.log"), "a") as f:
            f.write(" ".join(str(w) for w in words) + "\n")

    def update(self, task_id, state):
        self.conn.remote(AGENT).executor_status_update(
            TaskStatus(task_id=task_id, state=state, uuid=uuid.uuid4().hex))

    def registered(self, conn, executor, framework, agent):
        self.note("registered", executor.executor_id, framework.framework_id, agent.agent_id)

    def launch_task(self, conn, task):
        self.note("launch", task.task_id)
        os.makedirs(os.path.join(SANDBOX, "tasks", task.task_id), exist_ok=True)
        self.update(task.task_id, TaskState.TASK_RUNNING)
        mode = (task.data or b"").decode()
        if mode == "finish":
            self.update(task.task_id, TaskState.TASK_FINISHED)
        elif mode == "exit":
            asyncio.get_running_loop().call_later(0.2, os._exit, 3)
        elif mode == "stubborn":
            self.stubborn.add(task.task_id)

    def kill_task(self, conn, task_id):
        self.note("kill", task_id)
        if task_id not in self.stubborn:
            self.update(task_id, TaskState.TASK_KILLED)

    def framework_message(self, conn, data):
        self.note("message", data.decode())
        conn.remote(AGENT).executor_to_framework(
            os.environ["MEZZO_FRAMEWORK_ID"], os.environ["MEZZO_EXECUTOR_ID"], b"echo:" + data)

    def status_update_acknowledged(self, conn, task_id, uuid_):
        self.note("ack", task_id, uuid_)

    def shutdown(self, conn):
        self.note("shutdown")
        self.done.set()

    def connection_lost(self, conn):
        self.done.set()


async def main():
    host, port = parse_address(os.environ["MEZZO_AGENT_ENDPOINT"], 5051)
    ex = Executor()
    ex.conn = await connect(host, port, EXECUTOR, ex)
    ex.conn.remote(AGENT).register_executor(
        os.environ["MEZZO_FRAMEWORK_ID"], os.environ["MEZZO_EXECUTOR_ID"], os.environ["MEZZO_EXECUTOR_TOKEN"]
    )
    await ex.done.wait()
    await asyncio.sleep(0.05)


asyncio.run(main())
'''
