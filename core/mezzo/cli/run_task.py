"""``mezzo run -- CMD``: one command as one task, like ``mesos-execute`` or Slurm's ``srun``.

A tiny framework: it takes the first offer big enough, launches the command with
the built-in command executor, declines everything else, prints each state
change to stderr and the task's output to stdout, then unregisters. The exit
status is the command's own.

It never waits silently. Before registering it asks the master's HTTP API for
``/overview``: nothing listening, a peer that is not a mezzo master, or a request no
active agent could ever hold (``--cpus 64`` on agents of 2) end it at once, with one
line. While no offer fits it says why every few seconds (the master's ``why_pending``
for it). A master lost for longer than ``lost_master_after`` ends it (the task may run
on: ``mezzo task`` finds it). When the task ends, its whole stdout is printed: the
64 KiB tail the terminal status carries, or the sandbox's file through the master when
it is longer; a failed task's last lines of stderr and its sandbox follow.
"""

from __future__ import annotations

import shlex
import sys
import threading
import time
from typing import Any

import mezzo
from mezzo import CommandInfo, Filters, FrameworkInfo, Resources, TaskInfo, TaskState
from mezzo.config import TlsConfig
from mezzo.errors import NotAllowed, RequestFailed

from ..operator_client import NoHttpAnswer, OperatorClient
from . import tools
from .tables import number

# Exit statuses when the command itself gave none.
EXIT_KILLED = 137
EXIT_NOT_RUN = 1
EXIT_TIMEOUT = 124

WAITING_REPORT_SECONDS = 3.0
"""How often, while no offer fits, the run asks the master why and says so (when it changed)."""
LOST_MASTER_SECONDS = 10.0
"""How long the master may be gone before the run gives up."""
STDERR_TAIL_LINES = 10
OUTPUT_TAIL_BYTES = 64 * 1024
"""What the command executor sends of a task's stdout with its end (the last bytes):
:data:`mezzo.agent.command_executor.OUTPUT_TAIL_BYTES`, not imported for start-up's sake."""
"""Lines of a failed task's stderr shown."""


class _OneTask(mezzo.Scheduler):
    def __init__(self, argv: list[str], resources: Resources, name: str) -> None:
        self.argv = argv
        self.resources = resources
        self.name = name
        self.launched: TaskInfo | None = None
        self.framework_id: str | None = None
        self.exit_status: int | None = None
        self.final: Any = None
        """The terminal TaskStatus."""
        self.lost_since: float | None = None
        self.most_free: dict[str, float] = {}
        """The most of cpus and mem free in one offer declined for being too small, since
        the last report (what ``waiting:`` says)."""
        self.done = threading.Event()

    def registered(self, driver, framework_id, master) -> None:
        self.framework_id = framework_id
        self.lost_since = None
        _say(f"registered with {master} as framework {framework_id}")

    def reregistered(self, driver, framework_id, master) -> None:
        if self.lost_since is not None:
            _say(f"the master is back ({master})")
        self.lost_since = None

    def disconnected(self, driver) -> None:
        if self.lost_since is None:
            self.lost_since = time.monotonic()
            _say("lost the master; redialling")

    def resource_offers(self, driver, offers) -> None:
        for offer in offers:
            if self.launched is not None or not self.resources.fits_in(offer.resources):
                if self.launched is None:
                    free = Resources.of(offer.resources)
                    for name in ("cpus", "mem"):
                        self.most_free[name] = max(self.most_free.get(name, 0.0), free.get(name))
                driver.decline_offer(offer.offer_id, Filters(refuse_seconds=3600 if self.launched else 1))
                continue
            task = TaskInfo(
                task_id=f"{self.name}-{int(time.time() * 1000)}",
                name=self.name,
                agent_id=offer.agent_id,
                resources=self.resources,
                command=CommandInfo(value=shlex.join(self.argv)),
            )
            self.launched = task
            _say(f"launching {task.task_id} on {offer.hostname} ({offer.agent_id}): {shlex.join(self.argv)}")
            driver.launch_tasks([offer.offer_id], [task])
            driver.set_needs_offers(False)

    def status_update(self, driver, status) -> None:
        state = mezzo.state_name(status.state)
        detail = f": {status.message}" if status.message else ""
        _say(f"{status.task_id} {state}{detail}")
        if not mezzo.is_terminal(status.state):
            return
        self.final = status
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
    lost_master_after: float = LOST_MASTER_SECONDS,
) -> int:
    """Run ``argv`` as one task on the cluster at ``master``; return its exit status.
    Raises :class:`~mezzo.errors.RequestFailed` (one line; exit 1) when the master cannot
    be used or no agent could hold the task."""
    resources = Resources(cpus=cpus, mem=mem)
    api = OperatorClient(master, timeout=5.0, tls=tls)
    try:
        try:
            _check_fits(resources, api.get("/overview"))
            if not master.strip().startswith("zk://"):
                master = api.address  # the leader, when a standby was named
        except (NotAllowed, NoHttpAnswer) as exc:
            # Not allowed to look, or the master's HTTP API is off: the run itself may be.
            _say(f"cannot ask the master whether an agent fits ({exc}); registering anyway")
        scheduler = _OneTask(argv, resources, name)
        driver = mezzo.SchedulerDriver(scheduler, FrameworkInfo(name=name), master, tls=tls)
        scheduler.lost_since = time.monotonic()  # until registered: no master yet either
        driver.start()
        try:
            status = _wait(scheduler, api, timeout, lost_master_after)
        except KeyboardInterrupt:
            _say("interrupted: stopping the framework (its task is killed)")
            driver.stop()
            return 130
        driver.stop()
        if status is not None:
            return status
        _print_output(scheduler, api)
        return scheduler.exit_status if scheduler.exit_status is not None else EXIT_NOT_RUN
    finally:
        api.close()


