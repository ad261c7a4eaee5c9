"""Emulated frameworks on the Mesos v1 scheduler HTTP API: the §6.5 workload of
:mod:`.frameworks`, spoken as pymesos speaks it.

Each :class:`V1Framework` holds a ``SUBSCRIBE`` stream and sends its calls one
after the other on one keep-alive connection of its own, as pymesos does (one
``ACCEPT`` per offer it uses, one ``DECLINE`` per offer it does not, one
``ACKNOWLEDGE`` per status update that carries a uuid): 2 connections a framework. The workload and the
counters are those of :class:`.frameworks.EmulatedScheduler`, so that a benchmark
comparing the two APIs compares nothing else. All of a pool's frameworks share one
asyncio loop; nothing here is a pymesos import (pymesos needs a thread per
framework, too many for 200 in one process).

:class:`V1Probe` is the paper's test framework on the same API.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import aiohttp

from ..resources import Resources
from ..v1.recordio import RecordReader
from .frameworks import ENDED_WINDOW

PATH = "/api/v1/scheduler"
JSON = {"Content-Type": "application/json", "Accept": "application/json"}
TERMINAL = frozenset(
    {"TASK_FINISHED", "TASK_FAILED", "TASK_KILLED", "TASK_LOST", "TASK_ERROR", "TASK_DROPPED", "TASK_GONE"}
)
RESUBSCRIBE_BACKOFF = (0.5, 8.0)
"""First and longest pause between subscription attempts (doubling)."""


def offered(offer: dict[str, Any]) -> tuple[float, float]:
    """The cpus and mem of a v1 offer's unreserved scalars."""
    cpus = mem = 0.0
    for r in offer.get("resources", ()):
        if r.get("type", "SCALAR") == "SCALAR":
            if r.get("name") == "cpus":
                cpus += r["scalar"]["value"]
            elif r.get("name") == "mem":
                mem += r["scalar"]["value"]
    return cpus, mem


def task_json(task_id: str, agent_id: dict[str, str], cpus: float, mem: float, seconds: float) -> dict:
    """A v1 TaskInfo that emulated agents "run" for ``seconds`` (its ``duration`` label)."""
    return {
        "name": task_id,
        "task_id": {"value": task_id},
        "agent_id": agent_id,
        "resources": [
            {"name": "cpus", "type": "SCALAR", "scalar": {"value": cpus}},
            {"name": "mem", "type": "SCALAR", "scalar": {"value": mem}},
        ],
        "command": {"value": f"sleep {seconds:.3f}", "shell": True},
        "labels": {"labels": [{"key": "duration", "value": f"{seconds:.3f}"}]},
    }


