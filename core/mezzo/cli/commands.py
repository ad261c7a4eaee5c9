"""What each ``mezzo`` sub-command does; argument parsing lives in :mod:`.main`.

Each command imports what it runs in its own body, not here: asyncio, structlog and
pluggy, which the daemons need, took ~100 ms of start-up, and ``mezzo ps`` (:func:`tool`)
should cost little more than a Python start-up (issue 17).
"""

from __future__ import annotations

import argparse
import json
import os

from ..errors import ConfigError

# typing itself is not imported: 2-3 ms of a command's start-up.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..config import Config, TlsConfig

CONFIG_ENV = "MEZZO_CONFIG"
"""Where a configuration file is named when ``--config`` is not (:data:`mezzo.config.CONFIG_ENV`)."""
DEFAULT_MASTER = "127.0.0.1:5050"
"""``agent.master``'s default (:class:`mezzo.config.AgentConfig`)."""


def _load(args: argparse.Namespace, overrides: dict[str, Any]) -> Config:
    """The configuration (``--config`` or ``$MEZZO_CONFIG``, then ``overrides``), with
    logging set up from it and the log flags."""
    from .. import config as config_mod

    cfg = config_mod.load(args.config, overrides)
    _configure_logging(args, cfg)
    return cfg


def _client_target(args: argparse.Namespace) -> tuple[str, TlsConfig | None]:
    """The master a client command asks (``--master``, else ``agent.master``) and the
    ``[tls]`` to ask it with: the configuration's, read and checked as every command
    reads it. Without a file (no ``--config``, no ``$MEZZO_CONFIG``) there is nothing to
    read or check: the answer is the flag or the default, in plaintext, and
    :mod:`mezzo.config` is not imported (its tables are a third of ``mezzo ps``'s
    start-up, issue 17)."""
    if not (args.config or os.environ.get(CONFIG_ENV)):
        return args.master or DEFAULT_MASTER, None
    from .. import config as config_mod

    cfg = config_mod.load(args.config, {"agent.master": args.master})
    return cfg.agent.master, cfg.tls


def _configure_logging(args: argparse.Namespace, cfg: Config) -> None:
    from .. import log as log_mod

    log_mod.configure(args.log_level or cfg.log.level, args.log_format or cfg.log.format, final=True)


def _import_aiohttp_without_the_system_cas() -> None:
    """Import aiohttp, for a daemon this process will be, with OpenSSL pointed at an
    empty CA file; then put the environment back.

    aiohttp builds two client TLS contexts at import, each loading the system's CA
    bundle: about 0.1 s on this project's machines, a sixth of a master's start-up. A
    daemon never uses them: its servers need no client context, and mezzo's TLS
    (:mod:`mezzo.rpc.tls`) trusts only the cluster's own CA. Were one used all the same,
    it would trust nobody and fail its handshake, never accept a peer it should not.
    Only the daemon commands do this, before they start anything: a library user's
    process keeps aiohttp's defaults, and no thread can fork a child meanwhile.
    """
    import sys

    if "aiohttp" in sys.modules:
        return
    saved = os.environ.get("SSL_CERT_FILE")
    os.environ["SSL_CERT_FILE"] = os.devnull
    try:
        import aiohttp  # noqa: F401
    finally:
        if saved is None:
            del os.environ["SSL_CERT_FILE"]
        else:
            os.environ["SSL_CERT_FILE"] = saved


def _attributes(spec: str | None) -> dict[str, str] | None:
    if spec is None:
        return None
    out = {}
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        k, sep, v = part.partition(":")
        if not sep or not k.strip():
            raise ConfigError("--attributes", f"cannot parse {part!r}: expected NAME:VALUE")
        out[k.strip()] = v.strip()
    return out


def _agent_overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "agent.resources": args.resources,
        "agent.attributes": _attributes(args.attributes),
        "agent.work_dir": args.work_dir,
        "agent.isolation": [s.strip() for s in args.isolation.split(",") if s.strip()]
        if args.isolation
        else None,
        "agent.hostname": args.hostname,
    }


