"""Validation of ``launch_tasks`` (the paper's replyToOffer).

:func:`check_launch` takes what a framework sent and what the master knows, and
returns which tasks may run and, for each one that may not, the status to answer
it with. It has no side effects, so every rule is testable on its own.

Rules, in the order they are checked (the first failing rule answers the task):

1. Offers (all tasks dropped when any fails, TASK_DROPPED): every offer id is an
   outstanding offer of this framework; all offers are on one agent; that agent is
   still connected.
2. Per task (TASK_ERROR, others in the batch still launch, but for the other tasks of
   its task group, which are refused with it, as Mesos refuses a ``LAUNCH_GROUP`` whole,
   each saying which member failed and why): a non-empty task id,
   unique within the framework and within the batch; the agent id of the offers;
   sane resources (no negative amounts, no inverted ranges); exactly one of
   ``command`` and ``executor``; an executor with an id and sane resources;
   task plus (new) executor resources within what is left of the offers; a long
   task (``TaskInfo.long``) within the agent's long-task room left, counting the
   long tasks before it in the batch (:mod:`.long_tasks`); ``TaskInfo.data`` within
   ``master.max_task_data_bytes``, and its labels, command arguments and
   environments together within ``master.max_task_metadata_bytes`` (a task's
   description is forwarded to its agent and kept there and in the agent's journal,
   so one framework must not make either hold unbounded memory); its unix user
   (:func:`mezzo.task_user.task_user`) one the framework's principal may run tasks
   as (``may_run_as``: the ``run_tasks`` ACL, :mod:`mezzo.acls`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from ..resources import InvalidResources, Resources, wire_ranges_problem
from ..task_user import task_user
from ..wire.ttypes import TaskInfo, TaskState, TaskStatus
from .long_tasks import INSUFFICIENT_LONG_TASK_ROOM
from .long_tasks import room as long_task_room
from .records import AgentRecord, FrameworkRecord, OfferRecord

# Reason codes carried in TaskStatus.reason; messages say the specifics.
OFFER_UNKNOWN = "offer_unknown"
OFFERS_ON_SEVERAL_AGENTS = "offers_on_several_agents"
AGENT_GONE = "agent_gone"
INVALID_TASK_ID = "invalid_task_id"
DUPLICATE_TASK_ID = "duplicate_task_id"
WRONG_AGENT = "wrong_agent"
INVALID_RESOURCES = "invalid_resources"
INSUFFICIENT_RESOURCES = "insufficient_resources"
INVALID_COMMAND = "invalid_command"
INVALID_EXECUTOR = "invalid_executor"
TASK_DATA_TOO_LARGE = "task_data_too_large"
TASK_METADATA_TOO_LARGE = "task_metadata_too_large"
TASK_UNAUTHORIZED = "task_unauthorized"
"""The framework's principal may not run tasks as the task's user (``run_tasks`` ACL)."""
TASK_GROUP_INVALID = "task_group_invalid"
"""Another task of the task's group was refused (its own reason says why)."""


@dataclass(frozen=True, slots=True)
class TaskLimits:
    """Bounds on what one task may carry (``master.max_task_data_bytes`` and
    ``master.max_task_metadata_bytes``)."""

    data_bytes: int = 1024 * 1024
    metadata_bytes: int = 64 * 1024


@dataclass(slots=True)
class Accepted:
    task: TaskInfo
    resources: Resources
    """The task's own resources."""
    executor_resources: Resources | None
    """Set when this task brings a new executor to the agent."""


@dataclass(slots=True)
class LaunchPlan:
    offers: list[OfferRecord] = field(default_factory=list)
    agent: AgentRecord | None = None
    accepted: list[Accepted] = field(default_factory=list)
    rejected: list[TaskStatus] = field(default_factory=list)
    offered: Resources = field(default_factory=Resources)
    """Everything the offers held."""
    used: Resources = field(default_factory=Resources)
    """What the accepted tasks (and new executors) take of it."""


def _reject(
    task: TaskInfo | None, framework_id: str, state: int, reason: str, message: str, agent_id: str = ""
) -> TaskStatus:
    return TaskStatus(
        task_id=(task.task_id if task is not None and isinstance(task.task_id, str) else "") or "",
        state=state,
        reason=reason,
        message=message,
        source="master",
        agent_id=agent_id,
        framework_id=framework_id,
    )


