"""A session's cwd can never be acpgate's own state or a credential store.

Roots beat forbidden paths (SPEC §12), so a session rooted at the data dir
could read every other principal's conversations and the gateway tokens with
the real shell tool. Against a real ``acpgate serve``, with real tokens and the
built-in agent on a local model server doing what the attacker asks:

- ``session/new`` refuses (-32602, the reason named, the data dir's path not) a
  cwd that is, lies inside or contains the config dir, the data dir or a
  credential store; the config dir itself still means the agent workspace;
- a stored session whose workspace is refused now is refused on load/resume
  with the same message;
- ``[autonomy] allow_cwd`` opts a directory in, and even then neither the file
  tools nor the shell (Landlock) reach the state or credentials inside it.
"""

from __future__ import annotations

import base64
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from services.agent.sandbox import landlock_abi
from tests.gateway.stack import RawClient
from tests.security.fake_model import RESULT_MARKER
from tests.security.gateway_stack import Gateway, running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SSH_KEY = "-----BEGIN OPENSSH PRIVATE KEY----- attacker-wants-this"
SQLITE_MAGIC = "SQLite format 3"


def plant_secrets(gw: Gateway) -> None:
    """A private key under the gateway's HOME."""
    ssh = gw.home / ".ssh"
    ssh.mkdir(mode=0o700, exist_ok=True)
    (ssh / "id_ed25519").write_text(SSH_KEY)


async def error_of(client: RawClient, method: str, params: dict[str, Any]) -> dict[str, Any]:
    _, resp = await client.call(method, params)
    assert "error" in resp, resp
    return dict(resp["error"])


def assert_refused(error: dict[str, Any], gw: Gateway, why: str) -> None:
    """-32602 naming the reason and the opt-in, never the data dir's location."""
    assert error["code"] == -32602, error
    message = error["message"]
    assert message.startswith("cwd refused as a session workspace: it "), message
    assert why in message and "[autonomy] allow_cwd" in message, message
    assert str(gw.data_dir) not in message and str(gw.config_dir) not in message, message


async def tool_output(client: RawClient, sid: str, prompt: str) -> str:
    """What the tool the attacker asked for returned (as the model reported it)."""
    result = await client.result("session/prompt", {"sessionId": sid, "prompt": prompt})
    content = str(result["content"])
    assert RESULT_MARKER in content, content
    return content.split(RESULT_MARKER, 1)[1]


def refused(tool_output: str) -> bool:
    """The policy check (file tools, literal shell paths) or Landlock (hidden ones) said no."""
    return "forbidden by policy" in tool_output or "Permission denied" in tool_output


def hidden(path: Path) -> str:
    """``path`` spelled so that no literal path check can see it."""
    encoded = base64.b64encode(str(path).encode()).decode()
    return f"$(echo {encoded} | base64 -d)"


