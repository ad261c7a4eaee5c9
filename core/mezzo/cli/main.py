"""The ``mezzo`` command: ``master``, ``agent``, ``local``, ``run``, ``state``, ``teardown``,
``plugins``, ``certs``, the operator's ``ps``, ``task``, ``logs``, ``kill``, ``agents``,
``frameworks``, ``drain``, ``undrain``, and the batch queue's ``queue``, ``submit``,
``jobs``, ``cancel`` (:mod:`.queue_commands`).

Flags mean the same in every command (``--config``, ``--master``, ``--listen``,
...); a flag overrides the same key of the TOML file (``--config`` or
``$MEZZO_CONFIG``). Errors in configuration or input end the command with exit
status 2 and one line naming what was wrong.
"""

from __future__ import annotations

import argparse
import os
import sys

from .. import TYPE_CHECKING, __version__
from ..errors import MezzoError, RequestFailed
from . import queue_commands

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, NoReturn

EPILOG = "Configuration: TOML via --config or $MEZZO_CONFIG; flags override it. Docs: docs/configuration.md"


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="TOML configuration file (default: $MEZZO_CONFIG)")
    p.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        help="log verbosity (TOML log.level; default info)",
    )
    p.add_argument("--log-format", choices=["console", "json"], help="log line format (TOML log.format)")


class _Parser(argparse.ArgumentParser):
    """A mistake on the command line is one line naming the flag, and exit status 2
    (argparse's default also prints the whole usage)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")

    def _get_formatter(self) -> argparse.HelpFormatter:
        # argparse's own asks shutil for the terminal's width, and add_argument makes a
        # formatter to check each argument: importing shutil (with bz2 and lzma) was 2 to 3
        # ms of every command. The same width, found as shutil finds it.
        return self.formatter_class(prog=self.prog, width=_help_width())  # type: ignore[call-arg]  # every HelpFormatter takes it


_width: list[int] = []


def _help_width() -> int:
    """The terminal's width less 2, as argparse takes it: ``$COLUMNS``, else the width of
    standard output's terminal, else 80."""
    if not _width:
        columns = 0
        try:
            columns = int(os.environ.get("COLUMNS", "0"))
        except ValueError:
            pass
        if columns <= 0:
            try:
                columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
            except (AttributeError, ValueError, OSError):
                columns = 0
        _width.append((columns or 80) - 2)
    return _width[0]


class _Deferred:
    """A sub-command's parser until argparse first uses it, which it does only for the
    command the line names: then the parser is made and ``define`` adds its arguments.
    Making all 17 parsers and their ~140 arguments up front took 7 to 15 ms, a fifth to a
    third of ``mezzo --version`` (each parser looks up the translations of its texts, each
    argument the terminal's width)."""

    def __init__(self, define: Callable[[_Parser], None], kwargs: dict[str, Any]) -> None:
        self._define = define
        self._kwargs = kwargs
        self._parser: _Parser | None = None

    def __getattr__(self, name: str) -> Any:
        if self._parser is None:
            self._parser = _Parser(**self._kwargs)
            self._define(self._parser)
        return getattr(self._parser, name)