class V1Framework:
    """One v1 framework: subscribe, then one task of ``per_task`` on every offer it fits in.

    :meth:`run` subscribes (again, with its framework id, after a lost stream, with
    backoff) until cancelled. Counters as :class:`.frameworks.EmulatedScheduler`'s;
    ``call_errors`` counts calls the master did not answer 202.
    """

    def __init__(
        self,
        name: str,
        per_task: Resources,
        duration: Callable[[], float],
        url: str,
        session: aiohttp.ClientSession,
        *,
        refuse_seconds: float | None = None,
        role: str = "*",
    ) -> None:
        self.name = name
        self.cpus = per_task.get("cpus")
        self.mem = per_task.get("mem")
        self.duration = duration
        self.url = url
        self.session = session
        """For the stream (shared by a pool's frameworks)."""
        self._calls_session: aiohttp.ClientSession | None = None
        """For the calls: one connection, as pymesos (made on the loop, at the first call)."""
        self.role = role
        self.filters = None if refuse_seconds is None else {"refuse_seconds": refuse_seconds}
        self.framework_id = ""
        self.stream_id = ""
        self.offers = self.launched = self.running = self.finished = self.failed = 0
        self.declined = self.duplicates = self.registrations = self.reregistrations = 0
        self.call_errors = 0
        self.first_offer_at: float | None = None
        self.registered_at: float | None = None
        self.offered_at: float | None = None
        self._ids = 0
        self._live: set[str] = set()
        self._ended: OrderedDict[str, None] = OrderedDict()
        self._calls: set[asyncio.Task] = set()

    async def run(self) -> None:
        pause = RESUBSCRIBE_BACKOFF[0]
        while True:
            try:
                await self._subscribe_and_read()
                pause = RESUBSCRIBE_BACKOFF[0]
            except (aiohttp.ClientError, OSError, ValueError, KeyError):
                pass
            self.registered_at = None
            await asyncio.sleep(pause)
            pause = min(pause * 2, RESUBSCRIBE_BACKOFF[1])

    async def _subscribe_and_read(self) -> None:
        info: dict[str, Any] = {"user": "bench", "name": self.name, "roles": [self.role]}
        call: dict[str, Any] = {"type": "SUBSCRIBE", "subscribe": {"framework_info": info}}
        if self.framework_id:
            info["id"] = call["framework_id"] = {"value": self.framework_id}
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        async with self.session.post(
            self.url, data=json.dumps(call), headers=JSON, timeout=timeout
        ) as answer:
            if answer.status != 200:
                raise ValueError(f"SUBSCRIBE answered {answer.status}")
            self.stream_id = answer.headers["Mesos-Stream-Id"]
            reader = RecordReader()
            async for piece in answer.content.iter_any():
                for record in reader.feed(piece):
                    self.on_event(json.loads(record))

    # -- events ------------------------------------------------------------

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "OFFERS":
            self.on_offers(event["offers"].get("offers", ()))
        elif kind == "UPDATE":
            self.on_update(event["update"]["status"])
        elif kind == "SUBSCRIBED":
            known = self.framework_id
            self.framework_id = event["subscribed"]["framework_id"]["value"]
            if known:
                self.reregistrations += 1
            else:
                self.registrations += 1
            self.registered_at, self.offered_at = time.time(), None

    def on_offers(self, offers: Any) -> None:
        now = time.time()
        if self.first_offer_at is None:
            self.first_offer_at = now
        if self.offered_at is None:
            self.offered_at = now
        for offer in offers:
            self.offers += 1
            cpus, mem = offered(offer)
            if cpus + 1e-9 < self.cpus or mem + 1e-9 < self.mem:
                self.declined += 1
                body: dict[str, Any] = {"offer_ids": [offer["id"]]}
                if self.filters:
                    body["filters"] = self.filters
                self.send("DECLINE", body)
                continue
            self._ids += 1
            task = task_json(
                f"{self.name}-{self._ids}", offer["agent_id"], self.cpus, self.mem, self.duration()
            )
            body = {
                "offer_ids": [offer["id"]],
                "operations": [{"type": "LAUNCH", "launch": {"task_infos": [task]}}],
            }
            if self.filters:
                body["filters"] = self.filters
            self.send("ACCEPT", body)
            self.launched += 1

    def on_update(self, status: dict[str, Any]) -> None:
        task_id = status["task_id"]["value"]
        state = status["state"]
        if state == "TASK_RUNNING":
            if task_id not in self._live:
                self._live.add(task_id)
                self.running += 1
        elif state in TERMINAL:
            if task_id in self._ended:
                self.duplicates += 1
            else:
                self._ended[task_id] = None
                if len(self._ended) > ENDED_WINDOW:
                    self._ended.popitem(last=False)
                if task_id in self._live:
                    self._live.discard(task_id)
                    self.running -= 1
                if state == "TASK_FINISHED":
                    self.finished += 1
                else:
                    self.failed += 1
        if "uuid" in status:
            self.send(
                "ACKNOWLEDGE",
                {"agent_id": status["agent_id"], "task_id": status["task_id"], "uuid": status["uuid"]},
            )

    # -- calls -------------------------------------------------------------

    def send(self, kind: str, body: dict[str, Any] | None = None) -> None:
        """Send a call without waiting for its answer (events keep being read meanwhile);
        the calls queue for the framework's one calls connection (mostly in order: aiohttp
        may give a connection just freed to the newest call before older waiting ones)."""
        call: dict[str, Any] = {"type": kind, "framework_id": {"value": self.framework_id}}
        if body is not None:
            call[kind.lower()] = body
        task = asyncio.get_running_loop().create_task(self._post(call))
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)

    async def _post(self, call: dict[str, Any]) -> int:
        headers = {**JSON, "Mesos-Stream-Id": self.stream_id}
        if self._calls_session is None:
            self._calls_session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=1, keepalive_timeout=30),
                timeout=aiohttp.ClientTimeout(total=30),
            )
        try:
            async with self._calls_session.post(self.url, data=json.dumps(call), headers=headers) as answer:
                await answer.read()
                if answer.status != 202:
                    self.call_errors += 1
                return answer.status
        except (TimeoutError, aiohttp.ClientError, OSError):
            self.call_errors += 1
            return 0

    async def close(self) -> None:
        """Let go of the calls connection (the stream ends with :meth:`run`'s task)."""
        for call in list(self._calls):
            call.cancel()
        await asyncio.gather(*self._calls, return_exceptions=True)
        if self._calls_session is not None:
            await self._calls_session.close()


