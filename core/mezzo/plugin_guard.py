"""One boundary for calls into components: a plugin's bug is logged, counted and contained.

Components (allocators, offer filters, revocation policies, isolators) and observer
hooks are other people's code running inside a daemon's event loop. Whatever one
raises must not take the daemon down, leave its state half-changed, or flood its
log. Every call from the master or an agent into a component therefore goes
through one :class:`PluginGuard`:

- :meth:`PluginGuard.failed` is what every call site does with an exception: the
  failure is counted per ``kind/name.method`` (``metrics()["plugin_failures"]``) and
  logged with the component's name, with its traceback the first time and then at
  most once every :data:`LOG_EVERY` seconds per call site with the count since, so
  an offer filter that raises for every candidate of every cycle costs one log line
  a minute, not thousands a second.
- :meth:`PluginGuard.call` wraps a call that happens rarely (a revocation policy's
  ``select``, a notification): it returns the call's result, or ``default`` after
  reporting the failure.
- Observer hooks (:class:`mezzo.plugins.Observers`) call each plugin's
  implementation on its own, so one failing observer neither stops the others
  nor goes unnamed.
- Calls made per candidate inside an allocation cycle (``OfferFilter.refuse``) keep
  a ``try``/``except`` at the call site (free in Python 3.11 when nothing is raised)
  and report through :meth:`PluginGuard.failed`.

What the *caller* does after a failure is its own contract, stated where it
happens: an allocator that raises in ``allocate`` has the cycle's offers rolled
back (:mod:`mezzo.master.allocation`); an offer filter that raises is "broken",
which is not "no" (it is counted as an error, not as a reason, and the pair is not
offered this cycle); an isolator that raises in ``prepare`` fails the launch naming
it.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

import structlog

LOG_EVERY = 60.0
"""Seconds between two log lines for one failing call site (the first one is logged at once)."""

T = TypeVar("T")


def describe(component: Any) -> str:
    """``kind/name`` of a component (``allocator/drf``), or its class name for anything else."""
    kind = getattr(component, "kind", "") or "plugin"
    name = getattr(component, "name", "") or type(component).__qualname__
    return f"{kind}/{name}"


class PluginGuard:
    """Counts and logs the failures of calls into components, for one daemon.

    Usage::

        guard = PluginGuard(log)
        victims = guard.call(policy, "select", starved, holders, default=[])

        try:
            reason = offer_filter.refuse(framework, agent, free)
        except Exception as exc:
            guard.failed(offer_filter, "refuse", exc)
    """

    def __init__(self, log: Any = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._log = log if log is not None else structlog.get_logger("mezzo.plugins", component="plugins")
        self._clock = clock
        self.failures: Counter[str] = Counter()
        """Failures so far by ``kind/name.method``."""
        self._logged_at: dict[str, float] = {}
        self._logged_count: dict[str, int] = {}

    def failed(self, component: Any, method: str, exc: BaseException, **context: Any) -> None:
        """Report that ``component.method`` raised ``exc``. Never raises itself."""
        self.failed_in(describe(component), method, exc, **context)

    def failed_in(self, plugin: str, call: str, exc: BaseException, **context: Any) -> None:
        """Report that ``call`` of ``plugin`` (``kind/name``, or a plugin's name for a
        hook implementation) raised ``exc``. Never raises itself."""
        where = f"{plugin}.{call}"
        self.failures[where] += 1
        now = self._clock()
        last = self._logged_at.get(where)
        if last is None:
            self._logged_at[where] = now
            self._logged_count[where] = 1
            self._log.error(
                "plugin call failed", plugin=plugin, call=call, error=repr(exc), exc_info=exc, **context
            )
        elif now - last >= LOG_EVERY:
            total = self.failures[where]
            since = total - self._logged_count[where]
            self._logged_at[where] = now
            self._logged_count[where] = total
            self._log.error(
                "plugin call still failing",
                plugin=plugin,
                call=call,
                error=repr(exc),
                failures_since_last_log=since,
                failures=total,
                **context,
            )

    def call(self, component: Any, method: str, *args: Any, default: T, **kwargs: Any) -> Any | T:
        """``component.method(*args, **kwargs)``, or ``default`` once a failure is reported."""
        try:
            return getattr(component, method)(*args, **kwargs)
        except Exception as exc:
            self.failed(component, method, exc)
            return default

    def counts(self) -> dict[str, int]:
        """Failures by ``kind/name.method``, for the metrics (empty when none failed)."""
        return dict(self.failures)
