"""The unix users an agent runs tasks as (``agent.switch_user``).

An agent running as root (its effective uid 0) with ``agent.switch_user`` on runs each
command task and each executor as the user :func:`mezzo.task_user.task_user` names (the
command's, else the framework's, else ``nobody``); otherwise everything runs as the
agent's own user::

    switching = switches_users(config.switch_user)  # switch_user on and the agent is root
    user = resolve("etl")                         # UnknownUser if this host has no "etl"
    launch = ContainerLaunch(..., user=user)      # the containerizer drops to it last

What the containerizer does with a :class:`~mezzo.hookspecs.RunAs`, and why in that
order, is in :mod:`.containerizer` (``_spawn``): the isolators' ``preexec`` functions and
wrappers, and the exit wrapper that records the status, run as root; the command is the
first thing that runs as the user. Where something runs before the command in the same
process (a wrapper such as ``lxc-execute``, or the exit wrapper) the switch is made by
``setpriv`` (util-linux) right before the command: :func:`switch_argv`.

Lookups go through the C library (``pwd``, ``os.getgrouplist``), so users from LDAP or
sssd count as well as ``/etc/passwd``'s; they may block, so the agent makes them on a
worker thread.
"""

from __future__ import annotations

import os
import pwd

from ..hookspecs import RunAs

SETPRIV_PLACES = ("/usr/bin/setpriv", "/bin/setpriv", "/usr/sbin/setpriv", "/sbin/setpriv")
"""Where :func:`find_setpriv` looks, in order: fixed places only, since the wrapper runs it
as root with the task's environment (a ``PATH`` the framework chose)."""


class UnknownUser(LookupError):
    """The user a task should run as does not exist on this host; ``str()`` names it."""


def switches_users(switch_user: bool) -> bool:
    """Whether an agent with ``agent.switch_user`` set so runs tasks as their users: only
    as root can it become another user."""
    return switch_user and os.geteuid() == 0


def resolve(name: str) -> RunAs:
    """The uid, primary gid, supplementary groups (``os.getgrouplist``, the primary one
    included) and home directory of user ``name``. Raises :class:`UnknownUser`."""
    if not name or "\0" in name:
        raise UnknownUser(f"no user {name!r}")
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise UnknownUser(f"no user {name!r}") from None
    try:
        groups = os.getgrouplist(entry.pw_name, entry.pw_gid)
    except OSError:
        groups = [entry.pw_gid]
    return RunAs(
        name=entry.pw_name,
        uid=entry.pw_uid,
        gid=entry.pw_gid,
        groups=tuple(dict.fromkeys(groups)),
        home=entry.pw_dir or "/",
    )


def identity_env(user: RunAs) -> dict[str, str]:
    """``HOME``, ``USER`` and ``LOGNAME`` of ``user``: a task switched to it gets these
    instead of the agent's (root's) values that ``agent.inherited_environment`` passes on."""
    return {"HOME": user.home, "USER": user.name, "LOGNAME": user.name}


_setpriv: str | None = None


def find_setpriv() -> str | None:
    """The absolute path of ``setpriv`` (util-linux), or None where there is none."""
    global _setpriv
    if _setpriv is None:
        _setpriv = next((p for p in SETPRIV_PLACES if os.access(p, os.X_OK)), "")
    return _setpriv or None


def switch_argv(user: RunAs) -> list[str]:
    """The argv prefix that runs what follows it as ``user``: ``setpriv`` sets the groups,
    then the gid, then the uid (real, effective and saved alike), so no way back to root
    is left, then execs it. Raises ``FileNotFoundError`` when there is no setpriv (the
    agent checks at start-up: :class:`~mezzo.errors.ConfigError` ``agent.switch_user``)."""
    setpriv = find_setpriv()
    if setpriv is None:
        raise FileNotFoundError("running tasks as their users needs setpriv (util-linux), found nowhere")
    groups = ",".join(str(g) for g in user.groups)
    return [
        setpriv,
        f"--reuid={user.uid}",
        f"--regid={user.gid}",
        f"--groups={groups}" if groups else "--clear-groups",
        "--",
    ]


def become(user: RunAs) -> None:
    """Become ``user`` for good, in a forked child about to exec: supplementary groups,
    then the gid, then the uid (after setuid nothing else could be changed). Raises
    ``OSError``."""
    os.setgroups(list(user.groups))
    os.setgid(user.gid)
    os.setuid(user.uid)
