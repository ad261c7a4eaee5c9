"""The queue's HTTP API, served on a unix socket: what ``mezzo submit``, ``jobs`` and
``cancel`` talk to.

A unix socket, not a port, because the kernel tells who is at the other end
(``SO_PEERCRED``): a job runs as the unix user who submitted it, and only that user (or
root, or the queue's own user) may cancel it, with nothing to configure and no password
or certificate to hand around. Root's queue is open to every local user (socket mode
0666; jobs run as their submitters where agents run as root and switch users); any other
user's queue is that user's alone (0600, and other uids refused 403). Every local user of
a shared queue sees every job listed, commands included.

    POST /jobs        {"command", "cpus", "mem", "array": "1-N", "retries", "name"}
                      -> {"submission", "first", "last", "count", "warning", "queue": {...}}
    GET  /jobs        ?state=waiting|all|QUEUED|RUNNING|FINISHED|FAILED|CANCELLED
                      &user=NAME&limit=N -> {"jobs": [...], "total", "queue": {...}}

A job no active agent could hold (more cpus or mem than the largest has, as the master's
``/overview`` says) is taken all the same, since agents may join, but the answer's
``warning`` says so, and so does its ``why`` in listings.
    GET  /jobs/ID     -> one job
    POST /cancel      {"jobs": ["42", "43_7"]} -> {"cancelled", "cancelling", "unknown", "refused"}
    GET  /health      -> {"ok": true}

Errors are JSON ``{"error", "status"}`` naming the field (400), the job (404) or the
rule (403). Request bodies are capped at 1 MiB.
"""

from __future__ import annotations

import math
import os
import pwd
import socket
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from ..http.server import BadParameter, dumps, json_errors
from .framework import QueueFramework
from .jobs import Job, JobState, QueueFull, Submission, SubmissionError, never_fits, parse_array
from .journal import JournalError

MAX_BODY_BYTES = 1 << 20
LIST_LIMIT_MAX = 100_000
LIST_LIMIT_DEFAULT = 10_000
CANCEL_MAX = 10_000
"""Ids one cancel may name (a submission's number names all its jobs)."""
AMOUNT_MAX = 1e9
"""The most cpus or mem a job may ask (an agent's own bound)."""
NAME_MAX = 200


def peer_user(request: web.Request) -> tuple[int, str]:
    """The uid at the other end of the request's unix socket, and its user name (the
    uid as text when the system has no name for it)."""
    sock = request.transport.get_extra_info("socket") if request.transport is not None else None
    if sock is None or sock.family != socket.AF_UNIX:
        raise web.HTTPForbidden(text="the queue only takes requests on its unix socket")
    _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    try:
        return uid, pwd.getpwuid(uid).pw_name
    except KeyError:
        return uid, str(uid)


def queue_app(
    queue: QueueFramework, learn_cluster: Callable[[], Awaitable[None]], *, everyone: bool
) -> web.Application:
    """The API of ``queue``; ``learn_cluster`` refreshes ``queue.largest_agent`` when it is
    stale (a submission is checked against it). ``everyone``: every local user may use it
    (root's queue); otherwise only the queue's own user (and root)."""
    app = web.Application(middlewares=[json_errors], client_max_size=MAX_BODY_BYTES)
    api = _Endpoints(queue, learn_cluster, everyone)
    app.router.add_post("/jobs", api.submit)
    app.router.add_get("/jobs", api.list_jobs)
    app.router.add_get("/jobs/{job_id}", api.job)
    app.router.add_post("/cancel", api.cancel)
    app.router.add_get("/health", api.health)
    return app


def _answer(value: Any, status: int = 200) -> web.Response:
    return web.Response(text=dumps(value), status=status, content_type="application/json")


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        raise BadParameter("body", "not JSON") from None
    if not isinstance(body, dict):
        raise BadParameter("body", "not a JSON object")
    return body


def _number(body: dict[str, Any], name: str, default: float, least: float) -> float:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadParameter(name, f"{value!r} is not a number")
    if not least <= value <= AMOUNT_MAX:
        raise BadParameter(name, f"{value:g} is not between {least:g} and {AMOUNT_MAX:g}")
    return float(value)


def _text(body: dict[str, Any], name: str, default: str = "") -> str:
    """A string field that UTF-8 can carry (JSON allows lone surrogates; Thrift, the
    master and the agent's shell do not)."""
    value = body.get(name, default)
    if not isinstance(value, str):
        raise BadParameter(name, f"{value!r} is not a string")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise BadParameter(name, "not valid Unicode (a lone surrogate: bytes that were not UTF-8?)") from None
    return value


