"""The WebSocket gateway over the real stack (SPEC §3, §6, §7, §8, §9, §11).

Session + lifecycle services on real unix sockets, the real runtime and
dialect, the built-in demo agent as real child processes; clients are the
official ACP Python SDK's WebSocket transport and a raw websockets client.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import psutil
import pytest
from websockets.asyncio.client import connect
from websockets.typing import Subprotocol

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2

from .stack import RawClient, Stack, full_stack, select
from .wsfixtures import http_get, mint, write_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def auth(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


async def eventually(check: Any, what: str, tries: int = 300) -> None:
    for _ in range(tries):
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


async def test_sdk_websocket_client_initialize_prompt_cancel_load(tmp_path: Path) -> None:
    """The official SDK's WebSocket transport drives the gateway like any ACP agent."""
    from acp import connect_to_agent, text_block
    from acp.schema import ClientCapabilities, PermissionOption, RequestPermissionResponse
    from acp.ws import create_websocket_stream

    cfg = write_config(tmp_path / "cfg", detach_grace_secs=0)  # released at the disconnect
    _, secret = mint(cfg)
    updates: list[tuple[str, Any]] = []
    permission_asked = asyncio.Event()
    release_permission = asyncio.Event()

    class Client:
        async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
            updates.append((session_id, update))

        async def request_permission(self, session_id: str, tool_call: Any,
                                     options: list[PermissionOption], **kwargs: Any) -> Any:
            permission_asked.set()
            await release_permission.wait()
            return RequestPermissionResponse.model_validate({"outcome": {"outcome": "cancelled"}})

        def on_connect(self, conn: Any) -> None:
            pass

    async with full_stack(cfg) as stack:
        transport = await create_websocket_stream(stack.edge.url, headers=auth(secret))
        conn = connect_to_agent(Client(), transport)  # type: ignore[arg-type]
        init = await conn.initialize(protocol_version=1, client_capabilities=ClientCapabilities())
        assert init.protocol_version == 1
        assert init.agent_capabilities is not None and init.agent_capabilities.load_session
        project = tmp_path / "project"  # beside the config dir (a cwd holding it is refused)
        project.mkdir()
        new = await conn.new_session(cwd=str(project), mcp_servers=[])
        sid = new.session_id
        resp = await conn.prompt(session_id=sid, prompt=[text_block("hello over websocket")])
        assert resp.stop_reason == "end_turn"
        text = "".join(u.content.text for s, u in updates
                       if s == sid and getattr(u, "session_update", "") == "agent_message_chunk")
        assert "hello over websocket" in text

        # `!cmd` in supervised mode asks first; cancel while the question is open.
        turn = asyncio.create_task(conn.prompt(session_id=sid, prompt=[text_block("!echo hi")]))
        await asyncio.wait_for(permission_asked.wait(), 60)
        await conn.cancel(session_id=sid)
        cancelled = await asyncio.wait_for(turn, 60)
        release_permission.set()
        assert cancelled.stop_reason == "cancelled"
        marker = [u for s, u in updates if s == sid and getattr(u, "session_update", "") == "tool_call"
                  and getattr(u, "tool_call_id", "") == f"turn-cancelled-{sid}"]
        assert marker, "the turn-cancelled update precedes the cancelled result"
        await transport.close()

        # Disconnect released the session; a fresh connection loads it with replay.
        await eventually(lambda: _no_active(stack), "session released after disconnect")
        live = [u.model_dump(by_alias=True) for s, u in updates if s == sid]
        updates.clear()
        transport = await create_websocket_stream(stack.edge.url, headers=auth(secret))
        conn = connect_to_agent(Client(), transport)  # type: ignore[arg-type]
        await conn.initialize(protocol_version=1, client_capabilities=ClientCapabilities())
        await conn.load_session(cwd=str(project), session_id=sid, mcp_servers=[])
        *replayed, commands = [(getattr(u, "session_update", ""), u) for s, u in updates
                               if s == sid]
        assert commands[0] == "available_commands_update"  # the restored agent's, last
        kinds = [k for k, _ in replayed]
        assert "user_message_chunk" in kinds and "agent_message_chunk" in kinds
        users = [u for k, u in replayed if k == "user_message_chunk"]
        # The replay is the event log: the prompts, and every update exactly as this client
        # got it live, the cancelled turn's prompt marked and its marker last (SPEC §7).
        assert [u.content.text for u in users] == ["hello over websocket", "!echo hi"]
        assert [(u.field_meta or {})["acpgate"].get("stopReason") for u in users] \
            == [None, "cancelled"]
        assert [u.model_dump(by_alias=True) for k, u in replayed
                if k != "user_message_chunk"] == live
        assert getattr(replayed[-1][1], "tool_call_id", "") == f"turn-cancelled-{sid}"
        resp = await conn.prompt(session_id=sid, prompt=[text_block("after load")])
        assert resp.stop_reason == "end_turn"
        await transport.close()


