"""The master's HTTP API from a blocking client: what ``mezzo ps``, ``task``, ``logs``,
``kill``, ``agents``, ``frameworks``, ``drain`` and ``undrain`` ask through.

    client = OperatorClient("127.0.0.1:5050")             # or zk://HOST:PORT/PATH
    client.get("/tasks", state="active", limit=100)       # the parsed JSON answer
    client.post("/master/kill", frameworkId=fid, taskId=tid)
    client.read_file(agent_id, "/frameworks/F/executors/E/runs/latest/stdout", offset=0)

No event loop and no Thrift: HTTP/1.1 over one keep-alive connection
(:mod:`mezzo.blocking_http`), so a command costs one Python start-up and a round trip. ``zk://`` addresses are resolved once, to the
leader (through ZooKeeper, the only part that needs asyncio). TLS as every client of the
cluster has it: the ``tls`` table given, else the ``[tls]`` of ``$MEZZO_CONFIG``
(:func:`mezzo.rpc.tls.client_tls_for`); the client's certificate is its principal, and the
master's ACLs decide what it may see and do.

Failures raise one-line errors: :class:`~mezzo.errors.MasterUnreachable` (nothing
listens, no answer in time, the peer is not a mezzo master's HTTP API, no leader) and
:class:`~mezzo.errors.NotAllowed` (403: the ACL named), :class:`ApiError` for any other
error answer, with the master's own message. A standby's 307 is followed once, to the leader.
"""

from __future__ import annotations

import json
import os

from .blocking_http import ClosedBeforeAnswer, HttpConnection, TooLarge
from .errors import MasterUnreachable, MezzoError, NotAllowed, RequestFailed
from .rpc.address import parse_address

# typing itself is not imported: 2-3 ms of a command's start-up.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import ssl
    from typing import Any

    from .config import TlsConfig

ANSWER_MAX_BYTES = 1 << 30
"""The largest answer read (the state of a 50,000-agent cluster is tens of megabytes)."""


class ApiError(RequestFailed):
    """The master answered with an error: ``status`` (HTTP) and its message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class NoHttpAnswer(MasterUnreachable):
    """The peer took the connection but gave no HTTP answer: not an HTTP server, or a mezzo
    master whose HTTP API is off (``[master.http] enabled = false``)."""


_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def form_encode(fields: dict[str, str]) -> str:
    """``fields`` as ``application/x-www-form-urlencoded`` (what ``urllib.parse.urlencode``
    writes, but for spaces as ``%20``, which every reader takes alike): its import,
    with ``ipaddress``, was 2 ms of a command's start-up."""
    return "&".join(f"{_percent(k)}={_percent(v)}" for k, v in fields.items())


def _percent(text: str) -> str:
    return "".join(chr(b) if b in _UNRESERVED else f"%{b:02X}" for b in text.encode("utf-8"))


