"""A peer's control characters reach a log line as visible text, never raw
(mezzo.log.bound_fields): a line stays one line, and the operator's terminal obeys
nothing a peer wrote. Tracebacks keep their line breaks; printable text is kept."""

from __future__ import annotations

import io
import json
import re
from collections import namedtuple

import pytest
import structlog

from mezzo import log as mezzo_log
from mezzo.log import FIELD_CHARS, bound_fields

# ESC (clear the screen), CR, LF, NUL, DEL, C1 NEL, LINE SEPARATOR, RIGHT-TO-LEFT OVERRIDE,
# LEFT-TO-RIGHT ISOLATE
NASTY = "a\x1b[2Jb\rc\nd\x00e\x7ff\x85g\u2028h\u202ei\u2066j"
SHOWN = r"a\x1b[2Jb\rc\nd\x00e\x7ff\x85g\u2028h\u202ei\u2066j"
RAW = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028-\u202e\u2066-\u2069]")
"""What must never be in a rendered line (line feeds are checked by counting lines)."""
PRINTABLE = "Zürich-café-naïve-東京-Ελληνικά-😀-👩\u200d👩\u200d👧"


def _write(fmt: str, emit) -> str:
    """What ``emit(logger)`` writes through a real configuration in format ``fmt``."""
    out = io.StringIO()
    mezzo_log.configure("info", fmt, stream=out)
    try:
        emit(structlog.get_logger("t"))
    finally:
        structlog.reset_defaults()
    return out.getvalue()


def _one_line(text: str) -> str:
    # str.splitlines also splits at NEL, U+2028 and the other separators a viewer may honour
    (line,) = text.splitlines()
    assert text == line + "\n"
    assert RAW.search(line) is None
    return line


@pytest.mark.parametrize("fmt", ["console", "json"])
def test_controls_in_a_field_and_in_the_message_come_out_escaped_on_one_line(fmt):
    line = _one_line(_write(fmt, lambda log: log.info("framework " + NASTY, name=NASTY, ok="plain")))
    if fmt == "json":
        fields = json.loads(line)
        assert fields["event"] == "framework " + SHOWN
        assert fields["name"] == SHOWN  # decoded, still inert
        assert fields["ok"] == "plain"
    else:
        assert f"framework {SHOWN}" in line
        assert f"name={SHOWN}" in line
        assert "ok=plain" in line


@pytest.mark.parametrize("fmt", ["console", "json"])
def test_printable_unicode_is_kept_as_it_is(fmt):
    # A no-break space is not printable (str.isprintable) but no control either: kept.
    event = "bienvenue\xa0" + PRINTABLE
    line = _one_line(_write(fmt, lambda log: log.info(event, name=PRINTABLE)))
    if fmt == "json":
        fields = json.loads(line)
        assert (fields["event"], fields["name"]) == (event, PRINTABLE)
    else:
        assert line.count(PRINTABLE) == 2 and event in line


@pytest.mark.parametrize("fmt", ["console", "json"])
def test_a_traceback_keeps_its_line_breaks_and_escapes_its_other_controls(fmt):
    def emit(log):
        try:
            raise ValueError("bad name \x1b[2J\r\u202e")
        except ValueError:
            log.exception("launch failed", name="x\ny")

    text = _write(fmt, emit)
    if fmt == "json":
        fields = json.loads(_one_line(text))
        exception = fields["exception"]
        assert fields["name"] == r"x\ny"
    else:
        first, exception = text.split("\n", 1)
        assert first.endswith(r"name=x\ny")
    lines = exception.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[-1] == r"ValueError: bad name \x1b[2J\r\u202e"
    assert RAW.search(exception) is None


def test_a_stack_keeps_its_line_breaks_too():
    event = bound_fields(None, "info", {"event": "e", "stack": "Stack (most recent call last):\n  x\r\x1b"})
    assert event["stack"] == "Stack (most recent call last):\n  x" + r"\r\x1b"


def test_texts_in_nested_values_are_escaped_in_copies():
    names = ["ok", "a\nb"]
    labels = {"k\x1b": ("v\u2028", frozenset({"x\r"})), "fine": ["y"]}
    plain = ["ok", ("é", {"k": "v"})]
    event = bound_fields(
        None, "info", {"event": "e", "names": names, "labels": labels, "plain": plain, "n": 7}
    )
    assert event["names"] == ["ok", r"a\nb"]
    assert event["labels"] == {r"k\x1b": (r"v\u2028", frozenset({r"x\r"})), "fine": ["y"]}
    assert event["labels"]["fine"] is labels["fine"]  # copied only where a text changed
    assert event["plain"] is plain and event["n"] == 7
    assert names == ["ok", "a\nb"] and "k\x1b" in labels  # the caller's values are left alone


@pytest.mark.parametrize("fmt", ["console", "json"])
def test_what_is_not_escaped_here_is_escaped_by_the_renderer_within_one_line(fmt):
    # Four levels deep, and a namedtuple (not exactly a tuple), are left to the renderer:
    # the console shows them by repr() and JSON by json.dumps, which escape controls too.
    deep = [[[["\x1b[2J\n"]]]]
    pair = namedtuple("Pair", "left right")("\r", "\u2028")
    assert bound_fields(None, "info", {"deep": deep})["deep"] is deep
    line = _one_line(_write(fmt, lambda log: log.info("e", deep=deep, pair=pair)))
    if fmt == "json":
        fields = json.loads(line)
        assert fields["deep"] == deep and fields["pair"] == ["\r", "\u2028"]  # raw once decoded
    else:
        assert r"deep=[[[['\x1b[2J\n']]]]" in line
        assert r"pair=Pair(left='\r', right='\u2028')" in line


def test_a_long_text_is_cut_before_it_is_escaped():
    event = bound_fields(None, "info", {"event": "\x1b" * 100_000, "name": "\x1b" * 100_000})
    assert event["event"] == r"\x1b" * 100_000  # the message is never cut, only escaped
    assert event["name"] == r"\x1b" * FIELD_CHARS + "... (100,000 characters)"
