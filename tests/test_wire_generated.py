"""The committed Thrift code is exactly what `thrift/generate.sh` makes from the IDL,
and the runtime is the accelerated one."""

from __future__ import annotations

import filecmp
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_fastbinary_accelerator_present():
    from thrift.protocol import fastbinary  # noqa: F401  (pure-Python fallback is 4-10x slower)


def test_generated_code_matches_idl(tmp_path):
    if shutil.which("thrift") is None:
        pytest.fail("the thrift compiler is missing: `make setup` installs thrift-compiler")
    subprocess.run([str(ROOT / "thrift" / "generate.sh"), str(tmp_path)], check=True)
    committed = ROOT / "core" / "mezzo" / "wire"
    fresh = sorted(p.name for p in tmp_path.glob("*.py"))
    assert fresh == sorted(p.name for p in committed.glob("*.py"))
    cmp = filecmp.cmpfiles(tmp_path, committed, fresh, shallow=False)
    assert cmp[1] == [] and cmp[2] == [], f"regenerate with `make thrift`: {cmp[1] + cmp[2]} differ"
