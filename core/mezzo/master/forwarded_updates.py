"""Status updates on their way to a scheduler, so that resends are not forwarded again.

An agent re-sends an update until the scheduler's acknowledgement comes back through
the master. Each resend the master forwarded would cost three more messages (to the
scheduler, its acknowledgement, to the agent) for an update the scheduler already
has or is about to read, and an overloaded master acknowledges late, so it draws
more resends: at 100,000 emulated agents the agents sent 3.5 updates per task
instead of 2. :class:`ForwardedUpdates` remembers, per framework, the updates
forwarded and not yet acknowledged; a resend of one of them over the same scheduler
connection within :data:`RESEND_WINDOW` is taken (the task's state is applied as
usual) but not forwarded.

Nothing is lost by it: a scheduler that reconnected (a new connection) gets the
resend at once, and one whose acknowledgement went missing gets it again once the
window has passed since the last forward, as before. Memory is bounded per
framework (:meth:`ForwardedUpdates.note` evicts the oldest beyond ``limit``), so a
scheduler that never acknowledges cannot grow it without end.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

RESEND_WINDOW = 30.0
"""Seconds after a forward during which a resend of the same update over the same
scheduler connection is not forwarded (an agent's longest wait between resends)."""
LIMIT_FLOOR = 1_000
"""Updates remembered per framework at least, whatever its number of tasks."""


class ForwardedUpdates:
    """Updates forwarded to one framework's scheduler and not yet acknowledged."""

    __slots__ = ("_sent",)

    def __init__(self) -> None:
        # An OrderedDict, not a dict: the oldest is dropped over and over when a scheduler
        # does not acknowledge, and a dict's first key costs more to find after each
        # such drop (its deleted slots stay until it resizes): 29 µs a drop at 100,000
        # updates against 0.6 µs.
        self._sent: OrderedDict[str, tuple[Any, float]] = OrderedDict()
        """uuid -> (the scheduler connection it went to, when); oldest first."""

    def __len__(self) -> int:
        return len(self._sent)

    def is_resend(self, uuid: str, conn: Any, now: float) -> bool:
        """True if ``uuid`` went to ``conn`` less than :data:`RESEND_WINDOW` ago and was
        not acknowledged since: the caller need not forward it again."""
        sent = self._sent.get(uuid)
        return sent is not None and sent[0] is conn and now - sent[1] < RESEND_WINDOW

    def knows(self, uuid: str) -> bool:
        """True if ``uuid`` was forwarded and not acknowledged since (nor evicted)."""
        return uuid in self._sent

    def note(self, uuid: str, conn: Any, now: float, limit: int) -> None:
        """``uuid`` was forwarded to ``conn`` at ``now``; at most ``max(limit, LIMIT_FLOOR)``
        are kept, the oldest dropped first (each costs O(1))."""
        sent = self._sent
        sent[uuid] = (conn, now)
        sent.move_to_end(uuid)  # the newest forward, if it was there before
        bound = max(limit, LIMIT_FLOOR)
        while len(sent) > bound:
            sent.popitem(last=False)

    def acknowledged(self, uuid: str) -> None:
        self._sent.pop(uuid, None)

    def clear(self) -> None:
        self._sent.clear()
