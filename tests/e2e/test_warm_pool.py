"""Warm adapters behind `acpgate acp`, real processes throughout.

The built-in agent keeps one adapter warm by default: ``session/new`` takes it
(the session's lease is the one that was warm), the pool refills, a warm adapter
is counted against ``max_sessions`` only once a session took it, a config edit
retires it, and stopping acpgate leaves no warm adapter behind. The lease rows
are read from the embedded lifecycle service's own store (read-only).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from tests.e2e.harness import WAIT, AcpProcess, gone, workspace_beside_config, write_config

pytestmark = pytest.mark.slow


def _rows(db: Path, sql: str, *args: object) -> list[tuple[object, ...]]:
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return conn.execute(sql, args).fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


class Leases:
    """The embedded lifecycle service's lease rows, read from its database."""

    def __init__(self, config_dir: Path) -> None:
        self.db = config_dir / "data" / "lifecycle" / "leases.db"

    def warm(self, alias: str = "demo") -> list[tuple[str, int, int]]:
        """``(lease_id, root_pid, adapter_pid)`` of the warm leases whose adapter runs."""
        return [(str(a), int(b), int(c)) for a, b, c in _rows(  # type: ignore[call-overload]
            self.db, "SELECT lease_id, root_pid, adapter_pid FROM leases"
            " WHERE state = 'warm' AND session_key = ? AND adapter_pid > 0",
            f"agent:{alias}:warm")]

    def wait_warm(self, n: int = 1, *, other_than: set[str] = frozenset(),  # type: ignore[assignment]
                  alias: str = "demo", wait: float = WAIT) -> list[tuple[str, int, int]]:
        deadline = time.monotonic() + wait
        while True:
            ready = [x for x in self.warm(alias) if x[0] not in other_than]
            if len(ready) >= n:
                return ready
            assert time.monotonic() < deadline, f"no {n} warm lease(s) within {wait}s"
            time.sleep(0.05)

    def state(self, lease_id: str) -> str:
        rows = _rows(self.db, "SELECT state FROM leases WHERE lease_id = ?", lease_id)
        return str(rows[0][0]) if rows else ""

    def wait_state(self, lease_id: str, state: str, wait: float = WAIT) -> None:
        deadline = time.monotonic() + wait
        while self.state(lease_id) != state:
            assert time.monotonic() < deadline, f"lease {lease_id} never {state}"
            time.sleep(0.05)


def session_lease(config_dir: Path, session_id: str, wait: float = WAIT) -> str:
    """The lease the session service stored for ``session_id`` (session/new writes it right
    after its answer: waited for)."""
    db = config_dir / "data" / "sessions" / "acp-sessions.db"
    deadline = time.monotonic() + wait
    while True:
        rows = _rows(db, "SELECT lease_id FROM sessions WHERE id = ?", session_id)
        if (rows and rows[0][0]) or time.monotonic() >= deadline:
            return str(rows[0][0]) if rows else ""
        time.sleep(0.02)


def test_session_new_takes_the_warm_adapter_and_the_pool_refills(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg", max_sessions=1)
    work = str(workspace_beside_config(tmp_path))
    leases = Leases(cfg)
    proc = AcpProcess(cfg)
    try:
        proc.result("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        (warm_id, root, adapter), = leases.wait_warm()
        sid = proc.new_session(cwd=work)
        assert session_lease(cfg, sid) == warm_id  # the session runs on the warm adapter
        assert leases.state(warm_id) == "open"
        _, resp = proc.call("session/prompt", {"sessionId": sid, "prompt": "hello"})
        assert resp["result"]["stopReason"] == "end_turn"
        (refill, _, _), = leases.wait_warm(other_than={warm_id})
        # A ready warm adapter is no session: the one slot is taken by the open session.
        err = proc.error("session/new", {"cwd": work})
        assert err["code"] == -32001
        assert leases.state(refill) == "warm"
        proc.result("session/close", {"sessionId": sid})
        assert gone([root, adapter])
        again = proc.new_session(cwd=work)
        assert session_lease(cfg, again) == refill
        warm_pids = [pid for _, r, a in leases.wait_warm(other_than={warm_id, refill})
                     for pid in (r, a)]
    finally:
        code = proc.close()
    assert code == 0
    assert gone(warm_pids)  # stopping acpgate closes the pool too
    assert not leases.warm()


def test_a_config_edit_retires_the_warm_adapter(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg")
    work = str(workspace_beside_config(tmp_path))
    leases = Leases(cfg)
    proc = AcpProcess(cfg)
    try:
        proc.result("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        (stale, root, adapter), = leases.wait_warm()
        config = cfg / "config.toml"
        config.write_text(config.read_text() + "\n# edited\n")
        (fresh, _, _), = leases.wait_warm(other_than={stale})  # the periodic check replaced it
        assert gone([root, adapter])
        leases.wait_state(stale, "closed")
        sid = proc.new_session(cwd=work)
        assert session_lease(cfg, sid) == fresh
    finally:
        proc.close()


def test_an_external_agent_keeps_none_warm_unless_configured(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg", default_agent="sdk",
                       extra="[agents.demo2]\nkind = 'builtin'\nprovider = 'demo'\nmodel = 'demo'\n"
                             "warm = 2\n")
    work = str(workspace_beside_config(tmp_path))
    leases = Leases(cfg)
    proc = AcpProcess(cfg)
    try:
        proc.result("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        leases.wait_warm(2, alias="demo2")
        assert leases.wait_warm(1, alias="demo")  # built-in: one by default
        assert leases.warm("sdk") == []  # external: none by default
        sid = proc.new_session(cwd=work)
        assert session_lease(cfg, sid) not in {x[0] for x in leases.warm("demo")}
        children = [p.pid for p in proc.descendants()]
        assert len(children) >= 8  # three warm pairs plus the session's wrapper and adapter
    finally:
        proc.close()
    assert gone(children)
