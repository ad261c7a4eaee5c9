"""A v1 executor's subscription, as the agent sees it: that executor's link.

A mezzo executor (``mezzo.ExecutorDriver``) dials its agent's Thrift port and keeps
one duplex connection. An executor written for Apache Mesos (pymesos'
``MesosExecutorDriver``, anything speaking the v1 executor API) instead holds one
HTTP response open (``SUBSCRIBE`` to ``/api/v1/executor``) on which the agent's
events reach it, and sends its calls (``UPDATE``, ``MESSAGE``) as separate requests.

:class:`ExecutorStream` stands for such an executor where
:class:`~mezzo.agent.executors.ExecutorRun` keeps its connection (``run.conn``): it has
what the agent asks of that connection (``tag``, ``peer``, ``remote``, ``close``), and
its ``Executor`` methods (the service in ``thrift/mezzo.thrift``) turn the agent's
calls into v1 events in an :class:`~.event_buffer.EventBuffer` that the HTTP handler
(:mod:`mezzo.http.executor_api`) writes out. So launching, killing, acknowledging and
shutting down are the same code for both kinds of executor.

Bounded as a scheduler's stream is (:data:`MAX_BUFFERED_BYTES`; an executor that stops
reading is disconnected, which :class:`~mezzo.agent.executors.ExecutorRun` handles as
any lost executor connection), and no method waits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..wire.ttypes import AgentInfo, ExecutorInfo, FrameworkInfo, TaskInfo
from . import executor_translate
from .event_buffer import EventBuffer

MAX_BUFFERED_BYTES = 8 << 20
"""Events buffered for one executor before its stream is ended (a ``LAUNCH`` is a few
KiB; an executor this far behind is not reading)."""


class ExecutorStream(EventBuffer):
    """One executor's subscription; see the module docstring. ``role``: its
    framework's (the resources of ``LAUNCH``ed tasks carry it)."""

    def __init__(
        self,
        *,
        peer: str,
        role: str,
        container_id: str,
        abort: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(MAX_BUFFERED_BYTES, abort)
        self.peer = peer
        self.role = role
        self.container_id = container_id
        self.tag: Any = None
        """Set by :meth:`~mezzo.agent.executors.ExecutorRun.on_registered`: the run."""

    def remote(self, service: Any) -> ExecutorStream:
        """The stub of the executor's service: this stream (its methods below)."""
        return self

    # -- the Executor service, as v1 events ----------------------------------------------

    def registered(self, executor: ExecutorInfo, framework: FrameworkInfo, agent: AgentInfo) -> None:
        self.send("SUBSCRIBED", executor_translate.subscribed(executor, framework, agent, self.container_id))

    def launch_task(self, task: TaskInfo) -> None:
        self.send("LAUNCH", executor_translate.launch(task, self.role))

    def kill_task(self, task_id: str) -> None:
        self.send("KILL", executor_translate.kill(task_id))

    def framework_message(self, data: bytes) -> None:
        self.send("MESSAGE", executor_translate.message(data or b""))

    def status_update_acknowledged(self, task_id: str, uuid: str) -> None:
        if uuid:  # an update the agent could not take has no uuid worth echoing
            self.send("ACKNOWLEDGED", executor_translate.acknowledged(task_id, uuid))

    def shutdown(self) -> None:
        self.send("SHUTDOWN", None)

    def error(self, message: str) -> None:
        self.send("ERROR", {"message": message})
