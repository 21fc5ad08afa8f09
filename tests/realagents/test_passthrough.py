"""Transparent by default: each real adapter, driven directly and through acpgate.

The same scripted steps (:mod:`tests.realagents.compare`) run against the adapter
on stdio and against ``acpgate acp`` with the adapter as its default agent,
each with its own copy of the adapter's state and the same fake model provider;
capabilities, update kinds, notifications, results and errors must agree but for
the documented differences, so a feature acpgate loses shows up as a named diff.
Then each side restores the session (``session/load``: the adapter in a fresh
process, acpgate after ``session/close``): acpgate's replay shows the prompts
sent, the cancelled turn with its partial answer too, and where the adapter's
own restore works the same prompts and result fields (gemini-cli 0.61's loses
the conversation at times; acpgate's does not).

gemini-cli's authentication goes through acpgate too: without ``GEMINI_API_KEY``
in its environment (and with the API-key method chosen in its settings, as
after an earlier login) ``session/new`` fails with the agent's own error, both
ways; ``authenticate`` with the key in ``_meta["api-key"]`` (gemini-cli's way)
makes it work, both ways — through acpgate for every adapter the connection
starts, the key going nowhere else.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.e2e.harness import AcpProcess
from tests.realagents.adapters import ADAPTERS, GEMINI, RealAdapter, gemini_home
from tests.realagents.compare import (
    PROMPTS,
    SLOW_WAIT,
    Observed,
    differences,
    replayed,
    run_script,
)
from tests.realagents.fake_gemini import GEMINI_KEY
from tests.realagents.fake_models import FakeModelServer

pytestmark = pytest.mark.timeout(480)
#: How long an adapter gets to exit after EOF on its stdin before it is killed (and what it
#: started: an npm wrapper may leave a native binary running).
STOP_WAIT = 10.0


def _direct(adapter: RealAdapter, npm_dir: Path, env: dict[str, str], cwd: Path) -> AcpProcess:
    """The adapter on stdio, with the environment acpgate would give it."""
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TMPDIR", "TZ")}
    return AcpProcess(cwd, argv=adapter.argv(npm_dir), env={**base, **env}, cwd=cwd)


def _stop(peer: AcpProcess) -> None:
    """EOF, then the process and everything it started gone (cleanup, not an assertion)."""
    kids = peer.descendants()
    try:
        peer.close(STOP_WAIT)
    except subprocess.TimeoutExpired:
        pass
    for kid in kids:
        try:
            kid.kill()
        except psutil.NoSuchProcess:
            pass


def _through(adapter: RealAdapter, npm_dir: Path, models: FakeModelServer, root: Path,
             env: dict[str, str]) -> AcpProcess:
    cfg = root / "cfg"
    cfg.mkdir()
    (cfg / "config.toml").write_text(
        f'[acp]\ndefault_agent = "{adapter.alias}"\nsession_timeout_secs = 120\n\n'
        + adapter.config_entry(npm_dir, models.url, root / "state", env))
    return AcpProcess(cfg)


def _dirs(root: Path) -> tuple[Path, Path]:
    state, work = root / "state", root / "ws"
    state.mkdir(parents=True)
    work.mkdir()
    return state, work


@pytest.mark.parametrize("adapter", ADAPTERS, ids=[a.alias for a in ADAPTERS])
def test_direct_and_through_acpgate_agree(adapter: RealAdapter, npm_dir: Path,
                                          model_server: FakeModelServer,
                                          tmp_path: Path) -> None:
    if not adapter.installed(npm_dir):
        pytest.skip(f"{adapter.bin_name} is not installed in {npm_dir}")
    state, work = _dirs(tmp_path / "direct")
    env = adapter.env(model_server.url, state)
    direct = _direct(adapter, npm_dir, env, work)
    try:
        seen = run_script(direct, str(work), ask_mode=adapter.ask_mode)
    finally:
        _stop(direct)
    again = _direct(adapter, npm_dir, env, work)  # a fresh process restores it
    try:
        _init(again)
        direct_load = replayed(again, "session/load", {
            "sessionId": seen.session_id, "cwd": str(work), "mcpServers": []})
    finally:
        _stop(again)

    state, work = _dirs(tmp_path / "through")
    through = _through(adapter, npm_dir, model_server, tmp_path / "through",
                       adapter.env(model_server.url, state))
    try:
        got = run_script(through, str(work), ask_mode=adapter.ask_mode)
        assert through.result("session/close", {"sessionId": got.session_id}) == {}
        through_load = replayed(through, "session/load", {
            "sessionId": got.session_id, "cwd": str(work), "mcpServers": []})
    finally:
        through.close(SLOW_WAIT)  # acpgate itself exits on EOF, its adapters with it
        through.kill()

    diffs = differences(seen, got)
    assert not diffs, "direct vs through acpgate:\n" + "\n".join(diffs)
    _same_replay(adapter, direct_load, through_load)


def _init(peer: AcpProcess) -> dict[str, Any]:
    return dict(peer.result("initialize", {"protocolVersion": 1, "clientCapabilities": {}}))


def _same_replay(adapter: RealAdapter, direct: tuple[Any, list[str]],
                 through: tuple[Any, list[str]]) -> None:
    """The restore through acpgate worked and replays the prompts sent, the cancelled turn
    (the last) with what was streamed before the cancel; the adapter's own restore, where it
    works, answered with the same fields and replays the same prompts (claude-agent-acp
    adds its own ``[Request interrupted by user]`` after a cancelled turn, and of the
    partial answer only it keeps anything)."""
    assert "error" not in through[0], through[0]
    sent = [f"user_message_chunk: {p}" for p in PROMPTS]
    assert [line for line in through[1] if line.startswith("user_message_chunk: ")] == sent
    assert any("tick" in line for line in through[1]), through[1]
    if not adapter.restores_itself:  # see RealAdapter.restores_itself: any outcome, directly
        return
    assert "error" not in direct[0], direct[0]
    assert [line for line in direct[1] if line in sent] == sent, direct[1]
    assert sorted(through[0]) == sorted(direct[0]), (direct[0], through[0])


def _without_key(adapter: RealAdapter, model_url: str, state: Path) -> dict[str, str]:
    """gemini-cli's environment without the key, its settings choosing the API-key method
    (what an earlier login leaves behind)."""
    env = {k: v for k, v in adapter.env(model_url, state).items() if k != "GEMINI_API_KEY"}
    settings = gemini_home(state) / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}}))
    return env


def _auth_steps(peer: AcpProcess, work: Path) -> Observed:
    """initialize; session/new (refused: no key); authenticate with the key; two
    session/new (through acpgate: two adapters), each with a prompt."""
    obs = Observed()
    obs.initialize = _init(peer)
    refused = peer.call("session/new", {"cwd": str(work), "mcpServers": []}, SLOW_WAIT)[1]
    obs.steps["session/new before authenticate"] = refused.get("error")
    obs.steps["authenticate"] = peer.result("authenticate", {
        "methodId": "gemini-api-key", "_meta": {"api-key": GEMINI_KEY}})
    for n in (1, 2):
        _, new = peer.call("session/new", {"cwd": str(work), "mcpServers": []}, SLOW_WAIT)
        assert "result" in new, new
        _, resp = peer.call("session/prompt", {"sessionId": new["result"]["sessionId"],
                                               "prompt": [{"type": "text", "text": "hello"}]},
                            SLOW_WAIT)
        obs.steps[f"prompt {n}"] = resp.get("result", resp.get("error"))
    return obs


def test_gemini_authenticates_through_acpgate(npm_dir: Path, model_server: FakeModelServer,
                                              tmp_path: Path) -> None:
    if not GEMINI.installed(npm_dir):
        pytest.skip(f"{GEMINI.bin_name} is not installed in {npm_dir}")
    state, work = _dirs(tmp_path / "direct")
    direct = _direct(GEMINI, npm_dir, _without_key(GEMINI, model_server.url, state), work)
    try:
        seen = _auth_steps(direct, work)
    finally:
        _stop(direct)
    state, work = _dirs(tmp_path / "through")
    refused_before = model_server.refused_keys
    through = _through(GEMINI, npm_dir, model_server, tmp_path / "through",
                       _without_key(GEMINI, model_server.url, state))
    try:
        got = _auth_steps(through, work)
    finally:
        through.close(SLOW_WAIT)  # acpgate itself exits on EOF, its adapters with it
        through.kill()
        stderr = "".join(through.stderr)

    # The agent's authMethods are advertised; its refusal and its answers come through
    # exactly (acpgate's context aside).
    assert got.initialize["authMethods"] == seen.initialize["authMethods"]
    assert [m["id"] for m in got.initialize["authMethods"]][:2] == [
        "oauth-personal", "gemini-api-key"]
    refusal = dict(got.steps["session/new before authenticate"])
    refusal.pop("data", None)
    assert refusal == seen.steps["session/new before authenticate"] == {
        "code": -32000, "message": "Gemini API key is missing or not configured."}
    assert got.steps["authenticate"] == seen.steps["authenticate"]
    assert got.steps["prompt 1"] == seen.steps["prompt 1"]
    assert got.steps["prompt 2"] == seen.steps["prompt 2"]  # a second adapter, authenticated
    assert model_server.refused_keys == refused_before  # every request carried the key
    assert GEMINI_KEY not in stderr  # never logged
