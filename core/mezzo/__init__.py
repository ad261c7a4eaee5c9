"""mezzo: fine-grained cluster sharing through resource offers (the Mesos design).

The public Python API for framework authors::

    import mezzo

    class MyScheduler(mezzo.Scheduler):
        def resource_offers(self, driver, offers): ...

    mezzo.SchedulerDriver(MyScheduler(), mezzo.FrameworkInfo(name="demo"), "127.0.0.1:5050").run()

Value types are the Thrift structs of ``thrift/mezzo.thrift`` (one definition of
every message), plus :class:`Resources` with exact arithmetic.
"""

from __future__ import annotations

__version__ = "0.1.0"

TYPE_CHECKING = False
"""typing.TYPE_CHECKING without importing typing (~5 ms of ``mezzo --version``); mypy
takes any ``if TYPE_CHECKING:`` for true."""

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from .config import TlsConfig
    from .driver.executor import Executor, ExecutorDriver
    from .driver.lifecycle import DriverError, DriverStatus
    from .driver.scheduler import Scheduler, SchedulerDriver
    from .hookspecs import hookimpl
    from .resources import InvalidResources, Resources
    from .task_states import TERMINAL_STATES, is_terminal, state_name
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


def _lazy_exports(
    namespace: dict[str, Any], homes: dict[str, tuple[str, ...]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` (PEP 562) for a package whose public names are
    imported on first use: ``homes`` maps a module of the package (``"wire.ttypes"`` for
    ``mezzo.wire.ttypes``) to the names it provides; a name once imported is kept in
    ``namespace`` (the package's globals), so later look-ups do not come back here.
    ``from package import name`` works through it too."""
    where = {name: module for module, names in homes.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        # from .module import name; __import__ rather than importlib.import_module, whose
        # imports ``python -X importtime`` leaves out (bench/cli_latency.py reports from it).
        value = getattr(__import__(module, namespace, None, [name], 1), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *where})

    return __getattr__, __dir__


# Imported on first use, so that ``import mezzo`` costs next to nothing: up front, the
# Thrift types, pluggy and hookspecs took 40 to 50 ms, over twice a bare Python start-up,
# paid by every ``mezzo`` command, --version included, and by every plugin wanting one type.
__getattr__, __dir__ = _lazy_exports(
    globals(),
    {
        "config": ("TlsConfig",),
        "driver.executor": ("Executor", "ExecutorDriver"),
        "driver.lifecycle": ("DriverError", "DriverStatus"),
        "driver.scheduler": ("Scheduler", "SchedulerDriver"),
        "hookspecs": ("hookimpl",),
        "resources": ("InvalidResources", "Resources"),
        "task_states": ("TERMINAL_STATES", "is_terminal", "state_name"),
        "wire.ttypes": (
            "AgentInfo",
            "CommandInfo",
            "ExecutorInfo",
            "Filters",
            "FrameworkFilters",
            "FrameworkInfo",
            "Offer",
            "Range",
            "TaskInfo",
            "TaskState",
            "TaskStatus",
        ),
    },
)

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
