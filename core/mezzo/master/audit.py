"""The master's audit trail: who was refused what, one structured line each.

Every refusal on authority (a principal acting on a framework or an agent that is
not its own) is logged here, with the principal, the action and the object, under
the logger ``mezzo.audit`` (``component=audit``), so that operators can route it
apart from the rest of the log. The caller also answers the peer with an error:
the audit line is for the operator, the error for the one refused.

A peer refused in a loop would fill the disk with audit lines, so each kind of
refusal (action, principal, reason) is logged at most :data:`BURST` times per
:data:`WINDOW` seconds; the first line after a quiet spell says how many were left
out (``suppressed``). The objects refused are not part of the kind: a peer cannot
make every line new by asking about a new id each time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import structlog

log = structlog.get_logger("mezzo.audit", component="audit")

BURST = 20
"""Audit lines of one kind of refusal logged per :data:`WINDOW`."""
WINDOW = 10.0
"""Seconds over which :data:`BURST` lines of a kind may be logged."""
KINDS_MAX = 4_096
"""Kinds of refusal tracked at once; past it the counts start over (a few strings each)."""


class AuditLimiter:
    """Counts refusals of each kind per window; see the module docstring."""

    __slots__ = ("_clock", "_windows")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._windows: dict[tuple, list] = {}
        """kind -> [window start, lines logged in it, refusals left out since the last line]"""

    def admit(self, kind: tuple) -> int | None:
        """None when this refusal is not to be logged; else how many were left out before it."""
        now = self._clock()
        window = self._windows.get(kind)
        if window is None or now - window[0] >= WINDOW:
            if window is None and len(self._windows) >= KINDS_MAX:
                self._windows.clear()
            suppressed = window[2] if window is not None else 0
            self._windows[kind] = [now, 1, 0]
            return suppressed
        if window[1] >= BURST:
            window[2] += 1
            return None
        window[1] += 1
        suppressed, window[2] = window[2], 0
        return suppressed


LIMITER = AuditLimiter()


def principal_of(link: Any) -> str | None:
    """The principal a connection proved with its TLS certificate, or None."""
    return getattr(link, "principal", None)


def refused(action: str, principal: str | None, obj: str, reason: str, peer: str = "?") -> None:
    """Log that ``principal`` (None: no certificate) was refused ``action`` on ``obj``
    (unless that kind of refusal was logged :data:`BURST` times in this window)."""
    suppressed = LIMITER.admit((action, principal, reason))
    if suppressed is None:
        return
    extra = {"suppressed": suppressed} if suppressed else {}
    log.warning("refused", action=action, principal=principal, object=obj, reason=reason, peer=peer, **extra)


def refuses_on_framework(
    acls: Any, action: str, call: str, principal: str | None, record: Any, obj: str, peer: str
) -> bool:
    """Whether ``acls`` refuse ``principal`` the ``action`` (an ACL action whose objects
    are framework principals, such as ``teardown_frameworks``) on the framework of
    ``record`` (None: no such framework); a refusal is audited as ``call`` on ``obj``.

    Refused also when the principal may do it to no framework at all, before the
    framework is looked at, so that a refusal does not tell whether it exists: whether
    it does, and whose it is, go to the audit line only."""
    if acls.allows_some(action, principal) and (
        record is None or acls.allows(action, principal, record.principal)
    ):
        return False
    owner = "unknown" if record is None else (record.principal or "a caller without a certificate")
    refused(call, principal, obj, f"owner {owner}", peer)
    return True