def _sub_parser(*, define: Callable[[_Parser], None] | None = None, **kwargs: Any) -> Any:
    """The sub-commands' ``parser_class``: ``sub.add_parser(NAME, ..., define=f)`` lists NAME
    and makes its parser (``f(parser)`` adding the arguments) only if it is used
    (:class:`_Deferred`); without ``define``, the parser at once."""
    return _Parser(**kwargs) if define is None else _Deferred(define, kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="mezzo",
        description="mezzo: fine-grained cluster sharing through resource offers (the Mesos design).",
        epilog=EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"mezzo {__version__}")
    parser_class: Any = _sub_parser  # a factory, not a class: argparse only calls it
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=parser_class)

    sub.add_parser(
        "master",
        help="run a master",
        epilog=EPILOG,
        description="Run the master: tracks agents and frameworks, runs the allocator, sends offers.",
        define=_master_arguments,
    )

    sub.add_parser(
        "agent",
        help="run an agent",
        epilog=EPILOG,
        description="Run an agent: advertises this machine's resources and runs tasks in containers.",
        define=_agent_arguments,
    )

    sub.add_parser(
        "local",
        help="run a master and N agents in one process",
        epilog=EPILOG,
        description="Run a whole cluster on this machine: a master and N agents on loopback.",
        define=_local_arguments,
    )

    sub.add_parser(
        "run",
        help="run one command as a task",
        epilog=EPILOG,
        description="Run CMD as one task (like mesos-execute): shows its state changes and output "
        "and exits with the task's exit status.",
        define=_run_arguments,
    )

    sub.add_parser(
        "state",
        help="print the master's state as JSON",
        epilog=EPILOG,
        description="Print the master's state (agents, frameworks with allocations and dominant "
        "shares, tasks, outstanding offers) as JSON.",
        define=_state_arguments,
    )

    sub.add_parser(
        "teardown",
        help="end a framework: kill its tasks, refuse its id from then on",
        epilog=EPILOG,
        description="End a framework as if its scheduler had unregistered it: its tasks are killed, "
        "its scheduler hears an error, and its id is refused from then on. The master's "
        "teardown_frameworks ACL decides who may.",
        define=_teardown_arguments,
    )

    _operator_commands(sub)
    queue_commands.add_parsers(sub, _common, _amount, EPILOG)

    sub.add_parser(
        "plugins",
        help="list installed plugins and their components",
        epilog=EPILOG,
        description="List installed mezzo plugins and the components (allocators, isolators, "
        "offer filters) each registers.",
        define=_plugins_arguments,
    )

    sub.add_parser(
        "certs",
        help="make a cluster's CA and TLS certificates",
        epilog="Then point each process's [tls] table at its files; see docs/security.md.",
        description="Make DIR/ca.crt and DIR/ca.key (or reuse them), then a certificate and key "
        "signed by that CA for each principal: DIR/NAME.crt, DIR/NAME.key (0600). A principal is "
        "the name ACLs and logs use for whoever holds the key.",
        define=_certs_arguments,
    )

    return parser


def _master_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument(
        "--listen", metavar="HOST:PORT", help="address to bind (TOML master.listen; default 127.0.0.1:5050)"
    )
    p.add_argument(
        "--advertise",
        metavar="HOST[:PORT]",
        help="address others dial to reach this master, published in ZooKeeper (TOML master.advertise; "
        "default: the bound address)",
    )
    p.add_argument(
        "--zk",
        metavar="zk://HOST:PORT/PATH",
        help="contend for leadership with the other masters registered there; standby until elected "
        "(TOML master.zk)",
    )
    p.add_argument(
        "--allocator", metavar="NAME", help="allocator component (TOML master.allocator.name; default drf)"
    )
    p.add_argument(
        "--allocation-interval",
        type=float,
        metavar="SECONDS",
        help="batch allocation triggers over this long (TOML master.allocation_interval; default 0.1)",
    )
    p.add_argument(
        "--offer-timeout",
        type=float,
        metavar="SECONDS",
        help="rescind offers unanswered this long, 0 = never (TOML master.offer_timeout; default 30)",
    )
    p.set_defaults(func="master")


def _agent_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    _agent_flags(p)
    p.add_argument(
        "--master",
        metavar="HOST:PORT|zk://HOST:PORT/PATH",
        help="master to register with, or the ZooKeeper its masters elect through "
        "(TOML agent.master; default 127.0.0.1:5050)",
    )
    p.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="address to bind for executors (TOML agent.listen; default 127.0.0.1:5051)",
    )
    p.add_argument(
        "--advertise",
        metavar="HOST[:PORT]",
        help="address peers reach this agent at, as the master shows it (TOML agent.advertise; "
        "default: the bound address, or for a wildcard bind the one it dials the master from)",
    )
    p.add_argument(
        "--keep-tasks-on-stop",
        action="store_true",
        default=None,
        help="on SIGTERM/SIGINT leave the tasks running for the next agent on this work dir, "
        "for an upgrade (TOML agent.keep_tasks_on_stop; default: kill them)",
    )
    p.set_defaults(func="agent")


