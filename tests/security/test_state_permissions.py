"""acpgate's state is its user's alone: every state file 0600, every dir 0700.

Session stores hold conversations, the lease database names the processes acpgate
may signal, the token store and the service key are credentials, ``config.toml``
holds agents' ``env`` (API keys), adapter logs hold whatever agents print. A real
``acpgate acp`` run on a fresh install leaves nothing group- or world-readable in
its data dir, and an install left ``0644``/``0755`` by an earlier version (or a
loose umask) is tightened when acpgate opens it.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest

from tests.e2e.harness import AcpProcess, write_config

pytestmark = pytest.mark.slow


def loose(root: Path) -> list[str]:
    """Every path under ``root`` (itself included) that a group or other may reach."""
    found = []
    for path in [root, *root.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if not path.is_symlink() and mode & 0o077:
            found.append(f"{oct(mode)} {path.relative_to(root.parent)}")
    return found


async def run_a_session(config_dir: Path, work: Path) -> None:
    """``acpgate acp``: a session with one turn, then EOF."""
    acp = AcpProcess(config_dir)
    try:
        sid = await asyncio.to_thread(acp.new_session, agentAlias="demo", cwd=str(work))
        await asyncio.to_thread(acp.result, "session/prompt",
                                {"sessionId": sid, "prompt": "a private thought"})
    finally:
        assert await asyncio.to_thread(acp.close) == 0


async def test_a_fresh_install_keeps_its_state_private(tmp_path: Path) -> None:
    old_umask = os.umask(0o022)  # the usual umask: files 0644, dirs 0755 unless acpgate says
    try:
        config_dir = write_config(tmp_path / "cfg")
        work = tmp_path / "work"
        work.mkdir()
        await run_a_session(config_dir, work)
    finally:
        os.umask(old_umask)
    data = config_dir / "data"
    assert (data / "sessions" / "acp-sessions.db").exists()
    assert (data / "lifecycle" / "leases.db").exists()
    assert (data / "run" / "service.key").exists()
    assert loose(data) == []
    assert loose(config_dir / "config.toml") == []  # agents' env: API keys


async def test_an_install_left_readable_is_tightened(tmp_path: Path) -> None:
    config_dir = write_config(tmp_path / "cfg")
    work = tmp_path / "work"
    work.mkdir()
    await run_a_session(config_dir, work)
    data = config_dir / "data"
    # What an earlier acpgate (or a chmod) left: readable by everyone.
    for path in [data, *data.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    os.chmod(config_dir / "config.toml", 0o644)
    await run_a_session(config_dir, work)
    assert loose(data) == [] and loose(config_dir / "config.toml") == []
