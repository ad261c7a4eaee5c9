"""A framework written only against pymesos' documented API whose tasks run on its own
executor (:mod:`pymesos_executor`), run unmodified on mezzo.

    python pymesos_executor_framework.py MASTER LOG SETTINGS_JSON

MASTER is what pymesos is given (``host:port``); every callback is appended to LOG
as one JSON line, which the tests read. SETTINGS:

- ``executor_log`` (required): the file the executor logs to (its
  ``PYMESOS_EXECUTOR_LOG``, set in the ExecutorInfo's command environment);
- ``tasks``: task id -> what the executor is to do with it (the task's ``data``, see
  :mod:`pymesos_executor`); default two short tasks, one that fails and one that
  runs for a minute (``t-kill``);
- ``kill``: a task id to kill once it is RUNNING (default ``t-kill`` if there is
  such a task; null for none);
- ``message``: a framework message sent to the executor once it reported a task
  RUNNING; the framework waits for the executor's ``echo:<message>`` (default
  ``ping``; null for none);
- ``executor_id`` (default ``pymesos-executor``), ``group`` (launch the tasks as one
  LAUNCH_GROUP instead of a LAUNCH), ``failover_timeout`` (default 60).

What it does, as a Mesos framework would: launch every task on the first offer
that holds them all and their executor (0.1 cpus and 32 MB each, and as much for
the executor, once), so that all of them share one executor; decline what it
cannot use with a filter and suppress offers once launched; kill the task named;
send the message; and stop (TEARDOWN) once every task ended and the echo came (or
the executor was lost, so that it cannot come).
Acknowledgements are pymesos' implicit ones. Nothing here knows of mezzo.
"""

from __future__ import annotations

import getpass
import json
import os
import shlex
import socket
import sys
import threading
import time

from pymesos import MesosSchedulerDriver, Scheduler, decode_data, encode_data

TERMINAL = {
    "TASK_FINISHED",
    "TASK_FAILED",
    "TASK_KILLED",
    "TASK_ERROR",
    "TASK_LOST",
    "TASK_DROPPED",
    "TASK_GONE",
}
EXECUTOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pymesos_executor.py")
DEFAULT_TASKS = {
    "t0": {"sleep": 0.2},
    "t1": {"sleep": 0.2},
    "t-fail": {"fail": True},
    "t-kill": {"sleep": 60},
}
CPUS, MEM = 0.1, 32


def scalars(cpus: float, mem: float) -> list[dict]:
    return [
        {"name": "cpus", "type": "SCALAR", "scalar": {"value": cpus}},
        {"name": "mem", "type": "SCALAR", "scalar": {"value": mem}},
    ]


