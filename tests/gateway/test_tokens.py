"""Token store (SPEC §11): minted once, stored hashed, listed, revoked, verified; operator
grants."""

from __future__ import annotations

import hashlib
import sqlite3
import stat
from pathlib import Path

import pytest

from services.common.config import load_config
from services.edge.tokens import (
    GRANT_SEE_ALL,
    SCHEMA_VERSION,
    TokenStore,
    TokenWatch,
    UnknownGrant,
    token_db_path,
)
from services.edge.transport.auth import TokenSource, extract_token


def test_db_path_under_data_dir(tmp_path: Path) -> None:
    cfg = load_config(tmp_path, environ={})
    assert token_db_path(cfg) == tmp_path / "data" / "gateway" / "tokens.db"


def test_db_path_shared_by_several_hosts(tmp_path: Path) -> None:
    """``[gateway] token_db``: two gateway hosts with their own data dirs, one token file —
    a token minted through one works on the other, with the same token id (principal)."""
    shared = tmp_path / "shared" / "tokens.db"
    a = load_config(tmp_path / "a", environ={"ACPGATE_gateway__token_db": str(shared)})
    b = load_config(tmp_path / "b", environ={"ACPGATE_gateway__token_db": str(shared)})
    assert token_db_path(a) == token_db_path(b) == shared
    token_id, secret = TokenStore(token_db_path(a)).create("client")
    assert TokenStore(token_db_path(b)).identify(secret) == token_id


def test_create_verify_list_revoke(tmp_path: Path) -> None:
    store = TokenStore(tmp_path / "t" / "tokens.db")
    assert store.list() == []
    assert store.verify("anything") is False
    assert store.revoke("nope") is False
    tid, secret = store.create("laptop")
    tid2, secret2 = store.create("ci")
    assert secret != secret2 and tid != tid2
    assert store.verify(secret) and store.verify(secret2)
    assert not store.verify(secret + "x")
    assert not store.verify("")
    names = [(i.token_id, i.name, i.revoked) for i in store.list()]
    assert (tid, "laptop", False) in names and (tid2, "ci", False) in names
    assert store.revoke(tid) is True
    assert store.verify(secret) is False
    assert store.verify(secret2) is True
    assert {i.token_id: i.revoked for i in store.list()} == {tid: True, tid2: False}
    assert store.revoke(tid) is True  # idempotent


def test_secret_stored_only_hashed_and_file_private(tmp_path: Path) -> None:
    path = tmp_path / "tokens.db"
    store = TokenStore(path)
    _, secret = store.create("x")
    raw = path.read_bytes()
    assert secret.encode() not in raw
    with sqlite3.connect(path) as conn:
        cols = [r[1] for r in conn.execute("PRAGMA table_info(tokens)")]
    assert "secret" not in cols
    assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0


def test_secret_alphabet_fits_subprotocol_and_query(tmp_path: Path) -> None:
    _, secret = TokenStore(tmp_path / "t.db").create("x")
    assert all(c.isalnum() or c in "_-" for c in secret)
    assert len(secret) >= 40


def test_extract_order() -> None:
    tok = extract_token("Bearer aaa", ["bearer.bbb"], "/acp?token=ccc")
    assert tok is not None and tok.secret == "aaa" and tok.source is TokenSource.HEADER
    tok = extract_token(None, ["zeroclaw.acp.v1", "bearer.bbb"], "/acp?token=ccc")
    assert tok is not None and tok.secret == "bbb" and tok.source is TokenSource.SUBPROTOCOL
    tok = extract_token(None, ["zeroclaw.acp.v1"], "/acp?agent=x&token=ccc")
    assert tok is not None and tok.secret == "ccc" and tok.source is TokenSource.QUERY
    assert extract_token("Basic zzz", [], "/acp") is None
    assert extract_token(None, ["bearer."], "/acp?token=") is None
    assert "ccc" not in repr(extract_token(None, [], "/acp?token=ccc"))


def test_cli_create_list_revoke(tmp_path: Path) -> None:
    import subprocess
    import sys

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "acpgate", "token", "--config-dir", str(tmp_path), *args],
            capture_output=True, text=True, check=False, timeout=60,
        )

    created = run("create", "--name", "ide")
    assert created.returncode == 0, created.stderr
    secret = created.stdout.strip()
    assert secret.startswith("acpg_")
    assert secret not in created.stderr
    listed = run("list")
    assert "ide" in listed.stdout and secret not in listed.stdout
    token_id = listed.stdout.split("\t")[0]
    cfg = load_config(tmp_path, environ={})
    assert TokenStore(token_db_path(cfg)).verify(secret)
    assert run("revoke", token_id).returncode == 0
    assert not TokenStore(token_db_path(cfg)).verify(secret)
    assert run("revoke", "unknown").returncode == 2


async def test_identify_and_principal(tmp_path: Path) -> None:
    """Each token is its own principal (`client:<token id>`); revoked or wrong → None."""
    from services.edge.caller import LOCAL_OPERATOR, client_caller
    from services.edge.transport.auth import Authenticator, PresentedToken

    store = TokenStore(tmp_path / "tokens.db")
    tid, secret = store.create("a")
    tid2, secret2 = store.create("b")
    assert store.identify(secret) == tid and store.identify(secret2) == tid2
    assert store.identify(secret + "x") is None and store.identify("") is None
    auth = Authenticator(store)
    assert await auth.caller(PresentedToken(secret, TokenSource.HEADER)) == client_caller(tid)
    assert client_caller(tid).principal == f"client:{tid}"
    assert await auth.caller(None) is None
    store.revoke(tid)
    assert await auth.caller(PresentedToken(secret, TokenSource.QUERY)) is None
    assert await auth.admit(PresentedToken(secret2, TokenSource.QUERY)) is True
    # Auth off: every connection is the local operator.
    assert await Authenticator(store, require_auth=False).caller(None) == LOCAL_OPERATOR


