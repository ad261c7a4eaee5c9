"""The framework side of the protocol (paper Table 1): scheduler and executor drivers.

- :mod:`.runtime`: the one driver thread (an asyncio loop) shared by every driver
  in the process; all I/O and all callbacks run there.
- :mod:`.lifecycle`: status, start/stop/join/abort and redialling, shared by both drivers.
- :mod:`.scheduler`: :class:`Scheduler` callbacks and :class:`SchedulerDriver`.
- :mod:`.executor`: :class:`Executor` callbacks and :class:`ExecutorDriver`.

Framework authors use the same names from the top level: ``mezzo.Scheduler``,
``mezzo.SchedulerDriver``, ``mezzo.Executor``, ``mezzo.ExecutorDriver``.
"""

from .executor import Executor, ExecutorDriver
from .lifecycle import DriverError, DriverStatus
from .scheduler import Scheduler, SchedulerDriver

__all__ = ["DriverError", "DriverStatus", "Executor", "ExecutorDriver", "Scheduler", "SchedulerDriver"]
