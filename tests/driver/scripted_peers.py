"""Scripted peers for driver tests: a master and an agent that record and answer.

They are real ``mezzo.rpc`` servers on loopback, running on their own event loop
in their own thread (never the driver thread), so the drivers under test talk to
them exactly as they would to the real daemons.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import mezzo
from mezzo import rpc
from mezzo.services import AGENT, EXECUTOR, MASTER, SCHEDULER
from mezzo.testing import wait_for


def wait_count(get: Callable[[], list], count: int, timeout: float, what: str) -> list:
    """Poll ``get()`` until it holds at least ``count`` items; return them."""

    def enough():
        got = get()
        return got if len(got) >= count else None

    return wait_until(enough, timeout, f"{count} x {what}")


def wait_until(predicate: Callable[[], Any], timeout: float = 5.0, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; return that or fail naming ``what``."""
    return wait_for(predicate, timeout, what, interval=0.005)


class PeerLoop:
    """An asyncio loop in a thread of its own, hosting scripted servers."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="scripted-peer", daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 5.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class ScriptedPeer:
    """Records every call it receives as ``(method, args)``; unknown calls are just recorded.

    Subclasses add answers by defining ``on_<method>(conn, *args)``.
    """

    schema: rpc.ServiceSchema
    reply_schema: rpc.ServiceSchema

    def __init__(self, peer_loop: PeerLoop) -> None:
        self.peer_loop = peer_loop
        self.port = 0
        self.server = None
        self.conns: list[rpc.Connection] = []
        self.calls: list[tuple[str, tuple]] = []
        self.lock = threading.Lock()

    # -- serving -------------------------------------------------------------

    def start(self) -> ScriptedPeer:
        async def bind():
            self.server = await rpc.serve("127.0.0.1", self.port, self.schema, self)
            self.port = self.server.sockets[0].getsockname()[1]

        self.peer_loop.run(bind())
        return self

    def stop(self) -> None:
        async def close():
            if self.server is not None:
                self.server.close()
                await self.server.wait_closed()
                self.server = None
            for conn in self.conns:
                conn.close()
            self.conns = []

        self.peer_loop.run(close())

    def restart(self, down_for: float = 0.0) -> None:
        """Close everything and listen again on the same port (a daemon restart)."""
        self.stop()
        time.sleep(down_for)
        self.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    # -- dispatch --------------------------------------------------------------

    def __getattr__(self, name: str):
        if name.startswith("_") or name not in self.schema.methods:
            raise AttributeError(name)

        def record(conn, *args):
            if conn not in self.conns:
                self.conns.append(conn)
            with self.lock:
                self.calls.append((name, args))
            answer = getattr(self, "on_" + name, None)
            if answer is not None:
                answer(conn, *args)

        return record

    def connection_lost(self, conn) -> None:
        if conn in self.conns:
            self.conns.remove(conn)

    # -- inspection ----------------------------------------------------------------

    def of(self, method: str) -> list[tuple]:
        """Arguments of every recorded ``method`` call, in order."""
        with self.lock:
            return [args for name, args in self.calls if name == method]

    def wait_for(self, method: str, count: int = 1, timeout: float = 5.0) -> list[tuple]:
        return wait_count(lambda: self.of(method), count, timeout, method)

    def send(self, method: str, *args, conn=None) -> None:
        """Call the driver (on ``conn``, default the newest connection); thread-safe."""
        target = conn or wait_until(lambda: self.conns and self.conns[-1], what="a connection")
        getattr(target.remote(self.reply_schema), method)(*args)


class ScriptedMaster(ScriptedPeer):
    """Serves ``Master``: answers registration (``fw-N`` ids) and guaranteed-share requests."""

    schema = MASTER
    reply_schema = SCHEDULER

    def __init__(self, peer_loop: PeerLoop, *, answer_registration: bool = True) -> None:
        super().__init__(peer_loop)
        self.answer_registration = answer_registration
        self.guarantee = mezzo.Resources(cpus=2, mem=1024)
        self.answer_guaranteed_share = True
        self._ids = itertools.count(1)
        self.by_framework: dict[str, rpc.Connection] = {}

    def on_register_framework(self, conn, framework) -> None:
        if not self.answer_registration:
            return
        if framework.framework_id:
            self.by_framework[framework.framework_id] = conn
            conn.remote(SCHEDULER).reregistered(framework.framework_id, "master@" + self.address)
        else:
            fid = f"fw-{next(self._ids)}"
            self.by_framework[fid] = conn
            conn.remote(SCHEDULER).registered(fid, "master@" + self.address)

    def on_request_guaranteed_share(self, conn, framework_id, request_id) -> None:
        if self.answer_guaranteed_share:
            conn.remote(SCHEDULER).guaranteed_share(request_id, self.guarantee)


class ScriptedAgent(ScriptedPeer):
    """Serves ``Agent`` for executors: answers ``register_executor`` with ``registered``
    then the queued ``launch_task`` calls; acknowledges updates when ``ack`` is True."""

    schema = AGENT
    reply_schema = EXECUTOR

    def __init__(self, peer_loop: PeerLoop) -> None:
        super().__init__(peer_loop)
        self.ack = True
        self.to_launch: list[mezzo.TaskInfo] = []
        self.agent_info = mezzo.AgentInfo(
            agent_id="agent-1", hostname="localhost", port=5051, resources=mezzo.Resources(cpus=4, mem=4096)
        )

    def on_register_executor(self, conn, framework_id, executor_id, token="") -> None:
        executor = mezzo.ExecutorInfo(
            executor_id=executor_id,
            command=mezzo.CommandInfo(value="./executor"),
            resources=mezzo.Resources(cpus=0.1, mem=32),
            framework_id=framework_id,
        )
        framework = mezzo.FrameworkInfo(name="scripted", framework_id=framework_id)
        remote = conn.remote(EXECUTOR)
        remote.registered(executor, framework, self.agent_info)
        tasks, self.to_launch = self.to_launch, []
        for task in tasks:
            remote.launch_task(task)

    def on_executor_status_update(self, conn, status) -> None:
        if self.ack:
            conn.remote(EXECUTOR).status_update_acknowledged(status.task_id, status.uuid)
