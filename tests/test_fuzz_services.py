"""Structure-aware fuzzing of the real daemons: a master and an agent, as processes,
get well-formed but hostile calls of every method of their service over real sockets.

Where ``tests/test_fuzz.py`` sends bytes that mostly do not decode, these tests send
calls that do: every method of the ``Master`` and the ``Agent`` services, arguments
drawn from the generated ``thrift_spec`` of each (:mod:`tests.thrift_strategies`),
encoded by the codec as a peer would.

- ``test_master_and_agent_survive_every_call``: a cluster of a master and an agent.
  Each example sends a few calls to one of them on one of a few connections the
  fuzzer keeps open, then a call the daemon answers once it has handled them (a
  barrier), and reads everything that came back: what the daemon told a connection
  (the id it registered as, its offers) is what later calls on it name when in
  character (half of them are), so they get past "who is calling"; everything that
  came back is mixed into later draws. To the agent the fuzzer is a stranger.
- ``test_agent_survives_every_call_from_its_master``: an agent whose master is the
  fuzzer, so every call comes on its master link and gets past that check into
  what the agent does with tasks, kills, acknowledgements and shutdowns.

Afterwards the daemons still serve: the master answers ``mezzo state`` with its
agent connected and a framework runs a task to the end; the agent runs a task to
the end for its master; and no log holds "handler failed" (what
:mod:`mezzo.rpc.connection` logs when a handler raises) or a traceback.

Daemons are not replayable (their state carries over between examples), so these
tests do not shrink: they send, then check, and on failure name the last calls
sent (all of them are in ``fuzz-calls.log`` in the cluster's directory). The
normal suite sends 120 examples to each daemon (about 10 s with the clusters); to fuzz longer::

    .venv/bin/python -m pytest tests/test_fuzz_services.py --fuzz-examples 3000
"""

from __future__ import annotations

import socket
from collections import deque

import hypothesis.strategies as st
from hypothesis import HealthCheck, Phase, given, settings

import mezzo
from mezzo import AgentInfo, CommandInfo, Filters, FrameworkInfo, Resources, TaskInfo, TaskState
from mezzo.rpc import FrameDecoder, MalformedMessage
from mezzo.services import AGENT, EXECUTOR, MASTER, SCHEDULER, TOOL
from mezzo.testing import LocalProcessCluster

from .conftest import Recorder, wait_for
from .fuzz_known_bugs import known_bug
from .thrift_strategies import Known, WireMemory, as_received, call_args, knowing, unique

EXAMPLES = 120
"""Examples (a few calls on one connection each) per daemon in the normal suite
(``--fuzz-examples`` overrides)."""
CALLS_PER_EXAMPLE = 6
CONNECTIONS = 3
"""Connections the fuzzer keeps open to each daemon, one drawn per example: a
connection stays what it registered as, so later calls on it act as that peer."""
ANSWER_TIMEOUT = 10.0
"""Seconds a daemon has to handle an example's calls (then it stalled: a failure)."""
FUZZ_IDS = {"framework_id": ("fuzz-framework",), "agent_id": ("fuzz-agent",)}
"""Who the fuzzer is in character before a daemon told it otherwise: ids it may
register under itself (a master takes an unknown id as one an earlier master gave)."""
ANSWERS = {MASTER.name: (SCHEDULER, AGENT, TOOL), AGENT.name: (EXECUTOR, MASTER, TOOL)}
"""The services a daemon's answers on a connection may belong to, tried in order."""
BARRIER = {MASTER.name: "request_metrics", AGENT.name: "request_statistics"}
"""A call each daemon answers with ``Tool.<answer>(request_id, ...)`` once it handled
everything sent before it on the connection."""


