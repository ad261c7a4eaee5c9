"""structlog set-up shared by every mezzo process.

Daemons bind context once (``log.bind(component="master")``) and per event
(``framework=..., agent=..., task=...``), so every line says who it is about.
"""

from __future__ import annotations

import logging
import sys

import structlog

from .errors import ConfigError

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure(level: str = "info", fmt: str = "console", stream=None) -> None:
    """Route structlog to ``stream`` (stderr) at ``level`` as ``console`` or ``json`` lines."""
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
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(stream or sys.stderr),
        cache_logger_on_first_use=False,
    )
