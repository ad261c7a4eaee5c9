"""TOML configuration of the master and the agent, validated with errors naming the key.

A file looks like::

    [master]
    listen = "127.0.0.1:5050"
    allocation_interval = 0.1
    [master.allocator]
    name = "drf"
    [master.allocator.drf]          # the selected component's own table
    roles = { analytics = 2.0 }
    [master.revocation_policy]      # selected like the allocator
    name = "fair-share"

    [agent]
    master = "127.0.0.1:5050"
    resources = "cpus:4;mem:4096"
    isolation = ["posix"]

    [log]
    level = "info"

    [master.connections]            # and [agent.connections]: bounds on peers
    max_per_address = 256

    [tls]                           # every connection; read by drivers and the CLI too
    enabled = true
    cert = "/etc/mezzo/tls/master.crt"
    key = "/etc/mezzo/tls/master.key"
    ca = "/etc/mezzo/tls/ca.crt"

Every key is declared below with its type and default (``docs/configuration.md``
documents them); an unknown key or a value of the wrong type raises
:class:`~mezzo.errors.ConfigError` naming the dotted key. Tables that belong to a
component (``master.allocator.<name>``, ``master.revocation_policy.<name>``,
``agent.isolators.<name>``) are passed to
that component as plain dicts and validated by it, since only it knows its keys.

Command-line flags override the file: the CLI calls :func:`load` with the file's
path and a dict of dotted overrides.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import ConfigError

if TYPE_CHECKING:
    from .acls import Acls
    from .resources import Resources

CONFIG_ENV = "MEZZO_CONFIG"

Count = int
"""The type of a setting that is a whole number >= 0 (0 = no limit, unless the key says
otherwise); a plain ``int`` setting must be positive."""

MIB = 1024 * 1024

INHERITED_ENVIRONMENT = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TERM",
    "TMPDIR",
    "HOME",
    "USER",
    "LOGNAME",
)
"""``agent.inherited_environment``'s default: what a program needs to find its tools and
speak the machine's language, and nothing that grants anything."""


@dataclass
class OneSelectedConfig:
    """The table of a component the master runs exactly one of: ``name`` selects it,
    and every other key is the settings table of the component with that name."""

    name: str = ""
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per-component tables, e.g. ``settings["drf"]`` from ``[master.allocator.drf]``."""

    def selected_settings(self) -> dict[str, Any]:
        return self.settings.get(self.name, {})


@dataclass
class AllocatorConfig(OneSelectedConfig):
    """``[master.allocator]``."""

    name: str = "drf"
    """Allocator component (``mezzo plugins`` lists the installed ones)."""


@dataclass
class RevocationPolicyConfig(OneSelectedConfig):
    """``[master.revocation_policy]``, shaped like ``[master.allocator]``, e.g.
    ``[master.revocation_policy.fair-share]`` holds that policy's settings."""

    name: str = "fair-share"
    """Revocation policy component (``mezzo plugins`` lists the installed ones)."""


_ONE_SELECTED = {AllocatorConfig: "allocator", RevocationPolicyConfig: "revocation policy"}
"""Tables of a one-selected component: ``name`` plus the components' settings tables."""


@dataclass
class ConnectionsConfig:
    """``[master.connections]`` and ``[agent.connections]``: what the peers of the
    daemon's port can make it hold (enforced by :mod:`mezzo.rpc.limits`;
    ``docs/configuration.md`` says why each default). 0 = no limit, but where said."""

    max_open: Count = 0
    """Connections served at once; 0 = as many as the open-file limit allows, less an
    eighth of it kept for the daemon's own files. Over it, a connection is closed at once."""
    max_per_address: Count = 256
    """Connections from one remote address at once."""
    max_per_loopback_address: Count = 0
    """Connections from one loopback address at once (local processes: ``mezzo
    local``, emulated agents, executors)."""
    first_frame_timeout: float = 10.0
    """Seconds a new connection has to deliver its first complete message."""
    unregistered_idle_timeout: float = 60.0
    """Seconds a connection whose peer never registered (a tool's) may stay silent."""
    partial_frame_timeout: float = 30.0
    """Seconds a message may take to arrive once its first bytes have."""
    partial_frames_max_bytes: int = 64 * MIB
    """Bytes of incomplete messages held over all connections (at least
    ``max_frame_bytes``); past it the oldest incomplete ones are dropped."""
    write_buffer_high: int = 1 * MIB
    """Unsent bytes for one peer above which it is not read from until it catches up."""
    write_buffer_max: int = 64 * MIB
    """Unsent bytes for one peer at which it is disconnected rather than sent more."""
    write_stall_timeout: float = 60.0
    """Seconds a peer that is behind (or being closed) may take no byte before it is
    disconnected."""


