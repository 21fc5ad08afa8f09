"""Units of the edge toward external adapters: prompt blocks by capability,
what the edge promises the adapter, and adapter failures as client errors."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from services.common.acp.schema import ClientCapabilities, PromptCapabilities
from services.common.jsonrpc import JsonRpcError, error_line
from services.common.policy import SecurityPolicy
from services.common.protocol import MAX_BLOB_BYTES
from services.edge.adapter.caps import client_capabilities, env_auth_method, read_initialize_result
from services.edge.adapter.failures import (
    STDERR_MAX_LINE_CHARS,
    STDERR_MAX_LINES,
    prompt_error,
    scrub,
    setup_error,
    stderr_lines,
)
from services.edge.adapter.link import AdapterExit, AdapterGone
from services.edge.adapter.prompt_blocks import adapter_prompt, spec4_prompt

PNG = base64.b64encode(b"\x89PNG-bytes").decode()
ALL = PromptCapabilities(image=True, audio=True, embedded_context=True)
NONE = PromptCapabilities()


def _blocks() -> list[dict[str, Any]]:
    return [
        {"type": "text", "text": "look", "annotations": {"priority": 1}},
        {"type": "image", "mimeType": "image/png", "data": PNG},
        {"type": "audio", "mimeType": "audio/wav", "data": PNG},
        {"type": "resource", "resource": {"uri": "file:///n.txt", "text": "note"}},
        {"type": "resource", "resource": {"uri": "file:///d/r.pdf", "mimeType": "application/pdf",
                                          "blob": PNG}},
        {"type": "resource_link", "uri": "file:///x.md", "name": "x.md"},
        {"type": "mystery"},
    ]


async def test_capable_adapter_gets_the_client_blocks_as_sent(tmp_path: Path) -> None:
    got = await adapter_prompt(_blocks(), ALL, str(tmp_path))
    assert got.blocks == _blocks()[:-1]  # verbatim, unknown kinds left out
    assert not (tmp_path / "uploads").exists()
    assert got.text.split("\n\n") == ["look", "[IMAGE: image/png]", "[AUDIO: audio/wav]", "note",
                                      "[Document: r.pdf]", "[Link: x.md] file:///x.md"]


async def test_adapter_without_capabilities_gets_spec4(tmp_path: Path) -> None:
    got = await adapter_prompt(_blocks(), NONE, str(tmp_path))
    uploads = list((tmp_path / "uploads").iterdir())
    assert len(uploads) == 1 and uploads[0].suffix == ".pdf"
    assert got.blocks == [
        {"type": "text", "text": "look", "annotations": {"priority": 1}},
        {"type": "text", "text": f"note\n\n[Document: r.pdf] {uploads[0]}"},
        {"type": "resource_link", "uri": "file:///x.md", "name": "x.md"},
    ]
    # plain text only: exactly SPEC §4's one joined text, like the built-in agent gets
    plain = [{"type": "text", "text": "a"}, {"type": "resource", "resource": {"text": "b"}}]
    assert (await adapter_prompt(plain, NONE, str(tmp_path))).blocks == \
        (await spec4_prompt(plain, str(tmp_path))).blocks == [{"type": "text", "text": "a\n\nb"}]


@pytest.mark.parametrize("caps", [ALL, NONE], ids=["capable", "spec4"])
async def test_blobs_are_validated_whichever_way_they_go(caps: PromptCapabilities,
                                                        tmp_path: Path) -> None:
    bad = [{"type": "text", "text": "x"},
           {"type": "resource", "resource": {"uri": "file:///b", "blob": "@@"}}]
    with pytest.raises(JsonRpcError) as info:
        await adapter_prompt(bad, caps, str(tmp_path))
    assert info.value.code == -32602 and info.value.message.startswith("Invalid base64: ")
    big = base64.b64encode(bytes(MAX_BLOB_BYTES + 1)).decode()
    with pytest.raises(JsonRpcError) as info:
        await adapter_prompt([{"type": "text", "text": "x"},
                              {"type": "resource", "resource": {"uri": "u", "blob": big}}],
                             caps, str(tmp_path))
    assert "exceeds 10 MB" in info.value.message
    assert not (tmp_path / "uploads").exists()


async def test_invalid_image_refused_only_when_it_would_be_sent(tmp_path: Path) -> None:
    bad = [{"type": "text", "text": "x"}, {"type": "image", "mimeType": "image/png", "data": "@@"}]
    with pytest.raises(JsonRpcError):
        await adapter_prompt(bad, ALL, str(tmp_path))
    assert (await adapter_prompt(bad, NONE, str(tmp_path))).blocks == [{"type": "text", "text": "x"}]


async def test_empty_prompts_are_refused(tmp_path: Path) -> None:
    for prompt in ([], [{"type": "text", "text": "  "}], [{"type": "image", "data": PNG}]):
        with pytest.raises(JsonRpcError) as info:
            await adapter_prompt(prompt, NONE, str(tmp_path))
        assert info.value.message == "Parameter 'prompt' array must contain at least one text part"
    # an image alone is a prompt for an adapter that takes images
    assert (await adapter_prompt([{"type": "image", "mimeType": "image/png", "data": PNG}],
                                 ALL, str(tmp_path))).blocks[0]["type"] == "image"
    with pytest.raises(JsonRpcError) as info:
        await adapter_prompt({"text": "x"}, ALL, str(tmp_path))
    assert info.value.message.startswith("Missing required parameter: prompt")


def test_client_capabilities_promise_what_is_honoured() -> None:
    supervised = SecurityPolicy("/w")
    readonly = SecurityPolicy("/w", autonomy="readonly")
    client = ClientCapabilities.from_json(
        {"terminal": True, "elicitation": {"form": {}}, "fs": {"readTextFile": False}})
    assert client_capabilities(client, supervised).to_json() == {
        "fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True,
        "elicitation": {"form": {}}}
    assert client_capabilities(client, readonly).to_json() == {
        "fs": {"readTextFile": True, "writeTextFile": False}, "terminal": False,
        "elicitation": {"form": {}}}
    assert client_capabilities(ClientCapabilities(), supervised).terminal is False


def test_adapter_caps_from_initialize_and_env_auth(monkeypatch: pytest.MonkeyPatch) -> None:
    answer = read_initialize_result({  # no protocolVersion: what it can do is still read
        "agentCapabilities": {"loadSession": True, "sessionCapabilities": {"resume": {}},
                              "promptCapabilities": {"image": True, "audio": "yes"}},
        "authMethods": [{"id": "login", "name": "Login"},
                        {"id": "k2", "type": "env_var", "vars": [{"name": "K2"}, {"name": "K3"}]},
                        {"id": "k1", "type": "env_var", "vars": [{"name": "K1"}]}]})
    caps, prompt = answer.agent_capabilities, answer.agent_capabilities.prompt_capabilities
    assert (caps.load_session, caps.session_capabilities.resume is not None, prompt.image,
            prompt.audio, prompt.embedded_context) == (True, True, True, False, False)
    methods = answer.auth_methods
    monkeypatch.delenv("K1", raising=False)
    assert env_auth_method(methods, {"K2": "v"}) == ""  # K3 missing: never a partial method
    assert env_auth_method(methods, {"K2": "v", "K3": "w"}) == "k2"
    monkeypatch.setenv("K1", "from the environment")
    # acpgate's own environment reaches an adapter only where pass_env names it.
    assert env_auth_method(methods, {}) == ""
    assert env_auth_method(methods, {}, ["K1"]) == "k1"
    assert env_auth_method(methods, {}, ["K*"]) == "k1"
    junk = read_initialize_result("junk")
    assert junk.agent_capabilities.load_session is False and junk.auth_methods == []


def test_scrub_replaces_configured_values_and_key_shapes() -> None:
    line = ("token=abc123 Authorization: Bearer eyJhbGciOi sk-ant-api03-abcdefghij "
            "my-configured-value ok=1 api_key: 'zzz999'")
    out = scrub(line, ["my-configured-value", "1"])
    for secret in ("abc123", "eyJhbGciOi", "sk-ant-api03-abcdefghij", "my-configured-value",
                   "zzz999"):
        assert secret not in out
    assert "ok=1" in out  # short configured values are not treated as secrets


def test_stderr_tail_is_bounded() -> None:
    tail = "\n".join(f"line {i} " + "x" * 1000 for i in range(50)) + "\n\n"
    lines = stderr_lines(tail)
    assert len(lines) == STDERR_MAX_LINES and lines[-1].startswith("line 49 ")
    assert all(len(line) <= STDERR_MAX_LINE_CHARS for line in lines)


def test_adapter_failures_become_whole_errors() -> None:
    # The adapter's error answer, as the link raises it: code and message exactly, acpgate's
    # context beside the agent's data.
    rpc = JsonRpcError(-32000, "Authentication required", {"authMethods": ["x"]})
    err = setup_error("codex", rpc)
    assert (err.code, err.message, err.data) == (
        -32000, "Authentication required",
        {"authMethods": ["x"], "acpgate": {"during": "session/new", "agent": "codex"}})
    # Data that is not an object stays as the agent sent it; none gets acpgate's context.
    assert setup_error("codex", JsonRpcError(-32000, "m", "text")).data == "text"
    assert prompt_error(JsonRpcError(-32603, "boom"), (), "claude").data == {
        "acpgate": {"during": "session/prompt", "agent": "claude"}}
    gone = AdapterGone(AdapterExit(exit_code=2, stderr_tail="boom KEY=s3cr3tvalue\n"))
    err = prompt_error(gone, ["s3cr3tvalue"])
    assert err.message == "Prompt failed: agent process exited (exit code 2)"
    assert err.data == {"acpgate": {"exit": {"exitCode": 2, "signal": 0, "lost": False},
                                    "stderrTail": ["boom KEY=***"]}}
    plain = setup_error("a", ValueError("adapter's session/new result has no sessionId"))
    assert (plain.code, plain.data) == (-32603, None)
    assert '"data"' not in error_line(1, plain.code, plain.message, plain.data)
