"""A check the master runs every so often on its event loop, for one leadership term.

The revocation monitor and the short-task limit are both "look at the state now and
act": a subclass sets ``interval`` and implements ``check()``. A check that raises
is logged and the next one still runs, so a bug (or a plugin's) cannot end the
check for the rest of the term.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import structlog

if TYPE_CHECKING:
    from .ports import Clock, Timer


class PeriodicCheck:
    """Calls :meth:`check` every :attr:`interval` seconds between :meth:`start` and
    :meth:`stop`."""

    interval: float = 1.0
    """Seconds between checks."""
    log: Any = structlog.get_logger("mezzo.master", component="master")

    _handle: Timer | None = None

    def check(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def start(self, clock: Clock) -> None:
        self._handle = clock.call_later(self.interval, self._tick, clock)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _tick(self, clock: Clock) -> None:
        try:
            self.check()
        except Exception:
            self.log.exception("periodic check failed", check=type(self).__name__)
        self._handle = clock.call_later(self.interval, self._tick, clock)
