"""A bare v1 scheduler client for the tests: http.client and the JSON of Mesos' docs.

It speaks to the master exactly as pymesos does (a SUBSCRIBE stream on one
connection, calls on another keep-alive connection with ``Mesos-Stream-Id``), but
asserts nothing itself: the tests look at :attr:`V1Scheduler.events` and at the
status of each call.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Callable
from typing import Any


class V1Scheduler:
    """One framework over the v1 API of ``master`` (``host:port``)."""

    def __init__(
        self,
        master: str,
        framework_info: dict[str, Any] | None = None,
        *,
        auto_ack: bool = True,
        authorization: str | None = None,
    ) -> None:
        host, port = master.rsplit(":", 1)
        self.host, self.port = host, int(port)
        self.framework_info = {"user": "", "name": "v1-test", **(framework_info or {})}
        self.framework_id: str | None = None
        self.stream_id: str | None = None
        self.events: list[dict[str, Any]] = []
        self.ended = threading.Event()
        self._stream: http.client.HTTPConnection | None = None
        self._socket: socket.socket | None = None
        self._reader: threading.Thread | None = None
        self._calls: http.client.HTTPConnection | None = None
        self.response: http.client.HTTPResponse | None = None
        self.auto_ack = auto_ack
        """Acknowledge every update that carries a uuid as it comes (pymesos' implicit acks):
        the agents send a task's next update only once its last one was acknowledged."""
        self._acks: http.client.HTTPConnection | None = None
        self.sent_always = {"Authorization": authorization} if authorization else {}
        """Headers every request carries (Basic credentials, as pymesos' principal and secret)."""

    # -- the stream ------------------------------------------------------------------------

    def subscribe(self, framework_id: str | None = None) -> http.client.HTTPResponse:
        """POST SUBSCRIBE; on 200 the events are read in a thread from now on."""
        info = dict(self.framework_info)
        call: dict[str, Any] = {"type": "SUBSCRIBE", "subscribe": {"framework_info": info}}
        if framework_id:
            info["id"] = {"value": framework_id}
            call["framework_id"] = {"value": framework_id}
        self.ended.clear()
        self._stream = http.client.HTTPConnection(self.host, self.port, timeout=30)
        self._stream.request(
            "POST",
            "/api/v1/scheduler",
            body=json.dumps(call),
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json",
                "Connection": "close",
                **self.sent_always,
            },
        )
        self._socket = self._stream.sock  # http.client lets go of it once the answer will close
        self.response = response = self._stream.getresponse()
        if response.status == 200:
            self.stream_id = response.getheader("Mesos-Stream-Id")
            self._reader = threading.Thread(target=self._read, args=(response,), daemon=True)
            self._reader.start()
            first = self.wait_for("SUBSCRIBED")
            self.framework_id = first["subscribed"]["framework_id"]["value"]
        return response

    def _read(self, response: http.client.HTTPResponse) -> None:
        try:
            while True:
                size = response.readline()
                if not size:
                    break
                event = json.loads(response.read(int(size)))
                self.events.append(event)
                if self.auto_ack and event["type"] == "UPDATE" and "uuid" in event["update"]["status"]:
                    self._acknowledge_from_reader(event["update"]["status"])
        except (OSError, ValueError, AttributeError):
            pass  # closed by the test (http.client drops its file: AttributeError)
        self.ended.set()

    def _acknowledge_from_reader(self, status: dict[str, Any]) -> None:
        if self._acks is None:
            self._acks = http.client.HTTPConnection(self.host, self.port, timeout=30)
        body = {
            "type": "ACKNOWLEDGE",
            "framework_id": {"value": self.framework_id or status.get("framework_id", "")},
            "acknowledge": {"agent_id": status["agent_id"], "task_id": status["task_id"], "uuid": status["uuid"]},
        }
        headers = {"Content-Type": "application/json", "Mesos-Stream-Id": self.stream_id or "", **self.sent_always}
        self._acks.request("POST", "/api/v1/scheduler", body=json.dumps(body), headers=headers)
        self._acks.getresponse().read()

    def disconnect(self) -> None:
        """Close the stream (as a scheduler that died would)."""
        if self._socket is not None:
            self._socket.shutdown(socket.SHUT_RDWR)
            self._socket.close()
        self.ended.wait(10)

    def close(self) -> None:
        if self._socket is not None:
            # http.client let go of the stream's socket (the reader thread's response holds
            # it): close it too, or the master sees the stream open until it stops. First,
            # so that the reader is done acknowledging before the connections close.
            try:
                self._socket.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already gone (disconnect(), or the master closed it)
            self._socket.close()
            if self._reader is not None:
                self._reader.join(10)
        if self._acks is not None:
            self._acks.close()
        if self._calls is not None:
            self._calls.close()
        if self._stream is not None:
            self._stream.close()

    # -- waiting -----------------------------------------------------------------------

    def wait_for(
        self, kind: str, where: Callable[[dict[str, Any]], bool] = lambda e: True, timeout: float = 15.0
    ) -> dict[str, Any]:
        """The first event of type ``kind`` for which ``where`` holds (waiting for it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in list(self.events):
                if event["type"] == kind and where(event):
                    return event
            time.sleep(0.01)
        raise AssertionError(f"no {kind} event within {timeout} s; got {[e['type'] for e in self.events]}")

    def updates(self, task_id: str) -> list[dict[str, Any]]:
        """The statuses of ``task_id`` received so far, in order."""
        return [
            e["update"]["status"]
            for e in list(self.events)
            if e["type"] == "UPDATE" and e["update"]["status"]["task_id"]["value"] == task_id
        ]

    def wait_state(self, task_id: str, state: str, timeout: float = 15.0) -> dict[str, Any]:
        event = self.wait_for(
            "UPDATE",
            lambda e: e["update"]["status"]["task_id"]["value"] == task_id and e["update"]["status"]["state"] == state,
            timeout,
        )
        return event["update"]["status"]

    def offers(self, timeout: float = 15.0, after: int = 0) -> list[dict[str, Any]]:
        """The offers of the first OFFERS event at index ``after`` or later."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.events[after:]:
                if event["type"] == "OFFERS":
                    return event["offers"]["offers"]
            time.sleep(0.01)
        raise AssertionError(f"no OFFERS within {timeout} s; got {[e['type'] for e in self.events]}")

    # -- calls -------------------------------------------------------------------------

    def call(
        self,
        kind: str,
        body: dict[str, Any] | None = None,
        *,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, str]:
        """POST one call (``body`` under the type's key) on the keep-alive connection: (status, text)."""
        if self._calls is None:
            self._calls = http.client.HTTPConnection(self.host, self.port, timeout=30)
        message: dict[str, Any] = {"type": kind}
        if self.framework_id:
            message["framework_id"] = {"value": self.framework_id}
        if body is not None:
            message[kind.lower()] = body
        sent = {"Content-Type": "application/json"}
        if self.stream_id:
            sent["Mesos-Stream-Id"] = self.stream_id
        sent.update(self.sent_always)
        sent.update(headers or {})
        self._calls.request("POST", "/api/v1/scheduler", body=raw if raw is not None else json.dumps(message), headers=sent)
        response = self._calls.getresponse()
        text = response.read().decode()
        return response.status, text

    def launch(self, offer: dict[str, Any], task_id: str, command: str, cpus: float = 0.1, mem: float = 32) -> tuple[int, str]:
        task = {
            "task_id": {"value": task_id},
            "agent_id": offer["agent_id"],
            "name": task_id,
            "command": {"value": command, "shell": True},
            "resources": [
                {"name": "cpus", "type": "SCALAR", "scalar": {"value": cpus}},
                {"name": "mem", "type": "SCALAR", "scalar": {"value": mem}},
            ],
        }
        return self.call(
            "ACCEPT",
            {
                "offer_ids": [offer["id"]],
                "operations": [{"type": "LAUNCH", "launch": {"task_infos": [task]}}],
                "filters": {"refuse_seconds": 1},
            },
        )

    def acknowledge(self, status: dict[str, Any]) -> tuple[int, str]:
        return self.call(
            "ACKNOWLEDGE",
            {"agent_id": status["agent_id"], "task_id": status["task_id"], "uuid": status["uuid"]},
        )
