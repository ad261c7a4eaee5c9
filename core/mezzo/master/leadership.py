"""Who may change the cluster: calls reach the master's state only while it leads.

A master started with ``master.zk`` serves its port from the start, as a
standby, and contends for leadership (:class:`mezzo.zk.LeaderElection`). Its
connections dispatch to a :class:`LeaderGate` instead of the master's service:

- while leading, every call goes to the current term's service, looked up once per
  leadership change, so the gate costs nothing per message;
- while not leading, framework and agent calls are answered ``not_leader(leader)``
  and the connection is closed, so that a driver or agent that dialled a stale
  address finds the leader; tools (``mezzo state``) still get an answer, which
  says the master is not leading and who is;
- in between, when ZooKeeper already names this master leader but it is still
  taking over (reading the registry), calls are held and replayed the moment it
  leads. Agents and drivers watching ZooKeeper dial it within milliseconds of the
  election; refusing them would send each back to wait a redial interval.

No split brain: the master demotes itself the moment its ZooKeeper session is in
doubt (see :mod:`mezzo.zk.election`); from then on the gate refuses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from ..services import AGENT, MASTER, SCHEDULER

log = structlog.get_logger("mezzo.master", component="master")

AGENT_CALLS = frozenset(
    {
        "register_agent",
        "reregister_agent",
        "status_update",
        "executor_exited",
        "executor_to_framework",
        "pong",
        "container_statistics",
        "files_reply",
    }
)
"""Master calls only agents make (the rest, but tools', are schedulers')."""

TOOL_CALLS = frozenset({"request_state", "request_metrics"})
"""Calls served whether leading or not: they change nothing."""

HOLD_LIMIT = 200_000
"""Calls held while taking over; beyond this they are refused (the callers retry)."""


class LeaderGate:
    """The handler of a master's connections; routes calls by leadership to the
    current term's service (:class:`~.service.MasterService`).

    ``leader_address()`` says who leads as far as this master knows ("" if unknown),
    for the refusals.
    """

    def __init__(self, leader_address: Callable[[], str]) -> None:
        self._leader_address = leader_address
        self._service: Any = None
        self._open = False
        self._calls = [name for name in MASTER.methods if name not in TOOL_CALLS]
        self._held: list[tuple[str, Any, tuple]] | None = None
        """Calls kept while taking over; None when not holding."""
        self.close()

    def serve(self, service: Any) -> None:
        """Route to ``service`` from now on (a new term): tools at once, the other calls
        once :meth:`open`."""
        self._service = service
        for name in TOOL_CALLS:
            setattr(self, name, getattr(service, name))
        if self._open:
            self._bind_all()

    def _bind_all(self) -> None:
        for name in self._calls:
            setattr(self, name, getattr(self._service, name))

    def open(self) -> None:
        """Leading: every call goes to the service, the held ones first."""
        self._open = True
        self._bind_all()
        held, self._held = self._held or [], None
        if held:
            log.info("taking the calls held while taking over", calls=len(held))
        for name, conn, args in held:
            if getattr(conn, "is_open", True):  # its caller may have given up meanwhile
                getattr(self._service, name)(conn, *args)

    def close(self) -> None:
        """Not leading: framework and agent calls are refused (held ones too)."""
        self._open = False
        for name in self._calls:
            setattr(self, name, self._refusal(name))
        held, self._held = self._held or [], None
        for name, conn, _args in held:
            self._refuse(name, conn)

    def hold(self) -> None:
        """ZooKeeper names this master leader but it is not leading yet: keep calls."""
        if self._held is None:
            self._held = []

    def connection_lost(self, conn: Any) -> None:
        if self._service is not None:
            self._service.connection_lost(conn)

    def _refusal(self, name: str) -> Callable[..., None]:
        def refuse_or_hold(conn: Any, *args: Any) -> None:
            held = self._held
            if held is not None and len(held) < HOLD_LIMIT:
                held.append((name, conn, args))
            else:
                self._refuse(name, conn)

        return refuse_or_hold

    def _refuse(self, name: str, conn: Any) -> None:
        leader = self._leader_address()
        log.info("refusing a call: not the leader", call=name, peer=conn.peer, leader=leader or "unknown")
        conn.remote(AGENT if name in AGENT_CALLS else SCHEDULER).not_leader(leader)
        conn.close()
