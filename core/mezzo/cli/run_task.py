"""``mezzo run -- CMD``: one command as one task, like ``mesos-execute`` or Slurm's ``srun``.

A tiny framework: it takes the first offer big enough, launches the command with
the built-in command executor, declines everything else, prints each state
change to stderr and the task's output to stdout, then tears itself down. The exit
status is the command's own.

It speaks the master's v1 scheduler API (:mod:`mezzo.v1.scheduler_client`: a
blocking client, no event loop and no Thrift), as a Mesos framework would: a run
costs one Python start-up and a handful of round trips.

It never waits silently. Before subscribing it asks the master's HTTP API for
``/overview``: nothing listening, a peer that is not a mezzo master, or a request no
active agent could ever hold (``--cpus 64`` on agents of 2) end it at once, with one
line. While no offer fits it says why every few seconds (the master's ``why_pending``
for it). A master lost for longer than ``lost_master_after`` ends it (the framework's
``failover_timeout`` is that long, so a master back sooner finds the task still its
own; after that the task is killed). When the task ends, its whole stdout is printed:
the 64 KiB tail the terminal status carries, or the sandbox's file through the master
when it is longer; a failed task's last lines of stderr and its sandbox follow.
"""

from __future__ import annotations

import binascii
import os
import re
import shlex
import sys
import time

from mezzo.errors import MasterUnreachable, NotAllowed, RequestFailed

from ..operator_client import NoHttpAnswer, OperatorClient
from ..v1.scheduler_client import CallRefused, SchedulerClient, StreamEnded
from . import tools
from .tables import number

# typing itself is not imported: 2-3 ms of a command's start-up.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from mezzo.config import TlsConfig

# Exit statuses when the command itself gave none.
EXIT_KILLED = 137
EXIT_NOT_RUN = 1
EXIT_TIMEOUT = 124

WAITING_REPORT_SECONDS = 3.0
"""How often, while no offer fits, the run asks the master why and says so (when it changed)."""
LOST_MASTER_SECONDS = 10.0
"""How long the master may be gone before the run gives up."""
STDERR_TAIL_LINES = 10
"""Lines of a failed task's stderr shown."""
OUTPUT_TAIL_BYTES = 64 * 1024
"""What the command executor sends of a task's stdout with its end (the last bytes):
:data:`mezzo.agent.command_executor.OUTPUT_TAIL_BYTES`, not imported for start-up's sake."""
TERMINAL = frozenset(
    {"TASK_FINISHED", "TASK_FAILED", "TASK_KILLED", "TASK_ERROR", "TASK_DROPPED", "TASK_LOST", "TASK_GONE"}
)
_EXITED = re.compile(r"exited with status (\d+)")
_SIGNALLED = re.compile(r"(?:killed|terminated) (?:by|with) signal (SIG[A-Z0-9]+|\d+)")