MAX_FRAMEWORK_IDLE_TIMEOUT = 3600.0
"""The master keeps its listening clock's history for longer than the longest peer
timeout (:mod:`mezzo.master.loop_watch`), ten samples a second."""


def check_framework_health(table: MasterConfig, prefix: str) -> None:
    """A scheduler must be pinged before it can be found silent. Raises
    :class:`ConfigError` naming the key."""
    interval, timeout = table.framework_ping_interval, table.framework_idle_timeout
    if timeout > MAX_FRAMEWORK_IDLE_TIMEOUT:
        raise ConfigError(
            f"{prefix}framework_idle_timeout",
            f"must be at most {MAX_FRAMEWORK_IDLE_TIMEOUT:g} seconds (0 = never), got {timeout}",
        )
    if interval > 0 and 0 < timeout < 2 * interval:
        raise ConfigError(
            f"{prefix}framework_idle_timeout",
            f"must be at least twice framework_ping_interval ({interval}), so that a scheduler "
            f"is pinged and has time to answer before it is found silent, got {timeout}",
        )


def check_agent_stop(table: AgentConfig, prefix: str) -> None:
    """Tasks left running at a stop are taken back through the journal: without it
    they would be orphans nobody reports. Raises :class:`ConfigError` naming the key."""
    if table.keep_tasks_on_stop and not table.checkpoint:
        raise ConfigError(
            f"{prefix}keep_tasks_on_stop",
            "needs checkpoint = true: a restarted agent takes back the tasks it left running "
            "from its journal",
        )


def check_connections(table: ConnectionsConfig, prefix: str) -> None:
    """Bounds that only make sense together. Raises :class:`ConfigError` naming the key."""
    if table.write_buffer_max < table.write_buffer_high:
        raise ConfigError(
            f"{prefix}write_buffer_max",
            f"must be at least write_buffer_high ({table.write_buffer_high}), got {table.write_buffer_max}",
        )


@dataclass
class HttpConfig:
    """``[master.http]``: the HTTP API, served at the master's own port (``listen``):
    a connection whose first bytes are an HTTP request is answered in HTTP, with
    TLS when the port has it, within ``[master.connections]``' bounds (:mod:`mezzo.http`)."""

    enabled: bool = True
    """Answer HTTP at the port; off, such a connection is closed like any bad peer."""
    event_heartbeat: float = 15.0
    """Seconds between ``HEARTBEAT`` events on the event streams: operators' (``/api/v1``,
    ``/events``) and v1 schedulers' subscriptions (``/api/v1/scheduler``; Mesos sends one every 15 s)."""
    file_timeout: float = 10.0
    """Seconds the ``/files/*`` proxy waits for an agent's answer before a 504 (``mezzo
    logs`` reads through it); longer for agents on slow disks or far away."""
    credentials: str = ""
    """A JSON file of HTTP Basic credentials in Apache Mesos' ``--credentials`` format
    (``{"credentials": [{"principal": ..., "secret": ...}]}``): a request carrying one
    is its principal's call, for the ACLs; one not matching is answered 401. "" = the
    ``Authorization`` header is ignored. Read by the master when it starts, not when a
    configuration is loaded (:mod:`mezzo.http.credentials`)."""


