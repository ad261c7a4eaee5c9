"""The event loop a daemon runs on: ``master.event_loop`` = "uvloop" or "asyncio".

uvloop (libuv, in Cython) runs the same asyncio code with its own transports, whose
reads, writes and timers cost less than asyncio's Python ones. At Fig. 10's 20,000
agents (bench/tls_cost.py, docs/benchmarks.md, first measured with each loop's own TLS
transport) the master spent 65.7 % of a core without TLS and 76.8 % with it on uvloop,
against 70.0 % and 86.6 % on asyncio's own loop. TLS now runs the same on both
(:mod:`mezzo.rpc.tls_stream`). The master therefore runs on uvloop by default;
"asyncio" is there for platforms without uvloop and for telling a uvloop problem from
ours.

Only the master chooses: agents run task processes and isolators whose signal and
child handling have only been tested on asyncio's loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from .errors import ConfigError

T = TypeVar("T")

EVENT_LOOPS = ("uvloop", "asyncio")
"""Values of ``master.event_loop``."""


def check_event_loop(name: str, key: str = "master.event_loop") -> str:
    """``name`` when it names a loop this process can run; raises :class:`ConfigError`
    naming ``key`` otherwise (not one of :data:`EVENT_LOOPS`, or uvloop not installed)."""
    if name not in EVENT_LOOPS:
        raise ConfigError(key, f"expected one of {', '.join(map(repr, EVENT_LOOPS))}, got {name!r}")
    if name == "uvloop":
        try:
            import uvloop  # noqa: F401
        except ImportError:
            raise ConfigError(
                key, 'uvloop is not installed here (pip install uvloop, or "asyncio")'
            ) from None
    return name


def run(main: Coroutine[Any, Any, T], name: str) -> T:
    """Run ``main`` to its end on a new loop of kind ``name`` (see :data:`EVENT_LOOPS`)."""
    check_event_loop(name)
    if name == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(main)
    return asyncio.run(main)
