"""The iterative framework's executor: one per agent, keeping partitions in memory.

A task's ``data`` is JSON: ``{"partition": {...}, "weights": [...]}`` (a
:class:`~.data.Partition` and the current weights). The executor parses the partition
from its file the first time it is asked for it (or makes it again from its seed when
the file is not there), keeps the arrays, and answers each task with the gradient over
that partition: ``TASK_FINISHED`` whose ``data`` is ``{"gradient": [...], "cached":
bool, "seconds": float}`` (``cached``: whether the partition was in memory already).

Each task runs on a thread of its own (callbacks must return at once): as many run at
once as the scheduler gave the executor tasks, one per cpu it asked for (numpy does
its heavy work outside the GIL; its own thread pools are limited to one thread each).

    python -m examples.iterative.executor     # as the agent starts it
"""

from __future__ import annotations

import json
import os
import threading
import time

import numpy as np

import mezzo
from mezzo import TaskState, TaskStatus

from .data import Partition, gradient, parse, wait_out, write_partition


class CachingExecutor(mezzo.Executor):
    def __init__(self) -> None:
        self.cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.lock = threading.Lock()
        """Guards :attr:`cache` and :attr:`running`."""
        self.running: set[str] = set()
        self.killed: set[str] = set()
        """Tasks killed while running: reported TASK_KILLED when they end."""

    def launch_task(self, driver, task):
        with self.lock:
            self.running.add(task.task_id)
        threading.Thread(
            target=self._run, args=(driver, task), name=f"task-{task.task_id}", daemon=True
        ).start()

    def kill_task(self, driver, task_id):
        with self.lock:
            if task_id in self.running:
                self.killed.add(task_id)

    def _run(self, driver, task) -> None:
        driver.send_status_update(TaskStatus(task_id=task.task_id, state=TaskState.TASK_RUNNING))
        try:
            answer = self._compute(json.loads(task.data or b"{}"))
            status = TaskStatus(
                task_id=task.task_id, state=TaskState.TASK_FINISHED, data=json.dumps(answer).encode()
            )
        except Exception as exc:  # noqa: BLE001 - the task fails, the executor serves on
            status = TaskStatus(
                task_id=task.task_id, state=TaskState.TASK_FAILED, message=f"{type(exc).__name__}: {exc}"
            )
        with self.lock:
            self.running.discard(task.task_id)
            if task.task_id in self.killed:
                self.killed.discard(task.task_id)
                status = TaskStatus(task_id=task.task_id, state=TaskState.TASK_KILLED)
        driver.send_status_update(status)

    def _compute(self, spec: dict) -> dict:
        started = time.monotonic()
        part = Partition(**spec["partition"])
        with self.lock:
            held = self.cache.get(part.index)
        cached = held is not None
        if held is None:
            if not os.path.exists(part.path):
                write_partition(part)  # the file is gone: make it again from its source
            held = parse(part.path, part.dims)
            with self.lock:
                self.cache[part.index] = held
        points, labels = held
        g = gradient(points, labels, np.asarray(spec["weights"], dtype=float))
        wait_out(spec, started)
        return {"gradient": g.tolist(), "cached": cached, "seconds": time.monotonic() - started}


if __name__ == "__main__":
    mezzo.ExecutorDriver(CachingExecutor()).run()
