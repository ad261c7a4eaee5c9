"""Asking a master for its state or metrics, or to tear a framework down: what ``mezzo state``,
``mezzo teardown`` and the tests use.

state = fetch_state("127.0.0.1:5050")          # a dict; blocking
state = fetch_state("zk://127.0.0.1:2181/mezzo")   # asks the leading master
state = await fetch_state_async("127.0.0.1:5050")
counters = fetch_metrics("127.0.0.1:5050")     # cheap at any cluster size
usage = fetch_agent_statistics("127.0.0.1:5051")   # an agent's containers, measured now
teardown_framework("127.0.0.1:5050", framework_id)  # end a framework (an operator's call)

Each takes ``tls`` (a ``[tls]`` table); without it the ``[tls]`` of
``$MEZZO_CONFIG`` applies, if that is set (:func:`mezzo.rpc.tls.client_tls_for`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

from .config import TlsConfig
from .discovery import peer_address
from .errors import MasterUnreachable, NotAllowed
from .rpc import connect, parse_address
from .rpc.tls import client_tls_for
from .services import AGENT, MASTER, TOOL

__all__ = ["MasterUnreachable", "NotAllowed"]  # and the functions below; the errors live in .errors

_request_ids = itertools.count(1)

ANSWER_MAX_BYTES = 1 << 30
"""The largest answer accepted. The state of a 50,000-agent cluster with 100,000
tasks is tens of megabytes, beyond the 16 MiB bound daemons put on what peers send;
here the peer is the master we asked."""


class _Waiter:
    def __init__(self, request_id: int, future: asyncio.Future) -> None:
        self.request_id = request_id
        self.future = future

    def state(self, conn: Any, request_id: int, state_json: str) -> None:
        if request_id == self.request_id and not self.future.done():
            self.future.set_result(state_json)

    metrics = state  # the answers to request_metrics and request_statistics have the same shape
    statistics = state
    done = state  # teardown_framework's: a sentence, not JSON

    def error(self, conn: Any, request_id: int, message: str) -> None:
        if request_id == self.request_id and not self.future.done():
            self.future.set_exception(NotAllowed(message))

    def connection_lost(self, conn: Any) -> None:
        if not self.future.done():
            self.future.set_exception(MasterUnreachable("the peer closed the connection before answering"))


async def fetch_state_async(
    master: str, timeout: float = 10.0, tls: TlsConfig | None = None
) -> dict[str, Any]:
    """The master's state as a dict (see ``docs/getting-started.md`` for its fields)."""
    return await _ask(master, "request_state", timeout, tls)


async def fetch_metrics_async(
    master: str, timeout: float = 10.0, tls: TlsConfig | None = None
) -> dict[str, Any]:
    """The master's counters as a dict (see ``Master.metrics``)."""
    return await _ask(master, "request_metrics", timeout, tls)


async def leader_of(master: str, timeout: float) -> tuple[str, int]:
    """The address of ``master`` (``HOST:PORT``), or of the master leading ``zk://...``;
    :class:`MasterUnreachable` naming what failed."""
    try:
        target = peer_address(master, 5050, connect_timeout=timeout)
    except ValueError as exc:
        raise MasterUnreachable(str(exc)) from None
    try:
        await target.start()
        if target.current() is None:
            await target.changed(timeout)
        address = target.current()
    except TimeoutError:
        from .zk.url import shown

        raise MasterUnreachable(f"cannot reach ZooKeeper at {shown(master)} within {timeout:g} s") from None
    finally:
        target.close()
    if address is None:
        from .zk.url import shown

        raise MasterUnreachable(f"no master leads {shown(master)}")
    return address


async def _ask(
    master: str, call: str, timeout: float, tls: TlsConfig | None, *args: Any, parse: bool = True
) -> Any:
    address = await leader_of(master, timeout)
    return await _request("master", address, MASTER, call, timeout, tls, *args, parse=parse)


async def teardown_framework_async(
    master: str, framework_id: str, timeout: float = 10.0, tls: TlsConfig | None = None
) -> str:
    """End ``framework_id`` at the leading master (the ``teardown_frameworks`` ACL must
    allow the caller); returns what the master did. Raises :class:`NotAllowed` when refused
    or when no such framework is registered."""
    return await _ask(master, "teardown_framework", timeout, tls, framework_id, parse=False)


def teardown_framework(
    master: str, framework_id: str, timeout: float = 10.0, tls: TlsConfig | None = None
) -> str:
    """Blocking :func:`teardown_framework_async`."""
    return asyncio.run(teardown_framework_async(master, framework_id, timeout, tls))


async def fetch_agent_statistics_async(
    agent: str, timeout: float = 10.0, tls: TlsConfig | None = None
) -> list[dict[str, Any]]:
    """An agent's container statistics, measured now (see :mod:`mezzo.agent.statistics`)."""
    try:
        address = parse_address(agent, 5051)
    except ValueError as exc:
        raise MasterUnreachable(str(exc)) from None
    return await _request("agent", address, AGENT, "request_statistics", timeout, tls)


async def _request(
    who: str,
    address: tuple[str, int],
    service: Any,
    call: str,
    timeout: float,
    tls: TlsConfig | None,
    *args: Any,
    parse: bool = True,
) -> Any:
    """Dial ``address``, make ``call(request_id, *args)`` of ``service``, return the answer
    (parsed as JSON unless ``parse`` is false)."""
    host, port = address
    client = client_tls_for(tls)
    loop = asyncio.get_running_loop()
    waiter = _Waiter(next(_request_ids), loop.create_future())
    try:
        conn = await asyncio.wait_for(
            connect(host, port, TOOL, waiter, max_frame=ANSWER_MAX_BYTES, tls=client), timeout
        )
    except (TimeoutError, OSError) as exc:
        raise MasterUnreachable(f"cannot reach the {who} at {host}:{port}: {exc or 'timeout'}") from None
    try:
        getattr(conn.remote(service), call)(waiter.request_id, *args)
        text = await asyncio.wait_for(waiter.future, timeout)
    except TimeoutError:
        raise MasterUnreachable(f"the {who} at {host}:{port} did not answer within {timeout:g} s") from None
    except MasterUnreachable as exc:
        if client is None:  # what a TLS port does to plaintext: say so
            raise MasterUnreachable(f"{exc} (if it listens with TLS, give [tls] settings)") from None
        raise
    finally:
        conn.close()
    return json.loads(text) if parse else text


def fetch_agent_statistics(
    agent: str, timeout: float = 10.0, tls: TlsConfig | None = None
) -> list[dict[str, Any]]:
    """Blocking :func:`fetch_agent_statistics_async`."""
    return asyncio.run(fetch_agent_statistics_async(agent, timeout, tls))


def fetch_state(master: str, timeout: float = 10.0, tls: TlsConfig | None = None) -> dict[str, Any]:
    """Blocking :func:`fetch_state_async` (do not call from a running event loop)."""
    return asyncio.run(fetch_state_async(master, timeout, tls))


def fetch_metrics(master: str, timeout: float = 10.0, tls: TlsConfig | None = None) -> dict[str, Any]:
    """Blocking :func:`fetch_metrics_async` (do not call from a running event loop)."""
    return asyncio.run(fetch_metrics_async(master, timeout, tls))
