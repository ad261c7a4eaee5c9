"""structlog set-up shared by every mezzo process.

Daemons bind context once (``log.bind(component="master")``) and per event
(``framework=..., agent=..., task=...``), so every line says who it is about.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Mapping, MutableMapping
from itertools import islice
from typing import Any

import structlog

from .errors import ConfigError

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure(level: str = "info", fmt: str = "console", stream=None, *, final: bool = False) -> None:
    """Route structlog to ``stream`` (stderr) at ``level`` as ``console`` or ``json`` lines.

    ``final``: this is the process's configuration for good (a daemon's, made once at
    start), so each logger is bound once, on its first use after this call. A line
    filtered out by ``level`` then costs 0.6 µs instead of 7: structlog's lazy
    loggers otherwise bind anew on every call, and the master logs each task it
    launches. Leave it off where the configuration may change later: a logger bound
    once keeps the stream and level it was bound with (structlog's ``capture_logs``
    still sees it, since that edits the configured processors in place)."""
    if level not in LEVELS:
        raise ConfigError("log.level", f"expected one of {', '.join(LEVELS)}, got {level!r}")
    if fmt not in ("console", "json"):
        raise ConfigError("log.format", f"expected 'console' or 'json', got {fmt!r}")
    renderer = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            bound_fields,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(stream or sys.stderr),
        cache_logger_on_first_use=final,
    )


FIELD_CHARS = 400
"""A logged value's text is cut to this many characters."""
FIELD_ITEMS = 20
"""A logged list, set or mapping shows this many of its items."""
_WHOLE = frozenset({"event", "exception", "stack", "timestamp", "level"})
"""Fields never cut (escaped all the same): the message itself and tracebacks."""

# Control characters move a terminal's cursor, clear it, recolour it or end a line (C0,
# DEL, C1 such as U+0085, U+2028/U+2029), and bidi overrides reorder what follows them
# on screen (U+202A-U+202E, U+2066-U+2069): raw in a log, a peer's name could forge
# lines or hide text from the operator reading them. Each is also not printable
# (str.isprintable), which makes that the cheap first check.
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028-\u202e\u2066-\u2069]")
_CONTROLS_BUT_LF = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028-\u202e\u2066-\u2069]")
"""The same, line feeds excepted: for tracebacks, which are lines by nature."""
_ESCAPES = (
    {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}
    | {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
    | {c: f"\\u{c:04x}" for c in (*range(0x2028, 0x202F), *range(0x2066, 0x206A))}
)
"""What each character of _CONTROLS is shown as: the escape ``repr()`` writes for it."""
_ESCAPES_BUT_LF = {c: shown for c, shown in _ESCAPES.items() if c != 0x0A}
_MULTILINE = frozenset({"exception", "stack"})
"""Fields whose line feeds are kept: tracebacks (format_exc_info, StackInfoRenderer)."""
_CONTAINERS = frozenset({list, tuple, set, frozenset, dict})
"""The containers whose texts are escaped too (exactly these types, not subclasses)."""
_DEPTH = 3
"""How many levels of nested containers are looked into."""


def bound_fields(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    r"""Cut every field of a log line to a bounded size, and show control characters as text.

    Peers choose much of what is logged (ids, resources, filter lists): an agent
    announcing 65,536 port ranges made a 1 MB line, a filter of 700,000 agents a
    longer one, each written while the event loop waited. Long texts keep their
    start and say how long they were; long collections keep their first items and
    say how many there were.

    Peers also choose framework names, task ids and messages, and the console
    renderer writes texts (the message always) as they are: a name holding ``"\n"``
    or ``"\x1b[2J"`` could forge a line or clear the operator's terminal. So C0 and C1
    controls, DEL, U+2028, U+2029 and the bidi overrides and isolates (U+202A-U+202E,
    U+2066-U+2069) are shown as the escapes ``repr()`` writes (``\x1b``, ``\n``,
    ``\u2028``), before either renderer: a line is one line on the console and in
    JSON, and a JSON value once decoded is just as inert. Other text (accents, CJK,
    emoji and their zero-width joiners) stays as it is. Not reversible: backslashes
    are kept, so ``\n`` in a line may have been sent as those two characters.

    Escaped: the message and every text field, tracebacks (``exception``, ``stack``)
    but for their line feeds, and the texts in lists, tuples, sets, frozensets and
    dicts (keys too) down to _DEPTH levels, in copies: the caller's values are never
    changed. Not escaped: field names (mezzo's own), other objects and deeper levels,
    which the console shows by ``repr()`` and JSON by ``json.dumps``, both escaping
    controls within the line (unless an object's own ``__repr__`` writes them raw).

    Both in one pass over the fields, as the master logs on hot paths: a text with
    no control character costs one ``str.isprintable`` (cutting and escaping a line
    of ten fields: 1.7 µs, cutting alone 1.2), a regular expression runs only on
    texts that are not printable, and escaping is linear in the text. Texts are cut
    before they are escaped, so a cut text grows to 6 times FIELD_CHARS at most.
    """
    for key, value in event.items():
        if isinstance(value, str):
            if len(value) > FIELD_CHARS and key not in _WHOLE:
                value = event[key] = f"{value[:FIELD_CHARS]}... ({len(value):,} characters)"
            if not value.isprintable():
                event[key] = _escaped_text(value, key in _MULTILINE)
        elif isinstance(value, (list, tuple, set, frozenset, Mapping)):
            if len(value) > FIELD_ITEMS and key not in _WHOLE:
                items = value.items() if isinstance(value, Mapping) else value
                shown = ", ".join(_short(item) for item in islice(items, FIELD_ITEMS))
                # repr() escapes the controls of texts, not an object's own __repr__
                event[key] = _escaped(f"[{shown}, ...] ({len(value):,} items)", 0)
            elif type(value) in _CONTAINERS:
                event[key] = _escaped(value, _DEPTH)
    return event


def _short(item: Any) -> str:
    text = repr(item)
    return text if len(text) <= 80 else text[:80] + "..."


def _escaped_text(text: str, multiline: bool = False) -> str:
    # The search spares a copy of texts with nothing to escape that are not printable
    # either (a no-break space; a traceback's line feeds). str.translate is 60 ns a
    # character whatever it holds, where a substitution for each run of controls took
    # up to 300 (a run of one in every two characters).
    if multiline:
        return text if _CONTROLS_BUT_LF.search(text) is None else text.translate(_ESCAPES_BUT_LF)
    return text if _CONTROLS.search(text) is None else text.translate(_ESCAPES)


def _escaped(value: Any, depth: int) -> Any:
    """``value`` with the texts in it escaped: ``value`` itself if none needed it, else a copy."""
    if isinstance(value, str):
        return value if value.isprintable() else _escaped_text(value)
    kind = type(value)
    if depth == 0 or kind not in _CONTAINERS:
        return value
    changed = False
    if kind is dict:
        pairs = []
        for item_key, item in value.items():
            pair = (_escaped(item_key, depth - 1), _escaped(item, depth - 1))
            changed = changed or pair[0] is not item_key or pair[1] is not item
            pairs.append(pair)
        return dict(pairs) if changed else value
    items = []
    for item in value:
        escaped = _escaped(item, depth - 1)
        changed = changed or escaped is not item
        items.append(escaped)
    return kind(items) if changed else value
