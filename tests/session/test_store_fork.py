"""ACP ``session/fork`` in the store, on every backend.

A fork is a new row whose history is a copy of the parent's, written in one
transaction: items, turn numbers and times as the parent's; the parent's title,
plan, mode, config values, extra roots and MCP servers (unless the fork is given
its own); the parent's ownership (a sibling: same owner, same spawner); its own
claim; ``forked_from``; token totals of its own (none yet). The copied bytes count
against the owner's quota — refused whole, nothing written, when they would pass
it. The two histories go their own ways afterwards.
"""

from __future__ import annotations

import pytest

from services.common.protocol import MSG_TOKEN_QUOTA
from services.session.store import (
    HistoryEntry,
    NewSession,
    Quota,
    QuotaExceeded,
    SessionExists,
    SessionNotFound,
    SessionStore,
    TurnUsage,
)
from services.session.store.records import item_bytes
from tests.session.conftest import Backend

TTL = 30_000


def turn(text: str) -> list[HistoryEntry]:
    return [HistoryEntry(role="user", text=text),
            HistoryEntry(role="tool_call", tool_call_id="c1", tool_name="shell",
                         arguments_json='{"cmd": "ls"}'),
            HistoryEntry(role="tool_result", tool_call_id="c1", output="a\x00b ✓",
                         status="completed"),
            HistoryEntry(role="assistant", text=f"answer to {text}")]


async def items(store: SessionStore, sid: str) -> list[tuple[object, ...]]:
    return [(e.seq, e.turn, e.role, e.text, e.tool_call_id, e.output, e.created_at)
            async for e in store.iter_history(sid)]


async def owner_total(backend: Backend, owner: str) -> int:
    return await backend.count("SELECT COALESCE(SUM(stored_bytes), 0) FROM owner_usage"
                               f" WHERE owner_session_key = '{owner}'")


async def parent_with_turns(store: SessionStore) -> None:
    await store.create_session(NewSession("p", "alpha", "/w", owner_session_key="client:t1",
                               mcp_servers_json='[{"name": "docs"}]',
                               additional_directories=("/extra",)))
    await store.append_turn("p", turn("first message"), token_delta=9,
                            usage=TurnUsage(input_tokens=5, output_tokens=4), plan_json="[1]")
    await store.append_turn("p", turn("second"))
    await store.update_session("p", mode_id="readonly", config_json='{"model": "x"}',
                               title="Parent title", adapter_session_id="adapter-p")


async def test_fork_copies_history_and_state(store: SessionStore, backend: Backend) -> None:
    await parent_with_turns(store)
    parent = await store.get_session("p")
    fork = await store.fork_session("p", "f", agent_alias="alpha", gateway_instance_id="gw",
                                    host="h", claim_ttl_ms=TTL)
    assert fork.forked_from == "p" and parent.forked_from == ""
    assert (fork.agent_alias, fork.workspace_dir, fork.title) == ("alpha", "/w", "Parent title")
    assert (fork.plan_json, fork.mode_id, fork.config_json) == ("[1]", "readonly",
                                                                '{"model": "x"}')
    assert fork.mcp_servers_json == '[{"name": "docs"}]'
    assert fork.additional_directories == ("/extra",)
    assert fork.adapter_session_id == ""  # the agent's own session stays the parent's
    assert (fork.state, fork.claim.instance_id, fork.claim.host, fork.claim.generation) == \
        ("active", "gw", "h", 1)
    assert fork.ownership.owner_session_key == "client:t1"
    assert fork.ownership.session_key == "agent:alpha:acp:f"
    assert (fork.token_count, fork.input_tokens, fork.output_tokens) == (0, 0, 0)
    assert (fork.message_count, fork.stored_bytes) == (parent.message_count,
                                                        parent.stored_bytes)
    assert await items(store, "f") == await items(store, "p")
    assert await owner_total(backend, "client:t1") == 2 * parent.stored_bytes

    # From here on each goes its own way: the turn numbers go on from the copy.
    done = await store.append_turn("f", turn("only in the fork"))
    assert (done.turn, done.first_seq) == (3, parent.message_count + 1)
    assert len(await items(store, "p")) == parent.message_count
    assert await store.delete_session("p")
    assert len(await items(store, "f")) == parent.message_count + 4