def _serve(*daemons: Any, loop: str = "asyncio") -> int:
    """:func:`_serve_until_signal` on a new event loop of kind ``loop`` (:mod:`mezzo.event_loop`)."""
    from .. import event_loop

    return event_loop.run(_serve_until_signal(*daemons), loop)


async def _serve_until_signal(*daemons: Any) -> int:
    """Start ``daemons`` in order, run until SIGINT/SIGTERM or until a daemon stops on
    its own (an agent the master refused), then stop them in reverse.

    Returns the exit status: 0 after a signal, 1 when a daemon stopped by itself.
    """
    import asyncio
    import contextlib
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    started = []
    waiters = [asyncio.ensure_future(stop.wait())]
    try:
        for d in daemons:
            await d.start()
            started.append(d)
            # A composite daemon (mezzo local) lists the daemons it runs; watch each.
            inner_daemons = d.daemons() if hasattr(d, "daemons") else [d]
            for inner in inner_daemons:
                if isinstance(getattr(inner, "stopped", None), asyncio.Event):
                    waiters.append(asyncio.ensure_future(inner.stopped.wait()))
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        return 0 if stop.is_set() else 1
    finally:
        for w in waiters:
            w.cancel()
        errors = []
        for d in reversed(started):
            try:
                await d.stop()
            except Exception as exc:  # gather, do not lose later clean-ups
                errors.append(exc)
        if errors:
            raise errors[0]


def master(args: argparse.Namespace) -> int:
    cfg = _load(
        args,
        {
            "master.listen": args.listen,
            "master.advertise": args.advertise,
            "master.zk": args.zk,
            "master.allocator.name": args.allocator,
            "master.allocation_interval": args.allocation_interval,
            "master.offer_timeout": args.offer_timeout,
        },
    )
    _import_aiohttp_without_the_system_cas()
    from ..master import Master
    from ..plugins import load_plugins

    return _serve(Master(cfg.master, load_plugins(), tls=cfg.tls), loop=cfg.master.event_loop)


def agent(args: argparse.Namespace) -> int:
    overrides = _agent_overrides(args)
    overrides.update(
        {
            "agent.master": args.master,
            "agent.listen": args.listen,
            "agent.advertise": args.advertise,
            "agent.keep_tasks_on_stop": args.keep_tasks_on_stop,
        }
    )
    cfg = _load(args, overrides)
    _import_aiohttp_without_the_system_cas()
    from ..agent import Agent
    from ..plugins import load_plugins

    return _serve(Agent(cfg.agent, load_plugins(), tls=cfg.tls))


def local(args: argparse.Namespace) -> int:
    if args.agents < 1:
        raise ConfigError("--agents", f"expected at least 1 agent, got {args.agents}")
    overrides = _agent_overrides(args)
    overrides.update({"master.listen": args.listen, "master.allocator.name": args.allocator})
    cfg = _load(args, overrides)
    _import_aiohttp_without_the_system_cas()
    from ..plugins import load_plugins
    from .local_cluster import LocalCluster, throwaway_tls

    agent_tls = queue_tls = None
    if not cfg.tls.enabled and not args.no_tls:
        # Before the plugins load and anything binds: a failure to write them is exit 2.
        try:
            cfg.tls, agent_tls, client = throwaway_tls(cfg.agent.work_dir)
        except OSError as exc:
            raise ConfigError("agent.work_dir", f"cannot write certificates there: {exc}") from None
        print(f"mezzo local: TLS on, throw-away certificates; clients: MEZZO_CONFIG={client}", flush=True)
        from .. import config as config_mod

        queue_tls = config_mod.load(client).tls  # the queue is a client: the operator's certificate
        if not cfg.master.acls.configured and cfg.master.acls.permissive is None:
            # Authentication on and the default deny: the principals it just made get
            # exactly what a one-person cluster needs, nobody else anything.
            from ..acls import parse, single_tenant

            cfg.master.acls = parse(
                single_tenant(agents=["agent"], operators=["operator"], frameworks=["operator"])
            )
    queue = None
    if args.queue:
        from ..queue.client import default_socket
        from .queue_commands import queue_settings

        queue = queue_settings(cfg)
        queue.socket = queue.socket or default_socket()
        queue.state_dir = queue.state_dir or os.path.join(cfg.agent.work_dir, "queue")
        print(
            f"mezzo local: batch queue at {queue.socket} (mezzo submit, mezzo jobs)",
            flush=True,
        )
    cluster = LocalCluster(
        cfg, args.agents, load_plugins(), agent_tls=agent_tls, queue=queue, queue_tls=queue_tls
    )
    return _serve(cluster)


