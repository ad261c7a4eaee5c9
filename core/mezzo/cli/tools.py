"""The operator's commands: ``ps``/``tasks``, ``task``, ``logs``, ``kill``, ``agents``,
``frameworks``, ``drain``, ``undrain``.

Each is a thin client of the master's HTTP API (:class:`mezzo.operator_client.OperatorClient`):
what a table shows is what the master answered, filtered by the master (one request), and
what a command does is one ``POST``; nothing here decides what the master already knows.
Output is a table, or the master's JSON with ``--json``.

Exit statuses: 0 done; 1 the master could not be reached, refused (its ACLs), or does not
know the task or agent a command acts on; 2 a mistake on the command line (argparse, or a
value the master rejects as a bad parameter). A filter matching nothing (``ps --framework
F`` of a framework with no tasks) is an empty table, not an error.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from ..errors import RequestFailed
from ..operator_client import ApiError, OperatorClient
from .tables import duration, number, resources, shown, table, when

# typing itself is not imported: 2-3 ms of a command's start-up.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..config import TlsConfig

FOLLOW_POLL_SECONDS = 0.5
"""How often ``logs -f`` asks for more output when there was none."""
FOLLOW_STATE_SECONDS = 1.0
"""How often ``logs -f`` asks whether the task has ended."""
PAGE = 64 * 1024
"""Bytes asked for per read (the API's cap)."""
TAIL_SCAN_MAX = 64 * 1024 * 1024
"""The most ``logs --tail N`` reads backwards looking for N lines."""


class NotFound(RequestFailed):
    """The master knows no such task (or agent, framework)."""


def client(args: argparse.Namespace, master: str, tls: TlsConfig | None) -> OperatorClient:
    return OperatorClient(master, timeout=args.timeout, tls=tls)


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


# -- tasks ------------------------------------------------------------------------------


def ps(args: argparse.Namespace, api: OperatorClient) -> int:
    state = args.state or (None if args.all else "active")
    answer = api.get(
        "/tasks",
        framework_id=args.framework,
        agent_id=args.agent,
        state=state,
        limit=args.limit,
        order="desc",
    )
    if args.json:
        _print_json(answer)
        return 0
    now = time.time()
    rows = []
    for t in answer["tasks"]:
        start = t.get("start_time") or _first_status_time(t)
        end = t.get("end_time")
        rows.append(
            [
                t["id"],
                t["framework_id"],
                t["state"],
                t.get("hostname") or t["slave_id"],
                *resources(t.get("resources")),
                duration((end or now) - start) if start else None,
                t.get("exit_code"),
            ]
        )
    print(table(["ID", "FRAMEWORK", "STATE", "HOST", "CPUS", "MEM", "AGE", "EXIT"], rows))
    shown, total = len(rows), answer.get("total", len(rows))
    if total > shown:
        print(f"({shown} of {total} shown, newest first; --limit N for more)", file=sys.stderr)
    elif not rows:
        what = "tasks" if args.all or args.state else "active tasks (--all for ended ones too)"
        print(f"no {what}", file=sys.stderr)
    return 0


def task(args: argparse.Namespace, api: OperatorClient) -> int:
    t = find_task(api, args.task_id, args.framework)
    if args.json:
        _print_json(t)
        return 0
    start, end = t.get("start_time"), t.get("end_time")
    fields = [
        ("task", t["id"] + (f" ({t['name']})" if t.get("name") and t["name"] != t["id"] else "")),
        ("framework", t["framework_id"]),
        ("state", t["state"]),
        ("reason", t.get("reason") or None),
        ("message", t.get("message") or None),
        ("exit code", t.get("exit_code")),
        ("agent", f"{t['slave_id']} ({t.get('hostname') or '?'})"),
        ("resources", ", ".join(f"{k} {number(v)}" for k, v in sorted((t.get("resources") or {}).items()))),
        ("started", when(start)),
        ("ended", when(end)),
        ("ran", duration(end - start) if start and end else None),
        ("sandbox", t.get("sandbox")),
    ]
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        if value is not None and value != "":
            print(f"{name + ':':<{width + 1}} {shown(value)}")
    print()
    history = [
        [
            s["state"],
            when(s.get("timestamp")),
            s.get("source") or None,
            s.get("reason") or None,
            s.get("message") or None,
        ]
        for s in t.get("statuses", [])
    ]
    print(table(["STATE", "AT", "SOURCE", "REASON", "MESSAGE"], history))
    return 0


def find_task(api: OperatorClient, task_id: str, framework_id: str | None) -> dict[str, Any]:
    """The task ``task_id`` (of ``framework_id`` if given) as ``/tasks`` shows it, the
    newest if it ran more than once; :class:`NotFound` naming what is missing, or which
    frameworks to choose from."""
    found = api.get("/tasks", task_id=task_id, framework_id=framework_id, limit=20)["tasks"]
    if not found:
        scope = f" in framework {framework_id}" if framework_id else ""
        raise NotFound(f"the master knows no task {task_id!r}{scope} (running, or among the ended it keeps)")
    frameworks = sorted({t["framework_id"] for t in found})
    if len(frameworks) > 1:
        raise NotFound(
            f"task {task_id!r} exists in {len(frameworks)} frameworks ({', '.join(frameworks)}): "
            "choose one with --framework"
        )
    return found[0]  # newest first


def _first_status_time(t: dict[str, Any]) -> float | None:
    statuses = t.get("statuses") or []
    return statuses[0].get("timestamp") if statuses else None


# -- logs -------------------------------------------------------------------------------


def logs(args: argparse.Namespace, api: OperatorClient) -> int:
    t = find_task(api, args.task_id, args.framework)
    stream = "stderr" if args.stderr else "stdout"
    path = f"{t['sandbox']}/{stream}"
    agent = t["slave_id"]
    try:
        size = api.read_file(agent, path, -1)["offset"]
    except ApiError as exc:
        if exc.status != 404 or not args.follow:
            raise
        # Not there yet (a task still staging, its sandbox not made): -f waits for it.
        size = _wait_for_file(api, t, path, stream)
        if size is None:
            return 0
    offset = 0 if args.tail is None else tail_start(api, agent, path, size, args.tail)
    out = sys.stdout
    if not args.follow:
        copy_file(api, agent, path, offset, out, until=size)
        return 0
    offset = copy_file(api, agent, path, offset, out)
    if t.get("end_time"):
        return 0
    checked = time.monotonic()
    while True:
        got = copy_file(api, agent, path, offset, out)
        if got != offset:
            offset = got
            continue
        if time.monotonic() - checked >= FOLLOW_STATE_SECONDS:
            checked = time.monotonic()
            now = api.get("/tasks", task_id=t["id"], framework_id=t["framework_id"], limit=1)["tasks"]
            if not now or now[0].get("end_time"):
                copy_file(api, agent, path, offset, out)  # what it wrote last
                if now:
                    print(f"[task {t['id']} {now[0]['state']}]", file=sys.stderr)
                return 0
        time.sleep(FOLLOW_POLL_SECONDS)


def _wait_for_file(api: OperatorClient, t: dict[str, Any], path: str, stream: str) -> int | None:
    """Wait until the task's ``stream`` file exists (its size then: 0), saying so once; None
    when the task ended first (said too)."""
    print(f"mezzo logs: waiting for {t['id']}'s {stream} ({t['state']})", file=sys.stderr, flush=True)
    while True:
        time.sleep(FOLLOW_POLL_SECONDS)
        try:
            return int(api.read_file(t["slave_id"], path, -1)["offset"])
        except ApiError as exc:
            if exc.status != 404:
                raise
        now = api.get("/tasks", task_id=t["id"], framework_id=t["framework_id"], limit=1)["tasks"]
        if not now or now[0].get("end_time"):
            state = now[0]["state"] if now else "gone"
            print(f"[task {t['id']} {state}, no {stream} written]", file=sys.stderr)
            return None


def copy_file(
    api: OperatorClient, agent: str, path: str, offset: int, out: Any, until: int | None = None
) -> int:
    """Write a sandbox file from ``offset`` to ``out``: to its end now, or to ``until`` (a
    writer faster than the reader would otherwise keep it going); the offset reached."""
    while until is None or offset < until:
        page = api.read_file(agent, path, offset, PAGE if until is None else min(PAGE, until - offset))
        covered = page.get("length", len(page["data"].encode()))
        if not covered:
            break
        out.write(page["data"])
        offset += covered
    out.flush()
    return offset


def tail_start(api: OperatorClient, agent: str, path: str, size: int, lines: int) -> int:
    """The offset of the last ``lines`` lines of a file of ``size`` bytes (0 if it has
    fewer), reading backwards a page at a time, at most :data:`TAIL_SCAN_MAX` bytes.

    A newline is never part of a multi-byte character, so where one is is counted back from
    the end of the bytes its page covered (``length``): a page that begins inside a
    character (its first bytes read as U+FFFD) places its newlines right all the same."""
    if lines <= 0 or size <= 0:
        return size
    need: int | None = None
    count = 0
    end = size
    while end > 0 and size - end < TAIL_SCAN_MAX:
        start = max(0, end - PAGE)
        page = api.read_file(agent, path, start, end - start)
        text = page["data"]
        covered_to = start + page.get("length", len(text.encode()))
        if need is None:  # the last page: a final newline ends the last line, it starts none
            need = lines + (1 if text.endswith("\n") else 0)
        position = len(text)
        while (position := text.rfind("\n", 0, position)) >= 0:
            count += 1
            if count == need:
                return covered_to - len(text[position + 1 :].encode())
        end = start
    return end


# -- actions --------------------------------------------------------------------------------


def kill(args: argparse.Namespace, api: OperatorClient) -> int:
    framework_id = args.framework or find_task(api, args.task_id, None)["framework_id"]
    answer = _act(api, "/master/kill", frameworkId=framework_id, taskId=args.task_id)
    print(answer.get("message") or f"asked to kill task {args.task_id}")
    return 0


def drain(args: argparse.Namespace, api: OperatorClient) -> int:
    answer = _act(api, "/master/drain", agentId=args.agent_id, gracePeriod=args.grace)
    print(answer.get("message") or f"agent {args.agent_id} draining")
    return 0


def undrain(args: argparse.Namespace, api: OperatorClient) -> int:
    answer = _act(api, "/master/reactivate", agentId=args.agent_id)
    print(answer.get("message") or f"agent {args.agent_id} reactivated")
    return 0


def _act(api: OperatorClient, path: str, **form: Any) -> dict[str, Any]:
    """One operator action; a 404 (no such task or agent) is :class:`NotFound`."""
    try:
        answer = api.post(path, **form)
    except ApiError as exc:
        if exc.status == 404:
            raise NotFound(str(exc)) from None
        raise
    return answer if isinstance(answer, dict) else {}


# -- the cluster --------------------------------------------------------------------------


def agents(args: argparse.Namespace, api: OperatorClient) -> int:
    answer = api.get("/slaves", limit=args.limit)
    if args.json:
        _print_json(answer)
        return 0
    rows = []
    for a in answer["slaves"]:
        total, used = a.get("resources") or {}, a.get("used_resources") or {}
        rows.append(
            [
                a["id"],
                a.get("hostname"),
                _agent_state(a),
                f"{number(used.get('cpus', 0))}/{number(total.get('cpus', 0))}",
                f"{number(used.get('mem', 0))}/{number(total.get('mem', 0))}",
            ]
        )
    print(table(["ID", "HOST", "STATE", "CPUS USED", "MEM USED"], rows))
    shown, total = len(rows), answer.get("total", len(rows))
    if total > shown:
        print(f"({shown} of {total} shown; --limit N for more)", file=sys.stderr)
    return 0


def _agent_state(a: dict[str, Any]) -> str:
    if a.get("draining"):
        info = a.get("drain_info") or {}
        return str(info.get("state") or "DRAINING")
    return "active" if a.get("active") else "disconnected"


def frameworks(args: argparse.Namespace, api: OperatorClient) -> int:
    answer = api.get("/frameworks")
    if args.json:
        _print_json(answer)
        return 0
    rows = []
    for f in answer["frameworks"]:
        used = f.get("used_resources") or {}
        pending = f.get("why_pending") or []
        rows.append(
            [
                f["id"],
                f.get("name"),
                f.get("role"),
                "connected" if f.get("connected") else "disconnected",
                number(used.get("cpus", 0)),
                number(used.get("mem", 0)),
                f"{f.get('dominant_share', 0):.3f}",
                pending[0]["message"] if pending else "",
            ]
        )
    print(table(["ID", "NAME", "ROLE", "STATE", "CPUS", "MEM", "SHARE", "WHY PENDING"], rows))
    for f in answer["frameworks"]:
        more = (f.get("why_pending") or [])[1:]
        if more and args.why:
            print(f"\n{shown(f['id'])} ({shown(f.get('name'))}) also:")
            for reason in more:
                print(f"  {shown(reason['reason'])}: {shown(reason['message'])}")
    return 0
