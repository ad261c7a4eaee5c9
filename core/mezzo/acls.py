"""Who may do what: the master's access control lists (``[master.acls]``).

In the shape of Apache Mesos' ACLs: for each *action* an ordered list of rules, each
naming *principals* (the subject: who acts, taken from the caller's TLS
certificate, see :func:`mezzo.rpc.tls.principal_of`) and, for most actions, the
*objects* acted on. In TOML::

    [master.acls]
    permissive = false            # what an action no rule decides gets

    [[master.acls.register_frameworks]]
    principals = ["etl"]          # or "*": anyone, even a caller without a certificate
    roles = ["batch"]

    [[master.acls.run_tasks]]
    principals = ["etl"]
    users = ["etl", "nobody"]

    [[master.acls.run_tasks]]     # a deny rule: allow = false
    principals = "*"
    users = ["root"]
    allow = false

The first rule of the action that matches both the principal and the object
decides: allowed, or refused when it says ``allow = false``. When no rule matches,
``permissive`` decides; left out, it is false when the master runs TLS (with
authentication on, the default is deny) and true without TLS, where no caller has a
principal.

The actions and what each rule's object is:

=======================  ==========================  =====================================
action                   object key                  checked when
=======================  ==========================  =====================================
``register_frameworks``  ``roles``                   a framework registers or fails over
``run_tasks``            ``users``                   each task is launched (its unix user,
                                                     :func:`mezzo.task_user.task_user`)
``register_agents``      (none)                      an agent registers or re-registers
``teardown_frameworks``  ``framework_principals``    an operator tears a framework down
``kill_tasks``           ``framework_principals``    an operator kills one of its tasks
``drain_agents``         (none)                      an operator drains or reactivates an agent
``view_frameworks``      ``users``                   ``mezzo state``: which frameworks
                                                     (by ``FrameworkInfo.user``) and their
                                                     tasks and offers a viewer sees
``view_cluster``         (none)                      ``mezzo state``'s master and agents,
                                                     and the metrics
=======================  ==========================  =====================================

Checks are O(rules) with set lookups, and the rules are the operator's: nothing a
peer sends makes them longer. This module only decides; the callers answer the
refused with an error and write the audit line (:mod:`.audit`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError

ANY = "*"
"""In place of a rule's ``principals`` or object list: matches every one (a principal:
also a caller without a certificate). Inside a list it is a plain name (the default
role's)."""

ACTIONS: dict[str, str | None] = {
    "register_frameworks": "roles",
    "run_tasks": "users",
    "register_agents": None,
    "teardown_frameworks": "framework_principals",
    "kill_tasks": "framework_principals",
    "drain_agents": None,
    "view_frameworks": "users",
    "view_cluster": None,
}
"""Each action and the key naming its rules' objects (None: the rules name principals only)."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule: ``principals`` and ``objects`` are None for :data:`ANY`."""

    principals: frozenset[str] | None
    objects: frozenset[str] | None
    allow: bool = True

    def names(self, principal: str | None) -> bool:
        """Whether this rule is about ``principal`` (None: a caller without a certificate)."""
        return self.principals is None or (principal is not None and principal in self.principals)

    def matches(self, principal: str | None, obj: str | None) -> bool:
        return self.names(principal) and (self.objects is None or obj in self.objects)


@dataclass(frozen=True)
class Acls:
    """The parsed ``[master.acls]``. ``permissive`` None: decided by :meth:`for_tls`."""

    rules: Mapping[str, tuple[Rule, ...]] = field(default_factory=dict)
    permissive: bool | None = None

    def for_tls(self, tls_enabled: bool) -> Acls:
        """These ACLs with ``permissive`` decided: when left out, deny by default under
        TLS (every caller authenticated) and allow without it."""
        if self.permissive is not None:
            return self
        return Acls(self.rules, permissive=not tls_enabled)

    @property
    def configured(self) -> bool:
        """True when some rule exists (an empty table and no table are alike)."""
        return any(self.rules.values())

    def allows(self, action: str, principal: str | None, obj: str | None = None) -> bool:
        """Whether ``principal`` (None: no certificate) may do ``action`` on ``obj``."""
        for rule in self.rules.get(action, ()):
            if rule.matches(principal, obj):
                return rule.allow
        return bool(self.permissive)

    def allows_some(self, action: str, principal: str | None) -> bool:
        """Whether ``principal`` may do ``action`` on at least one object: a caller who may
        not is refused before anything is looked up for it (nor told what exists)."""
        about = tuple(r for r in self.rules.get(action, ()) if r.names(principal))
        return _allows_some_object(about, bool(self.permissive))

    def view_of(self, principal: str | None) -> View:
        """What ``principal`` sees of the state (``view_frameworks``, ``view_cluster``)."""
        about = tuple(r for r in self.rules.get("view_frameworks", ()) if r.names(principal))
        permissive = bool(self.permissive)
        cluster = self.allows("view_cluster", principal)
        if _allows_every_object(about, permissive):
            return View(cluster, None, True)  # one shape for all who see every framework
        return View(cluster, about, permissive)


def _allows_every_object(rules: tuple[Rule, ...], permissive: bool) -> bool:
    """Whether ``rules`` (all naming one principal), then ``permissive``, allow every object."""
    for rule in rules:
        if rule.objects is None:
            return rule.allow  # it decides every object the rules before it left open
        if not rule.allow and rule.objects:
            return False  # it may refuse some object (unless an allow before it took it)
    return permissive


def _allows_some_object(rules: tuple[Rule, ...], permissive: bool) -> bool:
    """Whether ``rules`` (all naming one principal), then ``permissive``, allow some object."""
    for rule in rules:
        if rule.objects is None:
            return rule.allow  # it decides every object the rules before it left open
        if rule.allow and rule.objects:
            return True
    return permissive


@dataclass(frozen=True)
class View:
    """What one viewer may see of the state; equal views share a rendered snapshot.

    ``frameworks`` None: every framework; else the ``view_frameworks`` rules that
    name the viewer, in order (the first one whose users hold a framework's user
    decides, then ``permissive``)."""

    cluster: bool
    frameworks: tuple[Rule, ...] | None
    permissive: bool

    def sees_user(self, user: str) -> bool:
        """Whether a framework of unix user ``user`` is shown."""
        if self.frameworks is None:
            return True
        for rule in self.frameworks:
            if rule.objects is None or user in rule.objects:
                return rule.allow
        return self.permissive

    @property
    def everything(self) -> bool:
        return self.cluster and self.frameworks is None

    @property
    def nothing(self) -> bool:
        """True when this viewer may see no part of the state: the caller is refused."""
        if self.cluster or self.frameworks is None:
            return False
        return not _allows_some_object(self.frameworks, self.permissive)


FULL_VIEW = View(cluster=True, frameworks=None, permissive=True)
"""Everything: what a viewer sees where no ACL says otherwise."""
PERMISSIVE = Acls(permissive=True)
"""No rules, everything allowed: a master without TLS and without ``[master.acls]``."""


def parse(value: Any, key: str = "master.acls") -> Acls:
    """``[master.acls]`` as :class:`Acls`. Raises :class:`ConfigError` naming the key."""
    if isinstance(value, Acls):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(key, f"expected a table, got {type(value).__name__} {value!r}")
    rules: dict[str, tuple[Rule, ...]] = {}
    permissive = None
    for name, entries in value.items():
        dotted = f"{key}.{name}"
        if name == "permissive":
            if not isinstance(entries, bool):
                raise ConfigError(dotted, f"expected true or false, got {entries!r}")
            permissive = entries
            continue
        if name not in ACTIONS:
            known = ", ".join(["permissive", *ACTIONS])
            raise ConfigError(dotted, f"unknown action (known keys here: {known})")
        if not isinstance(entries, list):
            raise ConfigError(dotted, f"expected a list of rules ([[{dotted}]] tables), got {entries!r}")
        rules[name] = tuple(_rule(entry, ACTIONS[name], f"{dotted}[{i}]") for i, entry in enumerate(entries))
    return Acls(rules, permissive)


def _rule(entry: Any, object_key: str | None, dotted: str) -> Rule:
    if not isinstance(entry, Mapping):
        raise ConfigError(dotted, f"expected a table, got {entry!r}")
    keys = {"principals", "allow"} | ({object_key} if object_key else set())
    unknown = sorted(set(entry) - keys)
    if unknown:
        raise ConfigError(
            f"{dotted}.{unknown[0]}", f"unknown key (known keys here: {', '.join(sorted(keys))})"
        )
    if "principals" not in entry:
        raise ConfigError(f"{dotted}.principals", 'is required (a list of names, or "*" for anyone)')
    allow = entry.get("allow", True)
    if not isinstance(allow, bool):
        raise ConfigError(f"{dotted}.allow", f"expected true or false, got {allow!r}")
    objects = None
    if object_key is not None:
        if object_key not in entry:
            raise ConfigError(f"{dotted}.{object_key}", 'is required (a list of names, or "*" for any)')
        objects = _names_of(entry[object_key], f"{dotted}.{object_key}")
    return Rule(_names_of(entry["principals"], f"{dotted}.principals"), objects, allow)


def _names_of(value: Any, dotted: str) -> frozenset[str] | None:
    if value == ANY:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(dotted, f'expected "*" or a list of non-empty names, got {value!r}')
    # Inside a list "*" is a name like any other: the default role is called "*", so
    # roles = ["*"] means that role only, while roles = "*" means every role.
    return frozenset(value)


def single_tenant(
    *, agents: list[str], operators: list[str], frameworks: list[str] | str = ANY
) -> dict[str, Any]:
    """``[master.acls]`` for a cluster one team owns (``mezzo local``, the test and bench
    clusters): ``agents`` register agents; ``frameworks`` (and the operators) register
    frameworks in any role and run tasks as any user; the operators also see everything
    and tear down any framework, kill any task and drain agents. Nothing else is allowed.
    As parsed TOML."""
    runners = frameworks if frameworks == ANY else sorted({*frameworks, *operators})
    return {
        "permissive": False,
        "register_agents": [{"principals": list(agents)}],
        "register_frameworks": [{"principals": runners, "roles": ANY}],
        "run_tasks": [{"principals": runners, "users": ANY}],
        "teardown_frameworks": [{"principals": list(operators), "framework_principals": ANY}],
        "kill_tasks": [{"principals": list(operators), "framework_principals": ANY}],
        "drain_agents": [{"principals": list(operators)}],
        "view_frameworks": [{"principals": list(operators), "users": ANY}],
        "view_cluster": [{"principals": list(operators)}],
    }


def to_toml(table: Mapping[str, Any], key: str = "master.acls") -> str:
    """``table`` (parsed ``[master.acls]``) written back as TOML, rules as inline tables."""
    lines = [f"[{key}]"]
    for name, value in table.items():
        if isinstance(value, list):
            rules = ", ".join(
                "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in rule.items()) + " }" for rule in value
            )
            lines.append(f"{name} = [{rules}]")
        else:
            lines.append(f"{name} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    """A bool, a string or a list of strings as TOML: strings as basic strings with
    quotes, backslashes and control characters escaped (TOML allows no raw control
    character but tab, and no surrogate escapes, which ``json.dumps`` would write)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return '"' + "".join(f"\\u{ord(c):04x}" if ord(c) < 0x20 or ord(c) == 0x7F else c for c in text) + '"'
