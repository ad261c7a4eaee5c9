"""The ``Agent`` Thrift service: what the master and executors may ask of an agent.

One handler serves the agent's connection to its master and every connection an
executor dials. The transport dispatches ``foo(a, b)`` to ``handler.foo(conn, a, b)``;
each method here checks that the call came from the side allowed to make it (the
master's link, or a registered executor's connection) and hands it to the
:class:`~mezzo.agent.agent.Agent`. A call from the wrong side is logged and
dropped: an executor cannot launch tasks, a stranger cannot speak for an executor.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

from ..rpc import Connection
from ..services import EXECUTOR, MASTER, TOOL
from ..wire.ttypes import FrameworkInfo, KillPolicy, TaskInfo, TaskStatus
from . import files, statistics
from .executors import ExecutorRun

if TYPE_CHECKING:
    from .agent import Agent
    from .master_link import MasterLink

FILES_IN_FLIGHT = 16
"""File requests of the master's proxy the agent works on at once (the master keeps fewer
outstanding per agent; this bounds a master that does not)."""


class AgentService:
    """The ``Agent`` Thrift service: one handler for the master's connection and
    every executor's. Each call checks it came from the side allowed to make it."""

    def __init__(self, agent: Agent) -> None:
        self._agent = agent
        self._files_in_flight = 0

    def _from_master(self, conn: Connection, method: str) -> MasterLink | None:
        """The agent's link to the master, if ``conn`` is that link's connection; else
        None, and the call is logged and ignored."""
        link = self._agent._link
        if link is not None and conn is link.conn:
            return link
        self._agent.log.warning(
            "ignoring a master-only call from another peer", method=method, peer=conn.peer
        )
        return None

    def _executor_of(self, conn: Connection, method: str) -> ExecutorRun | None:
        if isinstance(conn.tag, ExecutorRun):
            return conn.tag
        self._agent.log.warning(
            "ignoring an executor call from an unregistered peer", method=method, peer=conn.peer
        )
        return None

    # -- from the master

    def registered(self, conn: Connection, agent_id: str) -> None:
        if link := self._from_master(conn, "registered"):
            link.registered()
            self._agent._on_registered(agent_id or "", again=False)

    def reregistered(self, conn: Connection, agent_id: str) -> None:
        if link := self._from_master(conn, "reregistered"):
            link.registered()
            self._agent._on_registered(agent_id or "", again=True)

    def run_task(self, conn: Connection, framework: FrameworkInfo, task: TaskInfo) -> None:
        if self._from_master(conn, "run_task"):
            self._agent.run_task(framework, task)

    def kill_task(
        self, conn: Connection, framework_id: str, task_id: str, kill: KillPolicy | None = None
    ) -> None:
        if self._from_master(conn, "kill_task"):
            self._agent.kill_task(
                framework_id or "", task_id or "", kill if isinstance(kill, KillPolicy) else None
            )

    def status_update_acknowledged(
        self, conn: Connection, framework_id: str, task_id: str, uuid: str
    ) -> None:
        if self._from_master(conn, "status_update_acknowledged"):
            self._agent.updates.acknowledge(framework_id or "", task_id or "", uuid or "")

    def framework_to_executor(
        self, conn: Connection, framework_id: str, executor_id: str, data: bytes
    ) -> None:
        if not self._from_master(conn, "framework_to_executor"):
            return
        run = self._agent.find_executor(framework_id or "", executor_id or "")
        if run is None or not run.send_framework_message(data or b""):
            self._agent.log.info(
                "dropping framework message: executor not registered here",
                framework=framework_id,
                executor=executor_id,
            )

    def shutdown_framework(self, conn: Connection, framework_id: str) -> None:
        if self._from_master(conn, "shutdown_framework"):
            self._agent.shutdown_framework(framework_id or "")

    def error(self, conn: Connection, message: str) -> None:
        if self._from_master(conn, "error"):
            self._agent._on_error(message or "")

    def ping(self, conn: Connection) -> None:
        if self._from_master(conn, "ping"):
            conn.remote(MASTER).pong()

    def not_leader(self, conn: Connection, leader: str) -> None:
        if link := self._from_master(conn, "not_leader"):
            # We dialled a standby: leave it, the link finds the leader.
            self._agent.log.warning("the master we reached does not lead", leader=leader or "unknown")
            link.not_leading(conn)

    def reregistration_refused(self, conn: Connection, agent_id: str, message: str) -> None:
        if self._from_master(conn, "reregistration_refused") and agent_id == self._agent.agent_id:
            self._agent._on_reregistration_refused(message or "")

    def files_request(
        self, conn: Connection, request_id: int, operation: str, path: str, offset: int, length: int
    ) -> None:
        """The master proxies its ``/files/*`` for a caller it authorised (the agent trusts
        the master it registered with, and answers no one else): answered
        ``Master.files_reply`` from a worker thread's read (:func:`.files.answer`): a slow
        disk must not hold the agent's loop. At most :data:`FILES_IN_FLIGHT` at once;
        more are answered 503 at once."""
        if not self._from_master(conn, "files_request"):
            return
        rid = request_id if isinstance(request_id, int) else 0
        master = conn.remote(MASTER)
        if self._files_in_flight >= FILES_IN_FLIGHT:
            body = json.dumps({"error": "the agent is answering other file requests; retry", "status": 503})
            master.files_reply(rid, 503, body.encode())
            return
        self._files_in_flight += 1

        async def reply() -> None:
            try:
                status, body = await asyncio.to_thread(
                    files.answer, self._agent.files, operation or "", path or "", offset or 0, length or 0
                )
            finally:
                self._files_in_flight -= 1
            master.files_reply(rid, status, body)

        self._agent.background(reply(), what="file request")

    # -- from tools

    def request_statistics(self, conn: Connection, request_id: int) -> None:
        rid = request_id if isinstance(request_id, int) else 0

        async def answer() -> None:
            stats = await statistics.collect(self._agent)
            conn.remote(TOOL).statistics(rid, json.dumps(stats))

        self._agent.background(answer(), what="statistics request")

    # -- from executors

    def register_executor(
        self, conn: Connection, framework_id: str, executor_id: str, token: str = ""
    ) -> None:
        agent = self._agent
        link = agent._link
        if link is not None and conn is link.conn:
            # Only an executor registers. From the master's side this is dropped like any
            # call from the wrong side; answering it as a stranger (shutdown, close) would
            # close the agent's own master link.
            agent.log.warning(
                "ignoring an executor call from the master", method="register_executor", peer=conn.peer
            )
            return
        run = agent.find_executor(framework_id or "", executor_id or "")
        if run is None or conn.tag is not None or not run.accepts_registration():
            why = "not expected here"
        elif not run.holds_token(token):
            # Someone reaching this port knows the ids but is not the process the agent
            # started: refused, and the executor's own registration is still awaited.
            why = "wrong token"
        else:
            run.on_registered(conn)
            return
        if agent.leaving_tasks:
            # Stopping, its executors left to the next agent: this one redialled early.
            # Closed without a shutdown, it keeps redialling until that agent is up.
            conn.close()
            return
        agent.log.warning(
            f"refusing executor registration: {why}",
            framework=framework_id,
            executor=executor_id,
            peer=conn.peer,
        )
        conn.remote(EXECUTOR).shutdown()
        conn.close()

    def executor_status_update(self, conn: Connection, status: TaskStatus) -> None:
        run = self._executor_of(conn, "executor_status_update")
        if run is not None and status is not None:
            self._agent.executor_status(conn, run, status)

    def executor_to_framework(
        self, conn: Connection, framework_id: str, executor_id: str, data: bytes
    ) -> None:
        run = self._executor_of(conn, "executor_to_framework")
        if run is not None:
            self._agent.executor_message(run, data)

    def connection_lost(self, conn: Connection) -> None:
        if isinstance(conn.tag, ExecutorRun):
            conn.tag.on_disconnected(conn)