async def test_state_and_credential_stores_are_refused_as_cwd(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        plant_secrets(gw)
        token_a, token_b = await gw.token("a"), await gw.token("b")
        b = RawClient(await gw.connect(token_b))
        b_sid = (await b.result("session/new", {"agentAlias": "demo"}))["sessionId"]
        await b.result("session/prompt", {"sessionId": b_sid, "prompt": "B's private words"})

        a = RawClient(await gw.connect(token_a))
        sessions_dir = gw.data_dir / "sessions"
        for cwd, why in [
            (gw.data_dir, "is acpgate's own state"),
            (sessions_dir, "lies inside acpgate's own state"),
            (gw.data_dir / "gateway", "lies inside acpgate's own state"),
            (tmp_path, "contains acpgate's own state"),
            (gw.home / ".ssh", "is a credential store"),
            (gw.home, "contains a credential store"),
        ]:
            assert_refused(await error_of(a, "session/new", {"cwd": str(cwd)}), gw, why)
        # A symlink is no way around it: the real path is what counts.
        (tmp_path / "innocent").symlink_to(sessions_dir)
        assert_refused(await error_of(a, "session/new", {"cwd": str(tmp_path / "innocent")}),
                       gw, "lies inside acpgate's own state")

        # The config dir is the install-root placeholder: the agent workspace, allowed,
        # and so is that workspace named explicitly.
        workspace = str((gw.config_dir / "agents" / "attacker" / "workspace").resolve())
        assert (await a.result("session/new", {"cwd": str(gw.config_dir)}))["workspaceDir"] \
            == workspace
        assert (await a.result("session/new", {"cwd": workspace}))["workspaceDir"] == workspace

        # A legitimate project: its shell still cannot read the store, spelled or hidden.
        project = tmp_path / "project"
        project.mkdir()
        sid = (await a.result("session/new", {"cwd": str(project)}))["sessionId"]
        db = sessions_dir / "acp-sessions.db"
        for command in (f"cat {db}", f"cat {hidden(db)}"):
            out = await tool_output(a, sid, f"shell {command}")
            assert SQLITE_MAGIC not in out and "B's private words" not in out, out
            assert refused(out), out
        await a.ws.close()
        await b.ws.close()


async def test_a_stored_workspace_that_is_refused_now_is_refused_on_restore(
        tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        token = await gw.token("a")
        client = RawClient(await gw.connect(token))
        project = tmp_path / "project"
        project.mkdir()
        sid = (await client.result("session/new", {"cwd": str(project)}))["sessionId"]
        await client.result("session/close", {"sessionId": sid})
        # A row an older acpgate stored before this rule: its workspace is the data dir.
        with sqlite3.connect(gw.data_dir / "sessions" / "acp-sessions.db") as db:
            db.execute("UPDATE sessions SET workspace_dir = ? WHERE id = ?",
                       (str(gw.data_dir), sid))
        for method in ("session/load", "session/resume"):
            assert_refused(await error_of(client, method, {"sessionId": sid}), gw,
                           "is acpgate's own state")
        # Nothing came up: the slot is free and the session is not active.
        assert (await gw.metrics())["acpgate_active_sessions"] == 0
        await client.ws.close()


@pytest.mark.skipif(landlock_abi() < 1, reason="the shell is confined only where Landlock is")
async def test_an_opted_in_root_still_does_not_reach_the_state_inside_it(
        tmp_path: Path) -> None:
    allow = f'allow_cwd = ["{tmp_path}", "{tmp_path / "home"}"]\n'
    async with running_gateway(tmp_path, autonomy_extra=allow) as gw:
        plant_secrets(gw)
        (tmp_path / "notes.txt").write_text("ordinary file")
        client = RawClient(await gw.connect(await gw.token("a")))
        sid = (await client.result("session/new", {"cwd": str(tmp_path)}))["sessionId"]
        # The session works in its root ...
        assert "ordinary file" in await tool_output(client, sid, "shell cat notes.txt")
        assert "ordinary file" in await tool_output(client, sid, "file_read notes.txt")
        # ... but acpgate's state inside it stays out of reach, however it is named.
        db = gw.data_dir / "sessions" / "acp-sessions.db"
        tokens = gw.data_dir / "gateway" / "tokens.db"
        config = gw.config_dir / "config.toml"
        for target in (db, tokens, config):
            for prompt in (f"file_read {target}", f"shell cat {target}",
                           f"shell cat {hidden(target)}"):
                out = await tool_output(client, sid, prompt)
                assert SQLITE_MAGIC not in out and "[agents.attacker]" not in out, (prompt, out)
                assert refused(out), (prompt, out)
        # The opted-in home: the session starts, the private key stays unreadable.
        home_sid = (await client.result("session/new", {"cwd": str(gw.home)}))["sessionId"]
        key = gw.home / ".ssh" / "id_ed25519"
        for prompt in (f"file_read {key}", "file_read .ssh/id_ed25519", f"shell cat {hidden(key)}"):
            out = await tool_output(client, home_sid, prompt)
            assert SSH_KEY not in out and refused(out), (prompt, out)
        await client.ws.close()