def _local_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    _agent_flags(p)
    p.add_argument("--agents", type=int, default=3, metavar="N", help="number of agents (default 3)")
    p.add_argument("--listen", metavar="HOST:PORT", help="master address (default 127.0.0.1:5050)")
    p.add_argument("--allocator", metavar="NAME", help="allocator component (default drf)")
    p.add_argument(
        "--no-tls",
        action="store_true",
        help="plaintext (default: TLS with throw-away certificates, unless the configuration has [tls]; "
        "clients then use WORK_DIR/client.toml)",
    )
    p.add_argument(
        "--queue",
        action="store_true",
        help="run the batch queue too (mezzo submit; TOML [queue], its job list in WORK_DIR/queue "
        "unless queue.state_dir says otherwise)",
    )
    p.set_defaults(func="local")


def _run_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument(
        "--master",
        metavar="HOST:PORT|zk://HOST:PORT/PATH",
        default=None,
        help="master, or the ZooKeeper its masters elect through (default 127.0.0.1:5050)",
    )
    p.add_argument("--cpus", type=_amount, default=1.0, help="cpus for the task (default 1)")
    p.add_argument("--mem", type=_amount, default=128.0, metavar="MB", help="memory in MB (default 128)")
    p.add_argument("--name", default="mezzo-run", help="framework and task name (default mezzo-run)")
    p.add_argument(
        "--user",
        metavar="NAME",
        help="unix user the task runs as on its agent (default: yours; master.acls.run_tasks decides who may)",
    )
    p.add_argument(
        "--timeout",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="give up (exit 124) if the task has not ended after this long; 0 = wait forever",
    )
    p.add_argument(
        "--lost-master-after",
        type=_seconds,
        default=10.0,
        metavar="SECONDS",
        help="give up (exit 1) when the master is gone this long (or no master registers the run); "
        "the task may run on; 0 = wait for ever (default 10)",
    )
    p.add_argument(
        "cmd", nargs=argparse.REMAINDER, metavar="-- CMD ...", help="the command and its arguments"
    )
    p.set_defaults(func="run")


def _state_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    _tool_flags(p)
    p.add_argument(
        "--agent",
        metavar="HOST:PORT",
        default=None,
        help="print this agent's container statistics (usage measured by its isolators) instead",
    )
    p.add_argument(
        "--metrics",
        action="store_true",
        help="print only the master's counters (messages in and out, allocation cycles, CPU, memory), "
        "which cost the master next to nothing at any cluster size",
    )
    p.set_defaults(func="state")


def _teardown_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("framework_id", metavar="FRAMEWORK_ID", help="the framework's id (see mezzo state)")
    _tool_flags(p)
    p.set_defaults(func="teardown")


def _plugins_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func="plugins")


def _certs_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", metavar="DIR", help="where the CA and certificates go (made 0700)")
    p.add_argument(
        "--principal",
        action="append",
        metavar="NAME",
        help="a certificate for NAME (repeat; default: master, agent and operator)",
    )
    p.add_argument(
        "--host",
        action="append",
        metavar="HOST",
        help="a DNS name or IP address clients dial (repeat; default: localhost, 127.0.0.1 and "
        "this machine's name)",
    )
    p.add_argument("--days", type=int, default=825, help="days the certificates are valid (default 825)")
    p.add_argument("--force", action="store_true", help="replace certificates that exist already")
    p.set_defaults(func="certs")


TOOL_EPILOG = (
    "Asks the master's HTTP API (the leader's, with zk://); TLS and the principal from [tls] of "
    "--config or $MEZZO_CONFIG. Exit status: 0 done, 1 the master unreachable, refusing (ACLs) or "
    "not knowing what was named, 2 a mistake on the command line."
)