@dataclass
class AgentHttpConfig:
    """``[agent.http]``: the agent's HTTP API (``/files/*``, ``/metrics``), served at its own
    port like the master's (:mod:`mezzo.http.agent_api`)."""

    enabled: bool = True
    """Answer HTTP at the port; off, such a connection is closed like any bad peer."""
    readers: list[str] = field(default_factory=list)
    """With TLS: the principals who may read the sandboxes' files and the metrics at the
    agent directly; empty, only the master reads them (its ``/files/*`` proxy). Without
    TLS anyone may (callers have no principal)."""


@dataclass
class MasterConfig:
    listen: str = "127.0.0.1:5050"
    """Address the master binds."""
    advertise: str = ""
    """``HOST`` or ``HOST:PORT`` that agents, frameworks and tools dial to reach this
    master, published in ZooKeeper and in redirects; the port defaults to the bound
    one. Empty: the bound address, or this machine's fully qualified name when
    ``listen`` is a wildcard (``0.0.0.0``)."""
    allocation_interval: float = 0.1
    """Seconds over which allocation triggers are batched into one cycle."""
    offer_timeout: float = 30.0
    """Seconds before an unanswered offer is rescinded and re-offered (0 = never)."""
    refuse_seconds: float = 5.0
    """Default refuse filter for declines and unused parts of accepted offers."""
    agent_reregister_timeout: float = 30.0
    """Seconds a disconnected agent has to come back before its tasks are TASK_LOST;
    after a failover, what an admitted agent has to re-register with the new leader."""
    agent_ping_interval: float = 5.0
    """An agent connection silent this long is pinged."""
    agent_ping_timeout: float = 15.0
    """An agent connection silent this long (no pong, nothing) is declared lost: its
    tasks become TASK_LOST and frameworks hear ``agent_lost`` (0 = never). Silence is
    counted on the master's listening clock: time its own event loop was stalled is
    never charged to an agent."""
    agent_removal_fraction: float = 0.1
    """At most this fraction of the registered agents (at least one) is removed as lost
    within any ``agent_removal_window``; more losses than that are taken for the
    master's own trouble (its network, its load) and wait, logged, until a later
    window (Apache Mesos' ``--agent_removal_rate_limit``)."""
    agent_removal_window: float = 60.0
    """Seconds over which ``agent_removal_fraction`` is counted."""
    framework_ping_interval: float = 15.0
    """A scheduler connection silent this long is pinged (``Scheduler.ping``, answered
    ``pong`` by the driver); 0 turns framework health checks off."""
    framework_idle_timeout: float = 300.0
    """A scheduler connection silent this long (no pong, nothing) is closed and its
    framework treated as disconnected: its ``failover_timeout`` applies (0 = never).
    Counted on the master's listening clock, like ``agent_ping_timeout``."""
    framework_call_rate: float = 1000.0
    """Calls a second a framework may make on its own initiative (acknowledgements,
    answers to outstanding offers and the first kill of each task are free), refilling
    a bucket of ``framework_call_burst``; 0 = no limit (Apache Mesos' ``--rate_limits``)."""
    framework_call_burst: int = 10000
    """Calls a framework may make at once above ``framework_call_rate``."""
    zk: str = ""
    """``zk://HOST:PORT[,HOST:PORT]/PATH``: contend for leadership with the other
    masters there; empty = a lone master that leads from the start."""
    zk_session_timeout: float = 10.0
    """ZooKeeper session of the election: how long a crashed leader keeps leading
    in ZooKeeper's eyes, so it bounds failover time (the server clamps it to
    2-20 of its ticks)."""
    recovery_hold_timeout: float = 10.0
    """After a failover, offers wait until every agent the cluster admitted has
    re-registered, at most this long, so nothing is offered twice."""
    framework_recovery_timeout: float = 30.0
    """After a failover, a framework known only from its agents' reports has this
    long (or its ``failover_timeout`` if longer) to re-register before its tasks are
    killed."""
    max_frame_bytes: int = 16 * 1024 * 1024
    """Largest message accepted; bigger frames close the connection."""
    connections: ConnectionsConfig = field(default_factory=ConnectionsConfig)
    """Bounds on the connections of the master's port."""
    http: HttpConfig = field(default_factory=HttpConfig)
    """The HTTP API at the master's port."""
    max_completed_tasks_per_framework: Count = 1000
    """Ended tasks kept per framework for the HTTP API (``/state``, ``/tasks``), as
    Apache Mesos' flag of that name; 0 keeps none."""
    max_completed_frameworks: Count = 50
    """Removed frameworks kept, with their ended tasks, for the HTTP API; 0 keeps none."""
    max_task_data_bytes: int = 1024 * 1024
    """Largest ``TaskInfo.data`` a launch may carry; a bigger task is TASK_ERROR
    ``task_data_too_large`` (the agent keeps it in memory and in its journal)."""
    max_task_metadata_bytes: int = 64 * 1024
    """Largest total of a task's labels, command arguments and environments; a bigger
    task is TASK_ERROR ``task_metadata_too_large``."""
    render_state_in_child: bool = True
    """Render ``mezzo state`` in a forked child so the event loop never stalls on it."""
    render_inline_max_items: Count = 128
    """A state this small (agents counting two, frameworks, tasks and offers one) is
    rendered on the event loop instead: about 2 ms at most, of the order of what the
    fork costs the loop, and far less than the 5 ms it costs the asker. 0: always fork."""
    event_loop: str = "uvloop"
    """The master's event loop: "uvloop" (libuv; TLS at a fraction of the CPU) or "asyncio"
    (the standard library's)."""
    min_offer: str = ""
    """Mesos syntax, scalars only (``cpus:4;mem:8192``): an agent is offered only once
    this much is free on it, capped by its total; empty = any amount (paper §4.6)."""
    long_task_fraction: float = 1.0
    """Long tasks (``TaskInfo.long``) may hold at most this fraction of each agent's
    resources (paper §4.4); 1 = no bound."""
    short_task_max: float = 0.0
    """Seconds after which a task not marked long is revoked; 0 = never."""
    revocation_delay: float = 0.0
    """Seconds a framework below its guarantee must go unoffered before tasks of
    frameworks above theirs are revoked for it (paper §3.3); 0 = never revoke."""
    revocation_grace_period: float = 3.0
    """Seconds a revoked task gets between the request to stop and the kill of its
    process tree (or of its whole executor)."""
    offer_filters: list[str] = field(default_factory=list)
    """Offer filter components applied after the built-in framework filters, in order."""
    offer_filter_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    allocator: AllocatorConfig = field(default_factory=AllocatorConfig)
    revocation_policy: RevocationPolicyConfig = field(default_factory=RevocationPolicyConfig)
    acls: Acls = field(default_factory=lambda: _parse_acls({}, "master.acls"))
    """``[master.acls]``: who may register frameworks in which roles, run tasks as which
    users, register agents, tear down and view whose frameworks (:mod:`mezzo.acls`).
    No rule decides: ``acls.permissive``, by default deny under TLS and allow without."""