def check_launch(
    framework: FrameworkRecord,
    offer_ids: list[str],
    tasks: list[TaskInfo],
    offers: dict[str, OfferRecord],
    agents: dict[str, AgentRecord],
    limits: TaskLimits = TaskLimits(),
    may_run_as: Callable[[str], bool] | None = None,
    groups: Sequence[tuple[int, int]] = (),
) -> LaunchPlan:
    """Decide which of ``tasks`` launch on ``offer_ids``; see the module docstring.
    ``groups``: the task groups (``LAUNCH_GROUP``) as slices ``(start, end)`` of ``tasks``;
    each launches all or none."""
    plan = LaunchPlan()
    fid = framework.id
    units = list(_units(tasks, groups))  # before the Nones go: the slices count them
    tasks = [t for t in tasks if t is not None]

    def drop_all(reason: str, message: str) -> LaunchPlan:
        plan.rejected = [_reject(t, fid, TaskState.TASK_DROPPED, reason, message) for t in tasks]
        return plan

    valid: dict[str, OfferRecord] = {}
    bad: str | None = None
    for oid in offer_ids:
        offer = offers.get(oid) if isinstance(oid, str) else None
        if offer is None or offer.framework_id != fid:
            bad = bad or oid
        elif oid in valid:
            bad = bad or oid
        else:
            valid[oid] = offer
    # Valid offers are consumed either way: used by the launch, or recovered by the
    # master when the launch is dropped (the framework answered them).
    plan.offers = list(valid.values())
    if bad is not None:
        return drop_all(
            OFFER_UNKNOWN, f"offer {bad!r} is unknown, rescinded, repeated or not this framework's"
        )
    if not plan.offers:
        return drop_all(OFFER_UNKNOWN, "launch_tasks named no offer")
    agent_ids = {o.agent_id for o in plan.offers}
    if len(agent_ids) > 1:
        return drop_all(
            OFFERS_ON_SEVERAL_AGENTS, f"offers span several agents: {', '.join(sorted(agent_ids))}"
        )
    (agent_id,) = agent_ids
    agent = agents.get(agent_id)
    if agent is None or not agent.connected:
        return drop_all(AGENT_GONE, f"agent {agent_id} is gone or disconnected")
    plan.agent = agent

    offered = Resources()
    for o in plan.offers:
        offered = offered + o.resources
    plan.offered = offered
    budget = _Budget(offered, long_task_room(agent))

    def consider(task: TaskInfo) -> None:
        checked = _check_task(task, framework, agent, budget.ids, budget.executors, limits, may_run_as)
        refusal = (
            checked if isinstance(checked, TaskStatus) else budget.take(task, *checked, plan, fid, agent_id)
        )
        if refusal is not None:
            plan.rejected.append(refusal)

    for unit in units:
        if isinstance(unit, TaskInfo):
            consider(unit)
            continue
        # A task group launches whole or not at all (Mesos' LAUNCH_GROUP).
        mark = budget.mark(plan)
        for task in unit:
            consider(task)
        if len(plan.rejected) > mark.rejected:
            budget.roll_back(mark, plan, fid, agent_id)
    plan.used = budget.used
    return plan


def _units(tasks: list[TaskInfo], groups: Sequence[tuple[int, int]]) -> Iterator[TaskInfo | list[TaskInfo]]:
    """``tasks`` one by one (Nones left out), but for each group of two or more, which
    comes as a list. A slice that overlaps one before it, or reaches past the tasks, is
    read as far as it is sane (the façade makes them; this only keeps a wrong one from
    launching a task twice)."""
    ends = {start: end for start, end in groups if end - start > 1}
    i = 0
    while i < len(tasks):
        end = min(ends.get(i, i + 1), len(tasks))
        members = [t for t in tasks[i:end] if t is not None]
        if end - i > 1:
            yield members
        elif members:
            yield members[0]
        i = max(end, i + 1)


@dataclass(slots=True)
class _Mark:
    """Where a unit of :func:`check_launch` began, to undo it."""

    left: Resources
    long_left: Resources | None
    used: Resources
    accepted: int
    rejected: int


@dataclass(slots=True)
class _Budget:
    """What is left of the offers (and of the agent's long-task room) as the tasks of one
    launch take their share, and the task and executor ids the batch has used."""

    left: Resources
    long_left: Resources | None
    used: Resources = field(default_factory=Resources)
    ids: set[str] = field(default_factory=set)
    executors: set[str] = field(default_factory=set)

    def take(
        self,
        task: TaskInfo,
        resources: Resources,
        executor_resources: Resources | None,
        plan: LaunchPlan,
        fid: str,
        agent_id: str,
    ) -> TaskStatus | None:
        """Accept ``task`` into ``plan`` if what it needs is left; else the status refusing it."""
        need = resources if executor_resources is None else resources + executor_resources
        if not need.fits_in(self.left):
            return _reject(
                task,
                fid,
                TaskState.TASK_ERROR,
                INSUFFICIENT_RESOURCES,
                "task needs more than is left of its offers: " + "; ".join(need.shortfall(self.left)),
                agent_id,
            )
        if task.long is True and self.long_left is not None:
            if not resources.fits_in(self.long_left):
                return _reject(
                    task,
                    fid,
                    TaskState.TASK_ERROR,
                    INSUFFICIENT_LONG_TASK_ROOM,
                    "long task needs more than the agent's long-task room left: "
                    + "; ".join(resources.shortfall(self.long_left)),
                    agent_id,
                )
            self.long_left = self.long_left - resources
        self.left = self.left - need
        self.used = self.used + need
        self.ids.add(task.task_id)
        if executor_resources is not None:
            self.executors.add(task.executor.executor_id)
        plan.accepted.append(Accepted(task, resources, executor_resources))
        return None

    def mark(self, plan: LaunchPlan) -> _Mark:
        return _Mark(self.left, self.long_left, self.used, len(plan.accepted), len(plan.rejected))

    def roll_back(self, mark: _Mark, plan: LaunchPlan, fid: str, agent_id: str) -> None:
        """A member of the task group begun at ``mark`` was refused: refuse the members
        accepted since, giving back what they took, each saying which member and why."""
        first = plan.rejected[mark.rejected]
        why = f"another task of its group was refused ({first.task_id or 'no task_id'}: {first.message})"
        undone = plan.accepted[mark.accepted :]
        del plan.accepted[mark.accepted :]
        self.left, self.long_left, self.used = mark.left, mark.long_left, mark.used
        for accepted in undone:
            self.ids.discard(accepted.task.task_id)
            if accepted.executor_resources is not None:
                self.executors.discard(accepted.task.executor.executor_id)
            refusal = _reject(accepted.task, fid, TaskState.TASK_ERROR, TASK_GROUP_INVALID, why, agent_id)
            plan.rejected.append(refusal)