def _operator_commands(sub: Any) -> None:
    """``ps``/``tasks``, ``task``, ``logs``, ``kill``, ``agents``, ``frameworks``, ``drain``,
    ``undrain``: :mod:`.tools`."""

    def command(
        name: str,
        summary: str,
        description: str,
        arguments: Callable[[argparse.ArgumentParser], None],
        aliases: tuple[str, ...] = (),
    ) -> None:
        def define(p: argparse.ArgumentParser) -> None:
            _common(p)
            _tool_flags(p)
            p.set_defaults(func="tool", tool=name)
            arguments(p)

        sub.add_parser(
            name, help=summary, description=description, epilog=TOOL_EPILOG, aliases=aliases, define=define
        )

    command(
        "ps",
        "list tasks (active ones; --all for ended ones too)",
        "List tasks, newest first: id, framework, state, host, cpus, mem, age (running) or how long "
        "it ran (ended), exit code. One request to the master's /tasks.",
        _ps_arguments,
        aliases=("tasks",),
    )

    command(
        "task",
        "show one task: its states, agent and sandbox",
        "Show one task, running or ended: its state, reason, message and exit code, the agent it "
        "runs on, its resources, the times of each state it went through, and its sandbox "
        "(the path mezzo logs and /files/* read).",
        _task_arguments,
    )

    command(
        "logs",
        "print a task's stdout (or stderr), and follow it with -f",
        "Print a task's stdout or stderr through the master (no access to agents needed). "
        "With -f, keep printing what it writes until the task ends.",
        _logs_arguments,
    )

    command(
        "kill",
        "kill a task",
        "Kill a task as an operator: its executor is told to kill it (TASK_KILLED, reason "
        "killed_by_operator). The master's kill_tasks ACL decides who may.",
        _kill_arguments,
    )

    command(
        "agents",
        "list agents: state, resources used",
        "List the agents in the order they registered: id, host, state (active, disconnected, "
        "DRAINING, DRAINED), cpus and memory used of their total.",
        _agents_arguments,
    )

    command(
        "frameworks",
        "list frameworks, and why each gets no offers",
        "List the frameworks: id, name, role, connection, resources used, dominant share, and the "
        "first reason offers are held back from it now (--why: all of them).",
        _frameworks_arguments,
    )

    command(
        "drain",
        "stop offering an agent; kill its tasks after a grace period",
        "Drain an agent: no new offers, its outstanding offers rescinded, its tasks killed once the "
        "grace period is over (reason agent_drained). mezzo undrain brings it back. The master's "
        "drain_agents ACL decides who may.",
        _drain_arguments,
    )

    command(
        "undrain",
        "offer a drained agent again",
        "Reactivate a draining or drained agent.",
        _undrain_arguments,
    )


def _ps_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--framework", metavar="FRAMEWORK_ID", help="only this framework's tasks")
    p.add_argument("--agent", metavar="AGENT_ID", help="only the tasks on this agent")
    p.add_argument(
        "--state",
        metavar="STATE",
        type=_task_state,
        help="only tasks in this state (TASK_RUNNING, TASK_FAILED, ...; or active, ended)",
    )
    p.add_argument("--all", action="store_true", help="ended tasks too (the master keeps the most recent)")
    p.add_argument(
        "--limit", type=_count, default=100, metavar="N", help="show at most N tasks (default 100)"
    )
    _json_flag(p)


def _task_arguments(p: argparse.ArgumentParser) -> None:
    _task_id_arguments(p, "the task's framework, if ids repeat")
    _json_flag(p)


def _logs_arguments(p: argparse.ArgumentParser) -> None:
    _task_id_arguments(p, "the task's framework, if ids repeat")
    p.add_argument("-f", "--follow", action="store_true", help="follow the output until the task ends")
    p.add_argument("--stderr", action="store_true", help="stderr instead of stdout")
    p.add_argument("--tail", type=_count, metavar="N", help="only the last N lines (then follow, with -f)")


def _kill_arguments(p: argparse.ArgumentParser) -> None:
    _task_id_arguments(p, "the task's framework (found when omitted)")


def _agents_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--limit", type=_count, default=1000, metavar="N", help="show at most N agents (default 1000)"
    )
    _json_flag(p)


def _frameworks_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--why", action="store_true", help="every reason each framework gets no offers now")
    _json_flag(p)


def _drain_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("agent_id", metavar="AGENT_ID")
    p.add_argument(
        "--grace",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="how long its tasks may run on before they are killed (default 0: at once)",
    )


def _undrain_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("agent_id", metavar="AGENT_ID")


def _json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the master's JSON answer instead of a table")


def _task_id_arguments(p: argparse.ArgumentParser, framework_help: str) -> None:
    p.add_argument("task_id", metavar="TASK_ID")
    p.add_argument("--framework", metavar="FRAMEWORK_ID", help=framework_help)


