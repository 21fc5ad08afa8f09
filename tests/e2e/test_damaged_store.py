"""A damaged session store is never silent.

A store file that exists and cannot be read stops ``acpgate acp`` and ``acpgate serve``
before they serve anything (stderr names the file and the command that deals with it);
``acpgate store check`` finds it, ``acpgate store repair`` moves it aside and recovers
what it still holds, after which acp lists the recovered sessions. A store that cannot
be created runs in memory, and says so wherever people look: acp's stderr at the
default level, ``initialize``, ``/healthz`` and ``acpgate ps``.
"""

from __future__ import annotations

import json
import sqlite3
import stat
import subprocess
from pathlib import Path

import pytest

from tests.e2e.harness import ACPGATE, AcpProcess, child_env, write_config
from tests.gateway.wsfixtures import http_get
from tests.security.gateway_stack import free_port, running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

#: Sessions written before the damage.
SESSIONS = 5


def acpgate(config_dir: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ACPGATE, *args, "--config-dir", str(config_dir)], input=stdin,
                          capture_output=True, text=True, env=child_env(), timeout=120)


def _store_with_sessions(cfg: Path) -> list[str]:
    """Sessions written through acpgate, each with a long turn (history over many pages)."""
    acp = AcpProcess(cfg)
    try:
        acp.result("initialize", {"protocolVersion": 1})
        ids = []
        for i in range(SESSIONS):
            sid = acp.new_session()
            acp.say(sid, f"turn {i} " + "x" * 6000)
            acp.result("session/close", {"sessionId": sid})
            ids.append(sid)
        assert acp.close() == 0
    finally:
        acp.kill()
    return ids


def _damage(db: Path, how: str) -> None:
    """Everything in one file (no WAL left), then its last page overwritten, or its last
    quarter of pages cut off (the sessions' rows sit on an early page either way)."""
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page = con.execute("PRAGMA page_size").fetchone()[0]
    con.close()
    size = db.stat().st_size
    with db.open("r+b") as fh:
        if how == "truncated":
            fh.truncate(size * 3 // 4 // page * page)
        else:
            fh.seek(size - page)
            fh.write(b"\xff" * page)


@pytest.mark.parametrize("how", ["truncated", "last-page-overwritten"])
def test_a_damaged_store_stops_acp_and_serve_until_repaired(tmp_path: Path, how: str) -> None:
    cfg = write_config(tmp_path / "cfg", max_sessions=SESSIONS + 1,
                       extra=f"[gateway]\nport = {free_port()}\n")
    ids = _store_with_sessions(cfg)
    db = cfg / "data" / "sessions" / "acp-sessions.db"
    _damage(db, how)
    damaged = db.read_bytes()
    repair = f"acpgate store repair --config-dir {cfg}"

    acp = AcpProcess(cfg)
    try:
        acp.send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": 1}})
        assert acp.proc.wait(60) != 0
    finally:
        acp.kill()
    assert acp.raw_lines == []  # no answer to initialize: the editor shows stderr
    said = "".join(acp.stderr)
    assert str(db) in said and repair in said, said

    serve = acpgate(cfg, "serve")
    assert serve.returncode != 0
    assert str(db) in serve.stderr and repair in serve.stderr, serve.stderr
    assert "serve_ready" not in serve.stderr
    assert db.read_bytes() == damaged  # refused, not touched

    check = acpgate(cfg, "store", "check")
    assert check.returncode == 1 and "damaged" in check.stdout, check.stdout

    done = acpgate(cfg, "store", "repair", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    aside = Path(report["moved_to"])
    assert aside.parent == db.parent and aside.name.startswith("acp-sessions.db.damaged-")
    assert aside.read_bytes() == damaged
    assert report["sessions"] == SESSIONS, report
    assert how == "truncated" or report["history_items"] > 0, report
    for path in (db, aside):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert acpgate(cfg, "store", "check").returncode == 0

    acp = AcpProcess(cfg)
    try:
        caps = acp.result("initialize", {"protocolVersion": 1})["agentCapabilities"]
        assert caps["loadSession"] is True
        listed = acp.result("session/list", {})["sessions"]
        assert {s["sessionId"] for s in listed} == set(ids)
        busy = acpgate(cfg, "store", "repair")  # never under a running service
        assert busy.returncode == 1 and f"acp[{acp.proc.pid}]" in busy.stderr, busy.stderr
        assert acp.close() == 0
    finally:
        acp.kill()


def _sessions_is_a_file(cfg: Path) -> None:
    (cfg / "data").mkdir(parents=True, exist_ok=True)
    (cfg / "data" / "sessions").write_text("a file where the sessions dir should be")


def test_acp_in_memory_says_so_on_stderr_and_in_initialize(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg")
    _sessions_is_a_file(cfg)
    acp = AcpProcess(cfg)
    try:
        result = acp.result("initialize", {"protocolVersion": 1})
        assert result["agentCapabilities"]["loadSession"] is False
        store = result["_meta"]["acpgate"]["store"]
        assert store["persistent"] is False and "not a directory" in store["reason"]
        assert acp.close() == 0
    finally:
        acp.kill()
    said = "".join(acp.stderr)
    assert "warning: sessions are kept in memory only" in said and "not a directory" in said


async def test_serve_in_memory_is_degraded_in_healthz_and_ps(tmp_path: Path) -> None:
    _sessions_is_a_file(tmp_path / "gw" / "cfg")
    async with running_gateway(tmp_path / "gw") as gw:
        status, _, body = await http_get(f"http://127.0.0.1:{gw.port}/healthz")
        health = json.loads(body)
        assert status == 200 and health["status"] == "degraded", body
        assert health["store"]["persistent"] is False
        assert "not a directory" in health["store"]["reason"]
        code, out, err = await gw.cli("ps")
        assert code == 0, err
        assert "sessions in memory only" in out and "not a directory" in out, out