DEFAULT_MAX_JOURNAL_BYTES = 1024 * 1024 * 1024
"""``agent.max_journal_bytes`` unless configured: 1 GiB."""
MIN_MAX_JOURNAL_BYTES = 64 * 1024
"""The smallest ``agent.max_journal_bytes`` accepted."""


@dataclass
class AgentConfig:
    master: str = "127.0.0.1:5050"
    """The master to register with."""
    listen: str = "127.0.0.1:5051"
    """Address the agent binds (executors connect here)."""
    advertise: str = ""
    """``HOST`` or ``HOST:PORT`` where peers reach this agent (its HTTP API, its files),
    as the master shows it; the port defaults to the bound one. Empty: the bound
    address; the master puts the host the agent's connection comes from in place of a
    wildcard, and of a loopback address when the connection comes from elsewhere."""
    hostname: str = ""
    """Name reported to the master; empty = this machine's hostname."""
    resources: str = ""
    """Mesos syntax, e.g. ``cpus:4;mem:4096;ports:[31000-32000]``; empty = detected."""
    attributes: dict[str, str] = field(default_factory=dict)
    work_dir: str = "/var/lib/mezzo/agent"
    """Sandboxes live under ``<work_dir>/frameworks/...``."""
    isolation: list[str] = field(default_factory=lambda: ["posix"])
    """Isolator components, in the order they prepare and isolate."""
    isolator_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    kill_grace_period: float = 3.0
    """Seconds between asking a task to stop (SIGTERM / executor kill) and killing its process tree."""
    executor_register_timeout: float = 20.0
    """Seconds a launched executor has to register before it is killed and its tasks fail."""
    status_update_retry: float = 1.0
    """Seconds: the shortest wait before an unacknowledged status update is re-sent.
    The n-th wait (n = 0, 1, ...) is drawn from the upper half of
    ``min(30, 2 * status_update_retry * 2**n)`` (equal jitter; the 30 s cap is raised to
    twice this if that is more): 1-2 s, 2-4 s, ..., then 15-30 s by default."""
    reconnect_interval: float = 0.5
    """Seconds: the longest first wait before redialling a master that cannot be reached
    or that dropped the connection. The n-th wait (n = 0, 1, ...) is drawn from the upper
    half of ``min(10, reconnect_interval * 2**n)`` (the 10 s cap is raised to this if that
    is more); an answered registration starts again from n = 0. A new leader named by
    ZooKeeper is dialled at once."""
    statistics_interval: float = 10.0
    """Seconds between reports of container usage to the master (``mezzo state``
    shows them); only sent while some isolator measures something. 0 = never."""
    switch_user: bool = True
    """An agent running as root runs each task and executor as its unix user
    (:func:`mezzo.task_user.task_user`: the command's ``user``, else the framework's, else
    ``nobody``) in a sandbox owned by that user. Off, or an agent not running as root:
    they run as the agent's own user."""
    inherited_environment: list[str] = field(default_factory=lambda: list(INHERITED_ENVIRONMENT))
    """Names of the agent's environment variables its tasks and executors inherit; the
    rest (the agent's credentials, tokens, proxies) stays with the agent."""
    checkpoint: bool = True
    """Journal what the agent runs under ``<work_dir>/meta/`` so that an agent that
    restarts after a crash takes its tasks and executors back under the same id."""
    keep_tasks_on_stop: bool = False
    """An agent stopped by SIGTERM or SIGINT leaves its tasks and executors running and
    its journal in place, so that the next agent started on the same ``work_dir`` takes
    them back (an upgrade one agent at a time, with ``KillMode=process`` in its systemd
    unit). It must be back within the master's ``agent_reregister_timeout``, or its
    tasks are reported lost (but those of partition-aware frameworks) and killed when
    it returns. Off: stopping kills every task
    (``mezzo drain`` first moves work away gently). Needs ``checkpoint``."""
    max_journal_bytes: int = DEFAULT_MAX_JOURNAL_BYTES
    """The most the checkpoint journal may take on disk. It is compacted (rewritten with
    only what is live) as it grows, so it holds the live state and at most as much
    history; a task whose records would take the live state past half of this is
    refused (TASK_DROPPED, reason ``journal_full``). At least 64 KiB."""
    max_frame_bytes: int = 16 * 1024 * 1024
    connections: ConnectionsConfig = field(default_factory=ConnectionsConfig)
    """Bounds on the connections of the agent's port (executors, tools)."""
    http: AgentHttpConfig = field(default_factory=AgentHttpConfig)
    """The HTTP API at the agent's port."""


