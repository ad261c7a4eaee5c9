"""``mezzo queue``, ``submit``, ``jobs`` and ``cancel``: the batch queue (:mod:`mezzo.queue`).

``mezzo queue`` runs the queue daemon; the other three are its clients, like Slurm's
``sbatch``, ``squeue`` and ``scancel``. They talk to the daemon over its unix socket
(``--queue PATH``, else ``$MEZZO_QUEUE``, else the default: see
:func:`mezzo.queue.client.default_socket`) and import nothing else of mezzo, so a
submission costs about one Python start-up.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time

from .tables import duration, number, shown, table

# typing itself is not imported: 2-3 ms of a command's start-up.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

TABLE_ROWS_FETCHED = 10_000
"""Jobs ``mezzo jobs`` asks for to print its table (a waiting array folds into one row)."""
SOCKET_DEFAULT = "$MEZZO_QUEUE, else /run/mezzo/queue.sock for root"


def add_parsers(sub: Any, common: Any, amount: Any, epilog: str) -> None:
    """The four commands, listed in ``sub`` (``mezzo``'s sub-commands, whose parsers are
    made only when used: see :func:`.main._sub_parser`). ``common`` adds --config and the
    log flags, ``amount`` checks a resource amount."""
    client_epilog = "Exit status: 0 done, 1 no queue answers (or a job unknown or not yours), 2 a mistake on the command line."

    def queue_arguments(p: argparse.ArgumentParser) -> None:
        common(p)
        p.add_argument(
            "--master",
            metavar="HOST:PORT|zk://HOST:PORT/PATH",
            help="master to register with (TOML queue.master; default agent.master, 127.0.0.1:5050)",
        )
        p.add_argument(
            "--socket", metavar="PATH", help=f"where to listen (TOML queue.socket; default {SOCKET_DEFAULT})"
        )
        p.add_argument(
            "--state-dir",
            metavar="DIR",
            help="where the job list is kept (TOML queue.state_dir; default /var/lib/mezzo/queue for "
            "root, else ~/.local/state/mezzo/queue)",
        )
        p.add_argument(
            "--failover-timeout",
            type=amount,
            metavar="SECONDS",
            help="how long the master keeps the queue's tasks while it is down (TOML "
            "queue.failover_timeout; default a week)",
        )
        p.set_defaults(func="queue", command_module="queue_commands")

    def client_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--queue", metavar="PATH", help=f"the queue's unix socket (default {SOCKET_DEFAULT})")
        p.add_argument(
            "--config",
            metavar="FILE",
            help="TOML whose queue.socket names the queue (default: $MEZZO_CONFIG)",
        )

    def submit_arguments(p: argparse.ArgumentParser) -> None:
        client_arguments(p)
        p.add_argument("--array", metavar="FIRST-LAST", help="one job per index, such as 1-100")
        p.add_argument("--cpus", type=amount, default=1.0, help="cpus per job (default 1)")
        p.add_argument(
            "--mem", type=amount, default=128.0, metavar="MB", help="memory per job in MB (default 128)"
        )
        p.add_argument(
            "--retries",
            type=_retries,
            default=0,
            metavar="N",
            help="run a job that failed (or was lost with its agent) again, up to N times (default 0)",
        )
        p.add_argument("--name", default="", help="a name shown in listings")
        p.add_argument("--json", action="store_true", help="print the queue's answer as JSON")
        p.add_argument(
            "cmd",
            nargs=argparse.REMAINDER,
            metavar="-- CMD ...",
            help="the command: one argument is a shell command line, several a program and its arguments",
        )
        p.set_defaults(func="submit", command_module="queue_commands")

    def jobs_arguments(p: argparse.ArgumentParser) -> None:
        client_arguments(p)
        group = p.add_mutually_exclusive_group()
        group.add_argument("--all", action="store_true", help="ended jobs too")
        group.add_argument(
            "--state",
            choices=["QUEUED", "RUNNING", "FINISHED", "FAILED", "CANCELLED"],
            type=str.upper,
            help="only jobs in this state",
        )
        p.add_argument("--user", help="only this user's jobs")
        p.add_argument("--json", action="store_true", help="print JSON (every job, none folded)")
        p.set_defaults(func="jobs", command_module="queue_commands")

    def cancel_arguments(p: argparse.ArgumentParser) -> None:
        client_arguments(p)
        p.add_argument(
            "jobs", nargs="+", metavar="JOB", help="a job (42_7) or a submission (42: all its jobs)"
        )
        p.set_defaults(func="cancel", command_module="queue_commands")

    sub.add_parser(
        "queue",
        help="run the batch queue (the framework behind mezzo submit)",
        epilog=epilog,
        description="Run the batch queue: a framework that registers with the master, runs what "
        "mezzo submit hands it, retries what fails, and keeps its job list in STATE_DIR so that "
        "it survives a restart (its tasks keep running for --failover-timeout meanwhile). "
        "Submissions come in on a unix socket; a job runs as the user who submitted it.",
        define=queue_arguments,
    )
    sub.add_parser(
        "submit",
        help="queue a command (or an array of them) to run on the cluster",
        epilog="Exit status: 0 queued, 1 no queue answers, 2 a mistake on the command line.",
        description="Hand CMD to the batch queue and return at once (like sbatch): the job runs "
        "when an offer fits it, as you, even after this terminal is gone. With --array FIRST-LAST "
        "one job per index, {index} in CMD replaced by it (and $MEZZO_ARRAY_INDEX set). "
        "See the queue with mezzo jobs; a job's task with mezzo task / mezzo logs.",
        define=submit_arguments,
    )
    sub.add_parser(
        "jobs",
        help="list the batch queue's jobs",
        epilog=client_epilog,
        description="List the queue's jobs (like squeue): waiting and running ones, or with --all "
        "also those that ended (the last 10,000). Queued jobs of one array are shown as one row.",
        define=jobs_arguments,
    )
    sub.add_parser(
        "cancel",
        help="cancel queued or running jobs",
        epilog=client_epilog,
        description="Cancel jobs (like scancel): a queued one ends at once, a running one when its "
        "task has been killed. Only your own jobs, unless you are root or the queue's own user.",
        define=cancel_arguments,
    )


def _retries(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"expected 0 to 100, got {value}")
    return value


def _client(args: argparse.Namespace) -> Any:
    """The queue named by ``--queue``, else ``$MEZZO_QUEUE``, else ``queue.socket`` of the
    configuration (read only when there is one: ``--config`` or ``$MEZZO_CONFIG``), else
    the default socket."""
    import os

    from ..queue.client import SOCKET_ENV, QueueClient

    path = args.queue or os.environ.get(SOCKET_ENV)
    if not path and (args.config or os.environ.get("MEZZO_CONFIG")):
        from .. import config as config_mod

        path = config_mod.load(args.config).queue.socket
    return QueueClient(path or None)


# -- the commands -----------------------------------------------------------------------


def queue(args: argparse.Namespace) -> int:
    """Run the queue daemon until SIGINT/SIGTERM (or until the master refuses it: 1)."""
    from ..queue.daemon import QueueDaemon
    from .commands import _load, _serve

    cfg = _load(
        args,
        {
            "queue.master": args.master,
            "queue.socket": args.socket,
            "queue.state_dir": args.state_dir,
            "queue.failover_timeout": args.failover_timeout,
        },
    )
    return _serve(QueueDaemon(queue_settings(cfg), tls=cfg.tls))


def queue_settings(cfg: Any) -> Any:
    """:class:`~mezzo.queue.daemon.QueueSettings` from ``[queue]`` (its master defaulting
    to ``agent.master``)."""
    from ..queue.daemon import QueueSettings

    q = cfg.queue
    return QueueSettings(
        master=q.master or cfg.agent.master,
        socket=q.socket,
        state_dir=q.state_dir,
        name=q.name,
        role=q.role,
        failover_timeout=q.failover_timeout,
    )


def submit(args: argparse.Namespace) -> int:
    from ..errors import ConfigError
    from ..queue.jobs import SubmissionError, parse_array

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise ConfigError("CMD", "no command given: mezzo submit [--array 1-N] -- CMD ...")
    body: dict[str, Any] = {
        "command": shlex.join(cmd) if len(cmd) > 1 else cmd[0],
        "cpus": args.cpus,
        "mem": args.mem,
        "retries": args.retries,
        "name": args.name,
    }
    if args.array is not None:
        try:
            first, last = parse_array(args.array, "--array")
        except SubmissionError as exc:
            raise ConfigError(exc.field, exc.problem) from None
        body["array"] = f"{first}-{last}"
    answer = _client(args).post("/jobs", body)
    if args.json:
        print(json.dumps(answer, indent=2))
        return 0
    if answer["count"] == 1:
        print(f"submitted job {answer['first']}")
    else:
        print(f"submitted {answer['count']} jobs: {answer['first']} to {answer['last']}")
    if answer.get("warning"):
        print(f"mezzo submit: note: {answer['warning']}", file=sys.stderr)
    _say_if_unregistered(answer["queue"], "mezzo submit")
    return 0


def jobs(args: argparse.Namespace) -> int:
    state = "all" if args.all else (args.state or "waiting")
    # A table of more rows than this is no use on a terminal; --json lists every job.
    limit = None if args.json else TABLE_ROWS_FETCHED
    answer = _client(args).get("/jobs", state=state, user=args.user, limit=limit)
    if args.json:
        print(json.dumps(answer, indent=2))
        return 0
    now = time.time()
    groups = _folded(answer["jobs"])
    rows = [_row(group, now) for group in groups]
    print(_summary(answer["queue"]))
    if rows:
        print(
            table(["JOB", "STATE", "USER", "CPUS", "MEM", "TRIES", "HOST", "TIME", "EXIT", "COMMAND"], rows)
        )
    for group, row in zip(groups, rows, strict=True):
        if group[0].get("why"):
            print(f"{row[0]}: {shown(group[0]['why'])}")
    shown_count = len(answer["jobs"])
    if answer["total"] > shown_count:
        print(f"(the first {shown_count} of {answer['total']})")
    return 0


def cancel(args: argparse.Namespace) -> int:
    answer = _client(args).post("/cancel", {"jobs": args.jobs})
    if answer["cancelled"]:
        print(f"cancelled {_listed(answer['cancelled'])}")
    if answer["cancelling"]:
        print(f"cancelling {_listed(answer['cancelling'])} (their tasks are being killed)")
    problems = []
    if answer["unknown"]:
        problems.append(f"no such job: {_listed(answer['unknown'])}")
    if answer["refused"]:
        problems.append(f"not yours: {_listed(answer['refused'])}")
    if problems:
        print(f"mezzo cancel: {'; '.join(problems)}", file=sys.stderr)
        return 1
    if not answer["cancelled"] and not answer["cancelling"]:
        print("nothing to cancel: those jobs have ended")
    return 0


# -- shown --------------------------------------------------------------------------------


def _say_if_unregistered(status: dict[str, Any], who: str) -> None:
    if not status.get("registered"):
        since = status.get("lost_since")
        how_long = f" for {duration(time.time() - since)}" if since else ""
        print(
            f"{who}: note: the queue has no master{how_long}; jobs wait until it registers",
            file=sys.stderr,
        )


def _summary(status: dict[str, Any]) -> str:
    if status.get("registered"):
        where = f"registered with {shown(status['master'])} as {shown(status['framework_id'])}"
    else:
        since = status.get("lost_since")
        where = "no master" + (f" for {duration(time.time() - since)}" if since else "")
    return f"queue: {where}; {status['queued']} queued, {status['running']} running"


def _folded(jobs: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Jobs in rows: consecutive queued jobs of one array with consecutive indexes share
    one row (a 10,000-job array waiting is one line, as squeue shows it)."""
    groups: list[list[dict[str, Any]]] = []
    for job in jobs:
        last = groups[-1][-1] if groups else None
        if (
            last is not None
            and job["state"] == "QUEUED"
            and last["state"] == "QUEUED"
            and job["index"] is not None
            and last["submission"] == job["submission"]
            and last["index"] is not None
            and job["index"] == last["index"] + 1
            and job["attempts"] == last["attempts"] == 0
        ):
            groups[-1].append(job)
        else:
            groups.append([job])
    return groups


def _row(group: list[dict[str, Any]], now: float) -> list[Any]:
    job = group[0]
    if len(group) > 1:
        job_id = f"{job['submission']}_[{job['index']}-{group[-1]['index']}]"
    else:
        job_id = job["id"]
    if job["state"] == "QUEUED":
        took = duration(now - job["submitted"])
    elif job["state"] == "RUNNING":
        took = duration(now - (job["started"] or now))
    else:
        took = duration((job["ended"] or now) - (job["started"] or job["ended"] or now))
    state = job["state"] + (" (cancelling)" if job["cancelling"] else "")
    command = job["command"] if len(job["command"]) <= 40 else job["command"][:39] + "…"
    return [
        job_id,
        state,
        job["user"],
        number(job["cpus"]),
        number(job["mem"]),
        f"{job['attempts']}/{job['retries'] + 1}",
        job["hostname"] if job["state"] != "QUEUED" else None,
        took,
        job["exit_code"],
        command,
    ]


def _listed(ids: list[str], most: int = 10) -> str:
    text = ", ".join(shown(i) for i in ids[:most])
    return text + (f" and {len(ids) - most} more" if len(ids) > most else "")
