"""``acpgate store check|repair [--json]``: the session store's health, and its repair.

``check`` looks at the store without a service and without changing it: the SQLite
file's ``integrity_check`` and schema version (:mod:`services.session.store.sqlite.diagnosis`),
or whether ``[store] url``'s database answers and with which version. Exit 0 when
acpgate can start on it, 1 when not.

``repair`` moves a damaged SQLite file aside and salvages what it can into a fresh
store (:mod:`services.session.store.sqlite.salvage`). It refuses while any service of this
install runs (one would hold the file open, or write it again meanwhile): an
``acpgate serve`` (its lock), an ``acpgate acp`` (its endpoint), or services on the
install's sockets. Exit 0 when repaired, 1 when refused or nothing needed it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import os
import socket
import sys
import time
from dataclasses import asdict
from pathlib import Path

from acpgate.ops.endpoints import live_endpoints
from acpgate.serve_lock import SERVE_LOCK_NAME
from services.common.addresses import default_session_address
from services.common.config import Config
from services.common.in_use import socket_is_served
from services.session.api.server import store_target
from services.session.store import PostgresTarget
from services.session.store.postgres.db import create_pool, describe
from services.session.store.postgres.schema import read_version
from services.session.store.records import LATEST_SCHEMA_VERSION
from services.session.store.sqlite.diagnosis import DAMAGED, MISSING, NEWER, OK, Diagnosis, diagnose
from services.session.store.sqlite.salvage import RepairRefused, repair_store

__all__ = ["check_store", "run_store", "running_services"]

#: How long a connect to a service's TCP address may take to count as answering.
PROBE_SECS = 1.0


def _serve_lock_held(data_dir: Path) -> bool:
    """Whether an ``acpgate serve`` (or a child of one) holds the data dir's serve lock."""
    try:
        fd = os.open(data_dir / "run" / SERVE_LOCK_NAME,
                     os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        return exc.errno in (errno.EAGAIN, errno.EACCES)
    finally:
        os.close(fd)  # closing drops a lock taken here
    return False


def _answers(address: str) -> bool:
    """Whether something listens at a service address (``unix:/path`` or ``host:port``)."""
    if address.startswith("unix:"):
        return socket_is_served(address.removeprefix("unix:"))
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_SECS):
            return True
    except (OSError, ValueError):
        return False


def running_services(cfg: Config) -> list[str]:
    """The names of this install's services that run now (blocking)."""
    names = [e.name for e in live_endpoints(cfg.data_dir)]
    if _serve_lock_held(cfg.data_dir) and not any(n.startswith("serve") for n in names):
        names.append("serve")
    address = default_session_address(cfg)
    if not names and _answers(address):
        names.append(f"a session service at {address}")
    return names


async def _check_postgres(target: PostgresTarget) -> Diagnosis:
    try:
        pool = await create_pool(target)
    except Exception as exc:  # the driver's many errors, all of them an answer here
        return Diagnosis(target.shown, DAMAGED, f"it does not answer: {describe(exc)}")
    try:
        async with pool.acquire() as con:
            version = await read_version(con)
            if version > LATEST_SCHEMA_VERSION:
                return Diagnosis(target.shown, NEWER, f"its schema version {version} is newer "
                                 f"than this acpgate reads ({LATEST_SCHEMA_VERSION})", version)
            counted = await con.fetchval("SELECT COUNT(*) FROM sessions") if version else 0
            items = await con.fetchval("SELECT COUNT(*) FROM history") if version else 0
            return Diagnosis(target.shown, OK if version else MISSING, "", version,
                             int(counted), int(items))
    except Exception as exc:
        return Diagnosis(target.shown, DAMAGED, describe(exc))
    finally:
        await pool.close()


async def check_store(cfg: Config) -> Diagnosis:
    """The diagnosis of the install's store (the SQLite file read-only, or the database)."""
    target = store_target(cfg)
    if isinstance(target, PostgresTarget):
        return await _check_postgres(target)
    return await asyncio.to_thread(diagnose, cfg.session_db_path)


def _say(found: Diagnosis) -> str:
    if found.state == OK:
        return (f"ok: {found.path}: schema {found.schema_version}, {found.sessions} "
                f"session(s), {found.history_items} history item(s)")
    if found.state == MISSING:
        return f"ok: {found.path}: no store yet (the first start creates it)"
    return f"{found.state}: {found.path}: {found.problem}"


async def _repair(cfg: Config, flag: str) -> tuple[int, dict[str, object]]:
    if cfg.store.url:
        return 1, {"refused": "[store] url names a PostgreSQL database: repair it with its "
                              "own tools (pg_dump, psql); `acpgate store repair` repairs the "
                              "SQLite file"}
    running = await asyncio.to_thread(running_services, cfg)
    if running:
        return 1, {"refused": f"{', '.join(running)} run(s) on this install: stop them first "
                              f"(`acpgate ps{flag}` lists them)"}
    try:
        done = await repair_store(cfg.session_db_path, cfg.data_dir, int(time.time() * 1000))
    except RepairRefused as exc:
        return 1, {"refused": str(exc)}
    return 0, asdict(done)


async def run_store(cfg: Config, action: str, *, config_flag: str = "",
                    as_json_out: bool = False) -> int:
    """``acpgate store <action>``: print what was found or done; the exit code."""
    if action == "check":
        found = await check_store(cfg)
        code = 0 if found.usable else 1
        if as_json_out:
            print(json.dumps({**asdict(found), "usable": found.usable}, indent=2))
            return code
        print(_say(found))
        if found.state == DAMAGED and not cfg.store.url:
            print(f"→ stop acpgate, then `acpgate store repair{config_flag}`: the file is "
                  "moved aside and the sessions it still holds are recovered")
        elif not found.usable:
            print("→ acpgate does not start on it until this is dealt with")
        return code
    code, out = await _repair(cfg, config_flag)
    if as_json_out:
        print(json.dumps(out, indent=2))
    elif code:
        print(f"acpgate: repair refused: {out['refused']}", file=sys.stderr)
    else:
        print(f"repaired {cfg.session_db_path}: the damaged file is now {out['moved_to']}; "
              f"recovered {out['sessions']} session(s) and {out['history_items']} history "
              f"item(s) ({out['method']})")
    with contextlib.suppress(BrokenPipeError):
        sys.stdout.flush()
    return code
