"""A custom executor for the restart tests, on the real executor driver.

Each task reports TASK_RUNNING at once, then waits until a file named
``release-<task id>`` appears in the executor's sandbox and reports TASK_FINISHED
with this process's pid as data (so a test can tell the executor was never
restarted). Every task launched is appended to ``launched.log`` in the sandbox.
"""

import os
import threading
import time

import mezzo
from mezzo import TaskState, TaskStatus


class Hold(mezzo.Executor):
    def launch_task(self, driver, task):
        with open(driver.sandbox / "launched.log", "a") as f:
            f.write(f"{task.task_id} {os.getpid()}\n")
        driver.send_status_update(TaskStatus(task_id=task.task_id, state=TaskState.TASK_RUNNING))

        def work():
            release = driver.sandbox / f"release-{task.task_id}"
            while not release.exists():
                time.sleep(0.05)
            driver.send_status_update(TaskStatus(task_id=task.task_id, state=TaskState.TASK_FINISHED,
                                                 data=str(os.getpid()).encode()))

        threading.Thread(target=work, daemon=True).start()

    def kill_task(self, driver, task_id):
        driver.send_status_update(TaskStatus(task_id=task_id, state=TaskState.TASK_KILLED))


if __name__ == "__main__":
    mezzo.ExecutorDriver(Hold(), reconnect_interval=0.1).run()