def _check_fits(resources: Resources, overview: dict[str, Any]) -> None:
    """:class:`tools.NotFound` when no active agent has enough of a resource the task asks
    for (what the caller may see of the agents: nothing to check without ``view_cluster``)."""
    largest = (overview.get("resources") or {}).get("largest_agent") or {}
    if not largest:
        return
    for name in ("cpus", "mem"):
        wanted = resources.get(name)
        if wanted > largest.get(name, 0):
            have = ", ".join(f"{number(v)} {k}" for k, v in sorted(largest.items()) if k in ("cpus", "mem"))
            raise tools.NotFound(f"no agent offers {number(wanted)} {name} (the largest has {have})")


def _wait(scheduler: _OneTask, api: OperatorClient, timeout: float, lost_master_after: float) -> int | None:
    """Until the task ends (None), or an exit status to give up with: the timeout, or the
    master gone for ``lost_master_after`` s (0: wait for it for ever). Says why nothing is
    launched while it waits."""
    deadline = time.monotonic() + timeout if timeout > 0 else None
    said = ""
    next_report = time.monotonic() + WAITING_REPORT_SECONDS
    while not scheduler.done.wait(0.2):
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            _say(f"gave up after {timeout:g} s" + (f" ({said})" if said else ""))
            return EXIT_TIMEOUT
        lost = scheduler.lost_since
        if lost is not None and lost_master_after > 0 and now - lost >= lost_master_after:
            if scheduler.framework_id is None:
                _say(f"gave up: no master registered this framework within {lost_master_after:g} s")
                return EXIT_NOT_RUN
            where = (
                f"; the task may still run: mezzo task {scheduler.launched.task_id}"
                if scheduler.launched
                else ""
            )
            _say(f"gave up: the master was gone for {lost_master_after:g} s{where}")
            return EXIT_NOT_RUN
        if scheduler.launched is None and scheduler.framework_id and now >= next_report:
            next_report = now + WAITING_REPORT_SECONDS
            why = _waiting_for(scheduler, api)
            if why and why != said:
                _say(f"waiting: {why}")
                said = why
    return None


def _waiting_for(scheduler: _OneTask, api: OperatorClient) -> str:
    """Why nothing is launched yet: offers too small (the most they had free), else the
    master's ``why_pending`` for this framework, but for the run's own short declines."""
    if scheduler.most_free:
        most, scheduler.most_free = scheduler.most_free, {}
        want = ", ".join(f"{number(scheduler.resources.get(n))} {n}" for n in ("cpus", "mem"))
        free = ", ".join(f"{number(v)} {n}" for n, v in sorted(most.items()))
        return f"no agent has {want} free now (the most one offered: {free}); all busy?"
    try:
        shown = api.get("/frameworks", framework_id=scheduler.framework_id)["frameworks"]
    except (RequestFailed, KeyError, TypeError):
        return ""
    reasons = (
        [r for r in (shown[0].get("why_pending") or []) if r.get("reason") != "refuse_filters"]
        if shown
        else []
    )
    return reasons[0]["message"] if reasons else ""


def _print_output(scheduler: _OneTask, api: OperatorClient) -> None:
    """The task's whole stdout on stdout; for a task that did not finish, the end of its
    stderr and where its sandbox is, on stderr."""
    status, task = scheduler.final, scheduler.launched
    carried = (status.data or b"") if status is not None else b""
    if task is None or scheduler.framework_id is None:
        sys.stdout.write(carried.decode("utf-8", "replace"))
        return
    sandbox = f"/frameworks/{scheduler.framework_id}/executors/{task.task_id}/runs/latest"
    out = _Counted(sys.stdout)
    try:
        # Shorter than the tail the command executor sends, it is the whole file: no round
        # trip through the master to the agent (a fifth of what the run took after the end).
        short = len(carried) < OUTPUT_TAIL_BYTES
        size = len(carried) if short else api.read_file(task.agent_id, f"{sandbox}/stdout", -1)["offset"]
        if size > len(carried):  # the status carries only the last 64 KiB
            tools.copy_file(api, task.agent_id, f"{sandbox}/stdout", 0, out, until=size)
        else:
            out.write(carried.decode("utf-8", "replace"))
        out.flush()
    except RequestFailed as exc:
        if out.written:  # never the start of it and then its end again
            _say(f"stdout cut short: reading it through the master failed ({exc})")
        else:
            out.write(carried.decode("utf-8", "replace"))
            out.flush()
            if len(carried) >= 64 * 1024:
                _say(f"stdout shown from its last 64 KiB only: the whole file could not be read ({exc})")
    if status is not None and status.state != TaskState.TASK_FINISHED:
        try:
            size = api.read_file(task.agent_id, f"{sandbox}/stderr", -1)["offset"]
            start = tools.tail_start(api, task.agent_id, f"{sandbox}/stderr", size, STDERR_TAIL_LINES)
            if size > start:
                _say(f"the last lines of its stderr ({size - start} of {size} bytes):")
                tools.copy_file(api, task.agent_id, f"{sandbox}/stderr", start, sys.stderr)
        except RequestFailed:
            pass
        _say(f"sandbox: {sandbox} on agent {task.agent_id} (mezzo logs --stderr {task.task_id})")


class _Counted:
    """A text stream that counts the characters written to it."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.written = 0

    def write(self, text: str) -> None:
        self._stream.write(text)
        self.written += len(text)

    def flush(self) -> None:
        self._stream.flush()
