"""Checking a component's TOML settings table: the words every plugin's errors share.

Usage (inside a component's ``__init__``, ``key`` being its table's dotted key)::

    expect_table(settings, key, "a table")  # a nested table of the component's
    reject_unknown(settings, key, ("roles", "frameworks"))
    raise ConfigError(subkey(key, "roles"), f"expected a table, got {kind_of(value)}")

Each problem is a :class:`~mezzo.errors.ConfigError` naming the dotted key of the
offending setting, quoted as TOML would quote it (``...weights."my role"``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .errors import ConfigError

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def subkey(key: str, name: str) -> str:
    """``key.name``, with ``name`` quoted the way TOML needs it when it is not a bare key."""
    if _BARE_KEY.fullmatch(name):
        return f"{key}.{name}"
    escaped = name.replace("\\", "\\\\").replace('"', '\\"')
    return f'{key}."{escaped}"'


def kind_of(value: Any) -> str:
    """A TOML-ish name for the type of ``value``, for error messages."""
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, (list, tuple)):
        return "an array"
    return f"{type(value).__name__} {value!r}"


def expect_table(value: Any, key: str, what: str) -> Mapping[str, Any]:
    """``value`` if it is a table, else ConfigError on ``key`` saying ``what`` was expected."""
    if not isinstance(value, Mapping):
        raise ConfigError(key, f"expected {what}, got {kind_of(value)}")
    return value


def reject_unknown(settings: Mapping[str, Any], key: str, known: tuple[str, ...], *, owner: str = "") -> None:
    """ConfigError on the first setting of ``settings`` not in ``known``; ``owner``
    (e.g. ``isolator 'lxc'``) is named in the message when given.

    Components need not call this: :class:`mezzo.hookspecs.Component` checks their
    ``known_settings``. It is for nested tables of their own."""
    for name in settings:
        if name not in known:
            where = f" for {owner}" if owner else ""
            listed = f"known: {', '.join(known)}" if known else "it takes no settings"
            raise ConfigError(subkey(key, str(name)), f"unknown setting{where} ({listed})")
