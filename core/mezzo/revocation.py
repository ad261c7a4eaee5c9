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

Cost: O(victims x (holders x log holders + tasks of a holder)).
No settings; any key in ``[master.revocation_policy.fair-share]`` is an error.
"""

from __future__ import annotations

from typing import Sequence

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
        # What each candidate holder is left with, and its tasks newest first.
        left: dict[str, Resources] = {}
        queue: dict[str, list[HeldTask]] = {}
        guaranteed: dict[str, Resources] = {}
        for h in holders:
            if h.framework_id in starving or h.framework_id in left:
                continue
            left[h.framework_id] = h.allocated
            guaranteed[h.framework_id] = h.guaranteed
            queue[h.framework_id] = sorted(h.tasks, key=lambda t: (-t.started_at, t.task_id))

        victims: list[Victim] = []
        for s in sorted(starved, key=lambda s: -s.waiting_seconds):  # stable: ties keep input order
            remaining = s.wants
            while not _covered(remaining, s.wants):
                pick = self._next(remaining, left, guaranteed, queue, held)
                if pick is None:
                    break
                fid, task, excess = pick
                queue[fid].remove(task)
                left[fid] = left[fid] - task.resources
                remaining = remaining - task.resources
                g = guaranteed[fid]
                victims.append(Victim(
                    framework_id=fid, task_id=task.task_id, agent_id=task.agent_id,
                    reason=(f"framework {fid} above its guarantee by {excess} "
                            f"(guaranteed {g or 'nothing'}); revoked for framework "
                            f"{s.framework_id}, starved {s.waiting_seconds:.0f} s"),
                    for_framework_id=s.framework_id,
                ))
        return victims

    @staticmethod
    def _next(
        remaining: Resources,
        left: dict[str, Resources],
        guaranteed: dict[str, Resources],
        queue: dict[str, list[HeldTask]],
        held: Resources,
    ) -> tuple[str, HeldTask, Resources] | None:
        """The next victim: the newest eligible task of the holder most above its
        guarantee that has one, with that holder's excess before the pick."""
        ranked = []
        for fid, alloc in left.items():
            g = guaranteed[fid]
            if not queue[fid] or not above_guarantee(alloc, g):
                continue
            excess = alloc - g
            ranked.append((-_dominant_share(excess, held), fid, excess))
        ranked.sort(key=lambda r: (r[0], r[1]))
        for _, fid, excess in ranked:
            alloc, g = left[fid], guaranteed[fid]
            for task in queue[fid]:
                if remaining.intersection(task.resources) and meets_guarantee(alloc - task.resources, g):
                    return fid, task, excess
        return None


def _covered(remaining: Resources, wants: Resources) -> bool:
    """True once one scalar of ``wants`` is all taken: the starved framework would
    then meet its guarantee (:mod:`mezzo.guarantees`)."""
    return not remaining or any(remaining.milli(name) == 0 for name in wants.scalars)


def _dominant_share(excess: Resources, held: Resources) -> float:
    """The largest share of a scalar resource that ``excess`` is of ``held``."""
    shares = [m / held.milli(name) for name, m in excess.scalars.items() if held.milli(name) > 0]
    return max(shares, default=0.0)
