"""Structure-aware fuzzing of the master's RPC handler, in process (no sockets).

A Hypothesis state machine drives a master built without sockets (``ManualClock``)
through sequences of calls of *every* method of the ``Master`` service, each with
arguments drawn from the method's generated ``thrift_spec``
(:mod:`tests.thrift_strategies`): no strategy here names a method or a field, so a
method or field added to ``thrift/mezzo.thrift`` is fuzzed as soon as it is
generated. What the fuzzer knows of the cluster at that moment is mixed into the
draws: the calling peer's own ids, every id the cluster has, and whatever went over
the wire (values by field name, whole structs, as they were or with one field
changed: an offer's resources, a task the master launched, a status it forwarded).
Calls come on the links of registered agents and frameworks as well as on
strangers' links. So the fuzzer gets past "who is calling" and "does it fit" into
the lifecycles behind them. Between calls, time passes, allocation cycles run,
links drop and the master fails over.

Each call's arguments go through the codec first (encoded into a frame and
decoded), so the handler gets exactly what a connection would hand it. Every
message the master sends back is encoded too, as a real connection would, so an
unencodable answer fails here.

After every step:

- no exception escaped the handler (it would fail the test, with the sequence of calls);
- every resource of every agent is in exactly one place: free, offered, in a task
  or in an executor (the cluster state's invariant, tests/unit/test_cluster_state.py);
- what the allocator was told each framework holds is what the state says it holds;
- every outstanding offer is booked on its framework and its agent;
- ``render_state(master)`` renders and is valid JSON (RFC 8259: no NaN or Infinity);
- the master logged no error (what its plugin guard logs when a component raised).

Calls that would trigger a bug found here and not fixed yet are not sent
(tests/fuzz_known_bugs.py), so the fuzzer keeps looking for others.

The normal suite runs 80 sequences of up to 40 steps (about 12 s); to fuzz longer::

    .venv/bin/python -m pytest tests/unit/test_fuzz_master_service.py --fuzz-examples 5000

Each failure the fuzzer found is kept at the end of this module as a plain
regression test with its minimal message.
"""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import hypothesis.strategies as st
from hypothesis import HealthCheck, event, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from structlog.testing import capture_logs

import mezzo.master.master
from mezzo import AgentInfo, CommandInfo, ExecutorInfo, Filters, FrameworkInfo, Resources, TaskInfo
from mezzo.config import MasterConfig
from mezzo.master import Master
from mezzo.master.ports import ManualClock
from mezzo.master.records import AgentTag, FrameworkTag
from mezzo.master.service import STATISTICS_MAX_CHARS
from mezzo.master.state_view import render_state
from mezzo.plugins import load_plugins
from mezzo.services import MASTER, TOOL

from ..fuzz_known_bugs import known_bug
from ..thrift_strategies import Known, WireMemory, as_received, call_args, knowing, unique
from .allocator_ledger import AllocatorLedger
from .test_cluster_state import holding_with_all_executors

EXAMPLES = 80
"""Sequences per run in the normal suite (``--fuzz-examples`` overrides)."""
STEPS = 40
"""Steps per sequence."""
STEP_SECONDS = 0.003
"""Time one step takes on the master's clock: a few steps make an allocation interval."""

METHODS = sorted(MASTER.methods)
AGENT_TOTAL = "cpus:4;mem:1024;ports:[31000-31009]"
RESOURCE_NAMES = ("cpus", "mem", "ports", "disk")
"""Mixed into strings, so drawn resources name what agents have."""


def fuzz_master_config() -> MasterConfig:
    """The master under fuzz: the state is rendered inline (no fork: there is no
    event loop here), timeouts short enough for a few steps of time to reach them."""
    return MasterConfig(
        allocation_interval=0.01,
        render_state_in_child=False,
        offer_timeout=3,
        agent_reregister_timeout=5,
        recovery_hold_timeout=5,
        framework_recovery_timeout=5,
    )


