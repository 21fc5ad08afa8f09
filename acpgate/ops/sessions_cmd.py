"""``acpgate sessions list|show|delete``: the stored sessions, through the session service.

As the install's operator (the service credential; ``operator`` requests, which
see every principal's rows), asked of the first running service that answers —
the store is the one all of an install's session services share. ``list``:
newest activity first (``--limit``, ``--query``), a session being served now
marked ``active``; ``show ID``: the row and its whole history, readably
(``--json``: as the service sends it); ``delete ID``: the row and its history,
refused while any acpgate serves the session (close it there first).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import grpc
from google.protobuf.json_format import MessageToDict

from acpgate.ops.client import (
    CALL_TIMEOUT_SECS,
    Connected,
    OpsError,
    connect,
    describe,
    find_targets,
    operator_security,
)
from acpgate.ops.history_text import history_lines
from acpgate.ops.ps import owner_label, owner_names
from acpgate.ops.render import cut, duration, table, terminal_width
from acpgate_contracts.session.v1 import session_pb2 as spb
from services.common.config import Config

__all__ = ["run_sessions"]

#: What a CLI delete presents as its instance: none serves a session under it, so a
#: session any instance holds a live claim on is refused.
CLI_HOLDER = "acpgate-cli"


@asynccontextmanager
async def _session_service(cfg: Config) -> AsyncIterator[Connected]:
    """The first target whose session service answers (OpsError when none does)."""
    targets = await asyncio.to_thread(find_targets, cfg)
    if not targets:
        raise OpsError(f"no acpgate service runs for {cfg.config_dir}: the stored sessions are "
                       "read through one (start `acpgate serve`, or an editor's `acpgate acp`)")
    security = await asyncio.to_thread(operator_security, cfg)
    problems = []
    for target in targets:
        async with connect(security, target) as conn:
            try:
                await conn.session.GetStoreStatus(spb.GetStoreStatusRequest(),
                                                  timeout=CALL_TIMEOUT_SECS)
            except grpc.aio.AioRpcError as exc:
                problems.append(f"{target.name}: {describe(exc, target.session_addr)}")
                continue
            yield conn
            return
    raise OpsError("; ".join(problems))


def _active(row: spb.SessionRow, now_ms: int) -> bool:
    return bool(row.claim.instance_id) and row.claim.until >= now_ms


async def _list(conn: Connected, cfg: Config, limit: int, query: str, as_json_out: bool) -> int:
    rows: list[spb.SessionRow] = []
    cursor = ""
    while len(rows) < limit:
        page = await conn.session.ListSessions(spb.ListSessionsRequest(
            operator=True, cursor=cursor, limit=min(1000, limit - len(rows)), query=query),
            timeout=CALL_TIMEOUT_SECS)
        rows += page.sessions
        cursor = page.next_cursor
        if not cursor:
            break
    now = int(time.time() * 1000)
    if as_json_out:
        print(json.dumps([MessageToDict(r, preserving_proto_field_name=True) for r in rows],
                         indent=2))
        return 0
    if not rows:
        print("no stored sessions" + (f" matching {query!r}" if query else ""))
        return 0
    names = await asyncio.to_thread(owner_names, cfg)
    body = [[r.session_id, r.agent_alias, owner_label(r, names),
             "active" if _active(r, now) else "-",
             duration((now - r.last_activity) / 1000) + " ago",
             str(r.input_tokens + r.output_tokens), r.title or "-"] for r in rows]
    width = terminal_width()
    for line in table(["SESSION", "AGENT", "OWNER", "STATE", "UPDATED", "TOKENS", "TITLE"],
                      body):
        print(cut(line, width))
    if cursor:
        print(f"(the newest {len(rows)}; --limit N for more)")
    return 0


async def _show(conn: Connected, cfg: Config, session_id: str, as_json_out: bool) -> int:
    status = await conn.session.SessionStatus(spb.SessionStatusRequest(
        session_id=session_id, operator=True), timeout=CALL_TIMEOUT_SECS)
    items: list[spb.HistoryItem] = []
    async for page in conn.session.GetHistory(spb.GetHistoryRequest(
            session_id=session_id, operator=True), timeout=CALL_TIMEOUT_SECS * 6):
        items += page.items
    row = status.session
    if as_json_out:
        print(json.dumps({"session": MessageToDict(row, preserving_proto_field_name=True),
                          "history": [MessageToDict(i, preserving_proto_field_name=True)
                                      for i in items]}, indent=2))
        return 0
    names = await asyncio.to_thread(owner_names, cfg)
    created = time.strftime("%Y-%m-%d %H:%M", time.localtime(row.created_at / 1000))
    state = "active" if _active(row, int(time.time() * 1000)) else "stored"
    print(f"session {row.session_id} · agent {row.agent_alias} · owner {owner_label(row, names)} · "
          f"{state} · created {created} · {len(items)} items · "
          f"{row.input_tokens + row.output_tokens} tokens")
    print(f"workspace {row.workspace_dir}" + (f" · forked from {row.forked_from}"
                                               if row.forked_from else ""))
    if row.title:
        print(f"title: {row.title}")
    for line in history_lines(items, terminal_width()):
        print(line)
    return 0


async def _delete(conn: Connected, session_id: str) -> int:
    try:
        done = await conn.session.DeleteSession(spb.DeleteSessionRequest(
            session_id=session_id, holder_instance_id=CLI_HOLDER), timeout=CALL_TIMEOUT_SECS)
    except grpc.aio.AioRpcError as exc:
        if exc.code() != grpc.StatusCode.ABORTED:
            raise
        print(f"acpgate: session {session_id} is being served ({exc.details()}); close it in "
              "its client, or stop the acpgate serving it, then delete it", file=sys.stderr)
        return 1
    if not done.deleted:
        print(f"acpgate: no stored session {session_id}", file=sys.stderr)
        return 1
    print(f"deleted {session_id}")
    return 0


async def run_sessions(cfg: Config, action: str, *, session_id: str = "", limit: int = 50,
                       query: str = "", as_json_out: bool = False) -> int:
    """One ``acpgate sessions`` action; the exit code."""
    jobs: dict[str, Callable[[Connected], Awaitable[int]]] = {
        "list": lambda c: _list(c, cfg, limit, query, as_json_out),
        "show": lambda c: _show(c, cfg, session_id, as_json_out),
        "delete": lambda c: _delete(c, session_id),
    }
    try:
        async with _session_service(cfg) as conn:
            return await jobs[action](conn)
    except OpsError as exc:
        print(f"acpgate: {exc}", file=sys.stderr)
        return 1
    except grpc.aio.AioRpcError as exc:
        if exc.code() == grpc.StatusCode.NOT_FOUND:
            print(f"acpgate: {exc.details()}", file=sys.stderr)
        else:
            print(f"acpgate: {describe(exc, 'the session service')}", file=sys.stderr)
        return 1
