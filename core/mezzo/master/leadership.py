"""Who may change the cluster: calls reach the master's state only while it leads.

A master started with ``master.zk`` serves its port from the start, as a
standby, and contends for leadership (:class:`mezzo.zk.LeaderElection`). Its
connections dispatch to a :class:`LeaderGate` instead of the master itself:

- while leading, every call goes to the master's handler, looked up once per
  leadership change, so the gate costs nothing per message;
- while not leading, framework and agent calls are answered ``not_leader(leader)``
  and the connection is closed, so that a driver or agent that dialled a stale
  address finds the leader; tools (``mezzo state``) still get an answer, which
  says the master is not leading and who is.

No split brain: the master demotes itself the moment its ZooKeeper session is in
doubt (see :mod:`mezzo.zk.election`); from then on the gate refuses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from ..services import AGENT, MASTER, SCHEDULER

if TYPE_CHECKING:
    from .master import Master

log = structlog.get_logger("mezzo.master", component="master")

AGENT_CALLS = frozenset({
    "register_agent", "reregister_agent", "status_update", "executor_exited",
    "executor_to_framework", "pong",
})
"""Master calls only agents make (the rest, but tools', are schedulers')."""

TOOL_CALLS = frozenset({"request_state", "request_metrics"})
"""Calls served whether leading or not: they change nothing."""


class LeaderGate:
    """The handler of a master's connections; routes calls by leadership."""

    def __init__(self, master: Master) -> None:
        self._master = master
        self._calls = [name for name in MASTER.methods if name not in TOOL_CALLS]
        for name in TOOL_CALLS:
            setattr(self, name, getattr(master, name))
        self.close()

    def open(self) -> None:
        """Leading: every call goes to the master."""
        for name in self._calls:
            setattr(self, name, getattr(self._master, name))

    def close(self) -> None:
        """Not leading: framework and agent calls are refused."""
        for name in self._calls:
            setattr(self, name, self._refusal(name))

    def connection_lost(self, conn: Any) -> None:
        self._master.connection_lost(conn)

    def _refusal(self, name: str) -> Callable[..., None]:
        schema = AGENT if name in AGENT_CALLS else SCHEDULER
        master = self._master

        def refuse(conn: Any, *_args: Any) -> None:
            leader = master.leader_address
            log.info("refusing a call: not the leader", call=name, peer=conn.peer, leader=leader or "unknown")
            conn.remote(schema).not_leader(leader)
            conn.close()

        return refuse
