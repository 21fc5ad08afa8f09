"""Toward external adapters at full fidelity, against the ACP SDK test agent.

What the adapter advertised decides the prompt it gets; its ``fs/*`` and
``terminal/*`` requests are decided by the session service and then relayed
to the client or served by the edge; its errors reach the client whole (code,
message, ``data``; an exit during setup with its scrubbed stderr tail); an
``env_var`` auth method is used when the adapter asks for authentication.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import SDK_SECRET, AcpProcess, write_config

pytestmark = pytest.mark.slow

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\nfake").decode()


@pytest.fixture(scope="module")
def cfg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_config(tmp_path_factory.mktemp("fid") / "cfg", default_agent="sdkcaps",
                        max_sessions=10)


@pytest.fixture(scope="module")
def acp(cfg: Path) -> Iterator[AcpProcess]:
    proc = AcpProcess(cfg)
    yield proc
    assert proc.close() == 0
    proc.kill()


def _content(acp: AcpProcess, sid: str, prompt: Any) -> str:
    return acp.say(sid, prompt)


def test_blocks_pass_through_as_advertised(acp: AcpProcess, tmp_path: Path) -> None:
    """image + embeddedContext advertised: those pass; audio (not advertised) is left out."""
    sid = acp.new_session(agentAlias="sdkcaps", cwd=str(tmp_path))
    prompt = [
        {"type": "image", "mimeType": "image/png", "data": PNG},
        {"type": "audio", "mimeType": "audio/wav", "data": PNG},
        {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "doc"}},
        {"type": "resource_link", "uri": "file:///b.txt", "name": "b.txt"},
        {"type": "text", "text": "blocks"},
    ]
    assert _content(acp, sid, prompt) == "blocks: image:image/png,resource,resource_link,text"
    assert not (tmp_path / "uploads").exists(), "nothing falls back to uploads"
    acp.result("session/close", {"sessionId": sid})


def test_blocks_fall_back_to_spec4_without_the_capability(acp: AcpProcess, tmp_path: Path) -> None:
    """No prompt capabilities: images dropped, resources as text/uploads, texts joined (SPEC §4)."""
    sid = acp.new_session(agentAlias="sdk", cwd=str(tmp_path))
    blob = base64.b64encode(b"%PDF").decode()
    prompt = [
        {"type": "image", "mimeType": "image/png", "data": PNG},
        {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "doc"}},
        {"type": "resource", "resource": {"uri": "file:///r.pdf", "mimeType": "application/pdf",
                                          "blob": blob}},
        {"type": "resource_link", "uri": "file:///b.txt", "name": "b.txt"},
        {"type": "text", "text": "blocks"},
    ]
    assert _content(acp, sid, prompt) == "blocks: text,resource_link,text"
    assert len(list((tmp_path / "uploads").iterdir())) == 1
    acp.result("session/close", {"sessionId": sid})


def test_initialize_advertises_what_the_default_agent_recorded(cfg: Path) -> None:
    proc = AcpProcess(cfg)
    try:
        before = proc.result("initialize", {"protocolVersion": 1})
        proc.result("session/close", {"sessionId": proc.new_session()})
        after = proc.result("initialize", {"protocolVersion": 1})
    finally:
        proc.close()
        proc.kill()
    assert after["agentCapabilities"]["promptCapabilities"] == \
        {"image": True, "audio": False, "embeddedContext": True}
    # whatever a previous test recorded: the first one of a fresh install says False
    assert before["agentCapabilities"]["promptCapabilities"]["audio"] is False


def test_fs_served_by_the_edge_under_the_policy(acp: AcpProcess, tmp_path: Path) -> None:
    """A client without fs: the edge reads and writes inside the roots, refuses outside."""
    (tmp_path / "note.txt").write_text("hello\nworld\n")
    sid = acp.new_session(agentAlias="sdk", cwd=str(tmp_path))
    assert _content(acp, sid, f"fsread {tmp_path}/note.txt") == "fs served: hello\nworld\n"
    assert _content(acp, sid, f"fswrite {tmp_path}/sub/out.txt data") == "fs written"
    assert (tmp_path / "sub" / "out.txt").read_text() == "data"
    refused = _content(acp, sid, "fswrite /etc/acpgate-test nope")
    assert refused.startswith("fs error -32003: Refused by acpgate policy: ")
    assert not Path("/etc/acpgate-test").exists()
    acp.result("session/close", {"sessionId": sid})


def test_fs_and_terminal_relayed_to_a_capable_client(cfg: Path, tmp_path: Path) -> None:
    """A client with fs and terminal gets the admitted requests, with the checked real path."""
    (tmp_path / "note.txt").write_text("on disk")
    link = tmp_path / "link.txt"
    link.symlink_to(tmp_path / "note.txt")
    proc = AcpProcess(cfg)
    proc.handlers.update({
        "fs/read_text_file": lambda p: {"content": "from the client"},
        "terminal/create": lambda p: {"terminalId": "t-1"},
        "terminal/wait_for_exit": lambda p: {"exitCode": 0},
        "terminal/output": lambda p: {"output": "hi", "truncated": False},
        "terminal/release": lambda p: {},
    })
    try:
        proc.result("initialize", {"protocolVersion": 1, "clientCapabilities": {
            "fs": {"readTextFile": True, "writeTextFile": False}, "terminal": True}})
        sid = proc.new_session(agentAlias="sdk", cwd=str(tmp_path))
        assert _content(proc, sid, "setup").endswith("fs=True,True terminal=True")
        assert _content(proc, sid, f"fsread {link}") == "fs served: from the client"
        asked = [m for m in proc.outbound if m["method"] == "fs/read_text_file"]
        assert asked[-1]["params"]["path"] == os.path.realpath(tmp_path / "note.txt")
        assert asked[-1]["params"]["sessionId"] == sid
        assert _content(proc, sid, "fsread /etc/hostname") == "fs error -32003"
        assert len([m for m in proc.outbound if m["method"] == "fs/read_text_file"]) == 1
        # the client does not write files: the edge does, inside the roots
        assert _content(proc, sid, f"fswrite {tmp_path}/w.txt x") == "fs written"
        assert _content(proc, sid, "term echo hi") == "term exit=0 output=hi"
        create = next(m for m in proc.outbound if m["method"] == "terminal/create")
        assert create["params"]["cwd"] == os.path.realpath(tmp_path)
        proc.result("session/close", {"sessionId": sid})
    finally:
        proc.close()
        proc.kill()


def test_setup_error_keeps_code_and_data(acp: AcpProcess) -> None:
    err = acp.error("session/new", {"agentAlias": "sdkfail"})
    # The agent's error exactly; acpgate's context beside its data.
    assert err == {"code": -32603, "message": "Internal error",
                   "data": {"details": "Query closed before response received",
                            "acpgate": {"during": "session/new", "agent": "sdkfail"}}}


def test_setup_exit_carries_the_scrubbed_stderr_tail(acp: AcpProcess) -> None:
    err = acp.error("session/new", {"agentAlias": "sdkdie"})
    assert err["code"] == -32603
    assert err["message"] == "Failed to start agent `sdkdie`: agent process exited (exit code 4)"
    ours = err["data"]["acpgate"]
    assert ours["exit"] == {"exitCode": 4, "signal": 0, "lost": False}
    assert "fatal: cannot start with key ***" in ours["stderrTail"]
    assert SDK_SECRET not in json.dumps(err)


def test_prompt_error_keeps_code_and_data(acp: AcpProcess) -> None:
    sid = acp.new_session(agentAlias="sdk")
    err = acp.error("session/prompt", {"sessionId": sid, "prompt": "faildata"})
    assert err == {"code": -32603, "message": "Internal error",
                   "data": {"details": "Query closed early",
                            "acpgate": {"during": "session/prompt", "agent": "sdk"}}}
    acp.result("session/close", {"sessionId": sid})


def test_env_var_auth_when_the_adapter_asks(acp: AcpProcess) -> None:
    """-32000 "Authentication required": the edge authenticates with the env_var method, retries."""
    sid = acp.new_session(agentAlias="sdkauth")
    assert _content(acp, sid, "hi") == "echo: hi"
    acp.result("session/close", {"sessionId": sid})
