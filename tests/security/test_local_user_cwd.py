"""The local user's home is a workspace; acpgate's state inside it is not.

An editor opened at ``~`` starts ``acpgate acp`` there, and ``~`` contains
acpgate's own state (``~/.acpgate``) and the credential stores (``~/.ssh``).
The only principal of ``acpgate acp`` is the local user, who owns all of it
already: such a cwd is a session workspace there, and what it contains stays
forbidden — for the built-in agent's file tools, for its shell (Landlock, however
the path is spelled) and for an external agent's ``fs/*`` requests
(``CheckOperation``). A cwd that *is* or *lies inside* that state is still
refused, and the local user is told which path and the exact config line that
would allow it. On the gateway — also with ``require_auth = false``, whose
connections are remote, not the OS user — such a cwd stays refused and no path of
acpgate's is named. The config dir itself is the install-root placeholder: the
agent workspace (SPEC §3), as docs/security.md says.

Real ``acpgate acp`` (and ``acpgate serve``) processes, a real ``HOME``.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.agent.sandbox import landlock_abi
from services.common.protocol import MSG_CWD_REFUSED, MSG_CWD_REFUSED_LOCAL
from tests.e2e.harness import AcpProcess, write_config
from tests.gateway.stack import RawClient
from tests.security.gateway_stack import running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SSH_KEY = "-----BEGIN OPENSSH PRIVATE KEY----- local-user-test"
SQLITE_MAGIC = "SQLite format 3"
OWN = "acpgate's own state"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The local user's HOME: a private key, an ordinary file, acpgate's default config
    dir in it (``~/.acpgate``), and acpgate started with this HOME."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    (home / ".ssh" / "id_ed25519").write_text(SSH_KEY)
    (home / "notes.txt").write_text("an ordinary file")
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def acp(home: Path) -> Iterator[AcpProcess]:
    """``acpgate acp`` on ``~/.acpgate`` (full autonomy: the demo model's shell runs
    unasked; forbidden paths hold in every level)."""
    proc = AcpProcess(write_config(home / ".acpgate", autonomy="full"))
    try:
        yield proc
    finally:
        assert proc.close() == 0


def said(acp: AcpProcess, sid: str, prompt: str) -> str:
    """What the agent answered to ``prompt`` (the demo model reports its tool's output;
    the SDK agent what its fs request got), as streamed (an external agent's result carries
    no ``content``: it is passed whole)."""
    return acp.say(sid, prompt)


def hidden(path: Path) -> str:
    """``path`` spelled so that no literal path check can see it."""
    return f"$(echo {base64.b64encode(str(path).encode()).decode()} | base64 -d)"


def refused(output: str) -> bool:
    """The policy check (file tools, literal shell paths) or Landlock (hidden ones) said no."""
    return "forbidden by policy" in output or "Permission denied" in output


def local_refusal(relation: str, what: str, path: Path, cwd: Path, config: Path) -> str:
    """The message the local user gets: the guarded path and the exact line."""
    return MSG_CWD_REFUSED_LOCAL.format(relation=relation, what=what, path=os.path.realpath(path),
                                        cwd=json.dumps(os.path.realpath(cwd)),
                                        config_file=config / "config.toml")


def test_the_local_user_gets_a_session_at_home(home: Path, acp: AcpProcess) -> None:
    result = acp.result("session/new", {"agentAlias": "demo", "cwd": str(home)})
    assert result["workspaceDir"] == os.path.realpath(home)  # the built-in agent's dialect
    sid = result["sessionId"]
    assert "an ordinary file" in said(acp, sid, "!cat notes.txt")
    assert "an ordinary file" in said(acp, sid, "read notes.txt")
    # Restored, and a child it spawns (in its workspace), under the same rule.
    acp.result("session/close", {"sessionId": sid})
    acp.result("session/load", {"sessionId": sid})
    assert "an ordinary file" in said(acp, sid, "read notes.txt")
    parent = acp.new_session(agentAlias="sdk", cwd=str(home))
    out = said(acp, parent, 'ext acpgate/sessions_spawn {"agent": "sdk", "prompt": "hi"}')
    assert out.startswith("ext ok: ") and os.path.realpath(home) in out, out


@pytest.mark.skipif(landlock_abi() < 1, reason="the shell is confined only where Landlock is")
def test_acpgates_state_and_the_keys_at_home_stay_out_of_reach(home: Path,
                                                               acp: AcpProcess) -> None:
    sid = acp.new_session(agentAlias="demo", cwd=str(home))
    data = home / ".acpgate" / "data"
    store, key = data / "sessions" / "acp-sessions.db", data / "run" / "service.key"
    assert store.exists() and key.exists()
    service_key = key.read_text().strip()
    secrets = (SQLITE_MAGIC, service_key, SSH_KEY, "[agents.demo]")
    for target in (store, key, home / ".ssh" / "id_ed25519", home / ".acpgate" / "config.toml"):
        relative = target.relative_to(home)
        for prompt in (f"read {target}", f"read {relative}", f"!cat {target}",
                       f"!cat {relative}", f"!cat {hidden(target)}"):
            out = said(acp, sid, prompt)
            assert not any(s in out for s in secrets), (prompt, out)
            assert refused(out), (prompt, out)


def test_an_external_agents_file_requests_stay_out_of_acpgates_state(
        home: Path, acp: AcpProcess) -> None:
    sid = acp.new_session(agentAlias="sdk", cwd=str(home))
    assert said(acp, sid, f"fsread {home / 'notes.txt'}") == "fs served: an ordinary file"
    data = home / ".acpgate" / "data"
    for target in (data / "sessions" / "acp-sessions.db", data / "run" / "service.key",
                   home / ".ssh" / "id_ed25519"):
        assert said(acp, sid, f"fsread {target}") == "fs error -32003", target


def test_the_state_itself_is_refused_naming_the_path_and_the_line(home: Path,
                                                                  acp: AcpProcess) -> None:
    config = home / ".acpgate"
    data = config / "data"
    for cwd, relation, what, guarded in [
        (data, "is", OWN, data),
        (data / "sessions", "lies inside", OWN, data),
        (home / ".ssh", "is", "a credential store", home / ".ssh"),
    ]:
        error = acp.error("session/new", {"agentAlias": "demo", "cwd": str(cwd)})
        assert error == {"code": -32602, "message": local_refusal(
            relation, what, guarded, cwd, config)}, cwd
    # The install root is the placeholder for the agent workspace (SPEC §3; docs/security.md).
    workspace = os.path.realpath(config / "agents" / "demo" / "workspace")
    result = acp.result("session/new", {"agentAlias": "demo", "cwd": str(config)})
    assert result["workspaceDir"] == workspace


def test_the_line_a_refusal_names_allows_that_directory(home: Path) -> None:
    config = write_config(home / ".acpgate", autonomy="full")
    vault = home / ".ssh"
    first = AcpProcess(config)
    try:
        message = first.error("session/new", {"agentAlias": "demo", "cwd": str(vault)})["message"]
    finally:
        assert first.close() == 0
    line = message.split("; to allow it, put ", 1)[1].rsplit(f" in {config}", 1)[0]
    assert line == f"[autonomy] allow_cwd = [{json.dumps(str(vault))}]"
    text = (config / "config.toml").read_text()
    (config / "config.toml").write_text(text.replace(
        "[autonomy]\n", "[autonomy]\n" + line.removeprefix("[autonomy] ") + "\n", 1))
    second = AcpProcess(config)
    try:
        result = second.result("session/new", {"agentAlias": "demo", "cwd": str(vault)})
        assert result["workspaceDir"] == os.path.realpath(vault)
    finally:
        assert second.close() == 0


async def error_of(client: RawClient, params: dict[str, Any]) -> dict[str, Any]:
    _, resp = await client.call("session/new", params)
    assert "error" in resp, resp
    return dict(resp["error"])


async def test_a_gateway_without_auth_is_still_not_the_local_user(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, gateway="require_auth = false\n") as gw:
        (gw.home / ".ssh").mkdir(mode=0o700, exist_ok=True)
        client = RawClient(await gw.connect(None))
        for cwd, why in [(tmp_path, "contains"), (gw.home, "contains")]:
            error = await error_of(client, {"agentAlias": "demo", "cwd": str(cwd)})
            assert error["code"] == -32602, error
            assert error["message"] in (
                MSG_CWD_REFUSED.format(relation=why, what=OWN),
                MSG_CWD_REFUSED.format(relation=why, what="a credential store")), error
            assert str(gw.config_dir) not in error["message"]
        await client.ws.close()