class FuzzLink:
    """A peer's connection as the master sees it, without a socket.

    Every message the master sends on it is encoded with the peer's schema, as
    :class:`mezzo.rpc.Connection` does when the master calls a remote stub, so a
    message that could not go out fails the test where it is made; what it holds
    goes into ``memory`` (shared by the links of one run) for the fuzzer to send
    back. ``closed`` is remembered so the machine can deliver ``connection_lost``
    afterwards, as the transport would.
    """

    def __init__(self, number: int, clock: ManualClock, memory: WireMemory) -> None:
        self.number = number
        self.memory = memory
        self.peer = f"peer-{number}"
        self.tag = None
        self.closed = False
        self.last_received = clock.now()

    def remote(self, schema):
        return _EncodingStub(self, schema)

    def send(self, message: bytes) -> None:
        """A frame the master encoded itself: only its answers to tools go this way
        (``mezzo state``, :meth:`ServiceSchema.encode_with_text`)."""
        # Bytes-like, as a transport takes it (the state's answer is a view of its buffer).
        method, args = TOOL.decode(bytes(message[4:]))  # raises if it is not a sound call
        self.memory.record(TOOL, method, args)

    def close(self) -> None:
        self.closed = True

    def __repr__(self) -> str:
        return f"<link {self.peer}>"

    def __hash__(self) -> int:
        # The master keeps links in sets (agent health walks them): hashed by their
        # number, not their address, a set of them iterates in the same order in
        # every run of an example, so Hypothesis can replay it.
        return self.number


class _EncodingStub:
    def __init__(self, link: FuzzLink, schema) -> None:
        self._link, self._schema = link, schema

    def __getattr__(self, method):
        if method not in self._schema.methods:
            raise AttributeError(f"service {self._schema.name} has no method {method!r}")

        def send(*args, **kwargs):
            self._schema.encode(method, args, kwargs)  # raises if it cannot go on the wire
            self._link.memory.record(self._schema, method, args)

        return send


def assert_every_resource_in_one_place(master: Master) -> None:
    """The cluster state's invariant (as in tests/unit/test_cluster_state.py): each
    agent's free pool, offers, tasks and executors add up to its total."""
    for agent in master.state.agents.values():
        placed = agent.free
        for offer in agent.offers.values():
            placed = placed + offer.resources
        for task in agent.tasks.values():
            placed = placed + task.resources
        for executor in agent.executors.values():
            placed = placed + Resources.of(executor.resources)
        assert placed == agent.total, f"agent {agent.id}: {placed} placed of {agent.total}"


def strict_json(text: str):
    """``json.loads`` that refuses NaN and Infinity, which are not JSON (RFC 8259)."""

    def refuse(constant: str):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


class _Replayable:
    """Stands in for the ``uuid`` and ``time`` modules where the master reads them for
    something that would differ between two runs of one example, which Hypothesis
    must be able to replay by its choices alone:

    - master ids (``uuid4``, ``strftime`` in :mod:`mezzo.master.master`) name every
      framework, agent and offer; ids that differ between runs reorder the master's
      sets of ids and change what later draws pick. Here they count: ``fuzz-000001``.

    Everything else is the real ``time`` module.
    """

    def __init__(self) -> None:
        self.made = 0

    def uuid4(self) -> SimpleNamespace:
        self.made += 1
        return SimpleNamespace(hex=f"{self.made:06d}")

    def strftime(self, fmt: str) -> str:
        return "fuzz-"

    def __getattr__(self, name: str):
        return getattr(time, name)

    def install(self, monkeypatch) -> None:
        monkeypatch.setattr(mezzo.master.master, "uuid", self)
        monkeypatch.setattr(mezzo.master.master, "time", self)


REPLAYABLE = _Replayable()


