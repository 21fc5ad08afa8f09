"""SPEC §14's visibility matrix through the built-in agent's real session tools.

The seed's rows are made once as real sessions, seen from a requesting session R of agent
``alpha`` whose model (the fake model server) issues the tool calls — R spawns its two
children with ``sessions_spawn``:

- own: R itself; same-agent: another ``alpha`` session;
- owned-same-agent: an ``alpha`` child R spawned; owned-cross-agent-acp-child: a ``beta``
  child R spawned (a2a disabled or not);
- unowned-cross-agent: a ``beta`` session; main-session: a session of agent ``main``.

Then, for every ``[sessions] visibility`` × ``[a2a]`` setting, a fresh `acpgate acp` on a
copy of that data resumes R alone, and R calls ``sessions_list``, and ``sessions_history``,
``session_status`` and ``sessions_send`` on every row and on an id that names no session.
An allowed action never answers "not found" (a send to R itself is refused as busy: R is
running the tool; a send to any other row brings that session up again, hosted for R); a
refused one answers exactly what the missing id gets. The expected letters are the pure
matrix's (``tests/session/test_visibility.py``), so the tools, the edge and the session
service agree with the function they apply.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.common.protocol import MSG_SESSION_BUSY
from tests.agent.fake_http import Recorded, Reply
from tests.e2e.fake_model import API_KEY_ENV, ModelServer, agent_entry, text_reply, tool_reply
from tests.e2e.harness import AcpProcess, updates, write_config
from tests.session.test_visibility import EXPECTED, ROW_ORDER

pytestmark = pytest.mark.slow

A2A = {
    "a2a-off": "[a2a]\nenabled = false\n",
    "a2a-on": "[a2a]\nenabled = true\n",
    "a2a-allow-list": '[a2a]\nenabled = true\nallow = ["alpha", "ma*"]\n',
}
MISSING = "00000000-0000-4000-8000-000000000000"
READS = ("sessions_history", "session_status", "sessions_send")


@pytest.fixture(autouse=True)
def _child_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(API_KEY_ENV, "sk-e2e-not-a-real-key")


class Model:
    """R's script, and a plain answer for every other alpha session (children, targets)."""

    def __init__(self) -> None:
        self.ids: dict[str, str] = {}
        self._lock = threading.Lock()
        self._probed = False

    def __call__(self, request: Recorded) -> Reply:
        messages = request.body["messages"]
        first = next(str(m["content"]) for m in messages if m["role"] == "user")
        if not first.startswith("R:"):
            return text_reply("ok from alpha")
        last = messages[-1]
        if last["role"] == "user" and last["content"] == "R: seed":
            return tool_reply(("sessions_spawn", {"agent": "alpha", "prompt": "kid task"}),
                              ("sessions_spawn", {"agent": "beta", "prompt": "kid task"}))
        if last["role"] == "user" and last["content"] == "R: probe":
            with self._lock:
                ids = dict(self.ids)
            calls: list[tuple[str, dict[str, Any]]] = [("sessions_list", {"limit": 100})]
            for sid in [*ids.values(), MISSING]:
                calls += [("sessions_history", {"sessionId": sid}),
                          ("session_status", {"sessionId": sid}),
                          ("sessions_send", {"sessionId": sid, "message": "ping"})]
            return tool_reply(*calls)
        return text_reply("R is done")


