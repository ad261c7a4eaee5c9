"""The master's audit trail: who was refused what, one structured line each.

Every refusal on authority (a principal acting on a framework or an agent that is
not its own) is logged here, with the principal, the action and the object, under
the logger ``mezzo.audit`` (``component=audit``), so that operators can route it
apart from the rest of the log. The caller also answers the peer with an error:
the audit line is for the operator, the error for the one refused.
"""

from __future__ import annotations

from typing import Any

import structlog

log = structlog.get_logger("mezzo.audit", component="audit")


def principal_of(link: Any) -> str | None:
    """The principal a connection proved with its TLS certificate, or None."""
    return getattr(link, "principal", None)


def refused(action: str, principal: str | None, obj: str, reason: str, peer: str = "?") -> None:
    """Log that ``principal`` (None: no certificate) was refused ``action`` on ``obj``."""
    log.warning("refused", action=action, principal=principal, object=obj, reason=reason, peer=peer)