class MasterFuzz(RuleBasedStateMachine):
    """Random calls of every Master method on a small live cluster; see the module docstring."""

    log_events: list[dict] = []
    """The master's log events, captured by the test (structlog's ``capture_logs``)."""

    def __init__(self) -> None:
        super().__init__()
        self.log_events.clear()  # kept per step only: long runs would pile them up
        REPLAYABLE.made = 0
        self.clock = ManualClock()
        self.master = Master(fuzz_master_config(), load_plugins(), clock=self.clock)
        self.master.lead()
        self._watch_the_allocator()
        self.links: list[FuzzLink] = []
        """Links still open, in the order they were made (draws index into it)."""
        self.made = 0
        self.launched = 0
        self.memory = WireMemory()
        """What went over the wire: what the master sent, and the well-formed calls."""

    # -- helpers ---------------------------------------------------------------------

    def _watch_the_allocator(self) -> None:
        """Keep a ledger of what this term's allocator is told each framework holds."""
        self.ledger = AllocatorLedger(self.master.state.allocator.inner, strict=False)

    def _link(self) -> FuzzLink:
        self.made += 1
        link = FuzzLink(self.made, self.clock, self.memory)
        self.links.append(link)
        return link

    def _settle(self) -> None:
        """What follows a step on a real master: links it closed are gone (the
        transport tells it), and a moment passes, so timers that are due fire (an
        allocation cycle every few calls, offers made to be answered)."""
        for link in [lk for lk in self.links if lk.closed]:
            self.links.remove(link)
            self.master.service.connection_lost(link)
        self.clock.advance(STEP_SECONDS)
        if any(lk.closed for lk in self.links):
            self._settle()

    def known(self, link: FuzzLink) -> Known:
        """What a call on ``link`` may name: every id, hostname and resource name the
        cluster knows now, those of the peer on ``link``, structs seen on the wire.
        Orders are stable (insertion), so a failing example replays."""
        state = self.master.state
        strings: list[str] = [*state.frameworks, *state.removed_frameworks, *state.agents]
        strings += sorted(self.master.registry.admitted)
        strings += state.offer_book.offers
        for agent in state.agents.values():
            strings.append(agent.info.hostname)
            strings += [tid for _, tid in agent.tasks]
            strings += [eid for _, eid in agent.executors]
        strings += RESOURCE_NAMES
        # What the peer on the link would name, by wire field name.
        caller: dict[str, list[str]] = {}

        def add(name: str, *values: str) -> None:
            caller.setdefault(name, []).extend(values)

        tag = link.tag
        if isinstance(tag, FrameworkTag) and tag.framework_id in state.frameworks:
            framework = state.frameworks[tag.framework_id]
            add("framework_id", framework.id)
            for offer in framework.offers.values():
                add("offer_id", offer.id)
                add("agent_id", offer.agent_id)
            for task in framework.tasks.values():
                add("task_id", task.id)
                add("executor_id", task.executor_id)
                add("agent_id", task.agent_id)
        elif isinstance(tag, AgentTag):
            for aid in sorted(tag.agent_ids):
                add("agent_id", aid)
                agent = state.agents.get(aid)
                for fid, tid in agent.tasks if agent is not None else ():
                    add("framework_id", fid)
                    add("task_id", tid)
                for fid, eid in agent.executors if agent is not None else ():
                    add("framework_id", fid)
                    add("executor_id", eid)
        return Known(
            caller={name: unique(values) for name, values in caller.items()},
            strings=unique(strings),
            seen=self.memory.snapshot(),
        )

    # -- a cluster to start from -------------------------------------------------------

    @initialize()
    def a_small_cluster(self) -> None:
        for _ in range(2):
            self.add_agent()
            self.add_framework()
        self._link()  # a stranger
        self.master.term.allocation.run()
        self.launch()
        self.master.term.allocation.run()
        self.launch()

    # -- what the fuzzer does ------------------------------------------------------------
    #
    # Hypothesis picks rules evenly, so calls get four (on links of frameworks, of
    # agents, of nobody, and on any link, anything fuzzed) and everything else shares
    # one, `meanwhile`: most steps are calls.

    def _call(self, data, method: str, links: list[FuzzLink], in_character: bool = False) -> None:
        """A drawn call of ``method`` on one of ``links``, as a connection delivers it
        (unless it would trigger a known bug: tests/fuzz_known_bugs.py)."""
        link = data.draw(st.sampled_from(links), label="link")
        with knowing(self.known(link)):
            args = data.draw(call_args(MASTER, method, in_character=in_character), label=f"{method} args")
        received = as_received(MASTER, method, args)
        bug = known_bug(method, received)
        if bug is not None:
            event(f"not sent (known bug: {bug})")
            return
        link.last_received = self.clock.now()
        getattr(self.master.service, method)(link, *received)
        self._settle()

    def _tagged(self, kind) -> list[FuzzLink]:
        return [lk for lk in self.links if isinstance(lk.tag, kind)]

    # A framework's or an agent's calls are in character: they name its own id where
    # the call names its caller (see call_args), so they get past that check.

    @precondition(lambda self: self._tagged(FrameworkTag))
    @rule(data=st.data(), method=st.sampled_from(METHODS))
    def call_as_framework(self, data, method: str) -> None:
        self._call(data, method, self._tagged(FrameworkTag), in_character=True)

    @precondition(lambda self: self._tagged(AgentTag))
    @rule(data=st.data(), method=st.sampled_from(METHODS))
    def call_as_agent(self, data, method: str) -> None:
        self._call(data, method, self._tagged(AgentTag), in_character=True)

    @precondition(lambda self: self._tagged(type(None)))
    @rule(data=st.data(), method=st.sampled_from(METHODS))
    def call_as_stranger(self, data, method: str) -> None:
        self._call(data, method, self._tagged(type(None)))

    @precondition(lambda self: self.links)
    @rule(data=st.data(), method=st.sampled_from(METHODS))
    def call(self, data, method: str) -> None:
        self._call(data, method, self.links)

    @rule(
        data=st.data(),
        event=st.sampled_from(
            [
                "time_passes",
                "allocation_cycle",
                "add_agent",
                "add_framework",
                "launch",
                "stranger_connects",
                "link_drops",
                "master_fails_over",
            ]
        ),
    )
    def meanwhile(self, data, event: str) -> None:
        getattr(self, event)(data)
        self._settle()

    def time_passes(self, data) -> None:
        self.clock.advance(data.draw(st.sampled_from([0.0, 0.01, 1.0, 4.0, 30.0]), label="seconds"))

    def allocation_cycle(self, data) -> None:
        self.master.term.allocation.run()

    # Well-formed peers join and launch, so calls have someone to act as and tasks to
    # name even after a failover or after the fuzzer's calls emptied the cluster; what
    # they send is remembered like what the master sends.

    def _well_formed(self, link: FuzzLink, method: str, *args) -> None:
        self.memory.record(MASTER, method, args)
        getattr(self.master.service, method)(link, *as_received(MASTER, method, args))

    def add_agent(self, data=None) -> None:
        link = self._link()
        info = AgentInfo(hostname=link.peer, port=5051, resources=Resources.parse(AGENT_TOTAL))
        self._well_formed(link, "register_agent", info)

    def add_framework(self, data=None) -> None:
        link = self._link()
        self._well_formed(link, "register_framework", FrameworkInfo(name=link.peer, failover_timeout=10.0))

    def launch(self, data=None) -> None:
        """The first framework holding an offer launches a small task on it, with the
        command executor or (every other time) an executor of its own."""
        offers = [o for o in self.master.state.offer_book.offers.values()]
        if not offers:
            return
        offer = offers[0]
        framework = self.master.state.frameworks[offer.framework_id]
        self.launched += 1
        task = TaskInfo(
            task_id=f"task-{self.launched}",
            agent_id=offer.agent_id,
            resources=Resources(cpus=0.1, mem=16),
        )
        if self.launched % 2:
            task.command = CommandInfo(value="true")
        else:
            task.executor = ExecutorInfo(
                executor_id=f"executor-{self.launched}",
                command=CommandInfo(value="executor"),
                resources=Resources(cpus=0.1, mem=16),
            )
        self._well_formed(
            framework.conn, "launch_tasks", framework.id, [offer.id], [task], Filters(refuse_seconds=1)
        )

    def stranger_connects(self, data) -> None:
        self._link()

    def link_drops(self, data) -> None:
        if self.links:
            data.draw(st.sampled_from(self.links), label="link").closed = True

    def master_fails_over(self, data) -> None:
        """A new leadership term, as after a failover: every link is dropped, and the
        registry's agents are awaited (their ids stay known for reregister_agent)."""
        self.master.step_down("fuzz: failover")
        self.links.clear()
        self.master.lead(set(self.master.registry.admitted))
        self._watch_the_allocator()

    # -- what must hold ------------------------------------------------------------------

    @invariant()
    def every_resource_is_in_exactly_one_place(self) -> None:
        assert_every_resource_in_one_place(self.master)

    @invariant()
    def the_allocator_sees_what_the_state_holds(self) -> None:
        for framework in self.master.state.frameworks.values():
            told = self.ledger.of(framework.id)
            held = holding_with_all_executors(self.master.state, framework)
            assert told == dict(held.scalars), f"framework {framework.id}: told {told}, holds {held}"

    @invariant()
    def offers_are_booked_on_both_sides(self) -> None:
        state = self.master.state
        for offer in state.offer_book.offers.values():
            assert state.frameworks[offer.framework_id].offers[offer.id] is offer
            assert state.agents[offer.agent_id].offers[offer.id] is offer

    @invariant()
    def the_state_renders_as_json(self) -> None:
        strict_json(render_state(self.master))

    @invariant()
    def nothing_logged_as_an_error(self) -> None:
        """Errors are what the master logs when its own code or a plugin failed (the
        plugin guard, a failed cycle): never the answer to what a peer sent."""
        errors = [e for e in self.log_events if e.get("log_level") in ("error", "critical")]
        self.log_events.clear()
        assert not errors, errors

    def teardown(self) -> None:
        self.master.term.close()