def test_token_watch_sees_changes_from_another_process(tmp_path: Path) -> None:
    """The edge's cheap look at the store notices a revoke by `acpgate token revoke`."""
    import subprocess
    import sys

    path = tmp_path / "gateway" / "tokens.db"
    watch = TokenWatch(path)
    assert watch.active_ids_if_changed() == set()  # no store yet: no active token
    assert watch.active_ids_if_changed() is None
    store = TokenStore(path)
    tid, _ = store.create("a")
    assert watch.active_ids_if_changed() == {tid}
    assert watch.active_ids_if_changed() is None  # nothing changed since
    subprocess.run([sys.executable, "-c",
                    "import sys; from pathlib import Path; from services.edge.tokens import "
                    "TokenStore; TokenStore(Path(sys.argv[1])).revoke(sys.argv[2])",
                    str(path), tid], check=True, timeout=60)
    assert watch.active_ids_if_changed() == set()
    watch.close()
    assert not path.with_name("tokens.db-journal").exists()  # it only ever reads


# ------------------------------------------------------------------ operator grants


def test_grants_given_taken_and_only_for_active_tokens(tmp_path: Path) -> None:
    """see-all is held per token, set at creation or later, taken back, and counts only
    while the token is active; an unknown grant mints and changes nothing."""
    store = TokenStore(tmp_path / "tokens.db")
    ops, _ = store.create("ops", [GRANT_SEE_ALL])
    plain, _ = store.create("plain")
    assert store.grants_of(ops) == {GRANT_SEE_ALL} and store.grants_of(plain) == set()
    assert {i.token_id: i.grants for i in store.list()} == {ops: (GRANT_SEE_ALL,), plain: ()}
    assert store.grant(plain, GRANT_SEE_ALL) and store.grant(plain, GRANT_SEE_ALL)  # twice = once
    assert store.grants_of(plain) == {GRANT_SEE_ALL}
    assert store.revoke_grant(plain, GRANT_SEE_ALL) and store.grants_of(plain) == set()
    assert store.grant("nope", GRANT_SEE_ALL) is False
    assert store.revoke_grant("nope", GRANT_SEE_ALL) is False
    for bad in (lambda: store.grant(plain, "root"), lambda: store.create("x", ["root"])):
        with pytest.raises(UnknownGrant, match="see-all"):
            bad()
    assert len(store.list()) == 2
    store.revoke(ops)
    assert store.grants_of(ops) == set()  # a revoked token grants nothing


def test_an_old_store_is_migrated_and_keeps_its_tokens(tmp_path: Path) -> None:
    """A token file written before grants existed (schema 1: the tokens table alone) opens
    with its tokens intact and gains the grants table (schema version 2)."""
    path = tmp_path / "tokens.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE tokens (token_id TEXT PRIMARY KEY, name TEXT NOT NULL, "
                     "digest TEXT NOT NULL UNIQUE, created_at INTEGER NOT NULL, "
                     "revoked_at INTEGER)")
        conn.execute("INSERT INTO tokens VALUES ('t1', 'old', ?, 1, NULL)",
                     (hashlib.sha256(b"acpg_old").hexdigest(),))
    store = TokenStore(path)
    assert store.identify("acpg_old") == "t1"
    assert store.grants_of("t1") == set()
    assert store.grant("t1", GRANT_SEE_ALL) and store.grants_of("t1") == {GRANT_SEE_ALL}
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 2
    assert [(i.token_id, i.name, i.grants) for i in store.list()] == [
        ("t1", "old", (GRANT_SEE_ALL,))]


def test_cli_grants(tmp_path: Path) -> None:
    """`token create --grant`, `token grant`, `token revoke-grant`, shown by `token list`;
    an unknown grant or token exits 2 with one line."""
    import subprocess
    import sys

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "acpgate", "token", "--config-dir", str(tmp_path), *args],
            capture_output=True, text=True, check=False, timeout=60,
        )

    ops = run("create", "--name", "ops", "--grant", "see-all")
    assert ops.returncode == 0, ops.stderr
    ops_id = ops.stderr.split("token id:", 1)[1].split()[0]
    plain = run("create", "--name", "plain")
    plain_id = plain.stderr.split("token id:", 1)[1].split()[0]
    rows = {line.split("\t")[0]: line.split("\t") for line in run("list").stdout.splitlines()}
    assert rows[ops_id][4] == "see-all" and rows[plain_id][4] == "-"
    assert run("grant", plain_id, "see-all").returncode == 0
    assert run("list").stdout.count("see-all") == 2
    assert run("revoke-grant", ops_id, "see-all").returncode == 0
    rows = {line.split("\t")[0]: line.split("\t") for line in run("list").stdout.splitlines()}
    assert rows[ops_id][4] == "-" and rows[plain_id][4] == "see-all"
    bad = run("grant", plain_id, "root")
    assert bad.returncode == 2 and "unknown grant 'root'" in bad.stderr
    assert "Traceback" not in bad.stderr
    assert run("grant", "nope", "see-all").returncode == 2
    assert run("create", "--name", "x", "--grant", "root").returncode == 2
    assert len(run("list").stdout.splitlines()) == 2
    # --admin: the host grant of the console's host page, once with --grant host.
    admin = run("create", "--name", "admin", "--admin", "--grant", "host")
    admin_id = admin.stderr.split("token id:", 1)[1].split()[0]
    rows = {line.split("\t")[0]: line.split("\t") for line in run("list").stdout.splitlines()}
    assert rows[admin_id][4] == "host"