@dataclass
class LogConfig:
    level: str = "info"
    """debug, info, warning or error."""
    format: str = "console"
    """console (human) or json (one object a line)."""


PEER_CERTIFICATES = ("required", "optional")
"""Values of ``tls.peer_certificates``."""


@dataclass
class TlsConfig:
    """``[tls]``: TLS and certificates for this process's connections.

    The same table serves the master, agents, the CLI and frameworks' drivers (which
    read it from ``$MEZZO_CONFIG``); each process names its own certificate."""

    enabled: bool = False
    """Listen and dial with TLS. Every process of a cluster must agree."""
    cert: str = ""
    """This process's certificate (PEM; a chain may follow it in the file)."""
    key: str = ""
    """The certificate's private key (PEM, unencrypted; keep it 0600)."""
    ca: str = ""
    """The cluster's CA certificate(s) (PEM): peers' certificates are checked against it."""
    peer_certificates: str = "required"
    """Servers: "required" (every client shows a certificate of ``tls.ca``) or "optional"
    (clients without one are let in with no principal). An agent's port is always
    optional, since its executors dial it without certificates."""
    verify_hostname: bool = True
    """Clients: the server's certificate must name the host dialled (DNS name or IP address)."""
    handshake_timeout: float = 10.0
    """Seconds a peer has to finish the TLS handshake (its slot is held meanwhile)."""