async def _no_active(stack: Stack) -> bool:
    return stack.runtime.metrics.active_sessions == 0


async def test_two_connections_have_independent_zc_out_counters(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg")
    _, secret = mint(cfg)
    async with full_stack(cfg) as stack:
        async with connect(stack.edge.url, proxy=None, additional_headers=auth(secret),
                           subprotocols=[Subprotocol("zeroclaw.acp.v1")]) as ws1, \
                   connect(f"{stack.edge.url}?agent=helper", proxy=None,
                           additional_headers=auth(secret)) as ws2:
            assert ws1.subprotocol == "zeroclaw.acp.v1"
            a = RawClient(ws1, select("allow-once"))
            b = RawClient(ws2, select("reject-once"))
            sid_a = (await a.result("session/new", {}))["sessionId"]
            sid_b = (await b.result("session/new", {}))["sessionId"]
            assert sid_a != sid_b
            (_, ra), (_, rb) = await asyncio.gather(
                a.call("session/prompt", {"sessionId": sid_a, "prompt": "!echo from-a"}),
                b.call("session/prompt", {"sessionId": sid_b, "prompt": "!echo from-b"}),
            )
            assert ra["result"]["stopReason"] == "end_turn"
            assert rb["result"]["stopReason"] == "end_turn"
            for client, sid in ((a, sid_a), (b, sid_b)):
                assert [r["id"] for r in client.requests] == ["zc-out-0"]
                assert client.requests[0]["method"] == "session/request_permission"
                assert client.requests[0]["params"]["sessionId"] == sid
            assert "from-a" in ra["result"]["content"]
            # A session of one connection does not exist for the other.
            _, err = await b.call("session/prompt", {"sessionId": sid_a, "prompt": "x"})
            assert err["error"]["code"] == -32000
            # `?agent=helper` was connection B's default alias.
            keys = {lease.session_key for lease in await stack.leases()}
            assert f"agent:assistant:acp:{sid_a}" in keys
            assert f"agent:helper:acp:{sid_b}" in keys


async def test_each_token_sees_only_its_own_sessions(tmp_path: Path) -> None:
    """§8 session/list is "visible to the caller" (§14): one client's sessions are not another's.

    Each token is a principal that owns the sessions it creates; another
    token's session is listed nowhere and loads as "not found".
    """
    cfg = write_config(tmp_path / "cfg")
    _, secret_a = mint(cfg, "alice")
    _, secret_b = mint(cfg, "bob")
    async with full_stack(cfg) as stack:
        async with connect(stack.edge.url, proxy=None, additional_headers=auth(secret_a)) as wa:
            a = RawClient(wa)
            sid_a = (await a.result("session/new", {}))["sessionId"]
            await a.result("session/close", {"sessionId": sid_a})
            listed = await a.result("session/list", {})
            assert [x["sessionId"] for x in listed["sessions"]] == [sid_a]
        async with connect(stack.edge.url, proxy=None, additional_headers=auth(secret_b)) as wb:
            b = RawClient(wb)
            assert (await b.result("session/list", {}))["sessions"] == []
            for method in ("session/load", "session/resume"):
                _, err = await b.call(method, {"sessionId": sid_a})
                assert err["error"] == {"code": -32000, "message": f"Session not found: {sid_a}"}
            _, err = await b.call("session/event", {"sessionId": sid_a, "type": "x"})
            assert err["error"]["code"] == -32000
        # Alice, on a new connection, can still load her session.
        async with connect(stack.edge.url, proxy=None, additional_headers=auth(secret_a)) as wa:
            a = RawClient(wa)
            assert set(await a.result("session/load", {"sessionId": sid_a})) == \
                {"modes", "configOptions"}


async def test_disconnect_releases_sessions_and_leases(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg", detach_grace_secs=0)  # released at the disconnect
    _, secret = mint(cfg)
    async with full_stack(cfg) as stack:
        ws = await connect(stack.edge.url, proxy=None, additional_headers=auth(secret))
        client = RawClient(ws)
        sids = [(await client.result("session/new", {}))["sessionId"] for _ in range(2)]
        await client.result("session/prompt", {"sessionId": sids[0], "prompt": "hi"})
        assert stack.runtime.metrics.active_sessions == 2
        leases = [lease for sid in sids for lease in await stack.leases(f"agent:assistant:acp:{sid}")]
        assert [lease.state for lease in leases] == [lifecycle_pb2.LEASE_STATE_OPEN] * 2
        pids = [lease.root_pid for lease in leases] + [lease.adapter_pid for lease in leases]
        assert all(psutil.pid_exists(p) for p in pids)
        # /metrics sees them before the disconnect.
        _, _, body = await http_get(f"http://127.0.0.1:{stack.edge.port}/metrics")
        assert "acpgate_active_sessions 2" in body and 'acpgate_leases{state="open"} 2' in body
        assert "acpgate_turns_total 1" in body
        # The turns' token usage, as the agent reported it, totalled in /metrics
        tokens = dict(re.findall(r'acpgate_tokens_total\{kind="(\w+)"\} (\S+)', body))
        assert float(tokens["input"]) > 0 and float(tokens["output"]) > 0

        ws.transport.abort()  # an abrupt disconnect, no close handshake

        async def released() -> bool:
            states = [lease.state for sid in sids
                      for lease in await stack.leases(f"agent:assistant:acp:{sid}")]
            return stack.runtime.metrics.active_sessions == 0 and all(
                s in (lifecycle_pb2.LEASE_STATE_CLOSED, lifecycle_pb2.LEASE_STATE_LOST)
                for s in states)

        await eventually(released, "sessions and leases released")

        async def gone() -> bool:
            return not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"
                           for p in pids)

        await eventually(gone, "wrapper and adapter processes exited")
        # The rows are kept: another connection can load the session.
        async with connect(stack.edge.url, proxy=None, additional_headers=auth(secret)) as ws2:
            c2 = RawClient(ws2)
            seen, resp = await c2.call("session/load", {"sessionId": sids[0]})
            assert set(resp["result"]) == {"modes", "configOptions"}
            texts = [m["params"]["update"].get("content", {}).get("text") for m in seen
                     if m.get("method") == "session/update"]
            assert "hi" in texts


async def test_bridge_end_to_end(tmp_path: Path) -> None:
    """`acpgate bridge` as a real process: stdin lines ↔ frames, EOF → close, exit 0."""
    import sys

    cfg = write_config(tmp_path / "cfg", detach_grace_secs=0)  # released at the disconnect
    _, secret = mint(cfg)
    async with full_stack(cfg) as stack:
        bridge_dir = tmp_path / "bridge"
        bridge_dir.mkdir()
        (bridge_dir / "config.toml").write_text(
            f'[gateway]\nhost = "127.0.0.1"\nport = {stack.edge.port}\n')
        (bridge_dir / "acp-bridge-token").write_text(secret + "\n")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "acpgate", "bridge", f"--config-dir={bridge_dir}",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        assert proc.stdin is not None and proc.stdout is not None

        async def send(msg: dict[str, Any]) -> None:
            assert proc.stdin is not None
            proc.stdin.write((json.dumps(msg) + "\n").encode())
            await proc.stdin.drain()

        async def until(req_id: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
            seen: list[dict[str, Any]] = []
            while True:
                assert proc.stdout is not None
                line = await asyncio.wait_for(proc.stdout.readline(), 60)
                assert line, "bridge closed stdout early"
                msg = json.loads(line)
                if msg.get("id") == req_id and "method" not in msg:
                    return seen, msg
                seen.append(msg)

        await send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}})
        _, init = await until(1)
        assert init["result"]["protocolVersion"] == 1
        await send({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {}})
        _, new = await until(2)
        sid = new["result"]["sessionId"]
        # The back-channel works through the bridge: answer zc-out-0 from "the IDE".
        await send({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
                    "params": {"sessionId": sid, "prompt": "!echo bridged"}})
        seen: list[dict[str, Any]] = []
        while True:
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            msg = json.loads(line)
            if msg.get("id") == "zc-out-0":
                await send({"jsonrpc": "2.0", "id": "zc-out-0",
                            "result": {"outcome": {"outcome": "selected", "optionId": "allow-once"}}})
                continue
            if msg.get("id") == 3:
                prompt = msg
                break
            seen.append(msg)
        assert prompt["result"]["stopReason"] == "end_turn"
        assert "bridged" in prompt["result"]["content"]
        assert any(m.get("method") == "session/update" for m in seen)
        # Bad input gets its answer through the bridge too.
        proc.stdin.write(b"{not json\n")
        await proc.stdin.drain()
        err = json.loads(await asyncio.wait_for(proc.stdout.readline(), 60))
        assert err["error"]["code"] == -32700 and err["id"] is None
        # A request in flight at EOF is still answered, then the bridge exits 0.
        await send({"jsonrpc": "2.0", "id": 4, "method": "session/prompt",
                    "params": {"sessionId": sid, "prompt": "last words"}})
        proc.stdin.close()
        rest = await asyncio.wait_for(proc.stdout.read(), 60)
        last = [json.loads(line) for line in rest.decode().splitlines()]
        assert last[-1]["id"] == 4 and last[-1]["result"]["stopReason"] == "end_turn"
        assert await asyncio.wait_for(proc.wait(), 30) == 0
        stderr = (await proc.stderr.read()).decode() if proc.stderr else ""
        assert secret not in stderr
        await eventually(lambda: _no_active(stack), "bridge disconnect released the session")


