"""The workloads of the paper's §6.1 macrobenchmark, as job specs (pure, seeded).

- :func:`facebook_mix`: the "Facebook Hadoop mix", small and large jobs of eight
  types (:data:`FACEBOOK_BINS`) arriving at random times, to be submitted at
  ``Submission.at`` seconds after the start;
- :func:`large_mix`: the "large Hadoop mix", a few big text-search jobs meant to be
  run one after the other (the caller submits each when the previous finished).

Both are sized for a small cluster: eight one-cpu slots (two agents of four cpus)
and a run about five times shorter than the paper's; see :data:`FACEBOOK_BINS`.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass

from .fair import JobSpec

# Mean task seconds per job type. The paper gives none; these are ours, in the order
# of how much data a task of each type handles: a selection filters its block, a text
# search scans it, an aggregation's reduces combine partial sums, a join's tasks carry
# both sides of the join.
SELECTION_MAP_SECONDS = 2.5
"""Mean seconds of a selection's map (bins 1, 4, 6)."""
TEXT_SEARCH_MAP_SECONDS = 3.0
"""Mean seconds of a text search's map (bins 2, 7)."""
AGGREGATION_MAP_SECONDS = 3.0
"""Mean seconds of an aggregation's map (bins 3, 5)."""
AGGREGATION_REDUCE_SECONDS = 4.0
"""Mean seconds of an aggregation's reduce."""
JOIN_MAP_SECONDS = 3.5
"""Mean seconds of a join's map (bin 8)."""
JOIN_REDUCE_SECONDS = 5.0
"""Mean seconds of a join's reduce."""

FACEBOOK_BINS: tuple[tuple[JobSpec, int], ...] = (
    (JobSpec("selection (1)", maps=1, map_seconds=SELECTION_MAP_SECONDS), 38),
    (JobSpec("text search (2)", maps=2, map_seconds=TEXT_SEARCH_MAP_SECONDS), 18),
    (
        JobSpec(
            "aggregation (3)",
            maps=4,
            reduces=1,
            map_seconds=AGGREGATION_MAP_SECONDS,
            reduce_seconds=AGGREGATION_REDUCE_SECONDS,
        ),
        14,
    ),
    (JobSpec("selection (4)", maps=6, map_seconds=SELECTION_MAP_SECONDS), 12),
    (
        JobSpec(
            "aggregation (5)",
            maps=10,
            reduces=2,
            map_seconds=AGGREGATION_MAP_SECONDS,
            reduce_seconds=AGGREGATION_REDUCE_SECONDS,
        ),
        6,
    ),
    (JobSpec("selection (6)", maps=16, map_seconds=SELECTION_MAP_SECONDS), 6),
    (JobSpec("text search (7)", maps=24, map_seconds=TEXT_SEARCH_MAP_SECONDS), 4),
    (
        JobSpec(
            "join (8)", maps=32, reduces=4, map_seconds=JOIN_MAP_SECONDS, reduce_seconds=JOIN_REDUCE_SECONDS
        ),
        2,
    ),
)
"""The job bins of the Mesos paper's Table 3 (§6.1), each as (spec, number of jobs).

Where it comes from: the paper's mix was drawn from a week of Facebook's Hadoop
jobs in eight bins, from one-map selections to 400-map joins with 30 reduces; 100
jobs in all, run on a quarter of a 96-node, 4-core cluster.

How it is scaled: the job counts are the paper's (38, 18, 14, 12, 6, 6, 4, 2, so
100 jobs). The task counts are shrunk for eight slots and a run about five times
shorter: the paper's maps (1, 2, 10, 50, 100, 200, 400, 400) become (1, 2, 4, 6,
10, 16, 24, 32) and its reduces (0, 0, 2, 0, 10, 0, 0, 30) become (0, 0, 1, 0, 2,
0, 0, 4). Small jobs stay one or two tasks, so the mix keeps its shape: most jobs
are tiny, most of the work is in the few large ones."""


@dataclass(frozen=True)
class Submission:
    """Submit ``spec`` at ``at`` seconds after the workload starts."""

    at: float
    spec: JobSpec


def bin_counts(jobs: int) -> list[int]:
    """How many jobs of each :data:`FACEBOOK_BINS` bin make a mix of ``jobs`` jobs.

    In proportion to the paper's counts (largest remainders round, earlier bins win
    ties), always ``jobs`` in all; with ``jobs >= 8`` every bin has at least one, taken
    from the bin with the most.
    """
    if jobs < 0:
        raise ValueError(f"jobs must be >= 0, got {jobs}")
    weights = [count for _, count in FACEBOOK_BINS]
    total = sum(weights)
    shares = [jobs * w / total for w in weights]
    counts = [math.floor(s) for s in shares]
    by_remainder = sorted(range(len(shares)), key=lambda i: (counts[i] - shares[i], i))
    for i in by_remainder[: jobs - sum(counts)]:
        counts[i] += 1
    if jobs >= len(counts):
        for i, n in enumerate(counts):
            if n == 0:
                donor = max(range(len(counts)), key=lambda j: (counts[j], -j))
                counts[donor] -= 1
                counts[i] = 1
    return counts


def facebook_mix(
    *, jobs: int = 100, mean_interarrival: float = 3.0, time_scale: float = 1.0, seed: int = 0
) -> list[Submission]:
    """The Facebook mix: ``jobs`` jobs of :data:`FACEBOOK_BINS` (counts from
    :func:`bin_counts`) in a seeded random order, the first at 0 s and the next ones
    after exponential inter-arrival times of mean ``mean_interarrival`` seconds.

    ``time_scale`` multiplies every time: task means and inter-arrivals (0.1 runs the
    mix ten times faster). The paper's mean inter-arrival was 14 s over 25 minutes;
    3 s makes the 100 jobs arrive over about five. Sorted by ``at``; the same
    ``seed`` gives the same list.
    """
    if mean_interarrival < 0 or time_scale <= 0:
        raise ValueError("mean_interarrival must be >= 0 and time_scale > 0")
    rng = random.Random(seed)
    specs = [
        dataclasses.replace(
            spec, map_seconds=spec.map_seconds * time_scale, reduce_seconds=spec.reduce_seconds * time_scale
        )
        for (spec, _), n in zip(FACEBOOK_BINS, bin_counts(jobs), strict=True)
        for _ in range(n)
    ]
    rng.shuffle(specs)
    mean = mean_interarrival * time_scale
    at = 0.0
    submissions = []
    for i, spec in enumerate(specs):
        if i and mean > 0:
            at += rng.expovariate(1.0 / mean)
        submissions.append(Submission(at, spec))
    return submissions


def large_mix(*, jobs: int = 10, maps: int = 60, map_seconds: float = 4.0) -> list[JobSpec]:
    """The large mix: ``jobs`` map-only text-search jobs of ``maps`` maps each, to be
    submitted one at a time, each when the previous has finished.

    The paper ran ten IO-heavy text searches of 2400 tasks each; 60 maps of 4 s keep
    eight slots busy for half a minute per job.
    """
    if jobs < 0:
        raise ValueError(f"jobs must be >= 0, got {jobs}")
    return [JobSpec("text search (large)", maps=maps, map_seconds=map_seconds)] * jobs
