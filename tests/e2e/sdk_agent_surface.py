"""The ACP v1 client-surface half of the SDK test agent (``tests/e2e/sdk_agent.py``).

Per session it keeps a mode (``ask`` by default, or ``code``), two config
options (``model``: select ``fast``/``smart``; ``thinking``: boolean) and the
``additionalDirectories`` it was given, answers ``session/set_mode`` and
``session/set_config_option``, and serves the prompts of the surface tests
(:meth:`SurfaceAgent._extra`: ``title``, ``usage``, ``kinds``, ``state``,
``elicit-url``, ``withdraw``). Like the agent itself it imports no acpgate code.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from acp import Client, PromptResponse, RequestError, update_agent_message_text
from acp.schema import (
    SessionConfigOptionBoolean,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SessionMode,
    SessionModeState,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
    Usage,
)


class SurfaceAgent:
    """Modes, config options, extra roots and the surface tests' prompts."""

    def __init__(self) -> None:
        self._conn: Client | None = None
        #: Per session: mode, config values, additional directories.
        self._modes: dict[str, str] = {}
        self._config: dict[str, dict[str, Any]] = {}
        self._dirs: dict[str, list[str]] = {}

    def _session_state(self, sid: str, dirs: list[str] | None) -> dict[str, Any]:
        """Defaults for a session this process has not seen; the modes/configOptions fields."""
        self._modes.setdefault(sid, "ask")
        self._config.setdefault(sid, {"model": "fast", "thinking": False})
        self._dirs[sid] = list(dirs or [])
        return {"modes": _modes(self._modes[sid]), "config_options": _options(self._config[sid])}

    async def set_session_mode(self, session_id: str, mode_id: str,
                               **kwargs: Any) -> SetSessionModeResponse:
        if mode_id not in ("ask", "code"):
            raise RequestError(-32602, f"no mode {mode_id}")
        self._modes[session_id] = mode_id
        return SetSessionModeResponse()

    async def set_config_option(self, config_id: str, session_id: str, value: str | bool,
                                **kwargs: Any) -> SetSessionConfigOptionResponse:
        config = self._config[session_id]
        if config_id not in config or type(value) is not type(config[config_id]):
            raise RequestError(-32602, f"bad option {config_id}={value!r}")
        config[config_id] = value
        return SetSessionConfigOptionResponse(config_options=_options(config))

    async def _raw_update(self, session_id: str, update: dict[str, Any]) -> None:
        """A session/update as raw JSON (kinds the SDK's models may not know)."""
        assert self._conn is not None
        await self._conn._conn.send_notification(  # type: ignore[attr-defined]
            "session/update", {"sessionId": session_id, "update": update})

    async def _extra(self, session_id: str, text: str) -> PromptResponse | None:
        """The prompts of the ACP v1 surface tests; None when ``text`` is none of them."""
        assert self._conn is not None
        conn = self._conn
        raw = conn._conn  # type: ignore[attr-defined]
        if text == "title":
            await self._raw_update(session_id, {"sessionUpdate": "session_info_update",
                                                "title": "SDK title"})
            return PromptResponse(stop_reason="end_turn")
        if text == "usage":
            await self._raw_update(session_id, {"sessionUpdate": "usage_update",
                                                "used": 42, "size": 1000})
            return PromptResponse(stop_reason="end_turn", usage=Usage(
                total_tokens=30, input_tokens=20, output_tokens=10, thought_tokens=4))
        if text == "kinds":
            self._modes[session_id] = "code"
            self._config[session_id]["thinking"] = True
            for update in ({"sessionUpdate": "available_commands_update", "availableCommands": [
                                {"name": "plan", "description": "Make a plan"}]},
                           {"sessionUpdate": "current_mode_update", "currentModeId": "code"},
                           {"sessionUpdate": "config_option_update",
                            "configOptions": [o.model_dump(by_alias=True, exclude_none=True)
                                              for o in _options(self._config[session_id])]},
                           {"sessionUpdate": "future_kind_update", "anything": [1, {"x": 2}]}):
                await self._raw_update(session_id, update)
            return PromptResponse(stop_reason="end_turn")
        if text == "state":
            await conn.session_update(session_id, update_agent_message_text(
                f"mode={self._modes.get(session_id)} config={json.dumps(self._config.get(session_id), sort_keys=True)} "
                f"dirs={','.join(self._dirs.get(session_id, []))}"))
            return PromptResponse(stop_reason="end_turn")
        if text == "elicit-url":
            answer = await raw.send_request("elicitation/create", {
                "sessionId": session_id, "mode": "url", "message": "Sign in",
                "elicitationId": "el-1", "url": "https://example.invalid/login"})
            await raw.send_notification("elicitation/complete", {"elicitationId": "el-1"})
            await conn.session_update(session_id, update_agent_message_text(
                f"elicitation: {answer.get('action')}"))
            return PromptResponse(stop_reason="end_turn")
        if text == "withdraw":
            request_id = raw._next_request_id
            asking = asyncio.ensure_future(raw.send_request("session/request_permission", {
                "sessionId": session_id, "toolCall": {"toolCallId": "w-1", "title": "withdrawn"},
                "options": [{"optionId": "yes", "name": "Yes", "kind": "allow_once"}]}))
            await asyncio.sleep(0.3)
            await raw.send_notification("$/cancel_request", {"requestId": request_id})
            try:
                await asyncio.wait_for(asking, 10)
                note = "answered"
            except RequestError as exc:
                note = f"withdrawn {exc.code}"
            await conn.session_update(session_id, update_agent_message_text(note))
            return PromptResponse(stop_reason="end_turn")
        return None


def _modes(current: str) -> SessionModeState:
    return SessionModeState(current_mode_id=current, available_modes=[
        SessionMode(id="ask", name="Ask"), SessionMode(id="code", name="Code")])


def _options(config: dict[str, Any]) -> list[Any]:
    return [
        SessionConfigOptionSelect(type="select", id="model", name="Model", category="model",
                                  current_value=config["model"],
                                  options=[SessionConfigSelectOption(value="fast", name="Fast"),
                                           SessionConfigSelectOption(value="smart", name="Smart")]),
        SessionConfigOptionBoolean(type="boolean", id="thinking", name="Thinking",
                                   current_value=config["thinking"]),
    ]
