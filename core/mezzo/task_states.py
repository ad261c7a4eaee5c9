"""What a task's state means: which states are final, and a state's name.

Re-exported by :mod:`mezzo` (``mezzo.is_terminal``, ...); a module of its own so that
``import mezzo`` need not load the Thrift types until one of these is used.
"""

from __future__ import annotations

from .wire.ttypes import TaskState

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
