"""An external ACP agent built only on the official ACP Python SDK (package ``acp``).

Used as a ``kind = "acp"`` backend in the end-to-end tests; it imports no
acpgate code. Behaviour, chosen by the prompt text:

- ``perm``: asks the client ``session/request_permission`` and answers with the outcome;
- ``slow``: streams chunks until cancelled (then ``stopReason: cancelled``);
- ``hang``: one tool_call update, then silence until cancelled;
- ``brief``: five chunks 0.1 s apart, then ``end_turn``;
- ``recall``: answers with what it remembers of the session (its own stored
  prompts, and whether the prompt carried an embedded prior conversation);
- ``die``: exits with code 3 in the middle of the turn;
- ``setup``: reports the cwd, MCP server names and policy of its session/new;
- ``fail``: answers the prompt with a JSON-RPC error;
- ``fsread [path]``: calls ``fs/read_text_file`` (default ``/etc/hostname``) and
  reports the content or the error code;
- ``fswrite <path> <text>``: calls ``fs/write_text_file`` and reports the outcome;
- ``term <command>``: ``terminal/create`` + ``wait_for_exit`` + ``output`` + ``release``;
- ``blocks`` (as the last line): reports the types of the prompt's content blocks;
- ``faildata``: answers with an error carrying ``data.details``, as claude-agent-acp does;
- ``title``: a ``session_info_update`` titling the session "SDK title";
- ``usage``: a ``usage_update`` (used 42 of 1000) and ``usage`` on the prompt result;
- ``kinds``: ``available_commands_update``, its own ``current_mode_update`` (mode
  ``code``) and ``config_option_update`` (thinking on), and an update of a kind no
  schema knows yet (``future_kind_update``);
- ``state``: reports its mode, config values and additional directories;
- ``elicit-url``: a URL-mode ``elicitation/create``, then ``elicitation/complete``;
- ``withdraw``: asks for a permission, then withdraws it with ``$/cancel_request``;
- ``ext <method> <JSON object>``: an extension request ``_<method>`` to the client
  (e.g. ``ext acpgate/sessions_send {…}``, the session tools' methods), answered
  with ``ext ok: <result JSON>`` or ``ext error <code>: <message>``;
- ``pid``: ``pid=<its process id>`` (which adapter process serves the session);
- anything else: ``echo: <text>`` in two chunks.

The command is the prompt's last text block; an earlier text block that starts
with "Prior conversation" is a carried-over history (``recall`` reports it).
Modes ``ask`` (default) and ``code``; config options ``model`` (select, ``fast`` or
``smart``) and ``thinking`` (boolean), kept per session in this process only
(``sdk_agent_surface.py``, with the prompts from ``title`` on).

``SDK_AGENT_RESTORE`` = ``resume`` | ``load`` | ``none`` chooses what it
advertises; ``SDK_AGENT_PROMPT`` lists the prompt capabilities it advertises
(comma-separated ``image``, ``audio``, ``embeddedContext``; none by default);
``SDK_AGENT_NEW`` = ``fail`` (session/new answers an error with ``data``),
``die`` (prints its environment's ``SDK_AGENT_SECRET`` to stderr and exits 4)
or ``auth`` (session/new needs ``authenticate`` with the env_var method
``sdk-key`` first, advertised with the variable ``SDK_AGENT_KEY``);
``SDK_AGENT_STATE`` is a JSON file where it keeps its sessions so a new
process can restore them. ``SDK_AGENT_FORK=1`` advertises ``sessionCapabilities.fork``
and forks a session of that file (a copy of its prompts under a new id), as
claude-agent-acp forks the sessions it keeps on disk; an unknown one is -32002.
``SDK_AGENT_FORK=die`` advertises it too, and exits with code 5 when asked to fork.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

from acp import (
    Client,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptResponse,
    RequestError,
    run_agent,
    start_tool_call,
    text_block,
    update_agent_message_text,
    update_user_message_text,
)
from acp.schema import (
    AgentCapabilities,
    AuthenticateResponse,
    AuthEnvVar,
    EnvVarAuthMethod,
    ForkSessionResponse,
    PermissionOption,
    PromptCapabilities,
    ResumeSessionResponse,
    SessionCapabilities,
    SessionForkCapabilities,
    SessionResumeCapabilities,
    ToolCallUpdate,
)
from sdk_agent_surface import SurfaceAgent  # beside this file (run as a script)

RESTORE = os.environ.get("SDK_AGENT_RESTORE", "resume")
PROMPT_CAPS = set(filter(None, os.environ.get("SDK_AGENT_PROMPT", "").split(",")))
NEW_MODE = os.environ.get("SDK_AGENT_NEW", "")
FORK = os.environ.get("SDK_AGENT_FORK", "")
STATE = Path(os.environ.get("SDK_AGENT_STATE", "/tmp/sdk-agent-state.json"))


def _load_state() -> dict[str, list[str]]:
    try:
        return json.loads(STATE.read_text())
    except (OSError, ValueError):
        return {}


def _save_state(state: dict[str, list[str]]) -> None:
    STATE.write_text(json.dumps(state))


class SdkAgent(SurfaceAgent):
    """A tiny deterministic agent."""

    def __init__(self) -> None:
        super().__init__()
        self._cancel: dict[str, asyncio.Event] = {}
        self._state = _load_state()
        #: What session/new carried, per session (for the ``setup`` prompt).
        self._setup: dict[str, str] = {}
        self._authenticated = False
        #: The clientCapabilities of initialize, as received (for the ``setup`` prompt).
        self._client_caps: Any = None

    def on_connect(self, conn: Client) -> None:
        self._conn = conn

    async def initialize(self, protocol_version: int, client_capabilities: Any = None,
                         client_info: Any = None, **kwargs: Any) -> InitializeResponse:
        self._client_caps = client_capabilities
        caps = AgentCapabilities(
            load_session=RESTORE == "load",
            prompt_capabilities=PromptCapabilities(
                image="image" in PROMPT_CAPS, audio="audio" in PROMPT_CAPS,
                embeddedContext="embeddedContext" in PROMPT_CAPS),
            session_capabilities=SessionCapabilities(
                resume=SessionResumeCapabilities() if RESTORE == "resume" else None,
                fork=SessionForkCapabilities() if FORK else None),
        )
        methods = [EnvVarAuthMethod(id="sdk-key", name="SDK key", type="env_var",
                                    vars=[AuthEnvVar(name="SDK_AGENT_KEY")])]
        return InitializeResponse(protocol_version=1, agent_capabilities=caps,
                                  auth_methods=methods if NEW_MODE == "auth" else [])

    async def authenticate(self, method_id: str, **kwargs: Any) -> AuthenticateResponse:
        if method_id != "sdk-key" or not os.environ.get("SDK_AGENT_KEY"):
            raise RequestError(-32602, f"unknown auth method {method_id}")
        self._authenticated = True
        return AuthenticateResponse()

    async def new_session(self, cwd: str, mcp_servers: Any = None,
                          additional_directories: list[str] | None = None,
                          **kwargs: Any) -> NewSessionResponse:
        if NEW_MODE == "fail":
            raise RequestError(-32603, "Internal error",
                               {"details": "Query closed before response received"})
        if NEW_MODE == "die":
            print(f"fatal: cannot start with key {os.environ.get('SDK_AGENT_SECRET', '')}",
                  file=sys.stderr, flush=True)
            os._exit(4)
        if NEW_MODE == "auth" and not self._authenticated:
            raise RequestError(-32000, "Authentication required")
        sid = f"sdk-{uuid.uuid4().hex[:12]}"
        names = [getattr(m, "name", "?") for m in mcp_servers or []]
        fs = getattr(self._client_caps, "fs", None)
        terminal = getattr(self._client_caps, "terminal", None)
        self._setup[sid] = (f"cwd={cwd} mcp={','.join(names)} "
                            f"acpgate-meta={'acpgate' in kwargs} "
                            f"fs={getattr(fs, 'read_text_file', None)},"
                            f"{getattr(fs, 'write_text_file', None)} terminal={terminal}")
        self._state[sid] = []
        _save_state(self._state)
        return NewSessionResponse(session_id=sid,
                                  **self._session_state(sid, additional_directories))

    async def load_session(self, cwd: str, session_id: str, mcp_servers: Any = None,
                           additional_directories: list[str] | None = None,
                           **kwargs: Any) -> LoadSessionResponse:
        assert self._conn is not None
        if session_id not in self._state:
            raise RequestError(-32002, f"unknown session {session_id}")
        for text in self._state.get(session_id, []):  # the replay the edge must suppress
            await self._conn.session_update(session_id, update_user_message_text(text))
            await self._conn.session_update(session_id, update_agent_message_text(f"echo: {text}"))
        return LoadSessionResponse(**self._session_state(session_id, additional_directories))

    async def resume_session(self, cwd: str, session_id: str, mcp_servers: Any = None,
                             additional_directories: list[str] | None = None,
                             **kwargs: Any) -> ResumeSessionResponse:
        if session_id not in self._state:
            raise RequestError(-32002, f"unknown session {session_id}")
        return ResumeSessionResponse(**self._session_state(session_id, additional_directories))

    async def fork_session(self, session_id: str, cwd: str,
                           additional_directories: list[str] | None = None,
                           mcp_servers: Any = None, **kwargs: Any) -> ForkSessionResponse:
        if not FORK:
            raise RequestError(-32601, "Method not found: session/fork")
        if FORK == "die":
            os._exit(5)
        stored = {**self._state, **_load_state()}  # what any process of this agent stored
        if session_id not in stored:
            raise RequestError(-32002, f"unknown session {session_id}")
        sid = f"sdk-fork-{uuid.uuid4().hex[:12]}"
        self._state[sid] = list(stored[session_id])
        _save_state({**_load_state(), sid: self._state[sid]})
        self._setup[sid] = f"cwd={cwd} forked-from={session_id}"
        return ForkSessionResponse(session_id=sid,
                                   **self._session_state(sid, additional_directories))

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self._cancel.setdefault(session_id, asyncio.Event()).set()

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        assert self._conn is not None
        conn = self._conn
        texts = [getattr(b, "text", "") for b in prompt if getattr(b, "type", "") == "text"]
        text = texts[-1] if texts else ""
        carried = [t for t in texts[:-1] if t.startswith("Prior conversation")]
        embedded = [b for b in prompt if getattr(b, "type", "") == "resource"]
        cancel = self._cancel[session_id] = asyncio.Event()
        if text == "die":
            await conn.session_update(session_id, update_agent_message_text("dying"))
            await asyncio.sleep(0.05)
            os._exit(3)
        if text == "slow":
            for i in range(400):
                if cancel.is_set():
                    return PromptResponse(stop_reason="cancelled")
                await conn.session_update(session_id, update_agent_message_text(f"s{i} "))
                await asyncio.sleep(0.05)
            return PromptResponse(stop_reason="end_turn")
        if text == "fsread" or text.startswith("fsread "):
            path = text[len("fsread "):] or "/etc/hostname"
            try:
                got = await conn.read_text_file(session_id=session_id, path=path)
                note = f"fs served: {got.content}"
            except RequestError as exc:
                note = f"fs error {exc.code}"
            await conn.session_update(session_id, update_agent_message_text(note))
            return PromptResponse(stop_reason="end_turn")
        if text.startswith("fswrite "):
            _, path, body = text.split(" ", 2)
            try:
                await conn.write_text_file(session_id=session_id, path=path, content=body)
                note = "fs written"
            except RequestError as exc:
                note = f"fs error {exc.code}: {exc}"
            await conn.session_update(session_id, update_agent_message_text(note))
            return PromptResponse(stop_reason="end_turn")
        if text.startswith("term "):
            try:
                term = await conn.create_terminal(session_id=session_id, command=text[5:])
                done = await conn.wait_for_terminal_exit(session_id=session_id,
                                                         terminal_id=term.terminal_id)
                out = await conn.terminal_output(session_id=session_id,
                                                 terminal_id=term.terminal_id)
                await conn.release_terminal(session_id=session_id, terminal_id=term.terminal_id)
                note = f"term exit={done.exit_code} output={out.output}"
            except RequestError as exc:
                note = f"term error {exc.code}"
            await conn.session_update(session_id, update_agent_message_text(note))
            return PromptResponse(stop_reason="end_turn")
        if text.splitlines()[-1:] == ["blocks"]:
            kinds = [getattr(b, "type", "?") + (f":{b.mime_type}" if getattr(b, "type", "")
                                                in ("image", "audio") else "") for b in prompt]
            await conn.session_update(session_id, update_agent_message_text(
                "blocks: " + ",".join(kinds)))
            return PromptResponse(stop_reason="end_turn")
        if text == "faildata":
            raise RequestError(-32603, "Internal error", {"details": "Query closed early"})
        if text == "setup":
            await conn.session_update(session_id, update_agent_message_text(
                self._setup.get(session_id, "unknown")))
            return PromptResponse(stop_reason="end_turn")
        if text == "fail":
            raise RequestError(-32603, "sdk agent failed on purpose")
        if text == "pid":
            await conn.session_update(session_id, update_agent_message_text(f"pid={os.getpid()}"))
            return PromptResponse(stop_reason="end_turn")
        if text == "hang":  # silent until cancelled
            await conn.session_update(session_id, start_tool_call(
                "sdk-hang", "waiting", kind="other", status="in_progress"))
            await cancel.wait()
            return PromptResponse(stop_reason="cancelled")
        if text == "brief":
            for i in range(5):
                await conn.session_update(session_id, update_agent_message_text(f"b{i} "))
                await asyncio.sleep(0.1)
            return PromptResponse(stop_reason="end_turn")
        if text == "perm":
            await conn.session_update(session_id, start_tool_call(
                "sdk-call-1", "sdk tool", kind="execute", status="pending", raw_input={"x": 1}))
            resp = await conn.request_permission(
                session_id=session_id,
                tool_call=ToolCallUpdate(tool_call_id="sdk-call-1", title="sdk tool"),
                options=[PermissionOption(option_id="yes", name="Yes", kind="allow_once"),
                         PermissionOption(option_id="no", name="No", kind="reject_once")],
            )
            outcome = resp.outcome
            chosen = getattr(outcome, "option_id", None) or outcome.outcome
            await conn.session_update(session_id, update_agent_message_text(f"permission: {chosen}"))
            return PromptResponse(stop_reason="end_turn")
        if text.startswith("ext "):
            method, _, raw = text[4:].partition(" ")
            try:
                note = "ext ok: " + json.dumps(await conn.ext_method(method, json.loads(raw)))
            except RequestError as exc:
                note = f"ext error {exc.code}: {exc}"
            await conn.session_update(session_id, update_agent_message_text(note))
            return PromptResponse(stop_reason="end_turn")
        extra = await self._extra(session_id, text)
        if extra is not None:
            return extra
        if text == "recall":
            known = self._state.get(session_id, [])
            note = "embedded" if embedded else "text" if carried else "no-embedded"
            if embedded:
                res = embedded[0].resource
                note += ":" + ("prior-ok" if "first message" in getattr(res, "text", "") else "prior-missing")
            elif carried:
                note += ":" + ("prior-ok" if "first message" in carried[0] else "prior-missing")
            await conn.session_update(session_id, update_agent_message_text(
                f"remembered {len(known)} [{'|'.join(known)}] {note}"))
            return PromptResponse(stop_reason="end_turn")
        self._state.setdefault(session_id, []).append(text)
        _save_state(self._state)
        await conn.session_update(session_id, update_agent_message_text("echo: "))
        await conn.session_update(session_id, update_agent_message_text(text))
        return PromptResponse(stop_reason="end_turn")


async def main() -> None:
    # session/resume is routed only with the unstable protocol surface of SDK 0.12.
    await run_agent(SdkAgent(), use_unstable_protocol=True)  # type: ignore[arg-type]


if __name__ == "__main__":
    _ = text_block  # re-exported helper kept for readers of this example
    sys.exit(asyncio.run(main()))