async def test_bridge_errors(tmp_path: Path) -> None:
    import sys

    async def run(config_dir: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
        import os

        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "acpgate", "bridge", "--config-dir", str(config_dir),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, **(env or {})})
        _, err = await proc.communicate()
        return proc.returncode or 0, err.decode()

    code, err = await run(tmp_path / "missing")
    assert code == 2 and "no config at" in err and len(err.strip().splitlines()) == 1
    cfg_dir = tmp_path / "b"
    cfg_dir.mkdir()
    (cfg_dir / "config.toml").write_text('[gateway]\nport = 1\n')
    code, err = await run(cfg_dir)
    assert code == 2 and "ACPGATE_ACP_BRIDGE_TOKEN" in err
    code, err = await run(cfg_dir, {"ACPGATE_ACP_BRIDGE_TOKEN": "acpg_secret_value"})
    assert code == 1 and "cannot connect" in err and "acpg_secret_value" not in err
    (cfg_dir / "config.toml").write_text('[gateway]\nport = "x"\n')
    code, err = await run(cfg_dir, {"ACPGATE_ACP_BRIDGE_TOKEN": "t"})
    assert code == 2 and "port" in err

    # A wrong token against a live gateway: refused with 401, exit 1.
    cfg = write_config(tmp_path / "cfg")
    async with full_stack(cfg) as stack:
        (cfg_dir / "config.toml").write_text(f'[gateway]\nport = {stack.edge.port}\n')
        code, err = await run(cfg_dir, {"ACPGATE_ACP_BRIDGE_TOKEN": "acpg_wrong"})
        assert code == 1 and "401" in err and "acpg_wrong" not in err


