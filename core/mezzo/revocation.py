"""The built-in ``fair-share`` revocation policy (paper §3.3), the default
``master.revocation_policy``.

For each starved framework, longest waiting first, it takes tasks from the
frameworks above their guarantees until what the starved framework ``wants`` is
covered:

- **Which holder.** The one most above its guarantee, measured as the dominant share
  of its excess: for each scalar resource, ``(allocated - guaranteed) / held``, where
  ``held`` is what all holders together hold of that resource (so cpus and mem
  compare); the largest of these ranks the holder. Ties go to the smaller framework
  id, so the choice is reproducible. The ranking is recomputed after every pick,
  since a pick shrinks its holder's excess.
- **Which task.** The holder's newest task (latest ``started_at``, then smaller task
  id): it wastes the least work (paper §4.4). ``HeldTask.long`` is not looked at.
- **Never below a guarantee** (in the sense of :mod:`mezzo.guarantees`: the
  dominant share measured against the guarantee). Only a holder *above* its
  guarantee loses tasks, and a task is taken only if what the holder keeps, after
  every task taken from it so far and this one, still meets its guarantee. A
  framework at or below its guarantee loses nothing.
- **No more than needed.** A task is taken only if it holds some of what the
  starved framework still wants, and taking stops as soon as the starved framework
  would meet its guarantee: once one resource of its want is covered (the last
  task may overshoot it). Tasks of starved frameworks are never taken. If the want
  cannot be covered, what could be taken is still returned: it brings the starved
  framework closer to its guarantee.

Cost: O(tasks offered) to heap them once, then O(log) per victim and per task
passed over: each holder's tasks are drawn newest first from a heap, and holders
from a ranking in which only the holder just taken from changes its place.
No settings; any key in ``[master.revocation_policy.fair-share]`` is an error.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from .guarantees import above_guarantee, meets_guarantee
from .hookspecs import HeldTask, Holder, RevocationPolicy, Starved, Victim
from .resources import Resources


class FairSharePolicy(RevocationPolicy):
    name = "fair-share"
    description = "revoke the newest tasks of the frameworks most above their guarantees (never below one)"

    def select(self, starved: Sequence[Starved], holders: Sequence[Holder]) -> list[Victim]:
        starving = {s.framework_id for s in starved}
        held = Resources()
        for h in holders:
            held = held + h.allocated
        candidates: list[_Candidate] = []
        seen: set[str] = set()
        for h in holders:
            if h.framework_id not in starving and h.framework_id not in seen and h.tasks:
                seen.add(h.framework_id)
                candidates.append(_Candidate(h))

        victims: list[Victim] = []
        for s in sorted(starved, key=lambda s: -s.waiting_seconds):  # stable: ties keep input order
            remaining = s.wants
            # Holders most above their guarantee first; a holder's rank changes only
            # when a task is taken from it, so it is pushed back with its new rank.
            ranking = [c.rank(held) for c in candidates if above_guarantee(c.left, c.guaranteed)]
            heapq.heapify(ranking)
            while ranking and not _covered(remaining, s.wants):
                _, _, c = heapq.heappop(ranking)
                excess = c.left - c.guaranteed
                task = c.take(remaining)
                if task is None:
                    continue  # nothing of it helps this framework; it stays out of its ranking
                remaining = remaining - task.resources
                victims.append(
                    Victim(
                        framework_id=c.framework_id,
                        task_id=task.task_id,
                        agent_id=task.agent_id,
                        reason=(
                            f"framework {c.framework_id} above its guarantee by {excess} "
                            f"(guaranteed {c.guaranteed or 'nothing'}); revoked for framework "
                            f"{s.framework_id}, starved {s.waiting_seconds:.0f} s"
                        ),
                        for_framework_id=s.framework_id,
                    )
                )
                if above_guarantee(c.left, c.guaranteed):
                    heapq.heappush(ranking, c.rank(held))
            for c in candidates:
                c.restore()
        return victims


class _Candidate:
    """A holder as :meth:`FairSharePolicy.select` works through it: what it is left
    with, and its tasks in a heap, newest first, drawn only as far as needed (a
    holder of 100,000 tasks loses a few of them; sorting them all cost more than
    the rest of the round)."""

    __slots__ = ("_passed", "_tasks", "framework_id", "guaranteed", "left")

    def __init__(self, holder: Holder) -> None:
        self.framework_id = holder.framework_id
        self.guaranteed = holder.guaranteed
        self.left = holder.allocated
        # Task ids are unique within a holder, so the tuples never compare the tasks.
        self._tasks = [(-t.started_at, t.task_id, t) for t in holder.tasks]
        heapq.heapify(self._tasks)
        self._passed: list[tuple[float, str, HeldTask]] = []

    def rank(self, held: Resources) -> tuple[float, str, _Candidate]:
        """Its place in a ranking: the dominant share of its excess, largest first,
        then the smaller framework id."""
        return (-_dominant_share(self.left - self.guaranteed, held), self.framework_id, self)

    def take(self, remaining: Resources) -> HeldTask | None:
        """Take its newest task that holds some of ``remaining`` and leaves it meeting
        its guarantee; None if none does. Tasks passed over are kept aside until
        :meth:`restore`: for the same starved framework they stay unfit, since
        ``remaining`` and what the holder is left with only shrink."""
        while self._tasks:
            item = heapq.heappop(self._tasks)
            task = item[2]
            if remaining.intersection(task.resources) and meets_guarantee(
                self.left - task.resources, self.guaranteed
            ):
                self.left = self.left - task.resources
                return task
            self._passed.append(item)
        return None

    def restore(self) -> None:
        """Put the tasks passed over back, for the next starved framework."""
        for item in self._passed:
            heapq.heappush(self._tasks, item)
        self._passed.clear()


def _covered(remaining: Resources, wants: Resources) -> bool:
    """True once one scalar of ``wants`` is all taken: the starved framework would
    then meet its guarantee (:mod:`mezzo.guarantees`)."""
    return not remaining or any(remaining.milli(name) == 0 for name in wants.scalars)


def _dominant_share(excess: Resources, held: Resources) -> float:
    """The largest share of a scalar resource that ``excess`` is of ``held``."""
    shares = [m / held.milli(name) for name, m in excess.scalars.items() if held.milli(name) > 0]
    return max(shares, default=0.0)
