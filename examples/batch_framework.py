#!/usr/bin/env python3
"""A small batch framework: run N shell commands as tasks, retry failures, exit.

    python examples/batch_framework.py --master 127.0.0.1:5050 --tasks 10
    python examples/batch_framework.py --command 'test {attempt} -gt 1'   # every first attempt fails

Each task runs ``--command`` (``{index}`` and ``{attempt}`` are filled in) under
the agent's built-in command executor, with ``--cpus``/``--mem`` each. A task that
ends TASK_FAILED, TASK_LOST, TASK_DROPPED or TASK_KILLED is retried up to
``--max-attempts`` times; a TASK_ERROR is not retried, because the master refused
the task itself and an identical copy would be refused again. The exit status is 0
when every task finished, 1 otherwise.

See docs/writing-a-framework.md, which walks through this file.
"""

from __future__ import annotations

import argparse
import collections
import sys
import threading

import mezzo
import mezzo.log
from mezzo import CommandInfo, Filters, FrameworkInfo, Resources, TaskInfo, TaskState, TaskStatus

# Outcomes worth another attempt: the task did not get to run to completion.
RETRY = {TaskState.TASK_FAILED, TaskState.TASK_LOST, TaskState.TASK_DROPPED,
         TaskState.TASK_KILLED, TaskState.TASK_GONE, TaskState.TASK_UNKNOWN}


class BatchScheduler(mezzo.Scheduler):
    """All state below is touched only by callbacks, which run one at a time on
    the driver thread; the main thread reads it after ``done`` is set."""

    def __init__(self, total: int, command: str, per_task: Resources, max_attempts: int) -> None:
        self.command = command
        self.per_task = per_task
        self.max_attempts = max_attempts
        self.pending = collections.deque(range(total))  # task indexes waiting for an offer
        self.attempts = collections.Counter()           # index -> attempts launched
        self.running: dict[str, tuple[int, str]] = {}   # task id -> (index, agent id)
        self.outcome: dict[int, str] = {}                # index -> final state name
        self.total = total
        self.wants_offers = True
        self.done = threading.Event()

    # -- registration -------------------------------------------------------

    def registered(self, driver, framework_id, master):
        print(f"registered as {framework_id} with {master}")
        # guaranteed_share() waits for the master's answer, so it must not run on the
        # driver thread (it would raise DriverError here): ask from a thread of our own.
        threading.Thread(target=self.show_guarantee, args=(driver,), daemon=True).start()

    def show_guarantee(self, driver):
        try:
            print(f"guaranteed share: {driver.guaranteed_share(timeout=5)}")
        except (TimeoutError, mezzo.DriverError) as exc:
            print(f"no guaranteed share: {exc}", file=sys.stderr)

    def reregistered(self, driver, framework_id, master):
        # The connection dropped and came back: ask for the state of what we
        # believe is running. Answers arrive as ordinary status updates.
        print(f"re-registered with {master}; reconciling {len(self.running)} tasks")
        driver.reconcile_tasks([TaskStatus(task_id=tid, agent_id=agent)
                                for tid, (_, agent) in self.running.items()])

    # -- offers ----------------------------------------------------------------

    def resource_offers(self, driver, offers):
        for offer in offers:
            left, tasks = offer.resources, []
            while self.pending and self.per_task.fits_in(left):
                index = self.pending.popleft()
                self.attempts[index] += 1
                attempt = self.attempts[index]
                task_id = f"task-{index}-{attempt}"          # unique within the framework
                tasks.append(TaskInfo(
                    task_id=task_id,
                    name=f"batch task {index}",
                    agent_id=offer.agent_id,
                    resources=self.per_task,
                    command=CommandInfo(value=self.command.format(index=index, attempt=attempt)),
                ))
                self.running[task_id] = (index, offer.agent_id)
                left = left - self.per_task
            if tasks:
                # What the tasks leave of the offer is refused for 5 s.
                driver.launch_tasks(offer, tasks, Filters(refuse_seconds=5))
            else:
                # Too small, or nothing left to run: do not offer it again for a minute.
                driver.decline_offer(offer, Filters(refuse_seconds=60))
        if not self.pending and self.wants_offers:
            driver.set_needs_offers(False)       # suppress: we have nothing to launch
            self.wants_offers = False

    def offer_rescinded(self, driver, offer_id):
        print(f"offer {offer_id} rescinded")

    # -- task states -------------------------------------------------------------

    def status_update(self, driver, status):
        entry = self.running.get(status.task_id)
        if entry is None:
            return                               # a late or repeated update of a task we closed
        index, _ = entry
        name = mezzo.state_name(status.state)
        if status.state == TaskState.TASK_FINISHED:
            print(f"{status.task_id}: {name}")
            self._close(status.task_id, index, name)
        elif status.state == TaskState.TASK_ERROR:
            print(f"{status.task_id}: {name} ({status.reason}: {status.message}); not retried")
            self._close(status.task_id, index, name)
        elif status.state in RETRY:
            print(f"{status.task_id}: {name} ({status.reason or '-'}: {status.message})")
            del self.running[status.task_id]
            if self.attempts[index] < self.max_attempts:
                self.pending.append(index)
                if not self.wants_offers:
                    driver.set_needs_offers(True)    # revive (also clears our refuse filters)
                    self.wants_offers = True
            else:
                self._close(None, index, name)
        # TASK_STAGING, TASK_STARTING, TASK_RUNNING, TASK_KILLING: nothing to do.

    def _close(self, task_id, index, name):
        if task_id is not None:
            del self.running[task_id]
        self.outcome[index] = name
        if len(self.outcome) == self.total:
            self.done.set()

    # -- fatal ----------------------------------------------------------------------

    def error(self, driver, message):
        print(f"the master refused us: {message}", file=sys.stderr)
        self.done.set()                          # the driver aborts after this callback


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--master", default="127.0.0.1:5050", help="master HOST:PORT (default 127.0.0.1:5050)")
    p.add_argument("--tasks", type=int, default=10, help="number of tasks (default 10)")
    p.add_argument("--command", default="echo task {index} attempt {attempt}; sleep 1",
                   help="shell command of each task; {index} and {attempt} are filled in")
    p.add_argument("--cpus", type=float, default=0.5, help="cpus per task (default 0.5)")
    p.add_argument("--mem", type=float, default=64, help="MB of memory per task (default 64)")
    p.add_argument("--max-attempts", type=int, default=3, help="attempts per task (default 3)")
    p.add_argument("--timeout", type=float, default=300, help="give up after this many seconds (default 300)")
    args = p.parse_args()
    mezzo.log.configure("warning")                # driver logs: warnings and errors, on stderr

    scheduler = BatchScheduler(args.tasks, args.command, Resources(cpus=args.cpus, mem=args.mem),
                               args.max_attempts)
    framework = FrameworkInfo(name="batch", failover_timeout=30)
    driver = mezzo.SchedulerDriver(scheduler, framework, args.master)
    driver.start()                               # callbacks now run on the driver thread
    try:
        finished = scheduler.done.wait(args.timeout)
    except KeyboardInterrupt:
        finished = False
    driver.stop()                                # unregisters; the master kills what still runs
    if not finished:
        print("gave up before every task ended", file=sys.stderr)
    counts = collections.Counter(scheduler.outcome.values())
    print(f"{counts['TASK_FINISHED']}/{args.tasks} tasks finished; "
          f"{sum(scheduler.attempts.values())} attempts; outcomes: {dict(counts)}")
    return 0 if counts["TASK_FINISHED"] == args.tasks else 1


if __name__ == "__main__":
    sys.exit(main())
