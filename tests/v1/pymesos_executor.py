"""A custom executor written only against pymesos' documented API, run unmodified on mezzo.

    python pymesos_executor.py        (the agent starts it: MESOS_* in its environment)

The agent launches it as a Mesos agent would: ``MESOS_AGENT_ENDPOINT``,
``MESOS_FRAMEWORK_ID``, ``MESOS_EXECUTOR_ID`` and the rest in its environment, and
``PYMESOS_EXECUTOR_LOG`` (set by the framework, in the ExecutorInfo's command
environment) naming a file to which every callback is appended as one JSON line,
which the tests read. Each line carries the process id, so that the tests can tell
one executor process from several.

What it does with a task, as told by the task's ``data`` (base64 of a JSON object):

- ``{"sleep": S}``: run for S seconds, then TASK_FINISHED (or TASK_KILLED if killed);
- ``{"fail": true}``: TASK_FAILED;
- ``{"until": PATH, "timeout": S}``: run until the file PATH exists, then
  TASK_FINISHED (TASK_FAILED if it did not appear within S seconds, default 60).

Every task first gets TASK_RUNNING. A killed task gets TASK_KILLED, and no task
ever gets a second terminal update. A framework message ``M`` is answered with the
framework message ``echo:M``. Nothing here knows of mezzo.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time

from pymesos import Executor, MesosExecutorDriver, decode_data, encode_data

ENVIRONMENT = (
    "MESOS_AGENT_ENDPOINT",
    "MESOS_FRAMEWORK_ID",
    "MESOS_EXECUTOR_ID",
    "MESOS_DIRECTORY",
    "MESOS_SANDBOX",
    "MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD",
    "MESOS_AGENT_ID",
    "MESOS_CHECKPOINT",
)


class Log:
    """One JSON line per callback, appended (several executors may share the file)."""

    def __init__(self, path: str) -> None:
        self.lock = threading.Lock()
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def __call__(self, callback: str, **fields) -> None:
        line = json.dumps({"cb": callback, "t": time.time(), "pid": os.getpid(), **fields}) + "\n"
        with self.lock:
            os.write(self.fd, line.encode())


class Task:
    def __init__(self, task_id: str, spec: dict) -> None:
        self.id = task_id
        self.spec = spec
        self.killed = threading.Event()
        self.ended = False


class LoggingExecutor(Executor):
    def __init__(self, log: Log) -> None:
        self.log = log
        self.lock = threading.Lock()
        self.tasks: dict[str, Task] = {}

    # -- updates -----------------------------------------------------------------------

    def _update(self, driver, task: Task, state: str, message: str = "") -> None:
        """Send ``state`` for ``task``; a terminal state only once per task."""
        terminal = state != "TASK_RUNNING"
        with self.lock:
            if task.ended:
                return
            if terminal:
                task.ended = True
        status = {"task_id": {"value": task.id}, "state": state, "timestamp": time.time()}
        if message:
            status["message"] = message
        try:
            driver.sendStatusUpdate(status)
            self.log("sent", task=task.id, state=state)
        except Exception as exc:  # noqa: BLE001 - a refused call is what the tests look for
            self.log("send_error", task=task.id, state=state, error=repr(exc)[:500])

    def _run(self, driver, task: Task) -> None:
        spec = task.spec
        if spec.get("fail"):
            self._update(driver, task, "TASK_FAILED", "told to fail")
            return
        if "until" in spec:
            deadline = time.monotonic() + float(spec.get("timeout", 60))
            while not os.path.exists(spec["until"]):
                if task.killed.wait(0.02):
                    return  # killTask answered TASK_KILLED
                if time.monotonic() > deadline:
                    self._update(driver, task, "TASK_FAILED", f"{spec['until']} did not appear")
                    return
            self._update(driver, task, "TASK_FINISHED")
            return
        if task.killed.wait(float(spec.get("sleep", 0))):
            return  # killTask answered TASK_KILLED
        self._update(driver, task, "TASK_FINISHED")

    # -- callbacks ---------------------------------------------------------------------

    def registered(self, driver, executorInfo, frameworkInfo, slaveInfo):
        self.log(
            "registered",
            executor_id=executorInfo["executor_id"]["value"],
            executor_name=executorInfo.get("name"),
            framework_id=frameworkInfo["id"]["value"],
            framework_name=frameworkInfo.get("name"),
            agent_id=(slaveInfo.get("id") or {}).get("value"),
            agent_hostname=slaveInfo.get("hostname"),
        )

    def reregistered(self, driver, slaveInfo):
        self.log("reregistered", agent_id=(slaveInfo.get("id") or {}).get("value"))

    def disconnected(self, driver):
        self.log("disconnected")

    def launchTask(self, driver, task):
        self._launch(driver, task, "launch")

    def launchTaskGroup(self, driver, task_infos):
        self.log("launch_group", tasks=[t["task_id"]["value"] for t in task_infos])
        for task in task_infos:
            self._launch(driver, task, "launch_group_member")

    def _launch(self, driver, task, callback: str) -> None:
        task_id = task["task_id"]["value"]
        raw = task.get("data")
        try:
            spec = json.loads(decode_data(raw)) if raw else {}
        except ValueError as exc:
            spec = {"fail": True, "why": f"unreadable data: {exc}"}
        executor = task.get("executor") or {}
        self.log(
            callback,
            task=task_id,
            name=task.get("name"),
            agent_id=(task.get("agent_id") or {}).get("value"),
            executor_id=(executor.get("executor_id") or {}).get("value"),
            resources=sorted({r.get("name") for r in task.get("resources") or []}),
            data=spec,
        )
        record = Task(task_id, spec)
        with self.lock:
            self.tasks[task_id] = record
        self._update(driver, record, "TASK_RUNNING")
        threading.Thread(target=self._run, args=(driver, record), name=f"task {task_id}", daemon=True).start()

    def killTask(self, driver, taskId):
        task_id = taskId["value"]
        with self.lock:
            task = self.tasks.get(task_id)
        self.log("kill", task=task_id, known=task is not None)
        if task is None:
            return
        task.killed.set()
        self._update(driver, task, "TASK_KILLED", "killed by the scheduler")

    def frameworkMessage(self, driver, message):
        data = decode_data(message).decode()
        self.log("message", data=data)
        try:
            driver.sendFrameworkMessage(encode_data(("echo:" + data).encode()))
            self.log("echoed", data="echo:" + data)
        except Exception as exc:  # noqa: BLE001
            self.log("send_error", message=data, error=repr(exc)[:500])

    def shutdown(self, driver):
        with self.lock:
            unfinished = sorted(t.id for t in self.tasks.values() if not t.ended)
        self.log("shutdown", unfinished=unfinished)
        for task_id in unfinished:
            self.tasks[task_id].killed.set()

    def error(self, driver, message):
        self.log("error", message=message)


def main() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    log = Log(os.environ["PYMESOS_EXECUTOR_LOG"])
    log(
        "start",
        env={name: os.environ.get(name) for name in ENVIRONMENT},
        has_token=bool(os.environ.get("MESOS_EXECUTOR_AUTHENTICATION_TOKEN")),
        cwd=os.getcwd(),
    )
    executor = LoggingExecutor(log)
    driver = MesosExecutorDriver(executor, use_addict=True)
    try:
        driver.run()
    except BaseException as exc:  # the driver's I/O thread interrupts main when the agent refuses it
        log("crash", error=repr(exc)[:500])
        raise
    log("exit")


if __name__ == "__main__":
    main()
