"""``mezzo.log.configure(final=True)``, a daemon's configuration for good: each logger
is bound once, on its first use after it, so a filtered call costs little; without
``final`` a logger follows every later configuration (tests capture logs that way).

Run in a child process: binding for good is what is tested, and it must not leak
into the loggers of the rest of the suite."""

from __future__ import annotations

import subprocess
import sys

CHILD = r"""
import io, sys
import structlog
from structlog.testing import capture_logs
from mezzo import log as mezzo_log

final = sys.argv[1] == "final"
early = structlog.get_logger("early")
early.info("before any configuration")  # used before it: not bound for good by it
first, second = io.StringIO(), io.StringIO()
mezzo_log.configure("info", "json", stream=first, final=final)
late = structlog.get_logger("late", component="master")
late.debug("filtered out")
late.info("one")
with capture_logs() as captured:  # edits the configured processors in place
    late.info("captured")
mezzo_log.configure("info", "json", stream=second)  # a later configuration
late.info("two")
early.info("three")
print(sorted(e["event"] for e in captured))
print(first.getvalue().count('"event"'), second.getvalue().count('"event"'))
"""


def _run(mode: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, mode], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.splitlines()[-2:]  # the line before: "early" on structlog's defaults


def test_final_binds_each_logger_once_on_its_first_use_after_it():
    captured, written = _run("final")
    # "late" was bound at its first use, so it kept writing to the daemon's stream
    # ("one", "two"; "filtered out" was below the level); "early" had been used
    # before the configuration and follows the later one ("three").
    assert written == "2 1"
    assert captured == "['captured']"  # structlog's capture_logs still sees it


def test_without_final_every_logger_follows_a_later_configuration():
    captured, written = _run("not-final")
    assert written == "1 2"
    assert captured == "['captured']"