class _OneTask:
    """The run's framework: what it launched and heard; :meth:`handle` takes each event."""

    def __init__(
        self, client: SchedulerClient, argv: list[str], resources: dict[str, float], name: str
    ) -> None:
        self.client = client
        self.argv = argv
        self.resources = resources
        self.name = name
        self.task_id = ""
        self.agent_id = ""
        self.final: dict[str, Any] | None = None
        """The terminal TaskStatus (v1 JSON)."""
        self.exit_status: int | None = None
        self.suppressed = False
        """Whether offers were suppressed (after the launch, once one more came)."""
        self.most_free: dict[str, float] = {}
        """The most of cpus and mem free in one offer declined for being too small, since
        the last report (what ``waiting:`` says)."""

    def handle(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "OFFERS":
            self._offers(event["offers"]["offers"])
        elif kind == "UPDATE":
            self._update(event["update"]["status"])
        elif kind == "ERROR":
            _say(f"error from the master: {event['error']['message']}")
            if self.final is None:
                self.exit_status = EXIT_NOT_RUN

    def _offers(self, offers: list[dict[str, Any]]) -> None:
        decline = []
        for offer in offers:
            free = _scalars(offer)
            if self.task_id or not all(free.get(n, 0.0) >= self.resources[n] for n in ("cpus", "mem")):
                if not self.task_id:
                    for name in ("cpus", "mem"):
                        self.most_free[name] = max(self.most_free.get(name, 0.0), free.get(name, 0.0))
                decline.append(offer["id"])
                continue
            task_id = f"{self.name}-{int(time.time() * 1000)}"
            agent_id = offer["agent_id"]["value"]
            command = shlex.join(self.argv)
            _say(f"launching {task_id} on {offer['hostname']} ({agent_id}): {command}")
            task = {
                "task_id": {"value": task_id},
                "name": self.name,
                "agent_id": offer["agent_id"],
                "resources": _resources(self.resources),
                "command": {"value": command, "shell": True},
            }
            operation = {"type": "LAUNCH", "launch": {"task_infos": [task]}}
            self.client.call("ACCEPT", {"offer_ids": [offer["id"]], "operations": [operation]})
            # Only once the master took it: a call that failed launched nothing, and the
            # next offers are wanted.
            self.task_id, self.agent_id = task_id, agent_id
        if decline:
            # Once launched, no other offer is wanted for the rest of the run.
            self.client.call(
                "DECLINE", {"offer_ids": decline, "filters": {"refuse_seconds": 3600 if self.task_id else 1}}
            )
            if self.task_id and not self.suppressed:
                # Only once an offer came after the launch: a round trip a short task never
                # needs (0.4 ms of the 8 the cluster takes in ``mezzo run -- true``).
                self.client.call("SUPPRESS")
                self.suppressed = True

    def _update(self, status: dict[str, Any]) -> None:
        state = status.get("state", "?")
        message = status.get("message", "")
        task_id = status["task_id"]["value"]
        _say(f"{task_id} {state}" + (f": {message}" if message else ""))
        if state in TERMINAL and task_id == self.task_id:
            # Recorded before acknowledging: were the acknowledgement's answer lost, the
            # agent would not send the end again.
            self.final = status
            self.exit_status = _exit_status(state, message)
        if "uuid" in status:
            self.client.call(
                "ACKNOWLEDGE",
                {"agent_id": status["agent_id"], "task_id": status["task_id"], "uuid": status["uuid"]},
            )

    def reconcile(self) -> None:
        """Ask the master for the task's latest state: after subscribing again, so that
        an end whose update went down the old stream is known all the same."""
        if self.task_id:
            self.client.call("RECONCILE", {"tasks": [{"task_id": {"value": self.task_id}}]})


def _exit_status(state: str, message: str) -> int:
    """The command's exit status from its end: 0 finished, N from "exited with status N",
    128 + N for death by signal N, else the killed / not run conventions."""
    if state == "TASK_FINISHED":
        return 0
    exited = _EXITED.search(message)
    if exited:
        return int(exited.group(1))
    signalled = _SIGNALLED.search(message)
    if signalled:
        name = signalled.group(1)
        if name.isdigit():
            return 128 + int(name)
        import signal

        try:
            return 128 + int(signal.Signals[name])
        except KeyError:
            pass
    return EXIT_KILLED if state == "TASK_KILLED" else EXIT_NOT_RUN


def _scalars(offer: dict[str, Any]) -> dict[str, float]:
    free: dict[str, float] = {}
    for resource in offer.get("resources", ()):
        if resource.get("type") == "SCALAR":
            name = resource["name"]
            free[name] = free.get(name, 0.0) + resource["scalar"]["value"]
    return free


def _resources(resources: dict[str, float]) -> list[dict[str, Any]]:
    return [
        {"name": name, "type": "SCALAR", "scalar": {"value": amount}}
        for name, amount in resources.items()
        if amount > 0
    ]


def _say(line: str) -> None:
    print(f"mezzo run: {line}", file=sys.stderr, flush=True)


def _user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return ""


def run_command(
    master: str,
    argv: list[str],
    *,
    cpus: float,
    mem: float,
    name: str,
    timeout: float,
    user: str | None = None,
    tls: TlsConfig | None = None,
    lost_master_after: float = LOST_MASTER_SECONDS,
) -> int:
    """Run ``argv`` as one task on the cluster at ``master`` (as unix ``user``, by
    default the caller's own); return its exit status.
    Raises :class:`~mezzo.errors.RequestFailed` (one line; exit 1) when the master cannot
    be used or no agent could hold the task."""
    # A plain dict, not mezzo.resources' Resources (whose import, with the Thrift types, is
    # 3 ms of the run's start-up): the master rounds what it is sent to thousandths itself.
    resources = {"cpus": cpus, "mem": mem}
    api = OperatorClient(master, timeout=5.0, tls=tls)
    try:
        try:
            _check_fits(resources, api.get("/overview"))
        except NotAllowed as exc:
            # Not allowed to look: the run itself may be.
            _say(f"cannot ask the master whether an agent fits ({exc}); subscribing anyway")
        except NoHttpAnswer as exc:
            raise MasterUnreachable(f"{exc}; mezzo run needs the master's HTTP API") from None
        host, port = api.address.rsplit(":", 1)
        info = {
            "name": name,
            "user": user or _user(),
            "hostname": os.uname().nodename,
            # A master back within this window finds the task still the run's own.
            "failover_timeout": lost_master_after if lost_master_after > 0 else 7 * 24 * 3600.0,
        }
        client = SchedulerClient((host, int(port)), info, context=api.context, timeout=5.0)
        scheduler = _OneTask(client, argv, resources, name)
        try:
            try:
                framework_id = client.subscribe()
            except CallRefused as exc:
                raise RequestFailed(f"the master refused the framework: {exc.text}") from None
            except OSError as exc:
                raise MasterUnreachable(
                    f"cannot subscribe at {api.address}: {exc.strerror or exc or type(exc).__name__}"
                ) from None
            _say(f"registered with {api.address} as framework {framework_id}")
            status = _wait(scheduler, api, timeout, lost_master_after)
        except KeyboardInterrupt:
            _say("interrupted: stopping the framework (its task is killed)")
            _teardown(client)
            return 130
        _teardown(client)
        if status is not None:
            return status
        _print_output(scheduler, api)
        return scheduler.exit_status if scheduler.exit_status is not None else EXIT_NOT_RUN
    finally:
        api.close()


def _teardown(client: SchedulerClient) -> None:
    """End the framework (its task too, if it still runs); a master already gone is fine."""
    if client.framework_id:
        try:
            client.call("TEARDOWN")
        except (CallRefused, OSError) as exc:
            _say(
                f"could not end framework {client.framework_id} ({exc}): a task still running ends when "
                f"the master gives up waiting for it (--lost-master-after), or with mezzo teardown"
            )
    client.close()


def _check_fits(resources: dict[str, float], overview: dict[str, Any]) -> None:
    """:class:`tools.NotFound` when no active agent has enough of a resource the task asks
    for (what the caller may see of the agents: nothing to check without ``view_cluster``)."""
    largest = (overview.get("resources") or {}).get("largest_agent") or {}
    if not largest:
        return
    for name in ("cpus", "mem"):
        wanted = resources[name]
        if wanted > largest.get(name, 0):
            have = ", ".join(f"{number(v)} {k}" for k, v in sorted(largest.items()) if k in ("cpus", "mem"))
            raise tools.NotFound(f"no agent offers {number(wanted)} {name} (the largest has {have})")


def _wait(scheduler: _OneTask, api: OperatorClient, timeout: float, lost_master_after: float) -> int | None:
    """Until the task ends (None), or an exit status to give up with: the timeout, or the
    master gone for ``lost_master_after`` s (0: wait for it for ever). Says why nothing is
    launched while it waits."""
    client = scheduler.client
    deadline = time.monotonic() + timeout if timeout > 0 else None
    said = ""
    next_report = time.monotonic() + WAITING_REPORT_SECONDS
    lost_since: float | None = None
    attempts = 0
    while scheduler.exit_status is None:
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            _say(f"gave up after {timeout:g} s" + (f" ({said})" if said else ""))
            return EXIT_TIMEOUT
        if lost_since is not None:
            if lost_master_after > 0 and now - lost_since >= lost_master_after:
                where = (
                    f"; the task may still run: mezzo task {scheduler.task_id}" if scheduler.task_id else ""
                )
                _say(f"gave up: the master was gone for {lost_master_after:g} s{where}")
                return EXIT_NOT_RUN
            if _resubscribe(client, api):
                lost_since, attempts = None, 0
                try:
                    scheduler.reconcile()
                except (CallRefused, OSError):
                    lost_since = time.monotonic()  # gone again
            else:
                # Backing off: a master that refuses at once is not asked in a tight loop.
                time.sleep(min(0.1 * 2**attempts, 2.0))
                attempts += 1
            continue
        event = client.next_event(0.2)
        if isinstance(event, StreamEnded):
            _say("lost the master; redialling")
            lost_since = now
            continue
        if event is not None:
            try:
                scheduler.handle(event)
            except (CallRefused, OSError) as exc:
                _say(f"a call to the master failed ({exc}); redialling")
                client.close()
                lost_since = now
            except (KeyError, TypeError, ValueError) as exc:
                _say(f"ignored an event the master sent in an unexpected shape ({type(exc).__name__}: {exc})")
            continue
        if not scheduler.task_id and now >= next_report:
            next_report = now + WAITING_REPORT_SECONDS
            why = _waiting_for(scheduler, api)
            if why and why != said:
                _say(f"waiting: {why}")
                said = why
    return None


def _resubscribe(client: SchedulerClient, api: OperatorClient) -> bool:
    """Subscribe again as the same framework, at the leader as it is now: whether it is back."""
    try:
        client.close()
        api.forget_leader()
        host, port = api.address.rsplit(":", 1)
        client.address = (host, int(port))
        client.subscribe(client.framework_id)
    except (CallRefused, OSError, RequestFailed):
        return False
    _say("the master is back")
    return True


def _waiting_for(scheduler: _OneTask, api: OperatorClient) -> str:
    """Why nothing is launched yet: offers too small (the most they had free), else the
    master's ``why_pending`` for this framework, but for the run's own short declines."""
    if scheduler.most_free:
        most, scheduler.most_free = scheduler.most_free, {}
        want = ", ".join(f"{number(scheduler.resources[n])} {n}" for n in ("cpus", "mem"))
        free = ", ".join(f"{number(v)} {n}" for n, v in sorted(most.items()))
        return f"no agent has {want} free now (the most one offered: {free}); all busy?"
    try:
        shown = api.get("/frameworks", framework_id=scheduler.client.framework_id)["frameworks"]
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
    status, task_id, agent_id = scheduler.final, scheduler.task_id, scheduler.agent_id
    carried = binascii.a2b_base64(status.get("data", "")) if status is not None else b""
    # An end learnt by reconciling carries no output: the file is read, however short.
    reconciled = status is not None and status.get("reason") == "REASON_RECONCILIATION"
    framework_id = scheduler.client.framework_id
    if not task_id or not framework_id:
        sys.stdout.write(carried.decode("utf-8", "replace"))
        return
    sandbox = f"/frameworks/{framework_id}/executors/{task_id}/runs/latest"
    out = _Counted(sys.stdout)
    try:
        # Shorter than the tail the command executor sends, it is the whole file: no round
        # trip through the master to the agent (a fifth of what the run took after the end).
        short = len(carried) < OUTPUT_TAIL_BYTES and not reconciled
        size = len(carried) if short else api.read_file(agent_id, f"{sandbox}/stdout", -1)["offset"]
        if size > len(carried):  # the status carries only the last 64 KiB
            tools.copy_file(api, agent_id, f"{sandbox}/stdout", 0, out, until=size)
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
    # TASK_ERROR and TASK_DROPPED: refused before it ran; no sandbox to point at.
    if status is not None and status.get("state") not in ("TASK_FINISHED", "TASK_ERROR", "TASK_DROPPED"):
        try:
            size = api.read_file(agent_id, f"{sandbox}/stderr", -1)["offset"]
            start = tools.tail_start(api, agent_id, f"{sandbox}/stderr", size, STDERR_TAIL_LINES)
            if size > start:
                _say(f"the last lines of its stderr ({size - start} of {size} bytes):")
                tools.copy_file(api, agent_id, f"{sandbox}/stderr", start, sys.stderr)
        except RequestFailed:
            pass
        _say(f"sandbox: {sandbox} on agent {agent_id} (mezzo logs --stderr {task_id})")


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