def _finite_at_least_zero(what: str, most: float = float("inf")) -> Any:
    """An argparse type: a finite number from 0 to ``most``, else a one-line error saying
    it is not ``what``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not 0 <= value < float("inf") or value > most:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not {what}")
        return value

    return parse


AMOUNT_MAX = 1e15
"""The largest amount of a resource a flag takes: what the master holds in thousandths
within 64 bits (``mezzo.resources``), rounded down."""
_amount = _finite_at_least_zero(f"an amount from 0 to {AMOUNT_MAX:g}", AMOUNT_MAX)
_seconds = _finite_at_least_zero("a number of seconds >= 0")


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def _task_state(text: str) -> str:
    """``running``, ``TASK_RUNNING``, ``active`` or ``ended`` as ``/tasks?state=`` takes it."""
    from ..wire.ttypes import TaskState

    if text.lower() in ("active", "ended"):
        return text.lower()
    name = text.upper() if text.upper().startswith("TASK_") else f"TASK_{text.upper()}"
    if name not in TaskState.__members__:
        choices = ", ".join(n[5:].lower() for n in TaskState.__members__)
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a task state ({choices}; or active, ended)")
    return name


def _tool_flags(p: argparse.ArgumentParser) -> None:
    """What the commands asking a master (``state``, ``teardown``) share."""
    p.add_argument(
        "--master",
        metavar="HOST:PORT|zk://HOST:PORT/PATH",
        default=None,
        help="master, or the ZooKeeper its masters elect through: asks the leader (default 127.0.0.1:5050)",
    )
    p.add_argument(
        "--timeout", type=float, default=10.0, metavar="SECONDS", help="give up after this long (default 10)"
    )


def _agent_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--resources",
        metavar="SPEC",
        help="resources, Mesos syntax: 'cpus:4;mem:4096;ports:[31000-32000]' (default: detected)",
    )
    p.add_argument("--attributes", metavar="SPEC", help="attributes, 'rack:r1;zone:z2'")
    p.add_argument(
        "--work-dir",
        metavar="DIR",
        help="sandboxes and the checkpoint live here (TOML agent.work_dir; default /var/lib/mezzo/agent)",
    )
    p.add_argument("--isolation", metavar="NAMES", help="comma-separated isolator components (default posix)")
    p.add_argument("--hostname", help="hostname reported to the master (default: this machine's)")


def main(argv: list[str] | None = None) -> int:
    """Run the command ``argv`` names (default: ``sys.argv[1:]``); its exit status.

    Each sub-parser names its command's function (``func``) in :mod:`.commands`, or in
    another module of this package (``command_module``), and that module is imported only
    once the line is parsed: ``--help``, ``--version`` and a mistake on the command line
    load none of it, and ``mezzo ps`` none of what the daemons need (asyncio, structlog,
    pluggy, ...), which took over 100 ms before the command began."""
    return _dispatch(build_parser().parse_args(argv))


DAEMONS = frozenset({"master", "agent", "local", "queue"})
"""Commands that serve until stopped; every other one is a client of the cluster."""


def program() -> NoReturn:
    """The ``mezzo`` executable: :func:`main` on ``sys.argv``, then exit.

    A client command leaves through ``os._exit`` once its output is flushed: tearing down
    the interpreter (the modules a driver loads, its thread, atexit handlers with nothing
    left to do) took about 20 ms of the 230 a ``mezzo run -- true`` takes here
    (bench/cli_latency.py). A daemon exits the ordinary way."""
    args = build_parser().parse_args()
    status = _dispatch(args)
    if args.command in DAEMONS:
        sys.exit(status)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        pass  # the reader went away: nothing more to say to it
    os._exit(status)


def _dispatch(args: argparse.Namespace) -> int:
    # As ``from .commands import <func>``: __import__, whose imports python -X importtime
    # shows (not importlib.import_module's).
    module = __import__(getattr(args, "command_module", "commands"), globals(), None, [args.func], 1)
    try:
        return getattr(module, args.func)(args) or 0
    except RequestFailed as exc:
        # Not a mistake on the command line: the master unreachable, refusing, or not
        # knowing what was named (a bad parameter it rejects is one: 2).
        print(f"mezzo {args.command}: {exc}", file=sys.stderr)
        return 2 if exc.status == 400 else 1
    except MezzoError as exc:
        print(f"mezzo {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (mezzo logs T | head): done, quietly, and without Python's
        # complaint when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    program()
