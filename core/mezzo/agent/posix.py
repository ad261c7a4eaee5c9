"""The ``posix`` isolator: no enforcement (placeholder until the agent helper fills it)."""

from __future__ import annotations

from ..hookspecs import Isolator


class PosixIsolator(Isolator):
    name = "posix"
    description = "no enforcement: processes run as plain children of the agent"