class _Connection:
    """One of the fuzzer's connections to a daemon, and what the daemon told on it."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=ANSWER_TIMEOUT)
        self.frames = FrameDecoder()
        self.told = WireMemory()
        """Values in the daemon's answers on this connection, by field name: the ids it
        gave this peer (registered), its offers: what this peer names in character."""

    def close(self) -> None:
        self.sock.close()


class DaemonFuzzer:
    """Sends drawn calls of ``schema`` to the daemon at ``port`` on a few connections;
    keeps what it sent (the latest in memory, all in ``trace``) and what came back."""

    def __init__(self, port: int, schema, strings: tuple[str, ...], trace) -> None:
        self.port = port
        self.schema = schema
        self.strings = strings
        self.trace = trace
        self.seen = WireMemory()
        """Every answer on every connection (values and structs to send back)."""
        self.connections: list[_Connection | None] = [None] * CONNECTIONS
        self.barriers = 0
        self.last: deque[str] = deque(maxlen=20)
        self.failures: list[str] = []

    def known(self, conn: _Connection | None) -> Known:
        caller = dict(FUZZ_IDS)
        if conn is not None:
            caller.update({name: unique(reversed(v)) for name, v in conn.told.snapshot().values.items()})
        return Known(caller=caller, strings=self.strings, seen=self.seen.snapshot())

    def send(self, slot: int, calls: list[tuple[str, tuple]]) -> None:
        """Send ``calls`` on connection ``slot`` (opened if needed) and read the answers
        until the daemon has handled them all (or closed the connection)."""
        self.barriers += 1
        barrier_id = 2**62 + self.barriers  # far from what the fuzzer draws
        frames = []
        for method, args in calls:
            if self.schema is MASTER and known_bug(method, as_received(MASTER, method, args)):
                continue  # a bug found and not fixed yet: see tests/fuzz_known_bugs.py
            shown = f"[{slot}] {self.schema.name}.{method}{args!r}"
            self.last.append(shown[:2000])
            self.trace.write(shown + "\n")
            frames.append(self.schema.encode(method, args, {}))
        self.trace.flush()
        frames.append(self.schema.encode(BARRIER[self.schema.name], (barrier_id,), {}))
        try:
            conn = self.connections[slot] or _Connection(self.port)
            self.connections[slot] = conn
            conn.sock.sendall(b"".join(frames))
            while not self._read(conn, barrier_id):
                pass
        except ConnectionError:
            self._drop(slot)  # the daemon closed it: allowed, it says why in its log
        except OSError as exc:  # refused, or no answer in time: the daemon is gone or stuck
            self.failures.append(f"{exc!r}")
            self._drop(slot)

    def _read(self, conn: _Connection, barrier_id: int) -> bool:
        """Read one chunk of answers and remember them; True once the barrier's answer
        came. Raises ConnectionError when the daemon closed the connection."""
        chunk = conn.sock.recv(65536)
        if not chunk:
            raise ConnectionResetError("closed by the daemon")
        done = False
        for payload in conn.frames.feed(chunk):
            for service in ANSWERS[self.schema.name]:
                try:
                    method, args = service.decode(payload)
                except MalformedMessage:
                    continue
                conn.told.record(service, method, args)
                self.seen.record(service, method, args)
                done = done or (service is TOOL and args[:1] == (barrier_id,))
                break
        return done

    def _drop(self, slot: int) -> None:
        conn = self.connections[slot]
        if conn is not None:
            conn.close()
        self.connections[slot] = None

    def fuzz(self, examples: int) -> None:
        methods = sorted(self.schema.methods)

        @settings(
            max_examples=examples,
            phases=[Phase.generate],  # a daemon's state carries over: nothing replays
            database=None,
            deadline=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
        @given(data=st.data())
        def one_example(data) -> None:
            slot = data.draw(st.integers(0, CONNECTIONS - 1), label="connection")
            calls = []
            with knowing(self.known(self.connections[slot])):
                for _ in range(data.draw(st.integers(1, CALLS_PER_EXAMPLE), label="calls")):
                    method = data.draw(st.sampled_from(methods), label="method")
                    in_character = data.draw(st.booleans(), label="in character")
                    strategy = call_args(self.schema, method, in_character=in_character)
                    calls.append((method, data.draw(strategy, label=method)))
            self.send(slot, calls)

        try:
            one_example()
        finally:
            for slot in range(CONNECTIONS):
                self._drop(slot)

    def failure(self, what: str) -> str:
        return f"{what}; the last calls sent to the {self.schema.name}:\n" + "\n".join(self.last)


def seed_corpus(memory: WireMemory, agent: dict) -> None:
    """Well-formed calls, remembered as if seen on the wire, so that the fuzzer has a
    sound struct of each kind to send as it is or with one field changed before the
    daemons sent any: a framework, an agent (the cluster's resources), a task."""
    resources = Resources.parse(
        ";".join(f"{k}:{v}" for k, v in agent["resources"].items() if not isinstance(v, list))
    )
    memory.record(MASTER, "register_framework", (FrameworkInfo(name="fuzz", failover_timeout=1.0),))
    memory.record(
        MASTER, "register_agent", (AgentInfo(hostname="fuzz-host", port=5051, resources=resources),)
    )
    task = TaskInfo(
        task_id="fuzz-task",
        agent_id=agent["id"],
        resources=Resources(cpus=0.1, mem=16),
        command=CommandInfo(value="true"),
    )
    memory.record(MASTER, "launch_tasks", ("", [], [task], Filters(refuse_seconds=1)))


def test_master_and_agent_survive_every_call(make_cluster, drivers, fuzz_examples):
    cluster = make_cluster(1, master={"allocation_interval": 0.01})
    state = cluster.state()
    (agent,) = state["agents"]
    strings = unique([agent["id"], agent["hostname"], state["master"]["id"], *agent["resources"]])
    examples = fuzz_examples(EXAMPLES)
    with open(cluster.dir / "fuzz-calls.log", "w") as trace:
        fuzzers = [
            DaemonFuzzer(cluster.port, MASTER, strings, trace),
            DaemonFuzzer(agent["port"], AGENT, strings, trace),
        ]
        for fuzzer in fuzzers:
            seed_corpus(fuzzer.seen, agent)
            fuzzer.fuzz(examples)

    for fuzzer in fuzzers:
        assert not fuzzer.failures, fuzzer.failure(f"the daemon stopped answering: {fuzzer.failures[0]}")
    assert all(p.poll() is None for p in cluster.procs.values()), "a daemon died"

    # The master still serves, with its one real agent connected (a fuzzed call may
    # have taken the agent's id from it for a while: the agent comes back).
    wait_for(
        lambda: any(a["id"] == agent["id"] and a["connected"] for a in cluster.state()["agents"]),
        20,
        "the agent connected to the master again",
    )
    # ... and a framework still runs a task end to end.
    launched: set[str] = set()

    def launch(driver, offers):
        for o in offers:
            if o.agent_id == agent["id"] and not launched:
                launched.add(o.offer_id)
                task = TaskInfo(
                    task_id="after-fuzz",
                    agent_id=o.agent_id,
                    resources=Resources(cpus=0.1, mem=16),
                    command=CommandInfo(value="true"),
                )
                driver.launch_tasks(o.offer_id, [task], Filters(refuse_seconds=0))
            else:
                driver.decline_offer(o.offer_id, Filters(refuse_seconds=1))

    recorder = Recorder(launch)
    drivers(recorder, "after-fuzz", cluster.master)
    wait_for(lambda: recorder.final("after-fuzz") is not None, 30, "a task after the fuzzing")
    assert mezzo.state_name(recorder.final("after-fuzz").state) == "TASK_FINISHED"

    for name in ("master", "agent-1"):
        log = (cluster.dir / f"{name}.log").read_text(errors="replace")
        for sign in ("handler failed", "Traceback"):
            found = sign in log
            assert not found, f"{name}.log holds {sign!r}:\n{_around(log, sign)}"


def _around(log: str, sign: str, lines: int = 30) -> str:
    """The lines of ``log`` from the first one holding ``sign`` on."""
    all_lines = log.splitlines()
    first = next(i for i, line in enumerate(all_lines) if sign in line)
    return "\n".join(all_lines[max(0, first - 2) : first + lines])


# -- the agent, with the fuzzer as its master -----------------------------------------
#
# Over a socket of its own the fuzzer is a stranger to an agent, which ignores
# whatever only its master may ask (nearly all of the Agent service). To get past
# that check, the fuzzer takes the master's seat: the agent is started with the
# fuzzer's address as its master's, registers there, and every call then comes on
# its master link. The fuzzer answers its registrations and otherwise listens.

AGENT_METHODS = sorted(set(AGENT.methods) - {"error"})
"""Every Agent call but ``error``: that is the master telling the agent to stop, and
it stops (by design, tested elsewhere)."""


class MasterSeat:
    """A listening socket that an agent takes for its master's. :meth:`send` delivers
    calls on the agent's current link and waits until the agent has handled them (a
    ``ping`` after them, answered ``pong``), answering the agent's registrations and
    taking its next link if it left (``not_leader``); what the agent says is kept."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(ANSWER_TIMEOUT)
        self.address = f"127.0.0.1:{self.server.getsockname()[1]}"
        self.sock: socket.socket | None = None
        self.frames = FrameDecoder()
        self.agent_ids = 0
        self.agent_id = ""
        self.told = WireMemory()
        """What the agent said, by field name (its tasks' ids in its status updates)."""
        self.statuses: list = []

    def send(self, frames: list[bytes]) -> None:
        ping = AGENT.encode("ping", (), {})
        while True:
            if self.sock is None:
                self._take_link()
            try:
                self.sock.sendall(b"".join(frames) + ping)
                while not self._read():
                    pass
                return
            except ConnectionError:  # the agent left this link (not_leader): it dials again
                self.sock.close()
                self.sock, frames = None, []

    def _take_link(self) -> None:
        self.sock, _ = self.server.accept()
        self.sock.settimeout(ANSWER_TIMEOUT)
        self.frames = FrameDecoder()

    def _read(self) -> bool:
        """Read a chunk of what the agent says; True once its ``pong`` came."""
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionResetError("the agent closed its master link")
        ponged = False
        for payload in self.frames.feed(chunk):
            try:
                method, args = MASTER.decode(payload)
            except MalformedMessage:  # an answer to a tool (request_statistics)
                continue
            self.told.record(MASTER, method, args)
            if method == "register_agent":
                self.agent_ids += 1
                self.agent_id = f"fuzz-agent-{self.agent_ids}"
                self.sock.sendall(AGENT.encode("registered", (self.agent_id,), {}))
            elif method == "reregister_agent":
                self.agent_id = args[0].agent_id
                self.sock.sendall(AGENT.encode("reregistered", (self.agent_id,), {}))
            elif method == "status_update":
                self.statuses.append(args[0])
            ponged = ponged or method == "pong"
        return ponged

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.server.close()


def test_agent_survives_every_call_from_its_master(tmp_path, fuzz_examples):
    seat = MasterSeat()
    # Quick to come back to its master (not_leader makes it leave) and to end what it
    # was told to kill or what never registers: the fuzzer does not wait on timeouts.
    quick = {"reconnect_interval": 0.02, "kill_grace_period": 0.2, "executor_register_timeout": 2.0}
    cluster = LocalProcessCluster(
        1, agent={"master": seat.address, **quick}, directory=str(tmp_path / "cluster")
    )
    try:
        cluster.start_agent(1)
        seat.send([])  # its registration, answered
        framework = FrameworkInfo(framework_id="fuzz-framework", name="fuzz")
        task = TaskInfo(
            task_id="fuzz-task",
            agent_id=seat.agent_id,
            resources=Resources(cpus=0.1, mem=16),
            command=CommandInfo(value="true"),
        )
        seat.told.record(AGENT, "run_task", (framework, task))  # a sound call to start from
        last: deque[str] = deque(maxlen=20)
        _fuzz_the_agent(seat, last, fuzz_examples(EXAMPLES), cluster.dir / "fuzz-calls.log")

        assert cluster.procs["agent-1"].poll() is None, "the agent died; last calls:\n" + "\n".join(last)
        # It still runs a task to the end for its master (which acknowledges each of
        # the task's updates, so the agent sends the next).
        task.task_id, task.agent_id = "after-fuzz", seat.agent_id
        seat.send([AGENT.encode("run_task", (framework, task), {})])

        def finished() -> bool:
            ours = [s for s in seat.statuses if s.task_id == "after-fuzz"]
            acks = [
                AGENT.encode("status_update_acknowledged", (s.framework_id, s.task_id, s.uuid), {})
                for s in ours
            ]
            seat.send(acks)
            return any(s.state == TaskState.TASK_FINISHED for s in ours)

        wait_for(finished, 20, "TASK_FINISHED of a task after the fuzzing")
    finally:
        cluster.stop()
        seat.close()
    log = (cluster.dir / "agent-1.log").read_text(errors="replace")
    for sign in ("handler failed", "Traceback"):
        found = sign in log
        assert not found, f"agent-1.log holds {sign!r}:\n{_around(log, sign)}"


def _fuzz_the_agent(seat: MasterSeat, last: deque, examples: int, trace_path) -> None:
    @settings(
        max_examples=examples,
        phases=[Phase.generate],  # the agent's state carries over: nothing replays
        database=None,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def one_example(data) -> None:
        # What the agent told its master (latest first) is what the master would name:
        # its id, its tasks' and executors' ids.
        told = seat.told.snapshot()
        caller = {k: unique(reversed(v)) for k, v in told.values.items()}
        caller["agent_id"] = unique([seat.agent_id, *caller.get("agent_id", ())])
        frames = []
        with knowing(Known(caller=caller, seen=told)):
            for _ in range(data.draw(st.integers(1, CALLS_PER_EXAMPLE), label="calls")):
                method = data.draw(st.sampled_from(AGENT_METHODS), label="method")
                in_character = data.draw(st.booleans(), label="in character")
                args = data.draw(call_args(AGENT, method, in_character=in_character), label=method)
                shown = f"Agent.{method}{args!r}"
                last.append(shown[:2000])
                trace.write(shown + "\n")
                frames.append(AGENT.encode(method, args, {}))
        trace.flush()
        seat.send(frames)

    with open(trace_path, "w") as trace:
        one_example()