async def test_fork_takes_given_roots_and_servers(store: SessionStore) -> None:
    await parent_with_turns(store)
    fork = await store.fork_session("p", "f", agent_alias="beta", gateway_instance_id="gw",
                                    claim_ttl_ms=TTL, additional_directories=(),
                                    mcp_servers_json="[]")
    assert (fork.agent_alias, fork.ownership.agent_id) == ("beta", "beta")
    assert (fork.additional_directories, fork.mcp_servers_json) == ((), "[]")


async def test_fork_of_a_top_level_local_session_owns_itself(store: SessionStore) -> None:
    """A session that owns itself (stdio) has a fork that owns itself too: the same
    (local) principal, and no session is made the other's owner."""
    await store.create_session(NewSession("p", "alpha", "/w"))
    fork = await store.fork_session("p", "f", agent_alias="alpha", gateway_instance_id="gw",
                                    claim_ttl_ms=TTL)
    assert fork.ownership.owner_session_key == fork.ownership.session_key == "agent:alpha:acp:f"


async def test_fork_of_a_spawned_session_is_its_sibling(store: SessionStore) -> None:
    """Spawner, parent key and owner are the parent's: the fork is capped, listed and
    closed like the session it was forked from, never made that session's child."""
    await store.create_session(NewSession("root", "alpha", "/w", owner_session_key="client:t1"))
    await store.create_session(NewSession("kid", "beta", "/w", spawned_by="agent:alpha:acp:root",
                               parent_session_key="agent:alpha:acp:root",
                               owner_session_key="client:t1"))
    fork = await store.fork_session("kid", "f", agent_alias="beta", gateway_instance_id="gw",
                                    claim_ttl_ms=TTL)
    o = fork.ownership
    assert (o.spawned_by, o.parent_session_key, o.owner_session_key) == \
        ("agent:alpha:acp:root", "agent:alpha:acp:root", "client:t1")


async def test_fork_refusals_write_nothing(store: SessionStore, backend: Backend) -> None:
    await parent_with_turns(store)
    await store.create_session(NewSession("taken", "alpha", "/w", owner_session_key="client:t1"))
    before = await owner_total(backend, "client:t1")
    with pytest.raises(SessionNotFound):
        await store.fork_session("nope", "f", agent_alias="alpha", gateway_instance_id="gw",
                                 claim_ttl_ms=TTL)
    with pytest.raises(SessionExists):
        await store.fork_session("p", "taken", agent_alias="alpha", gateway_instance_id="gw",
                                 claim_ttl_ms=TTL)
    assert len(await items(store, "taken")) == 0
    size = (await store.get_session("p")).stored_bytes
    with pytest.raises(QuotaExceeded) as refused:
        await store.fork_session("p", "f", agent_alias="alpha", gateway_instance_id="gw",
                                 claim_ttl_ms=TTL, quota=Quota(owner_bytes=before + size - 1))
    assert str(refused.value) == MSG_TOKEN_QUOTA.format(used=before + size,
                                                        limit=before + size - 1)
    with pytest.raises(QuotaExceeded):
        await store.fork_session("p", "f", agent_alias="alpha", gateway_instance_id="gw",
                                 claim_ttl_ms=TTL, quota=Quota(session_bytes=size - 1))
    with pytest.raises(SessionNotFound):
        await store.get_session("f")
    assert await owner_total(backend, "client:t1") == before
    assert await backend.count("SELECT COUNT(*) FROM history WHERE session_id = 'f'") == 0
    # At the limit exactly it fits.
    fork = await store.fork_session("p", "f", agent_alias="alpha", gateway_instance_id="gw",
                                    claim_ttl_ms=TTL, quota=Quota(owner_bytes=before + size,
                                                                  session_bytes=size))
    assert fork.stored_bytes == size == sum(item_bytes(e) for e in turn("first message")) \
        + sum(item_bytes(e) for e in turn("second"))


async def test_fork_of_a_fork_names_its_own_parent(store: SessionStore) -> None:
    await parent_with_turns(store)
    await store.fork_session("p", "f1", agent_alias="alpha", gateway_instance_id="gw",
                             claim_ttl_ms=TTL)
    f2 = await store.fork_session("f1", "f2", agent_alias="alpha", gateway_instance_id="gw",
                                  claim_ttl_ms=TTL)
    assert f2.forked_from == "f1"
    assert await items(store, "f2") == await items(store, "p")
