"""An iterative framework in Spark's manner, and the same job in Hadoop's (paper §6.4).

Logistic regression over a data set in text partitions (:mod:`.data`), iterated. The
*cached* way keeps each partition in memory in a long-lived executor per agent and
places each iteration's tasks on the executor holding their partition (delay
scheduling); the *mapreduce* way runs every iteration as fresh tasks that read and parse
their partitions from disk again. ``bench/fig9.py`` times both, as the paper's Figure 9.

    python -m examples.iterative prepare --data /tmp/lr --partitions 8 --rows 100000
    python -m examples.iterative run --master 127.0.0.1:5050 --data /tmp/lr --mode cached --iterations 10

See ``docs/writing-a-framework.md`` ("An iterative framework").
"""

from .data import Partition, gradient, make_partitions, parse
from .scheduler import CachedScheduler, MapReduceScheduler, Result

__all__ = [
    "CachedScheduler",
    "MapReduceScheduler",
    "Partition",
    "Result",
    "gradient",
    "make_partitions",
    "parse",
]
