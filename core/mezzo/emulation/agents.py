"""Emulated agents: many agents in one process, speaking the real protocol.

For the scale and failover benchmarks (the paper's 50,000-node experiment runs
on one machine): each :class:`EmulatedAgent` has its own connection to the
master, its own id and resources, registers and re-registers like a real agent,
and reports status updates that it retries until acknowledged; its redials and
resends back off with jitter exactly as a real agent's do (:mod:`mezzo.backoff`),
or the benchmarks would measure a storm no real cluster makes. Tasks do not run:
a task "runs" for ``labels["duration"]`` seconds (or the N of a ``sleep N``
command; otherwise it finishes at once) on an event-loop timer. Nothing in the
master can tell these agents from real ones.

A process may hold only so many sockets (20,000 here), so agents can share a
connection (``agents_per_connection``): the master accepts several agents on one
connection, each call naming its agent (see ``docs/protocol.md``).

Usage::

    pool = EmulatedAgentPool("127.0.0.1:5050", count=10_000, resources="cpus:4;mem:8192",
                             agents_per_connection=10)
    await pool.start()                  # dial and register every agent
    await pool.wait_registered(timeout=60)
    ...
    await pool.stop()
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import os
import re
import time
from typing import Any

import structlog

from ..backoff import REDIAL_CAP, Backoff
from ..discovery import peer_address
from ..resources import Resources
from ..round_trip import RoundTripEstimate
from ..rpc import ClientTls, Connection, connect
from ..services import AGENT, MASTER
from ..wire.ttypes import AgentInfo, KillPolicy, RunningTask, TaskInfo, TaskState, TaskStatus

log = structlog.get_logger("mezzo.emulation", component="emulated-agent")

_SLEEP = re.compile(r"^\s*sleep\s+([0-9.]+)\s*$")
FIRST_RETRY_SECONDS = 1.0
"""An unacknowledged update is sent again after 1-2 times this long, then 2-4 times, ...
(jittered, as a real agent does with ``agent.status_update_retry``), stretched while the
master is slower than that to acknowledge (the pool's ``round_trip``, as a real agent's)."""
MAX_RETRY_SECONDS = 30.0
"""The longest wait between two sends of an unacknowledged update (as a real agent's)."""
RETRY_SCAN_SECONDS = 0.25
"""How often the pool looks for updates due to be sent again."""
TAKEOVER_RETRY_SECONDS = 0.05
"""Ceiling of the first redial of a master that answered ``not_leader`` although ZooKeeper
names it leader (backing off, jittered, up to the pool's ``redial_interval``): it is taking
over."""


def task_duration(task: TaskInfo) -> float:
    """How long an emulated task runs: ``labels["duration"]``, else ``sleep N``, else 0."""
    labels = task.labels or {}
    if "duration" in labels:
        try:
            return max(0.0, float(labels["duration"]))
        except ValueError:
            return 0.0
    if task.command is not None and isinstance(task.command.value, str):
        m = _SLEEP.match(task.command.value)
        if m:
            return float(m.group(1))
    return 0.0


class EmulatedAgent:
    """One emulated agent: its identity, its tasks and its unacknowledged updates."""

    def __init__(self, pool: EmulatedAgentPool, index: int) -> None:
        self.pool = pool
        self.index = index
        self.agent_id = ""
        self.link: _AgentConnection | None = None
        self.is_registered = False
        self.tasks: dict[tuple[str, str], TaskInfo] = {}
        self.ending: dict[tuple[str, str], TaskInfo] = {}
        """Tasks that ended whose terminal update is not acknowledged yet: still reported
        when re-registering, as a real agent does, or the master would think them lost."""
        self.latest: dict[tuple[str, str], TaskStatus] = {}
        self.unacked: dict[tuple[str, str], TaskStatus] = {}
        """Per task, the update in flight: sent, not yet acknowledged."""
        self.queued: dict[tuple[str, str], TaskStatus] = {}
        """Per task, the update waiting for the one in flight (one at most: the terminal one)."""

    def info(self) -> AgentInfo:
        return AgentInfo(
            agent_id=self.agent_id,
            hostname=f"emulated-{self.index}",
            port=5051,
            resources=self.pool.resources,
            attributes={"emulated": "true"},
        )

    def register(self, master: Any) -> None:
        if not self.agent_id:
            master.register_agent(self.info())
        else:
            held = {**self.ending, **self.tasks}
            running = [
                RunningTask(framework_id=f, task=t, latest=self.latest.get((f, t.task_id)))
                for (f, _), t in held.items()
            ]
            infos = self.pool.framework_infos
            frameworks = [infos[f] for f in {f for f, _ in held} if f in infos]
            master.reregister_agent(self.info(), running, [], frameworks)

    def on_registered(self, agent_id: str) -> None:
        self.agent_id = agent_id
        if not self.is_registered:
            self.is_registered = True
            self.pool._registered += 1
            self.pool.on_registered(self)
        for key, status in list(self.unacked.items()):
            self._send(status)
            self.pool.retry_later(self, key)

    def on_lost(self) -> None:
        if self.is_registered:
            self.is_registered = False
            self.pool._registered -= 1

    def start_over(self) -> None:
        """Declared lost by the cluster: drop every task silently, as a real agent
        kills them, and forget the id (the caller registers anew)."""
        self.pool.running -= len(self.tasks)
        for key in list(self.unacked):
            self.pool.withdraw(self, key)
        self.tasks.clear()
        self.ending.clear()
        self.latest.clear()
        self.unacked.clear()
        self.queued.clear()
        self.on_lost()
        self.agent_id = ""
        self.pool.started_over += 1

    # -- tasks -----------------------------------------------------------

    def run_task(self, framework_id: str, task: TaskInfo) -> None:
        key = (framework_id, task.task_id)
        if key in self.tasks:
            return
        self.tasks[key] = task
        self.pool.running += 1
        self._update(framework_id, task, TaskState.TASK_RUNNING)
        self.pool.clock.finish_later(self, key, task_duration(task))

    def finish(self, key: tuple[str, str], state: int, *, reason: str = "", message: str = "") -> None:
        """End the task of ``key`` in ``state`` (a no-op once it ended)."""
        task = self.tasks.pop(key, None)
        if task is not None:
            self.ending[key] = task
            self.pool.running -= 1
            self._update(key[0], task, state, reason=reason, message=message)

    def acknowledged(self, key: tuple[str, str], uuid_: str) -> bool:
        """Take an acknowledgement; True when the task has nothing left to report."""
        pending = self.unacked.get(key)
        if pending is None or pending.uuid != uuid_:
            return False  # a late answer to a retry: the update is gone already
        del self.unacked[key]
        self.pool.acknowledged(self, key)
        nxt = self.queued.pop(key, None)
        if nxt is not None:
            self._start(key, nxt)
            return False
        if key not in self.tasks:
            self.latest.pop(key, None)
            self.ending.pop(key, None)
            return True
        return False

    def _update(
        self, framework_id: str, task: TaskInfo, state: int, *, reason: str = "", message: str = ""
    ) -> None:
        status = TaskStatus(
            task_id=task.task_id,
            state=state,
            source="agent",
            agent_id=self.agent_id,
            framework_id=framework_id,
            uuid=os.urandom(16).hex(),
            timestamp=time.time(),
            reason=reason,
            message=message,
        )
        key = (framework_id, task.task_id)
        self.latest[key] = status
        # Like a real agent: one update in flight per task, the next waits for its
        # acknowledgement, so the framework sees them in order and each exactly once.
        if key in self.unacked:
            self.queued[key] = status
        else:
            self._start(key, status)

    def _start(self, key: tuple[str, str], status: TaskStatus) -> None:
        self.unacked[key] = status
        self._send(status)
        self.pool.retry_later(self, key, first=True)

    def _send(self, status: TaskStatus) -> None:
        link = self.link
        if link is not None and link.conn is not None and self.is_registered:
            link.conn.remote(MASTER).status_update(status)
            self.pool.updates_sent += 1


class _AgentConnection:
    """One connection to the master carrying a group of emulated agents.

    The handler of that connection's ``Agent`` service. Master calls are routed to
    their agent: registrations are answered in the order they were sent,
    ``run_task`` names the agent in the task, and calls naming only a task
    (``kill_task``, acknowledgements) go to the agent that holds it.
    """

    def __init__(self, pool: EmulatedAgentPool, agents: list[EmulatedAgent]) -> None:
        self.pool = pool
        self.agents = agents
        for a in agents:
            a.link = self
        self.by_id: dict[str, EmulatedAgent] = {}
        self.owner: dict[tuple[str, str], EmulatedAgent] = {}
        self.conn: Connection | None = None
        self.address: tuple[str, int] | None = None
        self.taking_over = False
        """A master ZooKeeper names said it does not lead yet: redial it soon."""
        self.redials = 0
        """Redials since the last registration answered (the pool's backoff policies
        are shared; each connection keeps only its attempt count)."""
        self._refused: Connection | None = None
        self._awaiting_id: list[EmulatedAgent] = []

    async def dial(self) -> None:
        address = self.pool.target.current()
        if address is None:
            raise OSError("no master leads")
        self.address = address
        self.conn = await connect(address[0], address[1], AGENT, self, tls=self.pool.tls)
        master = self.conn.remote(MASTER)
        for agent in self.agents:
            if not agent.agent_id:
                self._awaiting_id.append(agent)
            agent.register(master)

    def connection_lost(self, conn: Connection) -> None:
        if conn is not self.conn:
            return
        self.conn = None
        self._awaiting_id.clear()
        for agent in self.agents:
            agent.on_lost()
        if not self.pool.stopping:
            self.pool.redial(self)

    def next_wait(self) -> float:
        """Seconds before redialling the master just lost (each call backs off further)."""
        policy = self.pool.takeover_backoff if self.taking_over else self.pool.redial_backoff
        self.redials += 1
        return policy.delay(self.redials - 1)

    def _answered(self) -> None:
        """A registration was answered: the next redial starts from the shortest wait."""
        self.taking_over = False
        self.redials = 0

    # -- Agent service ---------------------------------------------------

    def registered(self, conn: Connection, agent_id: str) -> None:
        self._answered()
        if self._awaiting_id:
            agent = self._awaiting_id.pop(0)
            self.by_id[agent_id] = agent
            agent.on_registered(agent_id)

    def reregistered(self, conn: Connection, agent_id: str) -> None:
        self._answered()
        agent = self.by_id.get(agent_id)
        if agent is not None:
            agent.on_registered(agent_id)

    def run_task(self, conn: Connection, framework: Any, task: TaskInfo) -> None:
        agent = self.by_id.get(task.agent_id)
        if agent is not None:
            self.pool.framework_infos.setdefault(framework.framework_id, framework)
            self.owner[(framework.framework_id, task.task_id)] = agent
            agent.run_task(framework.framework_id, task)

    def kill_task(
        self, conn: Connection, framework_id: str, task_id: str, kill: KillPolicy | None = None
    ) -> None:
        # An emulated task is a timer: it stops at once, whatever grace the kill allows.
        agent = self.owner.get((framework_id, task_id))
        if agent is not None:
            reason = kill.reason or "" if kill is not None else ""
            message = kill.message or "" if kill is not None else ""
            agent.finish((framework_id, task_id), TaskState.TASK_KILLED, reason=reason, message=message)

    def shutdown_framework(self, conn: Connection, framework_id: str) -> None:
        for key, agent in list(self.owner.items()):
            if key[0] == framework_id:
                agent.finish(key, TaskState.TASK_KILLED)

    def status_update_acknowledged(
        self, conn: Connection, framework_id: str, task_id: str, uuid_: str
    ) -> None:
        key = (framework_id, task_id)
        agent = self.owner.get(key)
        if agent is not None and agent.acknowledged(key, uuid_):
            del self.owner[key]

    def framework_to_executor(
        self, conn: Connection, framework_id: str, executor_id: str, data: bytes
    ) -> None:
        pass  # emulated agents run no executors

    def files_request(
        self, conn: Connection, request_id: int, operation: str, path: str, offset: int, length: int
    ) -> None:
        # Emulated tasks write nothing to disk: the master's /files/* gets a plain 404.
        body = b'{"error":"an emulated agent has no sandboxes","status":404}'
        conn.remote(MASTER).files_reply(request_id, 404, body)

    def error(self, conn: Connection, message: str) -> None:
        log.error("master refused an emulated agent", message=message)

    def ping(self, conn: Connection) -> None:
        conn.remote(MASTER).pong()

    def not_leader(self, conn: Connection, leader: str) -> None:
        if conn is not self.conn or conn is self._refused:
            return  # one answer per call made on it: the first one counts
        self._refused = conn
        self.pool.not_leader += 1
        address = self.address
        if address is not None and (
            self.pool.target.current() == address or leader == f"{address[0]}:{address[1]}"
        ):
            # ZooKeeper names this master already (as we or it see it), and our calls beat its
            # takeover by a few milliseconds (it answers with the leader it knew, or itself):
            # try it again shortly rather than after a whole redial interval.
            if not self.taking_over:
                self.taking_over, self.redials = True, 0
        conn.close()  # redialled at whoever leads

    def reregistration_refused(self, conn: Connection, agent_id: str, message: str) -> None:
        agent = self.by_id.pop(agent_id, None)
        if agent is None:
            return
        for key in [k for k, a in self.owner.items() if a is agent]:
            del self.owner[key]
        agent.start_over()
        self._awaiting_id.append(agent)
        agent.register(conn.remote(MASTER))


class _TaskClock:
    """Ends emulated tasks on time: a timing wheel of ``TICK``-second slots.

    One event-loop timer per task would keep 100,000 timers in the loop's heap at
    50,000 agents, each insertion costing some twenty Python-level comparisons; a
    slot per tick makes scheduling a task O(1), for at most one tick of lateness.
    """

    TICK = 0.01

    def __init__(self) -> None:
        self._slots: dict[int, list[tuple[EmulatedAgent, tuple[str, str]]]] = {}
        self._next = 0
        self._handle: asyncio.TimerHandle | None = None

    def finish_later(self, agent: EmulatedAgent, key: tuple[str, str], seconds: float) -> None:
        slot = int((time.monotonic() + seconds) / self.TICK) + 1
        bucket = self._slots.get(slot)
        if bucket is None:
            self._slots[slot] = [(agent, key)]
        else:
            bucket.append((agent, key))
        if self._handle is None:
            self._next = min(slot, int(time.monotonic() / self.TICK))
            self._handle = asyncio.get_running_loop().call_later(self.TICK, self._tick)

    def _tick(self) -> None:
        self._handle = None
        now = int(time.monotonic() / self.TICK)
        slots = self._slots
        while self._next <= now and slots:
            for agent, key in slots.pop(self._next, ()):
                agent.finish(key, TaskState.TASK_FINISHED)
            self._next += 1
        if slots:
            self._next = min(self._next, now + 1)
            self._handle = asyncio.get_running_loop().call_later(self.TICK, self._tick)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._slots.clear()


class EmulatedAgentPool:
    """``count`` emulated agents dialling ``master``, ``agents_per_connection`` to a
    connection (a process may hold only so many sockets); see the module docstring."""

    def __init__(
        self,
        master: str,
        count: int,
        resources: str = "cpus:4;mem:8192",
        *,
        agents_per_connection: int = 1,
        dial_concurrency: int = 200,
        redial_interval: float = 0.5,
        tls: ClientTls | None = None,
    ) -> None:
        self.target = peer_address(master, 5050)
        self.tls = tls
        """What every connection dials with (None: plaintext)."""
        self.framework_infos: dict[str, Any] = {}
        """FrameworkInfo of every framework that ran tasks here, for re-registration."""
        self.resources = Resources.parse(resources)
        self.agents = [EmulatedAgent(self, i) for i in range(count)]
        per = max(1, agents_per_connection)
        self.links = [_AgentConnection(self, self.agents[i : i + per]) for i in range(0, count, per)]
        self.dial_concurrency = dial_concurrency
        self.redial_interval = redial_interval
        interval = max(redial_interval, 0.001)
        self.redial_backoff = Backoff(interval, max(REDIAL_CAP, interval))
        """How long a connection waits before redialling the master it lost (as a real agent)."""
        self.takeover_backoff = Backoff(min(TAKEOVER_RETRY_SECONDS, interval), interval)
        self.update_backoff = Backoff(2 * FIRST_RETRY_SECONDS, MAX_RETRY_SECONDS)
        """Waits between sends of an unacknowledged update: the n-th between ``FIRST_RETRY_SECONDS
        * 2**n`` and twice that, at most ``MAX_RETRY_SECONDS`` (as a real agent's)..."""
        self.round_trip = RoundTripEstimate(FIRST_RETRY_SECONDS, MAX_RETRY_SECONDS / 2)
        """... stretched by how long the master takes to acknowledge (as a real agent's)."""
        self.stopping = False
        self.updates_sent = 0
        self.running = 0
        """Tasks running on the pool's agents now."""
        self.all_registered_at: float | None = None
        """``time.time()`` when the last agent (re-)registered and made the pool whole; after a
        master failover, when the last agent re-registered with the new leader."""
        self.started_over = 0
        """Agents whose re-registration was refused, so that they dropped their tasks and
        registered anew (after a failover, tasks lost: must stay 0)."""
        self.not_leader = 0
        """Connections a master answered ``not_leader`` (a stale address, or a master about to
        lead that has not taken over yet): each costs a redial."""
        self.clock = _TaskClock()
        self._registered = 0
        self._all_registered: asyncio.Event | None = None
        self._retry_task: asyncio.Task | None = None
        self._redials: set[asyncio.Task] = set()
        self._retries: dict[tuple[EmulatedAgent, tuple[str, str]], list[float]] = {}
        """Updates in flight: (agent, task key) -> [when to resend, sends so far, when first
        sent (-1 when its round trip is not to be observed)]."""
        self._due: list[tuple[float, int, tuple[EmulatedAgent, tuple[str, str]], list[float]]] = []
        """The same entries by when to resend (a heap). An entry acknowledged meanwhile is
        left in it and skipped when due: it is no longer the one in ``_retries``."""
        self._seq = itertools.count()

    @property
    def registered_count(self) -> int:
        return self._registered

    async def start(self) -> None:
        """Dial every connection, ``dial_concurrency`` at a time; registration completes later."""
        await self.target.start()
        self.target.add_listener(self._leader_changed)
        self._all_registered = asyncio.Event()
        sem = asyncio.Semaphore(self.dial_concurrency)

        async def dial(link: _AgentConnection) -> None:
            async with sem:
                await link.dial()

        await asyncio.gather(*(dial(link) for link in self.links))
        self._retry_task = asyncio.get_running_loop().create_task(self._retry_loop())

    def on_registered(self, agent: EmulatedAgent) -> None:
        if self._registered == len(self.agents):
            self.all_registered_at = time.time()
            if self._all_registered is not None:
                self._all_registered.set()

    async def wait_registered(self, timeout: float) -> None:
        assert self._all_registered is not None, "start() first"
        await asyncio.wait_for(self._all_registered.wait(), timeout)

    def _leader_changed(self, address: tuple[str, int] | None) -> None:
        for link in self.links:
            if link.conn is not None and link.address != address:
                link.conn.close()  # redialled at the new leader

    def redial(self, link: _AgentConnection) -> None:
        async def again() -> None:
            while not self.stopping:
                address = self.target.current()
                if address is None:
                    # Nobody leads: wait for ZooKeeper's news (dialling now would fail at
                    # once, without ever yielding the loop).
                    await self.target.changed(self.redial_interval)
                    continue
                if address == link.address:
                    # The same master: give it a moment, longer each time it failed us.
                    # A new leader is dialled at once.
                    await self.target.changed(link.next_wait())
                    if self.stopping:
                        return
                try:
                    await link.dial()
                    return
                except OSError:
                    continue

        task = asyncio.get_running_loop().create_task(again())
        self._redials.add(task)
        task.add_done_callback(self._redials.discard)

    def retry_later(self, agent: EmulatedAgent, key: tuple[str, str], *, first: bool = False) -> None:
        """Resend ``agent``'s in-flight update of ``key`` unless acknowledged in time.
        ``first``: just sent for the first time, so its round trip may be observed (not
        so an update sent again after re-registration)."""
        now = time.monotonic()
        scale = self.round_trip.timeout / FIRST_RETRY_SECONDS
        entry = [now + self.update_backoff.delay(0, scale), 1, now if first else -1.0]
        self._retries[(agent, key)] = entry
        heapq.heappush(self._due, (entry[0], next(self._seq), (agent, key), entry))

    def withdraw(self, agent: EmulatedAgent, key: tuple[str, str]) -> None:
        """Stop resending an update that will never be acknowledged (its agent started over)."""
        self._retries.pop((agent, key), None)

    def acknowledged(self, agent: EmulatedAgent, key: tuple[str, str]) -> None:
        retry = self._retries.pop((agent, key), None)
        if retry is not None and retry[2] >= 0:
            self.round_trip.observe(time.monotonic() - retry[2])

    async def _retry_loop(self) -> None:
        # A heap of resend times looked at every RETRY_SCAN_SECONDS, rather than a timer
        # per update: at thousands of updates a second, nearly all are acknowledged
        # within milliseconds and a timer each would be armed and cancelled for nothing.
        # Only what is due is touched: a scan of every update in flight took a third of
        # the emulator's time at 50,000 agents, when acknowledgements lag.
        while True:
            await asyncio.sleep(RETRY_SCAN_SECONDS)
            self.resend_due(time.monotonic())

    def resend_due(self, now: float) -> int:
        """Send again every update in flight whose resend time is ``now`` or past, and
        schedule its next resend; how many were sent. O(log n) per update due."""
        due = self._due
        sent = 0
        while due and due[0][0] <= now:
            _, _, held, entry = heapq.heappop(due)
            if self._retries.get(held) is not entry:
                continue  # acknowledged (or withdrawn, or sent anew) meanwhile
            agent, key = held
            status = agent.unacked.get(key)
            if status is None:
                del self._retries[held]
                continue
            agent._send(status)
            sent += 1
            scale = self.round_trip.timeout / FIRST_RETRY_SECONDS
            entry[0] = now + self.update_backoff.delay(int(entry[1]), scale)
            entry[1] += 1
            heapq.heappush(due, (entry[0], next(self._seq), held, entry))
        return sent

    async def stop(self) -> None:
        self.stopping = True
        for t in [self._retry_task, *self._redials]:
            if t is not None:
                t.cancel()
        self.clock.stop()
        for link in self.links:
            if link.conn is not None:
                link.conn.close()
        self.target.close()
