"""A v1 framework's subscription, as the master sees it: that framework's link.

A Thrift scheduler is one duplex connection: its calls come in on it and the
master's calls to it (``Scheduler`` in ``thrift/mezzo.thrift``) go out on it. A v1
scheduler (pymesos, or anything written for Apache Mesos) splits that in two: one
HTTP response held open (``SUBSCRIBE``) carries events to it, and its calls arrive as
separate ``POST`` requests naming the stream by its ``Mesos-Stream-Id``.

:class:`SchedulerStream` stands for such a scheduler where the master's state
keeps a link (``FrameworkRecord.conn``): it has what the master's service asks of a
link (``tag``, ``peer``, ``principal``, ``remote``, ``close``) and its
``Scheduler`` methods turn the master's calls into v1 events, framed in RecordIO,
in a buffer the HTTP handler (:mod:`mezzo.http.scheduler_api`) writes out. So the
façade adds no logic of its own to the kernel: registration, offers, validation,
acknowledgements and failover are the same code for both kinds of framework.

Contracts:

- **Bounded.** At most :data:`MAX_BUFFERED_BYTES` of events wait for a scheduler
  that does not read them; past that the stream ends (its framework is then
  disconnected, its ``failover_timeout`` applies, its offers are rescinded, and its
  status updates wait at the agents until it acknowledges them: nothing is lost).
- **Never waits.** Every ``Scheduler`` method appends and returns; writing is the
  HTTP handler's, on its own turn of the loop.
- **Alive while connected.** A v1 scheduler does not answer pings (Mesos' HTTP
  API has none); its stream is as alive as its TCP connection, whose silence the
  port's ``write_stall_timeout`` deals with. So :attr:`last_received` is always
  now and the master's framework health check never finds it silent.
"""

from __future__ import annotations

import base64
import functools
import time
from collections.abc import Callable
from typing import Any, TypeVar

import structlog

from ..wire.ttypes import Offer, Resources, TaskStatus
from . import translate
from .event_buffer import EventBuffer

log = structlog.get_logger("mezzo.v1", component="v1-scheduler")

MAX_BUFFERED_BYTES = 32 << 20
"""Events buffered for one scheduler before its stream is ended (offers at 10,000
agents are a few MiB; a scheduler this far behind is not reading)."""


Method = TypeVar("Method", bound=Callable[..., None])


def _contained(method: Method) -> Method:
    """A ``Scheduler`` call that cannot fail its caller: the master's own code is
    mid-way through a change when it calls one. Should translating fail (a bug, never
    the scheduler's doing), the event is dropped, logged, and the stream ended: the
    framework is then disconnected, and it gets the state back by reconciling."""

    @functools.wraps(method)
    def contained(self: SchedulerStream, *args: Any) -> None:
        if self.closing:
            return  # nothing more is sent: not worth translating
        try:
            method(self, *args)
        except Exception:  # noqa: BLE001 - see the docstring
            log.exception(
                "a v1 event could not be made; ending the stream",
                call=method.__name__,
                framework=self.framework_id,
            )
            self.close(f"{method.__name__} could not be sent (see the master's log)")

    return contained  # type: ignore[return-value]


class SchedulerStream(EventBuffer):
    """One subscription; see the module docstring.

    ``master_info(address)`` makes the ``MasterInfo`` of ``SUBSCRIBED`` for the
    address the master names itself by; ``role`` is the framework's (offers carry
    it as their ``allocation_info``).
    """

    def __init__(
        self,
        stream_id: str,
        *,
        peer: str,
        principal: str | None,
        role: str,
        heartbeat_interval: float,
        master_info: Callable[[str], dict[str, Any]],
        abort: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(MAX_BUFFERED_BYTES, abort)
        self.stream_id = stream_id
        self.peer = peer
        self.principal = principal
        """Who the scheduler proved to be (TLS certificate, or Basic credentials), as on a
        Thrift connection."""
        self.role = role
        self.heartbeat_interval = heartbeat_interval
        self._master_info = master_info
        self.tag: Any = None
        """Set by the master's service (``FrameworkTag``) once the framework is registered."""
        self.framework_id = ""
        """The framework this stream speaks for, once ``SUBSCRIBED`` was sent."""
        self.write_paused = False
        self.errors: list[str] = []
        """``ERROR`` messages sent before ``SUBSCRIBED`` (a few): a subscription refused
        says why in its HTTP answer."""

    # -- what the master's service asks of a link --------------------------------------

    @property
    def last_received(self) -> float:
        """Always now: see "Alive while connected" in the module docstring."""
        return time.monotonic()

    def remote(self, service: Any) -> SchedulerStream:
        """The stub of the scheduler's service: this stream (its methods below)."""
        return self

    # -- the Scheduler service, as v1 events -------------------------------------------

    @_contained
    def registered(self, framework_id: str, master: str) -> None:
        self.framework_id = framework_id
        self._subscribed(framework_id, master)

    @_contained
    def reregistered(self, framework_id: str, master: str) -> None:
        self.framework_id = framework_id
        self._subscribed(framework_id, master)

    def _subscribed(self, framework_id: str, master: str) -> None:
        self.send(
            "SUBSCRIBED",
            {
                "framework_id": {"value": framework_id},
                "heartbeat_interval_seconds": self.heartbeat_interval,
                "master_info": self._master_info(master),
            },
        )
        # Mesos heartbeats at once after SUBSCRIBED, then every interval.
        self.send("HEARTBEAT", None)

    @_contained
    def resource_offers(self, offers: list[Offer]) -> None:
        role = self.role
        self.send("OFFERS", {"offers": [translate.offer(o, role) for o in offers]})

    @_contained
    def offer_rescinded(self, offer_id: str) -> None:
        self.send("RESCIND", {"offer_id": {"value": offer_id}})

    @_contained
    def status_update(self, status: TaskStatus) -> None:
        self.send("UPDATE", {"status": translate.task_status(status)})

    @_contained
    def framework_message(self, agent_id: str, executor_id: str, data: bytes) -> None:
        self.send(
            "MESSAGE",
            {
                "agent_id": {"value": agent_id},
                "executor_id": {"value": executor_id},
                "data": base64.b64encode(data or b"").decode("ascii"),
            },
        )

    @_contained
    def agent_lost(self, agent_id: str) -> None:
        self.send("FAILURE", {"agent_id": {"value": agent_id}})

    @_contained
    def executor_lost(self, agent_id: str, executor_id: str, exit_status: int) -> None:
        self.send(
            "FAILURE",
            {"agent_id": {"value": agent_id}, "executor_id": {"value": executor_id}, "status": exit_status},
        )

    def guaranteed_share(self, request_id: int, guarantee: Resources) -> None:
        """No v1 counterpart (mezzo's guarantees, paper §3.3): a v1 framework never asks."""

    def error(self, message: str) -> None:
        if not self.framework_id and len(self.errors) < 10:
            self.errors.append(message)  # kept only while subscribing, for its HTTP answer
        self.send("ERROR", {"message": message})

    def not_leader(self, leader: str) -> None:
        where = f"the leader is {leader}" if leader else "no master leads yet"
        self.error(f"this master is not the leader ({where}): subscribe again")
        self.close("not the leader")

    def ping(self) -> None:
        self.send("HEARTBEAT", None)
