"""A log line stays bounded whatever a peer sends: long texts and collections are cut
(mezzo.log.bound_fields), messages and tracebacks are kept whole."""

from __future__ import annotations

import io
import json

import structlog

from mezzo import log as mezzo_log
from mezzo.log import FIELD_CHARS, FIELD_ITEMS, bound_fields


def test_long_texts_and_collections_are_cut_and_say_how_long_they_were():
    resources = "ports:[" + ",".join(f"{i}-{i}" for i in range(65_536)) + "]"
    event = bound_fields(
        None,
        "info",
        {
            "event": "x" * 5000,
            "resources": resources,
            "agents": [f"agent-{i}" for i in range(700_000)],
            "labels": {f"k{i}": "v" for i in range(100)},
            "short": ["a", "b"],
            "number": 7,
        },
    )
    assert event["event"] == "x" * 5000  # the message itself is ours, never cut
    assert len(event["resources"]) < FIELD_CHARS + 40
    assert event["resources"].startswith(resources[:FIELD_CHARS])
    assert event["resources"].endswith(f"({len(resources):,} characters)")
    assert event["agents"].startswith("['agent-0', 'agent-1'")
    assert event["agents"].endswith("(700,000 items)")
    assert event["agents"].count("agent-") == FIELD_ITEMS
    assert event["labels"].endswith("(100 items)")
    assert event["short"] == ["a", "b"] and event["number"] == 7


def test_a_configured_logger_writes_bounded_lines():
    out = io.StringIO()
    mezzo_log.configure("info", "json", stream=out)
    try:
        structlog.get_logger("t").info("agent registered", resources="r" * 1_000_000, ids=list(range(10**5)))
    finally:
        structlog.reset_defaults()
    (line,) = out.getvalue().splitlines()
    assert len(line) < 2_000
    assert json.loads(line)["event"] == "agent registered"