def _check_task(
    task: TaskInfo,
    framework: FrameworkRecord,
    agent: AgentRecord,
    batch_ids: set[str],
    batch_executors: set[str],
    limits: TaskLimits,
    may_run_as: Callable[[str], bool] | None,
) -> TaskStatus | tuple[Resources, Resources | None]:
    fid = framework.id

    def error(reason: str, message: str) -> TaskStatus:
        return _reject(task, fid, TaskState.TASK_ERROR, reason, message, agent.id)

    tid = task.task_id
    if not isinstance(tid, str) or not tid.strip():
        return error(INVALID_TASK_ID, "task id is empty")
    if tid in framework.tasks or tid in framework.unreachable_tasks or tid in batch_ids:
        return error(DUPLICATE_TASK_ID, f"task id {tid!r} is already in use by this framework")
    if task.agent_id != agent.id:
        return error(WRONG_AGENT, f"task names agent {task.agent_id!r} but its offers are on {agent.id}")
    data = task.data or b""
    if len(data) > limits.data_bytes:
        return error(
            TASK_DATA_TOO_LARGE,
            f"task data of {len(data)} bytes is over the master's limit of "
            f"{limits.data_bytes} (master.max_task_data_bytes)",
        )
    metadata = _metadata_bytes(task)
    if metadata > limits.metadata_bytes:
        return error(
            TASK_METADATA_TOO_LARGE,
            f"labels, arguments and environments of {metadata} bytes are over "
            f"the master's limit of {limits.metadata_bytes} (master.max_task_metadata_bytes)",
        )
    too_many = wire_ranges_problem(task.resources, "task resources") or (
        wire_ranges_problem(task.executor.resources, "executor resources")
        if task.executor is not None
        else None
    )
    if too_many is not None:
        return error(INVALID_RESOURCES, too_many)
    try:
        resources = Resources.of(task.resources)
    except InvalidResources as exc:
        return error(INVALID_RESOURCES, f"task resources: {exc}")
    if resources.is_empty():
        return error(INVALID_RESOURCES, "task has no resources")
    has_command = task.command is not None
    has_executor = task.executor is not None
    if has_command == has_executor:
        return error(INVALID_COMMAND, "a task needs exactly one of command and executor")
    if has_command and not (isinstance(task.command.value, str) and task.command.value.strip()):
        return error(INVALID_COMMAND, "command value is empty")
    executor_resources = None
    if has_executor:
        ex = task.executor
        if not isinstance(ex.executor_id, str) or not ex.executor_id.strip():
            return error(INVALID_EXECUTOR, "executor id is empty")
        if ex.command is None or not (isinstance(ex.command.value, str) and ex.command.value.strip()):
            return error(INVALID_EXECUTOR, f"executor {ex.executor_id!r} has no command")
        try:
            ex_res = Resources.of(ex.resources)
        except InvalidResources as exc:
            return error(INVALID_RESOURCES, f"executor {ex.executor_id!r} resources: {exc}")
        if (fid, ex.executor_id) not in agent.executors and ex.executor_id not in batch_executors:
            executor_resources = ex_res
    if may_run_as is not None:
        user = task_user(framework.info, task)
        if not may_run_as(user):
            principal = framework.principal or "a caller without a certificate"
            return error(
                TASK_UNAUTHORIZED,
                f"principal {principal} may not run tasks as user {user!r} (master.acls.run_tasks)",
            )
    return resources, executor_resources


def _metadata_bytes(task: TaskInfo) -> int:
    """The size of a task's labels, and of its commands' arguments and environments
    (the task's own and its executor's), counted as UTF-8 text; O(their size)."""
    total = 0
    for key, value in (task.labels or {}).items():
        total += _text_bytes(key) + _text_bytes(value)
    commands = [task.command, task.executor.command if task.executor is not None else None]
    for command in commands:
        if command is None:
            continue
        for argument in command.arguments or ():
            total += _text_bytes(argument)
        for key, value in (command.environment or {}).items():
            total += _text_bytes(key) + _text_bytes(value)
    return total


def _text_bytes(value: object) -> int:
    return len(value.encode("utf-8", "replace")) if isinstance(value, str) else 0
