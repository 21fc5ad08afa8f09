"""Adapter logs found by session id: ``logs/sessions/<session id>.log``.

Against a real ``acpgate acp``: a built-in session (a warm adapter taken) and an
external one (spawned for it) each get a link named by their session id to
their lease's log, which says whose it is; the lease's own name keeps working
(the stderr tail of an exit reads it). Retention removes links with the logs,
and a key that is no session's (or would leave the directory) gets none.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from services.lifecycle.adapters.session_logs import (
    forget_session_log,
    link_session_log,
    session_log_path,
    session_of_key,
)
from services.lifecycle.adapters.spawn import remove_stderr_logs
from tests.e2e.harness import AcpProcess, write_config


@pytest.mark.slow
def test_each_session_has_its_adapter_log_by_name(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg")
    work = tmp_path / "work"
    work.mkdir()
    acp = AcpProcess(cfg)
    try:
        built_in = acp.new_session(agentAlias="demo", cwd=str(work))
        external = acp.new_session(agentAlias="sdk", cwd=str(work))
        acp.result("session/prompt", {"sessionId": built_in, "prompt": "hello"})
    finally:
        assert acp.close() == 0
    state = cfg / "data" / "lifecycle"
    for sid, alias in ((built_in, "demo"), (external, "sdk")):
        link = session_log_path(state, sid)
        assert link.is_symlink(), sorted(p.name for p in link.parent.iterdir())
        target = link.resolve()
        assert target.parent == state / "logs" and target.suffix == ".log"
        lease_id = target.stem
        assert link.read_text().count(f"lease {lease_id} serves session {sid} (agent {alias})")
        assert (target.stat().st_mode & 0o777) == 0o600
    assert (state / "logs" / "sessions").stat().st_mode & 0o777 == 0o700


def test_links_follow_their_leases_and_stay_inside_the_log_dir(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for lease in ("lease-a", "lease-b"):
        (logs / f"{lease}.log").write_text("started\n")
    key = "agent:demo:acp:s-1"
    link = link_session_log(tmp_path, "lease-a", key)
    assert link == session_log_path(tmp_path, "s-1") and os.readlink(link) == "../lease-a.log"
    # The session's next lease (a restore) takes the name over.
    link_session_log(tmp_path, "lease-b", key)
    assert os.readlink(link) == "../lease-b.log"
    forget_session_log(tmp_path, "lease-a", key)  # not the lease it points at: kept
    assert link.is_symlink()
    remove_stderr_logs(tmp_path, ["lease-b"])  # retention: the log and its link go
    assert not link.exists() and not link.is_symlink() and not (logs / "lease-b.log").exists()
    link_session_log(tmp_path, "lease-a", key)
    forget_session_log(tmp_path, "lease-a", key)  # a warm adapter given back unused
    assert not link.is_symlink()
    # Keys that name no session, or would name a file elsewhere, get no link.
    for bad in ("agent:demo:warm", "agent:demo:acp:../../x", "agent:demo:acp:.hidden",
                "agent:demo:acp:a/b", "something"):
        assert session_of_key(bad) is None
        assert link_session_log(tmp_path, "lease-a", bad) is None
    assert sorted(p.name for p in (logs / "sessions").iterdir()) == []
