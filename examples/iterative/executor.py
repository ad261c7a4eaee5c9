"""The iterative framework's executor: one per agent, keeping partitions in memory.

A task's ``data`` is JSON: ``{"partition": {...}, "weights": [...]}`` (a
:class:`~.data.Partition` and the current weights). The executor parses the partition
from its file the first time it is asked for it (or makes it again from its seed when
the file is not there), keeps the arrays, and answers each task with the gradient over
that partition: ``TASK_FINISHED`` whose ``data`` is ``{"gradient": [...], "cached":
bool, "seconds": float}`` (``cached``: whether the partition was in memory already).

Tasks run one at a time on a worker thread of the executor's (callbacks must return
at once); numpy's own threads use the task's cpus.

    python -m examples.iterative.executor     # as the agent starts it
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time

import numpy as np

import mezzo
from mezzo import TaskState, TaskStatus

from .data import Partition, gradient, parse, write_partition


class CachingExecutor(mezzo.Executor):
    def __init__(self) -> None:
        self.cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.work: queue.Queue[mezzo.TaskInfo | None] = queue.Queue()
        self.killed: set[str] = set()
        self.worker: threading.Thread | None = None

    def registered(self, driver, executor_info, framework_info, agent_info):
        self.worker = threading.Thread(target=self._run, args=(driver,), name="iterative-worker", daemon=True)
        self.worker.start()

    def launch_task(self, driver, task):
        self.work.put(task)

    def kill_task(self, driver, task_id):
        self.killed.add(task_id)  # reported TASK_KILLED when its turn comes

    def shutdown(self, driver):
        self.work.put(None)

    def _run(self, driver) -> None:
        while (task := self.work.get()) is not None:
            if task.task_id in self.killed:
                driver.send_status_update(TaskStatus(task_id=task.task_id, state=TaskState.TASK_KILLED))
                continue
            driver.send_status_update(TaskStatus(task_id=task.task_id, state=TaskState.TASK_RUNNING))
            try:
                answer = self._compute(json.loads(task.data or b"{}"))
            except Exception as exc:  # noqa: BLE001 - the task fails, the executor serves on
                driver.send_status_update(
                    TaskStatus(
                        task_id=task.task_id,
                        state=TaskState.TASK_FAILED,
                        message=f"{type(exc).__name__}: {exc}",
                    )
                )
                continue
            driver.send_status_update(
                TaskStatus(
                    task_id=task.task_id, state=TaskState.TASK_FINISHED, data=json.dumps(answer).encode()
                )
            )

    def _compute(self, spec: dict) -> dict:
        started = time.monotonic()
        part = Partition(**spec["partition"])
        cached = part.index in self.cache
        if not cached:
            if not os.path.exists(part.path):
                write_partition(part)  # the file is gone: make it again from its source
            self.cache[part.index] = parse(part.path, part.dims)
        points, labels = self.cache[part.index]
        g = gradient(points, labels, np.asarray(spec["weights"], dtype=float))
        return {"gradient": g.tolist(), "cached": cached, "seconds": time.monotonic() - started}


if __name__ == "__main__":
    mezzo.ExecutorDriver(CachingExecutor()).run()