class _Endpoints:
    def __init__(
        self, queue: QueueFramework, learn_cluster: Callable[[], Awaitable[None]], everyone: bool
    ) -> None:
        self.queue = queue
        self.learn_cluster = learn_cluster
        self.everyone = everyone
        self.own_uid = os.geteuid()

    def caller(self, request: web.Request) -> tuple[int, str]:
        """The caller's uid and name; 403 for another user of a queue not root's (its jobs
        would run as the queue's user, whose agents cannot switch users for it)."""
        uid, user = peer_user(request)
        if not self.everyone and uid not in (0, self.own_uid):
            raise web.HTTPForbidden(
                text=f"this queue runs as uid {self.own_uid} and takes only its own user's requests "
                "(root's queue takes every user's)"
            )
        return uid, user

    async def submit(self, request: web.Request) -> web.Response:
        _uid, user = self.caller(request)
        body = await _body(request)
        retries = body.get("retries", 0)
        if isinstance(retries, bool) or not isinstance(retries, int):
            raise BadParameter("retries", f"{retries!r} is not a whole number")
        name = _text(body, "name")
        if len(name) > NAME_MAX:
            raise BadParameter("name", f"longer than {NAME_MAX} characters")
        array_text = body.get("array")
        try:
            submission = Submission(
                command=_text(body, "command"),
                cpus=_number(body, "cpus", 1.0, 0.001),
                mem=_number(body, "mem", 128.0, 0.0),
                array=None if array_text is None else parse_array(_text(body, "array")),
                retries=retries,
                name=name,
            )
            jobs = self.queue.submit(submission, user)
        except QueueFull as exc:
            return _answer({"error": exc.problem, "status": 503}, status=503)
        except JournalError as exc:
            return _answer({"error": f"not queued: {exc}", "status": 503}, status=503)
        except SubmissionError as exc:
            raise BadParameter(exc.field, exc.problem) from None
        await self.learn_cluster()
        return _answer(
            {
                "warning": never_fits(submission, self.queue.largest_agent),
                "submission": jobs[0].submission,
                "first": jobs[0].id,
                "last": jobs[-1].id,
                "count": len(jobs),
                "user": user,
                "queue": self.queue.status(),
            }
        )

    async def list_jobs(self, request: web.Request) -> web.Response:
        self.caller(request)
        state = request.query.get("state", "waiting")
        wanted = _states(state)
        user = request.query.get("user")
        limit = _limit(request.query.get("limit"))
        with self.queue.lock:
            matching = [
                job
                for job in self.queue.table.all_jobs()
                if job.state in wanted and (user is None or job.user == user)
            ]
            largest = self.queue.largest_agent
            rows = [_listed(job, largest) for job in matching[:limit]]
            status = self.queue.status()
        return _answer({"jobs": rows, "total": len(matching), "queue": status})

    async def job(self, request: web.Request) -> web.Response:
        self.caller(request)
        job_id = request.match_info["job_id"]
        with self.queue.lock:
            job = self.queue.table.jobs.get(job_id)
            row = job.to_dict() if job is not None else None
        if row is None:
            return _answer({"error": f"no job {job_id} in the queue", "status": 404}, status=404)
        return _answer(row)

    async def cancel(self, request: web.Request) -> web.Response:
        uid, user = self.caller(request)
        body = await _body(request)
        named = body.get("jobs")
        if not isinstance(named, list) or not all(isinstance(j, str) for j in named) or not named:
            raise BadParameter("jobs", "expected a non-empty list of job ids")
        if len(named) > CANCEL_MAX:
            raise BadParameter("jobs", f"{len(named)} ids; at most {CANCEL_MAX} in one request")
        may_cancel_any = uid in (0, self.own_uid)
        with self.queue.lock:
            found = list(self.queue.table.select(named))
            found_ids = {job.id for job in found} | {str(job.submission) for job in found}
            mine = [j for j in found if (may_cancel_any or j.user == user) and not j.state.ended]
            refused = sorted({j.id for j in found if not may_cancel_any and j.user != user})
        self.queue.cancel(mine)
        with self.queue.lock:
            cancelled = [j.id for j in mine if j.state is JobState.CANCELLED]
            cancelling = [j.id for j in mine if j.state is JobState.RUNNING]
        return _answer(
            {
                "cancelled": cancelled,
                "cancelling": cancelling,
                "unknown": [j for j in named if j not in found_ids],
                "refused": refused,
            }
        )

    async def health(self, request: web.Request) -> web.Response:
        return _answer({"ok": True, "queue": self.queue.status()})


def _listed(job: Job, largest: dict[str, float] | None) -> dict[str, Any]:
    """``job`` as listed: its record, and for a queued one ``why`` no agent could hold it."""
    row = job.to_dict()
    row["why"] = never_fits(job, largest) if job.state is JobState.QUEUED else None
    return row


_STATE_SETS = {
    "waiting": frozenset({JobState.QUEUED, JobState.RUNNING}),
    "ended": frozenset({JobState.FINISHED, JobState.FAILED, JobState.CANCELLED}),
    "all": frozenset(JobState),
}


def _states(text: str) -> frozenset[JobState]:
    if text in _STATE_SETS:
        return _STATE_SETS[text]
    try:
        return frozenset({JobState(text.upper())})
    except ValueError:
        names = ", ".join([*_STATE_SETS, *(s.value for s in JobState)])
        raise BadParameter("state", f"{text!r} is not one of {names}") from None


def _limit(text: str | None) -> int:
    if text is None:
        return LIST_LIMIT_DEFAULT
    if not text.isdigit() or not 0 < int(text) <= LIST_LIMIT_MAX:
        raise BadParameter("limit", f"{text!r} is not a whole number from 1 to {LIST_LIMIT_MAX}")
    return int(text)