class OperatorClient:
    """One master's HTTP API; see the module docstring. Not thread-safe; :meth:`close`
    (or ``with``) when done."""

    def __init__(self, master: str, *, timeout: float = 10.0, tls: TlsConfig | None = None) -> None:
        self.master = master
        self.timeout = timeout
        self._context: ssl.SSLContext | None = None
        if (tls is not None and tls.enabled) or (tls is None and os.environ.get("MEZZO_CONFIG")):
            # Only then: ssl and the TLS settings' checks cost a plaintext command ~15 ms.
            from .rpc.tls import client_tls_for

            client = client_tls_for(tls)
            self._context = client.context if client is not None else None
        self._address: tuple[str, int] | None = None
        self._conn: HttpConnection | None = None
        self._used = False
        """A request went over ``_conn`` already (the master may have closed it since)."""

    def __enter__(self) -> OperatorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._used = False

    # -- requests ---------------------------------------------------------------------

    def get(self, endpoint: str, /, **params: Any) -> Any:
        """``GET endpoint?params`` (None values left out): the parsed JSON answer."""
        return self._json(self.request("GET", endpoint, params))

    def post(self, endpoint: str, /, **form: Any) -> Any:
        """``POST endpoint`` with ``form`` URL-encoded: the parsed JSON answer (or None if empty)."""
        body = self.request("POST", endpoint, form)
        return self._json(body) if body.strip() else None

    @property
    def address(self) -> str:
        """``HOST:PORT`` of the master asked: the leader a ``zk://`` address or a standby's
        redirect led to."""
        host, port = self._resolve()
        return f"{host}:{port}"

    @property
    def context(self) -> ssl.SSLContext | None:
        """The TLS context it dials with (None: plaintext), for another client of the same master."""
        return self._context

    def forget_leader(self) -> None:
        """Find the leader anew at the next request (after a failover): a ``zk://`` address
        is looked up again, a ``HOST:PORT`` asked again (a standby redirects)."""
        self.close()
        self._address = None

    def _json(self, body: bytes) -> Any:
        try:
            return json.loads(body)
        except ValueError:
            raise MasterUnreachable(
                f"{self._where()} answered something other than JSON: not a mezzo master?"
            ) from None

    def read_file(self, agent_id: str, path: str, offset: int, length: int | None = None) -> dict[str, Any]:
        """A page of a sandbox file through the master: ``{"offset", "data", "length"}``
        (``offset=-1``: the file's size)."""
        answer: dict[str, Any] = self.get(
            "/files/read", agent_id=agent_id, path=path, offset=offset, length=length
        )
        return answer

    def request(self, method: str, path: str, params: dict[str, Any]) -> bytes:
        """The body of a 2xx answer to ``method path``; the errors of the module docstring."""
        fields = {k: str(v) for k, v in params.items() if v is not None}
        encoded = form_encode(fields)
        target, body = (
            (f"{path}?{encoded}" if encoded else path, None) if method == "GET" else (path, encoded)
        )
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        for _hop in range(2):
            status, location, answer = self._exchange(method, target, body, headers)
            if status in (301, 302, 307, 308) and location:
                self._redirect(location)  # a standby: ask the leader
                continue
            if 200 <= status < 300:
                return answer
            raise _error(status, answer, method, path, self._where())
        raise MasterUnreachable(f"{self._where()} kept redirecting; no leading master answers")

    # -- the connection -------------------------------------------------------------------

    def _exchange(
        self, method: str, target: str, body: str | None, headers: dict[str, str]
    ) -> tuple[int, str | None, bytes]:
        if method != "GET" and self._used:
            self.close()  # never send a change down a kept-alive connection the master may have closed
        reused = self._used
        conn = self._connection()
        self._used = True
        data = body.encode() if body is not None else None
        try:
            try:
                answer = conn.request(method, target, data, headers, max_body=ANSWER_MAX_BYTES)
            except (ClosedBeforeAnswer, BrokenPipeError):
                if not reused:
                    raise
                # The master closes idle keep-alive connections: ask again on a new one.
                self.close()
                conn = self._connection()
                self._used = True
                answer = conn.request(method, target, data, headers, max_body=ANSWER_MAX_BYTES)
        except ConnectionRefusedError:
            self.close()
            raise MasterUnreachable(
                f"cannot reach the master at {self._where()}: connection refused (is it running? see --master)"
            ) from None
        except TimeoutError:
            self.close()
            raise MasterUnreachable(
                f"the master at {self._where()} did not answer within {self.timeout:g} s"
            ) from None
        except ConnectionError as exc:
            self.close()
            if isinstance(exc, TooLarge):
                raise MasterUnreachable(
                    f"the answer from {self._where()} is larger than {ANSWER_MAX_BYTES} bytes"
                ) from None
            hint = "" if self._context is not None else "; if it listens with TLS, give [tls] settings"
            raise NoHttpAnswer(
                f"{self._where()} did not answer as a mezzo master's HTTP API ({type(exc).__name__}{hint})"
            ) from None
        except OSError as exc:
            self.close()
            reason = getattr(exc, "reason", None)  # ssl.SSLError's
            if self._context is not None and type(exc).__module__ == "ssl":
                raise MasterUnreachable(f"TLS with {self._where()} failed: {reason or exc}") from None
            raise MasterUnreachable(
                f"cannot reach the master at {self._where()}: {exc.strerror or exc}"
            ) from None
        if answer.will_close:
            self.close()
        return answer.status, answer.header("location"), answer.body

    def _connection(self) -> HttpConnection:
        if self._conn is None:
            host, port = self._resolve()
            self._conn = HttpConnection(host, port, timeout=self.timeout, context=self._context)
        return self._conn

    def _resolve(self) -> tuple[str, int]:
        if self._address is None:
            self._address = resolve_master(self.master, self.timeout)
        return self._address

    def _redirect(self, location: str) -> None:
        import urllib.parse  # only on a redirect: 2 ms of a command's start-up otherwise

        url = urllib.parse.urlsplit(location if "//" in location else f"//{location}")
        if not url.hostname:
            raise MasterUnreachable(f"{self._where()} redirected to {location[:200]!r}, not a master")
        self.close()
        self._address = (url.hostname, url.port or 5050)

    def _where(self) -> str:
        if self._address is None:
            from .zk.url import shown

            return shown(self.master)
        host, port = self._address
        return f"{host}:{port}"


def resolve_master(master: str, timeout: float) -> tuple[str, int]:
    """``HOST:PORT`` parsed, or the leader of ``zk://...`` looked up; :class:`MasterUnreachable`
    naming the address when it cannot be used."""
    if master.strip().startswith("zk://"):
        import asyncio

        import structlog

        from . import log
        from .state_client import leader_of

        if not structlog.is_configured():
            # A command that set no logging up (mezzo run, ps): the ZooKeeper client's
            # lines go to stderr, and only what goes wrong. Its stdout is its output
            # (mezzo run -- cmd > file).
            log.configure("warning")

        return asyncio.run(leader_of(master, timeout))
    try:
        return parse_address(master.strip(), 5050)
    except ValueError as exc:
        raise MasterUnreachable(str(exc)) from None


def _error(status: int, body: bytes, method: str, path: str, where: str) -> MezzoError:
    try:
        message = str(json.loads(body)["error"])
    except (ValueError, KeyError, TypeError):
        # Every error of the master's API is JSON with "error": this is another server.
        return MasterUnreachable(f"{where} did not answer as a mezzo master's HTTP API (HTTP {status})")
    if status == 400 and "HTTPS" in message:  # a plaintext request at a TLS port
        return ApiError(
            status, f"{where}: {message}; give the cluster's [tls] with --config or $MEZZO_CONFIG"
        )
    if status == 403:
        return NotAllowed(f"{method} {path}: {message}")
    if status == 503:
        return MasterUnreachable(message)
    return ApiError(status, message)
