"""mezzo.isolation, the helpers isolator plugins may use, and the rule that they need nothing else.

Isolators are plugins: they import the plugin contract and the public helpers, never
``mezzo.agent``, whose internals change with the agent.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mezzo.isolation import process_alive, process_start_time, program_problem

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_PACKAGES = sorted(
    [p for p in (ROOT / "isolators").glob("*/mezzo_isolator_*") if p.is_dir()]
    + [p for p in (ROOT / "examples").glob("isolator-*/mezzo_isolator_*") if p.is_dir() and "build" not in p.parts]
)


@pytest.mark.parametrize("package", PLUGIN_PACKAGES, ids=lambda p: p.name)
def test_isolator_plugins_import_nothing_of_the_agent(package):
    for source in package.rglob("*.py"):
        tree = ast.parse(source.read_text(), str(source))
        for node in ast.walk(tree):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else (
                [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                assert not (name == "mezzo.agent" or name.startswith("mezzo.agent.")), \
                    f"{source.relative_to(ROOT)}:{node.lineno} imports {name}"


def test_the_plugin_packages_are_found():
    assert {p.name for p in PLUGIN_PACKAGES} >= {"mezzo_isolator_cgroups", "mezzo_isolator_lxc",
                                                 "mezzo_isolator_netbw", "mezzo_isolator_procstat"}


# -- program_problem ----------------------------------------------------------------


def test_a_program_on_the_path_of_the_environment_is_found(tmp_path):
    assert program_problem("sh", {"PATH": "/usr/bin:/bin"}, str(tmp_path)) is None


def test_a_program_missing_from_that_path_is_no_such_file(tmp_path):
    assert program_problem("sh", {"PATH": str(tmp_path)}, str(tmp_path)) == "No such file or directory"


def test_a_relative_name_is_looked_up_from_the_working_directory(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n")
    assert program_problem("./run.sh", {}, str(tmp_path)) == "Permission denied"
    script.chmod(0o755)
    assert program_problem("./run.sh", {}, str(tmp_path)) is None


# -- process identity ---------------------------------------------------------------


def test_a_process_is_alive_until_it_exits_and_is_named_by_its_start_time():
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    started = process_start_time(proc.pid)
    assert started is not None and started > 0
    assert process_alive(proc.pid, started)
    assert not process_alive(proc.pid, started + 1)  # another process with that pid
    proc.stdin.close()
    proc.wait()
    assert not process_alive(proc.pid, started)
    assert process_start_time(proc.pid) is None or process_start_time(proc.pid) != started


def test_this_process_has_a_start_time():
    assert process_start_time(os.getpid()) is not None
