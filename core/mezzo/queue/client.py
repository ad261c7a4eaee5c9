"""The queue's API from a blocking client: what ``mezzo submit``, ``jobs`` and ``cancel``
ask through (``http.client`` over the queue's unix socket; no event loop).

    queue = QueueClient()                      # $MEZZO_QUEUE, else the default socket
    queue.post("/jobs", {"command": "echo {index}", "array": "1-10"})
    queue.get("/jobs", state="all")

Failures raise one-line :class:`~mezzo.errors.RequestFailed` errors: :class:`QueueUnreachable`
when nothing serves the socket (with how to start a queue), :class:`QueueRefused` for
an error answer, with the queue's own message.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import struct
import urllib.parse
from pathlib import Path
from typing import Any

from ..errors import RequestFailed

SOCKET_ENV = "MEZZO_QUEUE"
ROOT_SOCKET = "/run/mezzo/queue.sock"
ANSWER_MAX_BYTES = 256 << 20


def default_socket() -> str:
    """Where the queue listens unless told: ``$MEZZO_QUEUE``, else ``/run/mezzo/queue.sock``
    for root, else ``$XDG_RUNTIME_DIR/mezzo-queue.sock`` (``~/.local/state/mezzo/queue.sock``
    without one). A user without a queue of their own uses root's by naming it."""
    named = os.environ.get(SOCKET_ENV)
    if named:
        return named
    if os.geteuid() == 0:
        return ROOT_SOCKET
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return str(Path(runtime) / "mezzo-queue.sock")
    # Never a shared directory such as /tmp: another user could take the name first.
    return str(Path.home() / ".local/state/mezzo/queue.sock")


def default_state_dir() -> str:
    """Where the queue keeps its journal unless told: ``/var/lib/mezzo/queue`` for root,
    else ``~/.local/state/mezzo/queue``."""
    if os.geteuid() == 0:
        return "/var/lib/mezzo/queue"
    return str(Path.home() / ".local/state/mezzo/queue")


class QueueUnreachable(RequestFailed):
    """Nothing serves the queue's socket."""


class UntrustedQueue(QueueUnreachable):
    """The socket is served by a user other than root or the caller."""


class QueueRefused(RequestFailed):
    """The queue answered with an error: ``status`` and its message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.path)
            _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        except BaseException:
            sock.close()
            raise
        if uid not in (0, os.geteuid()):
            # Whoever serves it would see the command (and could answer anything): only a
            # queue of root's or of this user's is trusted.
            sock.close()
            raise UntrustedQueue(f"{self.path} is served by uid {uid}, neither root nor you: not used")
        self.sock = sock


class QueueClient:
    """One request per connection (the queue is local: a connect costs microseconds)."""

    def __init__(self, path: str | None = None, *, timeout: float = 10.0) -> None:
        self.path = path or default_socket()
        self.timeout = timeout

    def get(self, endpoint: str, /, **params: Any) -> Any:
        fields = {k: str(v) for k, v in params.items() if v is not None}
        query = urllib.parse.urlencode(fields)
        return self._request("GET", f"{endpoint}?{query}" if query else endpoint, None)

    def post(self, endpoint: str, body: dict[str, Any]) -> Any:
        return self._request("POST", endpoint, json.dumps(body).encode())

    def _request(self, method: str, target: str, body: bytes | None) -> Any:
        conn = _UnixConnection(self.path, self.timeout)
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            conn.request(method, target, body=body, headers=headers)
            answer = conn.getresponse()
            data = answer.read(ANSWER_MAX_BYTES)
        except UntrustedQueue:
            raise
        except (FileNotFoundError, ConnectionRefusedError):
            raise QueueUnreachable(
                f"no queue at {self.path} (start one: mezzo queue, or mezzo local --queue; "
                f"or name it: --queue PATH or ${SOCKET_ENV})"
            ) from None
        except PermissionError:
            raise QueueUnreachable(f"the queue's socket {self.path}: permission denied") from None
        except TimeoutError:
            raise QueueUnreachable(f"the queue at {self.path} gave no answer in {self.timeout:g} s") from None
        except (OSError, http.client.HTTPException) as exc:
            raise QueueUnreachable(f"the queue at {self.path}: {exc}") from None
        finally:
            conn.close()
        try:
            value = json.loads(data)
        except ValueError:
            raise QueueUnreachable(
                f"{self.path} answered something other than JSON: not a mezzo queue?"
            ) from None
        if answer.status >= 400:
            message = value.get("error") if isinstance(value, dict) else None
            raise QueueRefused(answer.status, str(message or f"HTTP {answer.status}"))
        return value