def test_no_call_breaks_the_master(fuzz_examples, monkeypatch):
    REPLAYABLE.install(monkeypatch)
    with capture_logs() as events:
        monkeypatch.setattr(MasterFuzz, "log_events", events)
        _run(fuzz_examples(EXAMPLES))


def _run(examples: int) -> None:
    run_state_machine_as_test(
        MasterFuzz,
        settings=settings(
            max_examples=examples,
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        ),
    )


# -- regressions: each failure the fuzzer found, as its minimal call --------------------


def _master_alone() -> Master:
    master = Master(fuzz_master_config(), load_plugins(), clock=ManualClock())
    master.lead()
    return master


def _call_over_the_wire(master: Master, link: FuzzLink, method: str, *args) -> None:
    getattr(master.service, method)(link, *as_received(MASTER, method, args))


def _executor(cpus: float) -> ExecutorInfo:
    return ExecutorInfo(
        executor_id="e", framework_id="f", command=CommandInfo(value="x"), resources=Resources(cpus=cpus)
    )


def test_reregistering_agent_repeating_an_executor_leaks_its_resources():
    master = _master_alone()
    link = FuzzLink(1, master.clock, WireMemory())
    info = AgentInfo(agent_id="agent-1", hostname="h", port=5051, resources=Resources(cpus=4))
    _call_over_the_wire(master, link, "reregister_agent", info, [], [_executor(1), _executor(1)], [])
    assert master.state.agents["agent-1"].free == Resources(cpus=3)
    assert_every_resource_in_one_place(master)


