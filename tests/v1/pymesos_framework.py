"""A framework written only against pymesos' documented API, run unmodified on mezzo.

    python pymesos_framework.py MASTER LOG SETTINGS_JSON

MASTER is what pymesos is given (``host:port`` or ``zk://host:port/path``); every
callback is appended to LOG as one JSON line, which the tests read. SETTINGS (all
optional): ``waves`` (task counts, default [3, 2]), ``command`` (default ``sleep
0.5``), ``implicit_acks`` (default true), ``failover_timeout`` (default 60), ``kill``
(a task id to kill once it runs: its command is ``sleep 60``).

What it does, as a Mesos framework would: launch each wave's command tasks on
offers (0.1 cpus, 32 MB each), decline what it cannot use with a 5 s filter,
suppress offers when nothing waits, revive them for the next wave, kill the task
named, acknowledge explicitly when told to, reconcile explicitly and implicitly when
every task ended, and stop (TEARDOWN) once the reconciliation answers came.
Nothing here knows of mezzo.
"""

from __future__ import annotations

import getpass
import json
import socket
import sys
import threading
import time

from pymesos import MesosSchedulerDriver, Scheduler, decode_data  # noqa: F401 - part of the documented API

TERMINAL = {"TASK_FINISHED", "TASK_FAILED", "TASK_KILLED", "TASK_ERROR", "TASK_LOST", "TASK_DROPPED", "TASK_GONE"}


class Workload(Scheduler):
    def __init__(self, log_path: str, settings: dict) -> None:
        self.log_file = open(log_path, "a", buffering=1)  # noqa: SIM115 - open for the run
        self.lock = threading.Lock()
        self.waves = list(settings.get("waves", [3, 2]))
        self.command = settings.get("command", "sleep 0.5")
        self.implicit = settings.get("implicit_acks", True)
        self.kill_id = settings.get("kill")
        self.pending: list[str] = []
        self.ended: dict[str, str] = {}
        self.launched: list[str] = []
        self.wave = 0
        self.reconciled = False
        self.reconcile_answers = 0
        self._next_wave()

    def log(self, callback: str, **fields) -> None:
        self.log_file.write(json.dumps({"cb": callback, "t": time.time(), **fields}) + "\n")

    def _next_wave(self) -> None:
        count = self.waves.pop(0)
        self.wave += 1
        self.pending = [f"w{self.wave}-t{i}" for i in range(count)]

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
                cpus = sum(r["scalar"]["value"] for r in offer["resources"] if r["name"] == "cpus")
                mem = sum(r["scalar"]["value"] for r in offer["resources"] if r["name"] == "mem")
                tasks = []
                while self.pending and cpus >= 0.1 and mem >= 32:
                    task_id = self.pending.pop(0)
                    command = "sleep 60" if task_id == self.kill_id else self.command
                    tasks.append(
                        {
                            "task_id": {"value": task_id},
                            "agent_id": offer["agent_id"],
                            "name": task_id,
                            "command": {"value": command},
                            "resources": [
                                {"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.1}},
                                {"name": "mem", "type": "SCALAR", "scalar": {"value": 32}},
                            ],
                        }
                    )
                    cpus -= 0.1
                    mem -= 32
                if tasks:
                    self.launched += [t["task_id"]["value"] for t in tasks]
                    self.log("launch", tasks=[t["task_id"]["value"] for t in tasks], offer=offer["id"]["value"])
                    driver.launchTasks(offer["id"], tasks, {"refuse_seconds": 5})
                else:
                    self.log("decline", offer=offer["id"]["value"])
                    driver.declineOffer(offer["id"], {"refuse_seconds": 5})
            if not self.pending:
                self.log("suppress")
                driver.suppressOffers()

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
            has_uuid="uuid" in update,
        )
        if not self.implicit:
            driver.acknowledgeStatusUpdate(update)
        with self.lock:
            if update.get("reason") == "REASON_RECONCILIATION":
                self.reconcile_answers += 1
                if self.reconcile_answers == 1:
                    # The explicit answer came; the implicit ones (tasks still known) are quick.
                    threading.Timer(1.0, self._finish, args=(driver,)).start()
                return
            if state == "TASK_RUNNING" and task_id == self.kill_id:
                self.log("kill", task=task_id)
                driver.killTask({"value": task_id})
            if state in TERMINAL:
                self.ended.setdefault(task_id, state)
            if len(self.ended) == len(self.launched) and not self.pending:
                if self.waves:
                    self._next_wave()
                    self.log("revive", wave=self.wave)
                    driver.reviveOffers()
                elif not self.reconciled:
                    self.reconciled = True
                    self.log("reconcile")
                    # Explicit for one task, then implicit for all of them.
                    driver.reconcileTasks([{"task_id": {"value": self.launched[0]}}])
                    driver.reconcileTasks([])

    def _finish(self, driver) -> None:
        self.log("done", reconcile_answers=self.reconcile_answers)
        driver.stop()

    def frameworkMessage(self, driver, executorId, slaveId, message):
        self.log("message")

    def slaveLost(self, driver, slaveId):
        self.log("agent_lost", agent=slaveId["value"])

    def executorLost(self, driver, executorId, slaveId, status):
        self.log("executor_lost")

    def error(self, driver, message):
        self.log("error", message=message)


def main() -> None:
    master, log_path, settings_json = sys.argv[1:4]
    settings = json.loads(settings_json)
    framework = {
        "user": getpass.getuser(),
        "name": "pymesos-workload",
        "hostname": socket.gethostname(),
        "failover_timeout": settings.get("failover_timeout", 60),
    }
    workload = Workload(log_path, settings)
    driver = MesosSchedulerDriver(
        workload, framework, master, use_addict=False, implicit_acknowledgements=workload.implicit
    )
    driver.run()
    workload.log("exit")


if __name__ == "__main__":
    main()