class V1FrameworkPool:
    """``count`` :class:`V1Framework` on one loop and one client session; see the module docstring."""

    def __init__(
        self,
        master: str,
        count: int,
        per_task: str | Resources,
        duration: Callable[[], float],
        *,
        name_prefix: str = "v1",
        refuse_seconds: float | None = None,
    ) -> None:
        self.url = f"http://{master}{PATH}"
        self.per_task = per_task if isinstance(per_task, Resources) else Resources.parse(per_task)
        self.count = count
        self.duration = duration
        self.name_prefix = name_prefix
        self.refuse_seconds = refuse_seconds
        self.frameworks: list[V1Framework] = []
        self._session: aiohttp.ClientSession | None = None
        self._runs: list[asyncio.Task] = []

    async def start(self) -> None:
        # The streams' session: no limit (one stream per framework, each held for good).
        connector = aiohttp.TCPConnector(limit=0)
        self._session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30))
        self.frameworks = [
            V1Framework(
                f"{self.name_prefix}-{i}",
                self.per_task,
                self.duration,
                self.url,
                self._session,
                refuse_seconds=self.refuse_seconds,
            )
            for i in range(self.count)
        ]
        self._runs = [asyncio.create_task(f.run()) for f in self.frameworks]

    def registered_count(self) -> int:
        return sum(1 for f in self.frameworks if f.registered_at is not None)

    def counts(self) -> dict[str, int]:
        """Totals over every framework, as :meth:`.frameworks.EmulatedFrameworkPool.counts`."""
        keys = (
            "offers launched running finished failed declined duplicates registrations reregistrations call_errors"
        ).split()
        return {k: sum(getattr(f, k) for f in self.frameworks) for k in keys}

    def all_registered_at(self) -> float | None:
        times = [f.registered_at for f in self.frameworks]
        return None if not times or None in times else max(times)  # type: ignore[type-var]

    def offered_since_registered_at(self) -> float | None:
        times = [f.offered_at for f in self.frameworks if f.offered_at is not None]
        return min(times) if times else None

    def first_offer_at(self) -> float | None:
        times = [f.first_offer_at for f in self.frameworks if f.first_offer_at is not None]
        return min(times) if times else None

    async def stop(self) -> None:
        for run in self._runs:
            run.cancel()
        await asyncio.gather(*self._runs, return_exceptions=True)
        for framework in self.frameworks:
            await framework.close()
        if self._session is not None:
            await self._session.close()


class V1Probe(V1Framework):
    """The paper's test framework on the v1 API: subscribe, run one task, tear down.

    ``times`` as :class:`.frameworks.ProbeFramework`'s (``time.monotonic()`` of
    ``started``, ``registered``, ``offered``, ``running``, ``finished``).
    """

    def __init__(self, master: str, per_task: Resources, seconds: float, name: str, session) -> None:
        super().__init__(name, per_task, lambda: seconds, f"http://{master}{PATH}", session)
        self.times: dict[str, float] = {}
        self.outcome = ""
        self.done = asyncio.Event()

    def on_event(self, event: dict[str, Any]) -> None:
        if event.get("type") == "SUBSCRIBED":
            self.times.setdefault("registered", time.monotonic())
        super().on_event(event)

    def on_offers(self, offers: Any) -> None:
        for offer in offers:
            cpus, mem = offered(offer)
            if self.launched or cpus + 1e-9 < self.cpus or mem + 1e-9 < self.mem:
                self.send("DECLINE", {"offer_ids": [offer["id"]]})
                continue
            self.times["offered"] = time.monotonic()
            task = task_json(f"{self.name}-task", offer["agent_id"], self.cpus, self.mem, self.duration())
            self.send(
                "ACCEPT",
                {
                    "offer_ids": [offer["id"]],
                    "operations": [{"type": "LAUNCH", "launch": {"task_infos": [task]}}],
                },
            )
            self.launched = 1
            self.send("SUPPRESS", {})  # one task is all it wants

    def on_update(self, status: dict[str, Any]) -> None:
        super().on_update(status)
        if status["state"] == "TASK_RUNNING":
            self.times.setdefault("running", time.monotonic())
        elif status["state"] in TERMINAL:
            self.times["finished"] = time.monotonic()
            self.outcome = status["state"]
            self.done.set()


async def run_v1_probe(
    master: str,
    per_task: str | Resources = "cpus:1;mem:1024",
    seconds: float = 10.0,
    *,
    timeout: float = 120.0,
    name: str = "probe",
) -> V1Probe:
    """Run the test framework once; its times and outcome. Tears the framework down after."""
    per = per_task if isinstance(per_task, Resources) else Resources.parse(per_task)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        probe = V1Probe(master, per, seconds, name, session)
        probe.times["started"] = time.monotonic()
        run = asyncio.create_task(probe.run())
        try:
            await asyncio.wait_for(probe.done.wait(), timeout)
        except TimeoutError:
            probe.outcome = f"no end within {timeout:g} s"
        if probe.framework_id:
            await probe._post({"type": "TEARDOWN", "framework_id": {"value": probe.framework_id}})
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
        await probe.close()
    return probe