def test_reregistering_agent_reporting_more_than_it_has_makes_resources_up():
    master = _master_alone()
    link = FuzzLink(1, master.clock, WireMemory())
    info = AgentInfo(agent_id="agent-1", hostname="h", port=5051, resources=Resources(cpus=4))
    _call_over_the_wire(master, link, "reregister_agent", info, [], [_executor(8)], [])
    _call_over_the_wire(master, link, "executor_exited", "agent-1", "f", "e", 0, "")
    agent = master.state.agents["agent-1"]
    assert agent.free.fits_in(agent.total), f"{agent.free} free of {agent.total}"


def _registered_agent(master: Master) -> tuple[FuzzLink, str]:
    link = FuzzLink(1, master.clock, WireMemory())
    info = AgentInfo(hostname="h", port=5051, resources=Resources(cpus=1))
    _call_over_the_wire(master, link, "register_agent", info)
    (agent_id,) = master.state.agents
    return link, agent_id


def test_container_statistics_nested_too_deep_are_dropped():
    master = _master_alone()
    link, agent_id = _registered_agent(master)
    _call_over_the_wire(master, link, "container_statistics", agent_id, "[" * 100_000)
    assert master.state.agents[agent_id].statistics == []


def test_container_statistics_with_a_number_overflowing_to_infinity_leave_the_state_json():
    master = _master_alone()
    link, agent_id = _registered_agent(master)
    _call_over_the_wire(master, link, "container_statistics", agent_id, "[1e999]")
    strict_json(render_state(master))


def test_container_statistics_over_the_size_bound_are_dropped():
    master = _master_alone()
    link, agent_id = _registered_agent(master)
    _call_over_the_wire(master, link, "container_statistics", agent_id, "[1]")
    big = "[" + ",".join(["1"] * (STATISTICS_MAX_CHARS // 2 + 1)) + "]"
    _call_over_the_wire(master, link, "container_statistics", agent_id, big)
    assert master.state.agents[agent_id].statistics == [1]  # the last sound report stays


def test_container_statistics_with_nan_leave_the_state_json():
    master = _master_alone()
    link, agent_id = _registered_agent(master)
    _call_over_the_wire(master, link, "container_statistics", agent_id, "[NaN]")
    strict_json(render_state(master))
