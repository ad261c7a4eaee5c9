"""mezzo: fine-grained cluster sharing through resource offers (the Mesos design).

The public Python API for framework authors::

    import mezzo

    class MyScheduler(mezzo.Scheduler):
        def resource_offers(self, driver, offers): ...

    mezzo.SchedulerDriver(MyScheduler(), mezzo.FrameworkInfo(name="demo"), "127.0.0.1:5050").run()

Value types are the Thrift structs of ``thrift/mezzo.thrift`` (one definition of
every message), plus :class:`Resources` with exact arithmetic.
"""

from .hookspecs import hookimpl
from .resources import InvalidResources, Resources
from .wire.ttypes import (
    AgentInfo,
    CommandInfo,
    ExecutorInfo,
    Filters,
    FrameworkFilters,
    FrameworkInfo,
    Offer,
    Range,
    TaskInfo,
    TaskState,
    TaskStatus,
)

__version__ = "0.1.0"

TERMINAL_STATES = frozenset(
    {
        TaskState.TASK_FINISHED,
        TaskState.TASK_FAILED,
        TaskState.TASK_KILLED,
        TaskState.TASK_ERROR,
        TaskState.TASK_DROPPED,
        TaskState.TASK_LOST,
        TaskState.TASK_GONE,
    }
)
"""States after which a task never changes again (TASK_UNREACHABLE may still recover)."""


def is_terminal(state: int) -> bool:
    """True for a state after which the task never runs again."""
    return state in TERMINAL_STATES


def state_name(state: int) -> str:
    """``TASK_RUNNING`` for ``TaskState.TASK_RUNNING`` (also for a plain int off the wire)."""
    try:
        return TaskState(state).name
    except ValueError:
        return f"TASK_STATE_{state}"


_LAZY_NAMES = {
    "Scheduler": "mezzo.driver.scheduler",
    "SchedulerDriver": "mezzo.driver.scheduler",
    "Executor": "mezzo.driver.executor",
    "ExecutorDriver": "mezzo.driver.executor",
    "DriverStatus": "mezzo.driver.lifecycle",
    "DriverError": "mezzo.driver.lifecycle",
    "TlsConfig": "mezzo.config",
}


def __getattr__(name: str):
    # Drivers import asyncio machinery; load them on first use so that plugins and
    # tools importing mezzo for its types stay light.
    module = _LAZY_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'mezzo' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "AgentInfo",
    "CommandInfo",
    "DriverError",
    "DriverStatus",
    "Executor",
    "ExecutorDriver",
    "ExecutorInfo",
    "Filters",
    "FrameworkFilters",
    "FrameworkInfo",
    "InvalidResources",
    "Offer",
    "Range",
    "Resources",
    "Scheduler",
    "SchedulerDriver",
    "TERMINAL_STATES",
    "TaskInfo",
    "TaskState",
    "TaskStatus",
    "TlsConfig",
    "hookimpl",
    "is_terminal",
    "state_name",
]