class ExecutorWorkload(Scheduler):
    def __init__(self, log_path: str, settings: dict) -> None:
        self.log_file = open(log_path, "a", buffering=1)  # noqa: SIM115 - open for the run
        self.lock = threading.Lock()
        self.tasks: dict[str, dict] = dict(settings.get("tasks", DEFAULT_TASKS))
        self.kill_id = settings.get("kill", "t-kill" if "t-kill" in self.tasks else None)
        self.message = settings.get("message", "ping")
        self.group = settings.get("group", False)
        self.executor_id = settings.get("executor_id", "pymesos-executor")
        self.executor = {
            "executor_id": {"value": self.executor_id},
            "name": "pymesos test executor",
            "command": {
                "value": f"{shlex.quote(sys.executable)} {shlex.quote(EXECUTOR)}",
                "environment": {
                    "variables": [{"name": "PYMESOS_EXECUTOR_LOG", "value": settings["executor_log"]}]
                },
            },
            "resources": scalars(CPUS, MEM),
        }
        self.agent_id: dict | None = None
        self.ended: dict[str, str] = {}
        self.killed = False
        self.message_sent = False
        self.echoed = False
        self.executor_lost = False
        self.done = False

    def log(self, callback: str, **fields) -> None:
        self.log_file.write(json.dumps({"cb": callback, "t": time.time(), **fields}) + "\n")

    # -- callbacks -------------------------------------------------------------------

    def registered(self, driver, frameworkId, masterInfo):
        self.log("registered", framework_id=frameworkId["value"], master=masterInfo)

    def reregistered(self, driver, masterInfo):
        self.log("reregistered", master=masterInfo)

    def disconnected(self, driver):
        self.log("disconnected")

    def resourceOffers(self, driver, offers):
        with self.lock:
            for offer in offers:
                if self.agent_id is not None:
                    self.log("decline", offer=offer["id"]["value"], agent=offer["agent_id"]["value"])
                    driver.declineOffer(offer["id"], {"refuse_seconds": 60})
                    continue
                cpus = sum(r["scalar"]["value"] for r in offer["resources"] if r["name"] == "cpus")
                mem = sum(r["scalar"]["value"] for r in offer["resources"] if r["name"] == "mem")
                n = len(self.tasks) + 1  # the tasks and their executor
                if cpus < n * CPUS - 1e-9 or mem < n * MEM:
                    self.log(
                        "decline", offer=offer["id"]["value"], agent=offer["agent_id"]["value"], small=True
                    )
                    driver.declineOffer(offer["id"], {"refuse_seconds": 5})
                    continue
                self.agent_id = offer["agent_id"]
                self._launch(driver, offer)
            if self.agent_id is not None:
                self.log("suppress")
                driver.suppressOffers()

    def _launch(self, driver, offer) -> None:
        tasks = []
        for task_id, spec in self.tasks.items():
            task = {
                "task_id": {"value": task_id},
                "agent_id": offer["agent_id"],
                "name": task_id,
                "resources": scalars(CPUS, MEM),
                "data": encode_data(json.dumps(spec).encode()),
            }
            if not self.group:
                task["executor"] = self.executor
            tasks.append(task)
        self.log(
            "launch",
            tasks=list(self.tasks),
            offer=offer["id"]["value"],
            agent=offer["agent_id"]["value"],
            group=self.group,
        )
        if self.group:
            operation = {
                "type": "LAUNCH_GROUP",
                "launch_group": {"executor": self.executor, "task_group": {"tasks": tasks}},
            }
            driver.acceptOffers([offer["id"]], [operation], {"refuse_seconds": 60})
        else:
            driver.launchTasks(offer["id"], tasks, {"refuse_seconds": 60})

    def offerRescinded(self, driver, offerId):
        self.log("rescinded", offer=offerId["value"])

    def statusUpdate(self, driver, update):
        task_id = update["task_id"]["value"]
        state = update["state"]
        self.log(
            "update",
            task=task_id,
            state=state,
            reason=update.get("reason"),
            source=update.get("source"),
            message=update.get("message"),
            agent_id=(update.get("agent_id") or {}).get("value"),
            has_uuid="uuid" in update,
        )
        with self.lock:
            if update.get("reason") == "REASON_RECONCILIATION":
                return
            if state == "TASK_RUNNING" and task_id == self.kill_id and not self.killed:
                self.killed = True
                self.log("kill", task=task_id)
                driver.killTask({"value": task_id})
            if (
                state == "TASK_RUNNING"
                and update.get("source") == "SOURCE_EXECUTOR"
                and self.message is not None
                and not self.message_sent
            ):
                # The executor spoke: it is subscribed, a message reaches it now.
                self.message_sent = True
                self.log("send_message", data=self.message, executor_id=self.executor_id)
                driver.sendFrameworkMessage(
                    {"value": self.executor_id}, self.agent_id, encode_data(self.message.encode())
                )
            if state in TERMINAL:
                self.ended.setdefault(task_id, state)
            self._maybe_finish(driver)

    def frameworkMessage(self, driver, executorId, slaveId, message):
        data = decode_data(message).decode(errors="replace")
        self.log("message", data=data, executor_id=executorId["value"], agent_id=slaveId["value"])
        with self.lock:
            if self.message is not None and data == "echo:" + self.message:
                self.echoed = True
            self._maybe_finish(driver)

    def _maybe_finish(self, driver) -> None:
        if self.done or len(self.ended) < len(self.tasks):
            return
        if self.message is not None and not self.echoed and not self.executor_lost:
            return  # (an echo cannot come from an executor that is gone)
        self.done = True
        self.log("done", ended=self.ended)
        # Not from the driver's own thread: stop() tears the framework down (no failover).
        threading.Thread(target=driver.stop, name="stop").start()

    def slaveLost(self, driver, slaveId):
        self.log("agent_lost", agent=slaveId["value"])

    def executorLost(self, driver, executorId, slaveId, status):
        self.log("executor_lost", executor_id=executorId["value"], agent=slaveId["value"], status=status)
        with self.lock:
            self.executor_lost = True
            self._maybe_finish(driver)

    def error(self, driver, message):
        self.log("error", message=message)


def main() -> None:
    master, log_path, settings_json = sys.argv[1:4]
    settings = json.loads(settings_json)
    framework = {
        "user": getpass.getuser(),
        "name": "pymesos-executor-workload",
        "hostname": socket.gethostname(),
        "failover_timeout": settings.get("failover_timeout", 60),
        "checkpoint": True,
    }
    workload = ExecutorWorkload(log_path, settings)
    driver = MesosSchedulerDriver(
        workload, framework, master, use_addict=False, implicit_acknowledgements=True
    )
    driver.run()
    workload.log("exit")


if __name__ == "__main__":
    main()