def run(args: argparse.Namespace) -> int:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise ConfigError("CMD", "no command given: mezzo run [--cpus N] [--mem MB] -- CMD ...")
    # No logging to set up: the run is a v1 client, which prints its own lines (and
    # structlog with asyncio would be a quarter of the run's time).
    master, tls = _client_target(args)
    from .run_task import run_command

    return run_command(
        master,
        cmd,
        cpus=args.cpus,
        mem=args.mem,
        name=args.name,
        user=args.user,
        timeout=args.timeout,
        tls=tls,
        lost_master_after=args.lost_master_after,
    )


def state(args: argparse.Namespace) -> int:
    cfg = _load(args, {"agent.master": args.master})
    from ..state_client import fetch_agent_statistics, fetch_metrics, fetch_state

    if args.agent:
        print(json.dumps(fetch_agent_statistics(args.agent, args.timeout, cfg.tls), indent=2))
        return 0
    fetch = fetch_metrics if args.metrics else fetch_state
    print(json.dumps(fetch(cfg.agent.master, args.timeout, cfg.tls), indent=2))
    return 0


def teardown(args: argparse.Namespace) -> int:
    cfg = _load(args, {"agent.master": args.master})
    from ..state_client import teardown_framework

    print(teardown_framework(cfg.agent.master, args.framework_id, args.timeout, cfg.tls))
    return 0


def tool(args: argparse.Namespace) -> int:
    """One of the operator's commands (:mod:`.tools`), against the master's HTTP API.

    Nothing it runs logs but the ZooKeeper client finding the leader of a ``zk://``
    master, so logging is set up for that alone: structlog loads asyncio, 50 ms or more
    of start-up."""
    master, tls = _client_target(args)
    if master.strip().startswith("zk://"):
        from .. import config as config_mod

        _configure_logging(args, config_mod.load(args.config, {"agent.master": args.master}))
    from . import tools

    with tools.client(args, master, tls) as api:
        return getattr(tools, {"tasks": "ps"}.get(args.tool, args.tool))(args, api)


def plugins(args: argparse.Namespace) -> int:
    from ..plugins import load_plugins

    _load(args, {})
    rows = load_plugins().describe()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        print(f"{row['plugin']}  ({row['distribution']})")
        for c in row["components"]:
            print(f"    {c['kind']:<17} {c['name']:<20} {c['description']}")
    return 0


def certs(args: argparse.Namespace) -> int:
    import socket
    from pathlib import Path

    from ..certs import check_host, check_principal, ensure_ca, issue

    directory = Path(args.dir)
    hosts = [check_host(h) for h in args.host or sorted({"localhost", "127.0.0.1", socket.getfqdn()})]
    principals = [check_principal(p) for p in args.principal or ["master", "agent", "operator"]]
    ensure_ca(directory)
    print(f"CA: {directory / 'ca.crt'} (key {directory / 'ca.key'}: keep it off the cluster's machines)")
    for principal in principals:
        issued = issue(directory, principal, hosts, days=args.days, overwrite=args.force)
        print(f"{principal}: {issued.cert}, key {issued.key}")
    print(f"hosts named: {', '.join(hosts)}")
    print("[tls] of a process holding PRINCIPAL's files:")
    print(
        f'  enabled = true\n  ca = "{directory.resolve() / "ca.crt"}"\n'
        f'  cert = "{directory.resolve()}/PRINCIPAL.crt"\n  key = "{directory.resolve()}/PRINCIPAL.key"'
    )
    return 0
