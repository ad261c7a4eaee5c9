"""A MapReduce-style task: read and parse one partition, print its gradient, exit.

    python -m examples.iterative.task '{"partition": {...}, "weights": [...]}'

The gradient goes to standard output as JSON (``{"gradient": [...]}``): the agent's
command executor sends the tail of a task's output back in its last status update.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from .data import Partition, gradient, parse, wait_out


def main(argv: list[str]) -> int:
    started = time.monotonic()
    spec = json.loads(argv[0])
    part = Partition(**spec["partition"])
    points, labels = parse(part.path, part.dims)
    g = gradient(points, labels, np.asarray(spec["weights"], dtype=float))
    wait_out(spec, started)
    print(json.dumps({"gradient": g.tolist()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
