"""Fixtures shared by the agent tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """An empty session workspace (``<tmp>/ws``)."""
    d = tmp_path / "ws"
    d.mkdir()
    return d
