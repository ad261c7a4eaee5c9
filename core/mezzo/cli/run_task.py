"""``mezzo run -- CMD``: one command as one task, like ``mesos-execute``.

A tiny framework: it takes the first offer big enough, launches the command with
the built-in command executor, declines everything else, prints each state
change to stderr and the task's output (carried back in the terminal status) to
stdout, then unregisters. The exit status is the command's own.
"""

from __future__ import annotations

import shlex
import sys
import threading
import time

import mezzo
from mezzo import CommandInfo, Filters, FrameworkInfo, Resources, TaskInfo, TaskState
from mezzo.config import TlsConfig

# Exit statuses when the command itself gave none.
EXIT_KILLED = 137
EXIT_NOT_RUN = 1
EXIT_TIMEOUT = 124


class _OneTask(mezzo.Scheduler):
    def __init__(self, argv: list[str], resources: Resources, name: str) -> None:
        self.argv = argv
        self.resources = resources
        self.name = name
        self.launched = False
        self.exit_status: int | None = None
        self.done = threading.Event()

    def registered(self, driver, framework_id, master) -> None:
        _say(f"registered with {master} as framework {framework_id}")

    def resource_offers(self, driver, offers) -> None:
        for offer in offers:
            if self.launched or not self.resources.fits_in(offer.resources):
                driver.decline_offer(offer.offer_id, Filters(refuse_seconds=3600 if self.launched else 1))
                continue
            self.launched = True
            task = TaskInfo(
                task_id=f"{self.name}-{int(time.time() * 1000)}",
                name=self.name,
                agent_id=offer.agent_id,
                resources=self.resources,
                command=CommandInfo(value=shlex.join(self.argv)),
            )
            _say(f"launching {task.task_id} on {offer.hostname} ({offer.agent_id}): {shlex.join(self.argv)}")
            driver.launch_tasks([offer.offer_id], [task])
            driver.set_needs_offers(False)

    def status_update(self, driver, status) -> None:
        state = mezzo.state_name(status.state)
        detail = f": {status.message}" if status.message else ""
        _say(f"{status.task_id} {state}{detail}")
        if not mezzo.is_terminal(status.state):
            return
        if status.data:
            sys.stdout.write(status.data.decode("utf-8", "replace"))
            sys.stdout.flush()
        if status.state == TaskState.TASK_FINISHED:
            self.exit_status = 0
        elif status.exit_code is not None:
            self.exit_status = status.exit_code
        elif status.state == TaskState.TASK_KILLED:
            self.exit_status = EXIT_KILLED
        else:
            self.exit_status = EXIT_NOT_RUN
        self.done.set()

    def error(self, driver, message) -> None:
        _say(f"error from the master: {message}")
        self.exit_status = EXIT_NOT_RUN
        self.done.set()


def _say(line: str) -> None:
    print(f"mezzo run: {line}", file=sys.stderr, flush=True)


def run_command(
    master: str,
    argv: list[str],
    *,
    cpus: float,
    mem: float,
    name: str,
    timeout: float,
    tls: TlsConfig | None = None,
) -> int:
    """Run ``argv`` as one task on the cluster at ``master``; return its exit status."""
    resources = Resources(cpus=cpus, mem=mem)
    scheduler = _OneTask(argv, resources, name)
    driver = mezzo.SchedulerDriver(scheduler, FrameworkInfo(name=name), master, tls=tls)
    driver.start()
    try:
        finished = scheduler.done.wait(timeout if timeout > 0 else None)
    except KeyboardInterrupt:
        _say("interrupted: stopping the framework (its task is killed)")
        driver.stop()
        return 130
    driver.stop()
    if not finished:
        _say(f"gave up after {timeout:g} s")
        return EXIT_TIMEOUT
    return scheduler.exit_status if scheduler.exit_status is not None else EXIT_NOT_RUN