async def _bridge(bridge_dir: Path, env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
    import os
    import sys

    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "acpgate", "bridge", "--config-dir", str(bridge_dir),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, **(env or {})})


async def test_bridge_over_tls_with_env_token(tmp_path: Path, tls_files: tuple[Path, Path]) -> None:
    cert, key = tls_files
    cfg = write_config(tmp_path / "cfg",
                       extra=f'\n[gateway.tls]\ncert_file = "{cert}"\nkey_file = "{key}"\n')
    _, secret = mint(cfg)
    async with full_stack(cfg) as stack:
        assert stack.edge.url.startswith("wss://")
        bridge_dir = tmp_path / "bridge"
        bridge_dir.mkdir()
        (bridge_dir / "config.toml").write_text(
            f'[gateway]\nhost = "127.0.0.1"\nport = {stack.edge.port}\n\n'
            f'[gateway.tls]\nca_file = "{cert}"\n')
        (bridge_dir / "acp-bridge-token").write_text("acpg_stale_file_token\n")  # env wins
        proc = await _bridge(bridge_dir, {"ACPGATE_ACP_BRIDGE_TOKEN": secret})
        out, err = await asyncio.wait_for(proc.communicate(
            b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n'), 60)
        assert proc.returncode == 0, err.decode()
        assert json.loads(out.decode().splitlines()[0])["result"]["protocolVersion"] == 1


async def test_bridge_eof_refuses_late_permission_requests(tmp_path: Path) -> None:
    """After stdin EOF nobody can answer zc-out-N: the bridge refuses, the turn still ends."""
    cfg = write_config(tmp_path / "cfg")
    _, secret = mint(cfg)
    async with full_stack(cfg) as stack:
        bridge_dir = tmp_path / "bridge"
        bridge_dir.mkdir()
        (bridge_dir / "config.toml").write_text(f'[gateway]\nport = {stack.edge.port}\n')
        (bridge_dir / "acp-bridge-token").write_text(secret)
        proc = await _bridge(bridge_dir)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"session/new","params":{}}\n')
        await proc.stdin.drain()
        sid = json.loads(await asyncio.wait_for(proc.stdout.readline(), 60))["result"]["sessionId"]
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
                                     "params": {"sessionId": sid, "prompt": "!echo nope"}}).encode()
                         + b"\n")
        await proc.stdin.drain()
        proc.stdin.close()  # EOF before the permission request arrives
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        msgs = [json.loads(line) for line in out.decode().splitlines()]
        assert proc.returncode == 0, err.decode()
        assert not any(m.get("id") == "zc-out-0" for m in msgs), "refused by the bridge itself"
        final = msgs[-1]
        assert final["id"] == 2 and final["result"]["stopReason"] == "end_turn"
        updates = [m["params"]["update"] for m in msgs if m.get("method") == "session/update"]
        assert "denied" in final["result"]["content"], updates
