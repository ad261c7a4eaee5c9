"""Plain-text tables and the short forms of times, sizes and resources the tool commands print."""

from __future__ import annotations

import time
from collections.abc import Sequence

# typing itself is not imported: 2-3 ms of a command's start-up.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def shown(value: Any) -> str:
    """``value`` as text safe for a terminal: ids, messages and names come from peers (an
    executor's status message, a scheduler's framework name), and an escape sequence or a
    line feed among them must not rewrite the operator's screen or forge a row."""
    text = str(value)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """``rows`` under ``headers``, columns left-aligned and two spaces apart; None shows as
    ``-``; every cell :func:`shown`."""
    cells = [[str(h) for h in headers]] + [["-" if c is None else shown(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in cells
    ]
    return "\n".join(lines)


def duration(seconds: float | None) -> str | None:
    """``42s``, ``5m03s``, ``2h05m``, ``3d04h``; None stays None."""
    if seconds is None:
        return None
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def when(timestamp: float | None) -> str | None:
    """A Unix time as local ``YYYY-MM-DD HH:MM:SS.mmm``; None stays None."""
    if not timestamp:
        return None
    return (
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp)) + f".{int(timestamp * 1000) % 1000:03d}"
    )


def number(value: Any) -> str:
    """``2``, ``0.5``, ``1024``: a resource amount without a trailing ``.0``."""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:.6g}"
    return str(value)


def resources(flat: dict[str, Any] | None, names: Sequence[str] = ("cpus", "mem")) -> list[str]:
    """The amounts of ``names`` in Mesos' flattened resources (``-`` where absent)."""
    flat = flat or {}
    return [number(flat[name]) if name in flat else "-" for name in names]
