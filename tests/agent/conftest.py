"""Fixtures for agent tests (helpers live in agent_harness.py)."""

from __future__ import annotations

import pytest
from agent_harness import EXECUTOR_SCRIPT


@pytest.fixture
def executor_script(tmp_path):
    """Path of the minimal test executor (see agent_harness.EXECUTOR_SCRIPT)."""
    path = tmp_path / "test_executor.py"
    path.write_text(EXECUTOR_SCRIPT)
    return path
