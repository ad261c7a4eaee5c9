#!/usr/bin/env python3
"""A tiny custom executor for the tests: runs each task in a thread for a moment,
reports its own pid in the TASK_FINISHED data (so tests can tell that one process
ran every task), and echoes framework messages back upper-cased.

A task whose data is ``b"hold"`` runs until killed; the framework message
``b"crash"`` makes the executor exit at once with status 3."""

import os
import threading
import time

import mezzo
from mezzo import TaskState, TaskStatus


class Echo(mezzo.Executor):
    def launch_task(self, driver, task):
        driver.send_status_update(TaskStatus(task_id=task.task_id, state=TaskState.TASK_RUNNING))
        if task.data == b"hold":
            return

        def work():
            time.sleep(0.2)
            driver.send_status_update(TaskStatus(task_id=task.task_id, state=TaskState.TASK_FINISHED,
                                                 data=str(os.getpid()).encode()))

        threading.Thread(target=work, daemon=True).start()

    def kill_task(self, driver, task_id):
        driver.send_status_update(TaskStatus(task_id=task_id, state=TaskState.TASK_KILLED,
                                             message="killed by the echo executor"))

    def framework_message(self, driver, data):
        if data == b"crash":
            os._exit(3)
        driver.send_framework_message(data.upper())


if __name__ == "__main__":
    mezzo.ExecutorDriver(Echo()).run()
