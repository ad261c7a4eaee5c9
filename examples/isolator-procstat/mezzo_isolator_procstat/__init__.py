"""An example mezzo isolator: per-container usage from /proc, and a run-time limit."""

from .isolator import ProcStatIsolator

__all__ = ["ProcStatIsolator"]
