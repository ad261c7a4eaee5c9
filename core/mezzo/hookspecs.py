"""The plugin contract of mezzo: every hook and every component interface.

This module is the whole contract between mezzo and its plugins. A plugin is a
pip-installable package with an entry point in the group ``mezzo`` naming a
module (or object) holding ``@mezzo.hookimpl`` functions::

    [project.entry-points.mezzo]
    drf = "mezzo_allocator_drf.plugin"

Components and hooks
--------------------
Policy that a cluster runs *one of* (the allocator, the revocation policy) or *an
ordered list of* (isolators, offer filters) is a **component**: a class with a ``name`` that a
plugin registers from :func:`mezzo_register_components` and that the operator
switches on by name in TOML. Installing a plugin never switches anything on.

Everything else is an **observer hook** (``mezzo_task_status``, ...): called for
every plugin that implements it, for metrics and audit, results ignored. Observer
hooks run on the daemon's event loop: keep them cheap and never block. An
exception from an observer is logged and swallowed; it never aborts the master's
work.

A hook implementation that does not match its spec fails at start-up
(``PluginManager.check_pending``), not at the first call.

Component interfaces
--------------------
:class:`Allocator`, :class:`OfferFilter`, :class:`RevocationPolicy` and
:class:`Isolator` below are the base classes components derive from. Their methods
are documented with when the core calls them and what their return means.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import pluggy

if TYPE_CHECKING:
    from .plugins import ComponentRegistry
    from .resources import Resources
    from .wire.ttypes import AgentInfo, FrameworkInfo, Offer, TaskStatus

PROJECT = "mezzo"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# --------------------------------------------------------------------- hooks


@hookspec
def mezzo_register_components(registry: ComponentRegistry) -> None:
    """Register the component classes this plugin provides.

    Called once per plugin when the plugin manager is built, plugin by plugin so
    that a clash of names can say which two plugins clash. Call ``registry.add(cls)`` for each
    :class:`Allocator`, :class:`OfferFilter`, :class:`RevocationPolicy` or
    :class:`Isolator` subclass; the
    kind comes from the base class and the name from ``cls.name``. Registering two
    components of one kind under one name is a start-up error naming both plugins.
    Return value: ignored.
    """


@hookspec
def mezzo_task_status(framework_id: str, status: TaskStatus) -> None:
    """Observer, master side: a task status update reached the master (before it is
    forwarded to the scheduler). Includes the master's own TASK_ERROR/TASK_DROPPED
    answers to bad launches. Return value: ignored."""


@hookspec
def mezzo_offers_sent(framework_id: str, offers: list[Offer]) -> None:
    """Observer, master side: an allocation cycle sent ``offers`` to a framework.
    Return value: ignored."""


@hookspec
def mezzo_agent_added(agent: AgentInfo) -> None:
    """Observer, master side: an agent registered (new id) or re-registered.
    Return value: ignored."""


@hookspec
def mezzo_agent_removed(agent_id: str, reason: str) -> None:
    """Observer, master side: an agent left the cluster (lost, or did not come back
    within ``master.agent_reregister_timeout``); ``reason`` says which.
    Return value: ignored."""


@hookspec
def mezzo_framework_added(framework: FrameworkInfo) -> None:
    """Observer, master side: a framework registered and was given its id.
    Return value: ignored."""


@hookspec
def mezzo_framework_removed(framework_id: str, reason: str) -> None:
    """Observer, master side: a framework unregistered or was removed.
    Return value: ignored."""


@hookspec
def mezzo_leader_elected(master: str) -> None:
    """Observer: ``master`` (``host:port``) became the leading master.
    Return value: ignored."""


# ----------------------------------------------------------------- components


class Component:
    """Base of all components. Subclasses set ``name`` (the TOML name) and declare
    the settings their TOML table may hold in ``known_settings``."""

    name: ClassVar[str] = ""
    kind: ClassVar[str] = ""
    description: ClassVar[str] = ""
    """One line shown by ``mezzo plugins``."""
    known_settings: ClassVar[tuple[str, ...]] = ()
    """The names the component's settings table may hold, in the order error messages
    list them. Anything else is refused by :meth:`__init__` before the component reads
    its settings."""

    def __init__(self, settings: Mapping[str, Any], *, key: str) -> None:
        """Check ``settings`` (the component's TOML table, possibly empty) against
        :attr:`known_settings`.

        ``key`` is the dotted TOML key of that table (e.g. ``master.allocator.drf``).
        A table that is not a table, or a setting not in :attr:`known_settings`, raises
        :class:`mezzo.errors.ConfigError` naming the key. A subclass calls this first,
        then reads its settings and raises ``ConfigError`` on ``f"{key}.<setting>"`` for
        an invalid value (:mod:`mezzo.setting_checks` has the helpers).
        """
        from .setting_checks import expect_table, reject_unknown

        expect_table(settings, key, "a table")
        reject_unknown(settings, key, self.known_settings, owner=f"{self.kind} {self.name!r}")


class AllocationCycle(abc.ABC):
    """What an allocator sees of one allocation cycle. Provided by the master.

    The master builds one per cycle, after expiring refuse filters and offers.
    """

    @abc.abstractmethod
    def agents(self) -> Iterable[str]:
        """Ids of the agents with free resources worth offering, in a shuffled order
        (shuffling spreads frameworks over agents, as Apache Mesos does). Left out:
        agents on which less than the minimum offer size is free (``master.min_offer``,
        capped by the agent's total), and agents every framework refuses. Offer only
        agents from here: the master does not check the minimum again."""

    @abc.abstractmethod
    def free(self, agent_id: str) -> Resources:
        """Unallocated, unoffered resources of ``agent_id`` right now."""

    @abc.abstractmethod
    def may_offer(self, framework_id: str, agent_id: str) -> bool:
        """False when a refuse filter (from a decline), the framework's persistent
        filters or an offer filter component rule the pair out. Cheap: O(1) for
        refuse filters, then each offer filter once. The reason for a False is
        recorded by the master (for the state output), not returned."""

    def refusing(self, agent_id: str) -> Collection[str]:
        """The frameworks whose refuse filters (from declines) cover what is free on
        ``agent_id`` now: ``may_offer`` would say no to each. Cheap (no copy), so an
        allocator can skip them by membership before calling ``may_offer``, which stays
        the authority for everything else (persistent filters, offer filter
        components, connection). Default: empty."""
        return frozenset()

    @abc.abstractmethod
    def offer(self, framework_id: str, agent_id: str) -> None:
        """Offer every free resource of ``agent_id`` to ``framework_id``.

        The master records the offer and sends it at the end of the cycle, and
        calls :meth:`Allocator.allocated` before returning, so the framework's
        share already includes the offer when the allocator picks for the next
        agent. After this call ``free(agent_id)`` is empty.
        """


class Allocator(Component):
    """An allocation policy: decides which framework is offered each agent.

    The master keeps the allocator's view of the cluster current through the
    notification methods, calls :meth:`allocate` once per cycle, and never calls
    two methods concurrently (everything runs on the master's event loop). Every
    method must be cheap: the master serves tens of thousands of agents from one
    thread. Notifications are idempotent in the sense that the master calls each
    ``add_*`` once per id and the matching ``remove_*`` at most once after it.
    """

    kind = "allocator"

    @abc.abstractmethod
    def add_framework(self, framework_id: str, info: FrameworkInfo) -> None:
        """A framework registered. It starts active (wanting offers)."""

    @abc.abstractmethod
    def remove_framework(self, framework_id: str) -> None:
        """A framework left; its allocation has already been recovered."""

    @abc.abstractmethod
    def activate(self, framework_id: str) -> None:
        """The framework wants offers again (``set_needs_offers(True)``, reconnect)."""

    @abc.abstractmethod
    def deactivate(self, framework_id: str) -> None:
        """The framework wants no offers (``set_needs_offers(False)``, disconnect).
        Its allocation still counts toward its share."""

    @abc.abstractmethod
    def add_agent(self, agent_id: str, total: Resources) -> None:
        """An agent joined; ``total`` is added to the cluster's resources."""

    @abc.abstractmethod
    def remove_agent(self, agent_id: str, total: Resources) -> None:
        """An agent left; allocations on it have already been recovered."""

    @abc.abstractmethod
    def allocated(self, framework_id: str, resources: Resources) -> None:
        """``resources`` now count toward the framework's allocation: offered to it
        (an outstanding offer counts, paper §3.5) or used by its tasks."""

    @abc.abstractmethod
    def recovered(self, framework_id: str, resources: Resources) -> None:
        """``resources`` no longer count toward the framework: declined, rescinded,
        unused part of an accepted offer, or freed by a finished task."""

    @abc.abstractmethod
    def allocate(self, cycle: AllocationCycle) -> None:
        """Run one allocation cycle: for agents in ``cycle.agents()``, call
        ``cycle.offer(framework, agent)`` for the framework the policy prefers among
        the active ones for which ``cycle.may_offer`` holds. Leaving an agent
        unoffered is allowed (nothing suitable). Return value: ignored."""

    def guaranteed_share(self, framework_id: str) -> Resources:
        """The resources this framework may hold without losing tasks to revocation
        (paper §3.3). The guarantees of all frameworks must fit in the cluster
        together. Default: nothing guaranteed."""
        from .resources import Resources

        return Resources()

    def dominant_share(self, framework_id: str) -> float:
        """The framework's (unweighted) dominant share in [0, 1], for the state output."""
        return 0.0


class FrameworkView(Protocol):
    """What an offer filter sees of a framework: the master's record, read-only."""

    @property
    def id(self) -> str:
        """The framework id."""

    @property
    def info(self) -> FrameworkInfo:
        """What its scheduler registered (name, role, ...)."""

    @property
    def agent_whitelist(self) -> frozenset[str] | None:
        """``set_filters`` agents: the agent ids or hostnames it wants offers of; None = any."""

    @property
    def min_free(self) -> Resources | None:
        """``set_filters`` min_free: offer only agents with at least this free; None = any."""


class AgentView(Protocol):
    """What an offer filter sees of an agent: the master's record, read-only."""

    @property
    def id(self) -> str:
        """The agent id."""

    @property
    def info(self) -> AgentInfo:
        """What the agent registered: hostname, port, attributes (str to str)."""

    @property
    def total(self) -> Resources:
        """Everything the agent has, used or not."""

    @property
    def hostname(self) -> str:
        """``info.hostname``."""


class OfferFilter(Component):
    """A predicate run on the master before offering an agent to a framework.

    Enabled by name in ``master.offer_filters`` (in order, after the built-in
    framework filters of ``set_filters``). The paper's two filters ("only agents in
    list L", "only agents with at least R free") are built in and registered the
    same way.
    """

    kind = "offer_filter"

    @abc.abstractmethod
    def refuse(self, framework: FrameworkView, agent: AgentView, free: Resources) -> str | None:
        """Return ``None`` to allow offering ``free`` on ``agent`` to ``framework``,
        or a short reason (e.g. ``"agent not in framework's list"``) to treat the
        resources as declined by it. Called per (framework, agent) candidate inside
        the allocation cycle: it must be cheap and must not block. Treat both views
        as read-only.

        "No" and "broken" are different answers, as in the Kubernetes scheduler
        framework's ``Status``: a reason is an expected "no", shown per framework in
        ``mezzo state`` (``not_offered_last_cycle``, as ``"<filter>: <reason>"``). An
        exception means the filter is broken: the master logs it once with the
        filter's name (then at most once a minute), counts it in the metrics
        (``plugin_failures``), shows ``"<filter>: error"`` in the state, and does not
        offer the pair in this cycle (a broken filter fails closed)."""


@dataclass(frozen=True)
class Starved:
    """A framework that revocation should make room for (paper §3.3)."""

    framework_id: str
    """The starved framework."""
    wants: Resources
    """What it is short of: its guarantee minus what it holds and minus what is being
    revoked for it already (scalars). Getting any one of these resources in full
    meets its guarantee (:mod:`mezzo.guarantees`). Never empty."""
    waiting_seconds: float
    """How long it has wanted offers (``set_needs_offers(True)``) and been below its
    guarantee without launching anything (as often as the master checks)."""


@dataclass(frozen=True)
class HeldTask:
    """A running task that revocation could kill."""

    task_id: str
    """The task's id (unique within its framework)."""
    agent_id: str
    """The agent it runs on."""
    resources: Resources
    """The task's own resources (not its executor's)."""
    started_at: float
    """When it was launched, in ``time.time()`` seconds: how much work killing it
    would waste (paper §4.4)."""
    long: bool
    """Marked long by its framework (``TaskInfo.long``, paper §4.4); policies may
    treat long and short tasks differently."""


@dataclass(frozen=True)
class Holder:
    """A framework that holds resources, as a revocation policy sees it."""

    framework_id: str
    """The framework."""
    allocated: Resources
    """Everything that counts toward it: its tasks, its executors and its
    outstanding offers (as :meth:`Allocator.allocated` saw them)."""
    guaranteed: Resources
    """:meth:`Allocator.guaranteed_share` of the framework: what it may hold
    without losing tasks. Empty when nothing is guaranteed."""
    tasks: Sequence[HeldTask]
    """Its running tasks, the candidates for revocation, in no particular order:
    listed only when the framework is above its guarantee (:mod:`mezzo.guarantees`).
    Empty for one at or below it: it may lose no task, and is a holder only for
    what it holds (listing its tasks would cost every round O(tasks in the cluster))."""


@dataclass(frozen=True)
class Victim:
    """A task a revocation policy chose to kill."""

    framework_id: str
    """The framework that owns the task (a :attr:`Holder.framework_id`)."""
    task_id: str
    """The task (a :attr:`HeldTask.task_id` of that holder)."""
    agent_id: str
    """The agent it runs on (its :attr:`HeldTask.agent_id`)."""
    reason: str
    """Why, for people: the task's ``TaskStatus.message`` and the master's log, e.g.
    ``"framework F above its guarantee by cpus:2;mem:512 (guaranteed cpus:1);
    revoked for framework G, starved 40 s"``."""
    for_framework_id: str = ""
    """The starved framework the task is revoked for (a :attr:`Starved.framework_id`).
    What the task frees is then held for that framework for a few seconds, so the
    allocator cannot hand it straight to someone else, and counts toward its want
    until the task is gone. Empty: the master frees it for anyone."""


class RevocationPolicy(Component):
    """Chooses which tasks to revoke (kill) so that starved frameworks get resources.

    Paper §3.3: allocators expose a guaranteed allocation per framework (see
    :meth:`Allocator.guaranteed_share`); a framework below its guarantee loses no
    tasks, one above it may lose any. Selected by name in
    ``[master.revocation_policy] name`` (default ``fair-share``); exactly one per
    master. It only chooses: the master decides when to ask and does the killing.
    """

    kind = "revocation_policy"

    @abc.abstractmethod
    def select(self, starved: Sequence[Starved], holders: Sequence[Holder]) -> list[Victim]:
        """Choose the tasks to revoke for the ``starved`` frameworks.

        When it is called: on the master's event loop, when at least one framework
        that wants offers (``set_needs_offers(True)``) has been below its guarantee
        without launching anything for ``master.revocation_delay`` seconds (checked about
        once a second while revocation is on). ``starved`` lists those frameworks;
        ``holders`` lists the other frameworks that run tasks that could be killed
        (on connected agents, not being killed already), with those tasks when the
        framework is above its guarantee and none when it is not (it may lose none). It must be cheap and
        must not block; it must not keep or modify its arguments.

        "Below", "meets" and "above" a guarantee are meant as in
        :mod:`mezzo.guarantees` (the dominant share measured against the
        guarantee); its functions are there for policies to use. Rules every
        policy must keep:

        - Pick tasks only of frameworks above their guarantee, and never one that
          would leave its framework's ``allocated`` minus the victims picked so far
          (this call included) short of meeting its ``guaranteed``: an MPI-like
          framework that stays within its guarantee never loses a task.
        - Pick no more than needed for the starved frameworks to meet their
          guarantees (see :attr:`Starved.wants`).
        - Name each task at most once, and only tasks from ``holders``.

        The master checks the victims it gets: one that names no task it offered
        the policy, or names one twice, is logged and skipped; an exception is
        logged and revocation goes on at the next check.

        What the return means: the tasks to revoke, in the order to kill them; ``[]``
        for nothing to do (nobody above a guarantee, or nothing that helps). The
        master kills each victim with a grace period (the executor is asked to kill
        the task; the executor is killed if it does not), and the framework sees
        ``TASK_KILLED`` with reason ``revoked`` and the victim's ``reason`` as the
        message. The freed resources are offered by the allocator as usual; the
        policy does not decide who gets them.
        """


@dataclass(frozen=True)
class RunAs:
    """A unix user a container's command runs as, as the agent looked it up on its host."""

    name: str
    uid: int
    gid: int
    """The user's primary group."""
    groups: tuple[int, ...]
    """Supplementary groups (the primary one included)."""
    home: str

    @property
    def owner(self) -> tuple[int, int]:
        """``(uid, gid)``: who the container's files are given to."""
        return self.uid, self.gid


@dataclass
class ContainerLaunch:
    """How a container's first process is started; isolators adjust it in ``prepare``.

    ``preexec`` functions run in the child between fork and exec, in order (join a
    cgroup, enter a namespace). ``wrapper`` is prepended to ``argv`` (e.g.
    ``lxc-execute ... --``). ``user``: the user the command runs as (set by an agent
    running as root with ``agent.switch_user``; None: the agent's own). The switch comes
    last: ``preexec`` functions and the wrapper run as the agent (root), and only the
    command itself as ``user``.
    """

    argv: list[str]
    env: dict[str, str]
    cwd: str
    preexec: list[Callable[[], None]] = field(default_factory=list)
    wrapper: list[str] = field(default_factory=list)
    user: RunAs | None = None


@dataclass
class Container:
    """One isolation container on an agent: an executor, or one command task."""

    container_id: str
    framework_id: str
    executor_id: str
    resources: Resources
    sandbox: str
    launch: ContainerLaunch
    pid: int | None = None
    state: dict[str, Any] = field(default_factory=dict)
    """Scratch space for isolators, keyed by isolator name."""


@dataclass
class Limitation:
    """Why an isolator's limit ended a container, for the tasks' terminal updates.

    ``reason`` is machine-readable (e.g. ``memory_limit``) and becomes
    ``TaskStatus.reason``; ``message`` says it for people, with the numbers (e.g.
    ``memory limit of 64 MB reached (the kernel killed the container)``).
    """

    reason: str
    message: str


class Isolator(Component):
    """Enforces one kind of isolation on agent containers (cgroups, namespaces, ...).

    Enabled by name in ``agent.isolation``. For each container the agent calls
    ``prepare`` of every isolator in TOML order, starts the process, calls
    ``isolate`` in order, ``update`` whenever the container's resources change, and
    ``cleanup`` in reverse order when it ends. If an isolator's ``prepare`` or
    ``isolate`` raises, the ones already run are cleaned up in reverse and the
    launch fails with TASK_FAILED naming the isolator and its error.
    """

    kind = "isolator"

    async def recover(self, containers: list[Container]) -> None:
        """At agent start-up: ``containers`` are the ones still known; remove any
        leftovers of containers not in the list (from a crash). Default: nothing."""

    async def prepare(self, container: Container) -> None:
        """Before the container's process starts: create what it needs and adjust
        ``container.launch``. Default: nothing."""

    async def isolate(self, container: Container) -> None:
        """Right after the process started (``container.pid`` set). Default: nothing."""

    async def update(self, container: Container, resources: Resources) -> None:
        """The container's resources changed (tasks came or went). Default: nothing."""

    async def usage(self, container: Container) -> dict[str, float]:
        """Resource usage, e.g. ``{"cpu_seconds": 1.5, "mem_bytes": 1e6}``.
        Values must be finite: the agent drops a measurement that is NaN or an
        infinity, or a list or dict holding one at any depth (the other keys are
        kept), and logs a warning the first time each isolator reports one under
        each key. Default: nothing measured."""
        return {}

    async def limitation(self, container: Container) -> Limitation | None:
        """The container's processes are gone (before ``cleanup``): did this isolator's
        limit end them? E.g. the memory cgroup's OOM killer. The first isolator, in
        ``agent.isolation`` order, that answers one names the reason of the failed
        tasks. Default: None (nothing of ours ended it)."""
        return None

    async def cleanup(self, container: Container) -> None:
        """The container's processes are gone: remove everything made for it.
        Must be idempotent and must not raise for resources already gone."""