@dataclass
class QueueConfig:
    """``[queue]``: the batch queue (``mezzo queue``) and where ``mezzo submit``,
    ``jobs`` and ``cancel`` find it."""

    master: str = ""
    """The master the queue registers with (HOST:PORT or zk://); empty: ``agent.master``."""
    socket: str = ""
    """The queue's unix socket; empty: :func:`mezzo.queue.client.default_socket`."""
    state_dir: str = ""
    """Where the job list is kept; empty: ``/var/lib/mezzo/queue`` for root, else
    ``~/.local/state/mezzo/queue``."""
    name: str = "mezzo-queue"
    """The queue's framework name."""
    role: str = "*"
    """The queue's framework role (weights, guarantees and priorities are per role)."""
    failover_timeout: float = 7 * 24 * 3600.0
    """Seconds the master keeps the queue's tasks running while the queue is down."""


@dataclass
class Config:
    master: MasterConfig = field(default_factory=MasterConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    log: LogConfig = field(default_factory=LogConfig)
    tls: TlsConfig = field(default_factory=TlsConfig)
    queue: QueueConfig = field(default_factory=QueueConfig)


# Component tables: the TOML table holding a component's settings, the dataclass
# field the tables land in, and the key selecting the component(s).
_COMPONENT_TABLES = {
    ("master", "offer_filter"): "offer_filter_settings",
    ("agent", "isolators"): "isolator_settings",
}


def load(path: str | os.PathLike | None = None, overrides: Mapping[str, Any] | None = None) -> Config:
    """Read ``path`` (or ``$MEZZO_CONFIG``, or nothing) and apply dotted ``overrides``.

    Raises :class:`ConfigError` naming the key for unknown keys, wrong types, an
    unreadable file or bad TOML.
    """
    path = path or os.environ.get(CONFIG_ENV) or None
    data: dict[str, Any] = {}
    if path:
        try:
            data = tomllib.loads(Path(path).read_bytes().decode("utf-8"))
        except OSError as exc:
            raise ConfigError(str(path), f"cannot read config file: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(
                str(path), f"config file is not UTF-8: {exc.reason} at byte {exc.start}"
            ) from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(str(path), f"invalid TOML: {exc}") from None
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        node = data
        *parents, leaf = dotted.split(".")
        for i, p in enumerate(parents):
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(
                    ".".join(parents[: i + 1]), f"is a value, not a table, so {dotted} cannot be set"
                )
        node[leaf] = value
    return from_dict(data)


def from_dict(data: Mapping[str, Any]) -> Config:
    """Build a validated :class:`Config` from parsed TOML."""
    return _build(Config, data, "")


def _build(cls: type, data: Any, prefix: str) -> Any:
    if not isinstance(data, Mapping):
        hint = ""
        if cls in _ONE_SELECTED and isinstance(data, str):
            hint = f" ([{prefix.rstrip('.')}] name = {data!r})"
        raise ConfigError(prefix.rstrip(".") or "<root>", f"expected a table{hint}, got {_kind(data)}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in _component_fields(cls)}
    if cls in _ONE_SELECTED:
        # Only `name` is a key here; every other table is a component's settings.
        fields = {"name": fields["name"]}
    kwargs: dict[str, Any] = {}
    components = _component_fields(cls)
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        comp_field = _component_table(cls, key)
        if comp_field is not None:
            kwargs[comp_field] = _component_settings(value, dotted)
            continue
        if cls in _ONE_SELECTED and key not in fields:
            # [master.allocator.<name>]: the named allocator's own settings table.
            if not isinstance(value, Mapping):
                what = _ONE_SELECTED[cls]
                raise ConfigError(
                    dotted, f"unknown key ({what} settings tables must be tables, got {_kind(value)})"
                )
            kwargs.setdefault("settings", {})[key] = dict(value)
            continue
        f = fields.get(key)
        if f is None:
            known = ", ".join(sorted([*fields, *components.values()]))
            raise ConfigError(dotted, f"unknown key (known keys here: {known})")
        kwargs[key] = _coerce(f.type, value, dotted)
        check = _VALUE_CHECKS.get(dotted)
        if check is not None:
            check(kwargs[key], dotted)
    built = cls(**kwargs)
    table_check = _TABLE_CHECKS.get(cls)
    if table_check is not None:
        table_check(built, prefix)
    return built


def _component_fields(cls: type) -> dict[str, str]:
    section = {MasterConfig: "master", AgentConfig: "agent"}.get(cls)
    return {fld: table for (sec, table), fld in _COMPONENT_TABLES.items() if sec == section}


def _component_table(cls: type, key: str) -> str | None:
    section = {MasterConfig: "master", AgentConfig: "agent"}.get(cls)
    fld = _COMPONENT_TABLES.get((section, key)) if section else None
    return fld


def _component_settings(value: Any, dotted: str) -> dict[str, dict[str, Any]]:
    if not isinstance(value, Mapping):
        raise ConfigError(dotted, f"expected a table of component tables, got {_kind(value)}")
    out = {}
    for name, table in value.items():
        if not isinstance(table, Mapping):
            raise ConfigError(f"{dotted}.{name}", f"expected a table, got {_kind(table)}")
        out[name] = dict(table)
    return out


def parse_min_offer(text: str, key: str = "master.min_offer") -> Resources | None:
    """``master.min_offer`` as :class:`~mezzo.resources.Resources`, or None when it asks
    for nothing (empty, or only zeros).

    Raises :class:`ConfigError` naming ``key`` when the text does not parse or names a
    range (a minimum is an amount; "ports:[31000-31009]" would ask for those very ports).
    """
    # Imported here: Resources loads the Thrift types (~15 ms), which the commands that
    # only read a configuration (mezzo ps, ...) have no use for.
    from .resources import InvalidResources, Resources

    try:
        minimum = Resources.parse(text)
    except InvalidResources as exc:
        raise ConfigError(key, str(exc)) from None
    if minimum.ranges:
        raise ConfigError(
            key,
            "only scalar resources (cpus, mem, disk, ...) can make a minimum, "
            f"not ranges such as {', '.join(sorted(minimum.ranges))}",
        )
    return minimum or None


# Keys whose values need more than a type check, checked when the file is loaded so
# that a mistake stops every command before it starts anything.
def check_fraction(value: float, key: str) -> float:
    """A share of something: in (0, 1]. Raises :class:`ConfigError` naming ``key``."""
    if not 0 < value <= 1:
        raise ConfigError(key, f"expected a fraction in (0, 1], got {value!r}")
    return value


LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("console", "json")


def check_choice(choices: tuple[str, ...], wanted: str) -> Callable[[str, str], str]:
    """A check that a key is one of ``choices`` (``log.level``, ``log.format``; ``wanted``
    says so in the error): made when the file is read, so that commands which set no
    logging up (``mezzo ps``) refuse a bad value as the daemons do."""

    def check(value: str, key: str) -> str:
        if value not in choices:
            raise ConfigError(key, f"expected {wanted}, got {value!r}")
        return value

    return check


def check_tenth_second(value: float, key: str) -> float:
    """At least a tenth of a second: ``master.http.event_heartbeat`` (0 would stream
    heartbeats without pause) and ``master.http.file_timeout`` (0 would answer every
    file request 504)."""
    if value < 0.1:
        raise ConfigError(key, f"expected at least 0.1 seconds, got {value!r}")
    return value


def check_journal_bytes(value: int, key: str) -> int:
    """``agent.max_journal_bytes``: room for a journal. Raises :class:`ConfigError` naming ``key``."""
    if value < MIN_MAX_JOURNAL_BYTES:
        raise ConfigError(key, f"expected at least {MIN_MAX_JOURNAL_BYTES} bytes (64 KiB), got {value!r}")
    return value


# Checks of single values beyond their type: called with the coerced value and its
# dotted key, they raise ConfigError; what they return is not used.
def check_event_loop(value: str, key: str) -> str:
    """``master.event_loop``: see :func:`mezzo.event_loop.check_event_loop`."""
    from .event_loop import check_event_loop as check

    return check(value, key)


_VALUE_CHECKS: dict[str, Callable[[Any, str], object]] = {
    "master.event_loop": check_event_loop,
    "master.min_offer": parse_min_offer,
    "master.long_task_fraction": check_fraction,
    "master.agent_removal_fraction": check_fraction,
    "agent.max_journal_bytes": check_journal_bytes,
    "master.http.event_heartbeat": check_tenth_second,
    "master.http.file_timeout": check_tenth_second,
    "log.level": check_choice(LOG_LEVELS, "one of " + ", ".join(LOG_LEVELS)),
    "log.format": check_choice(LOG_FORMATS, "'console' or 'json'"),
}


def check_tls(cfg: TlsConfig, prefix: str) -> None:
    """``[tls]``: see :func:`mezzo.rpc.tls.check_tls` (imported here when a file is
    loaded, so that reading a configuration does not load the RPC layer)."""
    from .rpc.tls import check_tls as check

    check(cfg, prefix)


# Checks of a whole table once built, for keys that bound each other: called with the
# table and its dotted prefix ("master.connections."), they raise ConfigError.
_TABLE_CHECKS: dict[type, Callable[[Any, str], object]] = {
    AgentConfig: check_agent_stop,
    ConnectionsConfig: check_connections,
    MasterConfig: check_framework_health,
    TlsConfig: check_tls,
}


_NESTED = {
    "AllocatorConfig": AllocatorConfig,
    "RevocationPolicyConfig": RevocationPolicyConfig,
    "ConnectionsConfig": ConnectionsConfig,
    "HttpConfig": HttpConfig,
    "AgentHttpConfig": AgentHttpConfig,
    "MasterConfig": MasterConfig,
    "AgentConfig": AgentConfig,
    "LogConfig": LogConfig,
    "TlsConfig": TlsConfig,
    "QueueConfig": QueueConfig,
}


def _parse_acls(value: Any, dotted: str) -> Acls:
    """``[master.acls]`` (imported here, so that reading a configuration loads no master code)."""
    from .acls import parse

    return parse(value, dotted)


def _coerce(type_: Any, value: Any, dotted: str) -> Any:
    t = type_ if isinstance(type_, str) else getattr(type_, "__name__", str(type_))
    if t in _NESTED:
        return _build(_NESTED[t], value, dotted + ".")
    if t == "Acls":
        return _parse_acls(value, dotted)
    if t == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(dotted, f"expected a number, got {_kind(value)}")
        if value < 0 or value != value or value in (float("inf"),):
            raise ConfigError(dotted, f"expected a finite number >= 0, got {value!r}")
        return float(value)
    if t == "int":
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(dotted, f"expected a positive integer, got {value!r}")
        return value
    if t == "Count":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(dotted, f"expected an integer >= 0, got {value!r}")
        return value
    if t == "bool":
        if not isinstance(value, bool):
            raise ConfigError(dotted, f"expected true or false, got {_kind(value)}")
        return value
    if t == "str":
        if not isinstance(value, str):
            raise ConfigError(dotted, f"expected a string, got {_kind(value)}")
        return value
    if t == "list[str]":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(dotted, f"expected a list of strings, got {value!r}")
        return list(value)
    if t == "dict[str, str]":
        if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
            raise ConfigError(dotted, f"expected a table of strings, got {value!r}")
        return dict(value)
    raise AssertionError(f"config field {dotted} has unsupported type {t}")  # our bug, not the user's


def _kind(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a table"
    return f"{type(value).__name__} {value!r}"
