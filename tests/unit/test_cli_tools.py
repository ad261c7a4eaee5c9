"""Pure parts of the operator commands (mezzo.cli.tools, mezzo.cli.tables): where ``logs
--tail N`` starts, and the table and duration formats."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mezzo.agent.files import page
from mezzo.cli import tools
from mezzo.cli.tables import duration, table


class FileApi:
    """``read_file`` over bytes, answering as the agent does (mezzo.agent.files.page)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.reads = 0

    def read_file(self, agent_id: str, path: str, offset: int, length: int | None = None) -> dict:
        self.reads += 1
        if offset == -1:
            return {"offset": len(self.data), "data": "", "length": 0}
        asked = length or tools.PAGE
        return page(offset, self.data[offset : offset + asked], asked)


def tail(data: bytes, lines: int) -> bytes:
    api = FileApi(data)
    return data[tools.tail_start(api, "a", "/p", len(data), lines) :]  # type: ignore[arg-type]


@pytest.mark.parametrize("page_size", [4, 7, 64 * 1024])
def test_tail_starts_at_the_nth_line_from_the_end_whatever_the_pages(monkeypatch, page_size) -> None:
    monkeypatch.setattr(tools, "PAGE", page_size)
    text = "".join(f"line {i} é€😀\n" for i in range(1, 21)).encode()
    assert tail(text, 2) == "line 19 é€😀\nline 20 é€😀\n".encode()
    assert tail(text, 1) == "line 20 é€😀\n".encode()
    assert tail(text[:-1], 1) == "line 20 é€😀".encode()  # no final newline: the last line still counts
    assert tail(text[:-1], 2) == "line 19 é€😀\nline 20 é€😀".encode()
    assert tail(text, 50) == text  # fewer lines than asked: all of it
    assert tail(text, 0) == b""
    assert tail(b"", 3) == b""


def test_tail_reads_back_at_most_its_bound(monkeypatch) -> None:
    monkeypatch.setattr(tools, "PAGE", 10)
    monkeypatch.setattr(tools, "TAIL_SCAN_MAX", 30)
    api = FileApi(b"x" * 100)  # one long line
    assert tools.tail_start(api, "a", "/p", 100, 3) == 70  # type: ignore[arg-type]
    assert api.reads == 3


def test_tables_and_durations() -> None:
    assert table(["ID", "STATE"], [["t1", "TASK_RUNNING"], ["task-22", None]]) == (
        "ID       STATE\nt1       TASK_RUNNING\ntask-22  -"
    )
    assert [duration(s) for s in (None, 0, 59.9, 61, 3600 * 2 + 300, 86400 * 3 + 3600 * 4)] == [
        None,
        "0s",
        "59s",
        "1m01s",
        "2h05m",
        "3d04h",
    ]


def test_what_peers_named_cannot_rewrite_the_terminal() -> None:
    from mezzo.cli.tables import number, shown

    assert shown("task-1") == "task-1"
    assert shown("evil\x1b[2J\nTASK_FAKE") == "evil\\x1b[2J\\nTASK_FAKE"
    assert table(["ID"], [["a\rb"]]) == "ID\na\\rb"
    assert [number(v) for v in (2.0, 0.5, 1048576.0, 1 / 3)] == ["2", "0.5", "1048576", "0.333333"]


def test_the_client_commands_defaults_are_the_configurations() -> None:
    # Without a configuration file, ps and run do not import mezzo.config (a third of
    # their start-up): the defaults they use instead must be its own.
    from mezzo import config
    from mezzo.cli import commands

    assert commands.CONFIG_ENV == config.CONFIG_ENV
    assert commands.DEFAULT_MASTER == config.AgentConfig().master


HEAVY = ("mezzo.config", "typing", "ipaddress", "base64", "threading", "mezzo.wire.ttypes", "asyncio", "structlog")
"""What ``ps`` and ``run`` do without (each 1 to 30 ms of a command's start-up):
the configuration's dataclasses, typing, threading, the Thrift types, the event loop, logging."""


def test_ps_and_run_without_a_configuration_file_import_nothing_heavy(tmp_path) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "MEZZO_CONFIG"}
    probe = (
        "import sys\n"
        "from mezzo.cli.main import main\n"
        "try:\n"
        "    main(sys.argv[1:])\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules) or '-', file=sys.stderr)\n"
    )
    for argv in (["ps", "--master", "127.0.0.1:9", "--timeout", "0.5"], ["run", "--master", "127.0.0.1:9", "--", "true"]):
        done = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, env=env, timeout=30)
        assert done.stderr.strip().splitlines()[-1] == "-", (argv, done.stderr)
    config = tmp_path / "mezzo.toml"
    config.write_text('[agent]\nmaster = "127.0.0.1:9"\n')
    done = subprocess.run([sys.executable, "-c", probe, "ps", "--timeout", "0.5"], capture_output=True, text=True,
                          env={**env, "MEZZO_CONFIG": str(config)}, timeout=30)
    lines = done.stderr.strip().splitlines()
    assert "mezzo.config" in lines[-1].split() and "127.0.0.1:9" in done.stderr, done.stderr  # the file's master was asked


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=20), st.text(max_size=40), max_size=5))
def test_form_encoding_reads_back_as_urlencode_writes_it(fields) -> None:
    import urllib.parse

    from mezzo.operator_client import form_encode

    encoded = form_encode(fields)
    assert encoded.isascii()
    assert urllib.parse.parse_qsl(encoded, keep_blank_values=True) == list(fields.items())
