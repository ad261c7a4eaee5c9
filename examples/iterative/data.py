"""The data set: points for logistic regression, in text partitions on disk.

Each partition is a CSV file, one point a line: the label (-1 or 1) then ``dims``
coordinates. Points are drawn around two centres (one per label), so that a separating
plane exists and the regression converges. Every partition is made from a seed of its
own, which is its *source*: the same partition can be made again anywhere, byte for
byte (how a lost cache is recomputed when the file is not there).

Reading a partition is what Hadoop does at every iteration: read the text and parse it
(:func:`parse`); an iterative framework does it once per executor and keeps the arrays.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROWS_PER_CHUNK = 100_000
"""Points made and written at a time (bounds the memory a big partition takes to make)."""


@dataclass(frozen=True)
class Partition:
    """One partition: where it lives and how to make it again."""

    index: int
    path: str
    rows: int
    dims: int
    seed: int


def partition_path(directory: str | Path, index: int) -> str:
    return os.path.join(str(directory), f"part-{index:05d}.csv")


def make_partitions(
    directory: str | Path, partitions: int, rows: int, dims: int, seed: int = 1
) -> list[Partition]:
    """Write ``partitions`` files of ``rows`` points of ``dims`` coordinates each."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    made = []
    for index in range(partitions):
        part = Partition(index, partition_path(directory, index), rows, dims, seed * 1_000_003 + index)
        write_partition(part)
        made.append(part)
    return made


def write_partition(part: Partition) -> None:
    """Make ``part``'s points from its seed and write them (atomically: a reader never
    sees half a file)."""
    rng = np.random.default_rng(part.seed)
    tmp = f"{part.path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="ascii") as out:
        left = part.rows
        while left:
            n = min(left, ROWS_PER_CHUNK)
            labels = rng.choice(np.array([-1.0, 1.0]), size=n)
            points = rng.normal(size=(n, part.dims)) + labels[:, None] * 0.5
            np.savetxt(out, np.column_stack([labels, points]), fmt="%.6f", delimiter=",")
            left -= n
    os.replace(tmp, part.path)


def parse(path: str, dims: int) -> tuple[np.ndarray, np.ndarray]:
    """Read and parse a partition: (points, labels)."""
    table = np.loadtxt(path, delimiter=",", dtype=float, ndmin=2)
    if table.shape[1] != dims + 1:
        raise ValueError(
            f"{path}: {table.shape[1]} columns, expected {dims + 1} (a label and {dims} coordinates)"
        )
    return np.ascontiguousarray(table[:, 1:]), np.ascontiguousarray(table[:, 0])


def gradient(points: np.ndarray, labels: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The logistic loss's gradient over these points (the Spark paper's example):
    sum over points of (1 / (1 + exp(-y w.x)) - 1) y x."""
    margins = labels * (points @ weights)
    scale = (1.0 / (1.0 + np.exp(-margins)) - 1.0) * labels
    return points.T @ scale


def wait_out(spec: dict, started: float) -> None:
    """Sleep until ``spec["work"]`` seconds (if given) have passed since ``started``
    (``time.monotonic()``): a task stands for a heavier computation than its own."""
    left = float(spec.get("work", 0.0)) - (time.monotonic() - started)
    if left > 0:
        time.sleep(left)