def _finished(messages: list[dict[str, Any]], sid: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(tool_call, its tool_call_update) pairs of session ``sid``, in call order."""
    ups = updates(messages, sid)
    done = {u["toolCallId"]: u for u in ups if u["sessionUpdate"] == "tool_call_update"}
    return [(u, done[u["toolCallId"]]) for u in ups
            if u["sessionUpdate"] == "tool_call" and u["toolCallId"] in done]


def _config(root: Path, server: ModelServer, vis: str, a2a: str) -> Path:
    extra = (agent_entry("alpha", server)
             + '\n[agents.beta]\nkind = "builtin"\nprovider = "demo"\nmodel = "demo"\n'
             + '\n[agents.main]\nkind = "builtin"\nprovider = "demo"\nmodel = "demo"\n'
             + f'\n[sessions]\nvisibility = "{vis}"\n' + A2A[a2a])
    return write_config(root, default_agent="alpha", autonomy="full", max_sessions=10,
                        extra=extra)


@pytest.fixture(scope="module")
def model() -> Model:
    return Model()


@pytest.fixture(scope="module")
def server(model: Model) -> Iterator[ModelServer]:
    with ModelServer([], model) as running:
        yield running


@pytest.fixture(scope="module")
def seeded(server: ModelServer, tmp_path_factory: pytest.TempPathFactory,
           ) -> tuple[Path, dict[str, str]]:
    """The seed's rows as real sessions — R spawned its two children with its tools — all
    closed again: each matrix cell brings up R alone, so a send to a row restores it."""
    root = tmp_path_factory.mktemp("a2a-vis")
    ws = root / "ws"
    ws.mkdir()
    cfg = _config(root / "cfg", server, "tree", "a2a-off")
    # The module's own acpgate: the model key is set for it too (the autouse fixture is
    # per test, and a built-in agent refuses to prompt with its key variable unset).
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(API_KEY_ENV, "sk-e2e-not-a-real-key")
        acp = AcpProcess(cfg)
    try:
        new = {"cwd": os.path.realpath(ws)}
        r = acp.new_session(agentAlias="alpha", **new)
        ids = {"own": r,
               "same-agent": acp.new_session(agentAlias="alpha", **new),
               "unowned-cross-agent": acp.new_session(agentAlias="beta", **new),
               "main-session": acp.new_session(agentAlias="main", **new)}
        seeded, resp = acp.call("session/prompt", {"sessionId": r, "prompt": "R: seed"})
        assert resp["result"]["content"] == "R is done", resp
        for call, done in _finished(seeded, r):
            assert done["status"] == "completed", done
            kid = json.loads(done["rawOutput"])
            name = "owned-same-agent" if call["rawInput"]["agent"] == "alpha" \
                else "owned-cross-agent-acp-child"
            ids[name] = kid["sessionId"]
    finally:
        assert acp.close() == 0
        acp.kill()
    return cfg, {name: ids[name] for name in ROW_ORDER}


@pytest.mark.parametrize("a2a", list(A2A))
@pytest.mark.parametrize("vis", ["self", "tree", "agent", "all"])
def test_spec14_matrix_through_the_session_tools(tmp_path: Path, model: Model,
                                                 server: ModelServer,
                                                 seeded: tuple[Path, dict[str, str]],
                                                 vis: str, a2a: str) -> None:
    seed_cfg, ids = seeded
    cfg = tmp_path / "cfg"
    shutil.copytree(seed_cfg, cfg)
    _config(cfg, server, vis, a2a)
    model.ids = ids
    acp = AcpProcess(cfg)
    try:
        r = ids["own"]
        assert set(acp.result("session/resume", {"sessionId": r})) == {"modes", "configOptions"}
        probed, resp = acp.call("session/prompt", {"sessionId": r, "prompt": "R: probe"})
        assert resp["result"]["content"] == "R is done", resp
        results = _finished(probed, r)
        listing = json.loads(results[0][1]["rawOutput"])
        listed = {row["sessionId"] for row in listing["sessions"]}
        outcome: dict[tuple[str, str], tuple[str, str]] = {
            (call["name"], call["rawInput"]["sessionId"]): (done["status"], done["rawOutput"])
            for call, done in results[1:]}
        assert len(outcome) == 3 * (len(ROW_ORDER) + 1)
        for tool in READS:
            assert outcome[(tool, MISSING)] == ("failed", f"Session not found: {MISSING}")
        for name in ROW_ORDER:
            sid = ids[name]
            allowed = EXPECTED[(vis, a2a)][ROW_ORDER.index(name)] == "Y"
            where = f"{vis}/{a2a}/{name}"
            assert (sid in listed) is allowed, f"list {where}"
            for tool in READS:
                got = outcome[(tool, sid)]
                if not allowed:  # exactly what a missing id gets
                    assert got == ("failed", f"Session not found: {sid}"), f"{tool} {where}"
                elif tool == "sessions_send" and name == "own":
                    assert got == ("failed", MSG_SESSION_BUSY.format(session_id=sid)), where
                else:
                    assert got[0] == "completed", f"{tool} {where}: {got}"
                    assert json.loads(got[1])["sessionId"] == sid, f"{tool} {where}"
    finally:
        assert acp.close() == 0
        acp.kill()
