"""One session's v1 ``session/update`` payloads as v2 upserts (pure, per session).

:class:`SessionTranslator` keeps what a translation needs to know of a session:

- message chunks carry a ``messageId`` (kept when the v1 agent or acpgate gave one;
  consecutive chunks of one kind are one message otherwise);
- a v2 agent's update that v1 could not carry as it came (a notice, a plan with its id,
  a content chunk, a v2 diff) is given back as the agent sent it (:mod:`.agent_forms`);
- ``tool_call`` becomes ``tool_call_update`` (v2's first update of an id creates it), its
  content's v1 diffs (``path``/``oldText``/``newText``) v2's ``changes`` and a patch;
- ``plan`` becomes ``plan_update`` (one plan per session: :data:`~.names.V1_PLAN_ID`);
- ``current_mode_update`` and ``config_option_update`` become a full
  ``config_option_update`` with the modes as a mode option (:mod:`.config`);
- commands get their ``type``; acpgate's ``prompt_received`` is the user message
  (``user_message_chunk`` s) and ``state_update running``, its ``turn_complete`` an idle
  ``state_update`` with the stop reason and usage; acpgate's other own kinds get the
  ``_acpgate_`` prefix v2 keeps for implementations.

The foreground state is tracked here too (:meth:`state`), so a repeated state is not
sent twice, and so is the agent's ``background`` list: a v2 agent's ``state_update`` passes
(its list kept), and every ``state_update`` sent after one carried a list carries it too
(v2: an agent that reports background work includes it on every state update).
"""

from __future__ import annotations

import difflib
import uuid
from typing import Any

from services.common.acp.v2.agent_forms import agent_form, content_item
from services.common.acp.v2.config import config_options_v2
from services.common.acp.v2.names import (
    OWN_KIND_PREFIX,
    STATE_IDLE,
    STATE_RUNNING,
    STOP_ERROR,
    U2_AVAILABLE_COMMANDS,
    U2_CONFIG_OPTION,
    U2_PLAN_UPDATE,
    U2_STATE,
    U2_TOOL_CALL_UPDATE,
    U2_USER_MESSAGE_CHUNK,
    V1_PLAN_ID,
)

__all__ = ["SessionTranslator", "new_message_id", "tool_call_v2"]

#: v1 kinds (and acpgate's own) whose translation is not the update itself.
_V1_TOOL_CALL = "tool_call"
_V1_TOOL_CALL_UPDATE = "tool_call_update"
_V1_PLAN = "plan"
_V1_CURRENT_MODE = "current_mode_update"
_V1_CONFIG_OPTION = "config_option_update"
_OWN_PROMPT_RECEIVED = "prompt_received"
_OWN_TURN_COMPLETE = "turn_complete"
#: acpgate's own kinds a v2 client gets prefixed.
_OWN_KINDS = frozenset({"permission_resolved", "client_disconnected"})
_CHUNKS = frozenset({"user_message_chunk", "agent_message_chunk", "agent_thought_chunk"})


def new_message_id() -> str:
    """A fresh message id."""
    return f"msg_{uuid.uuid4().hex}"


def _diff_v2(item: dict[str, Any]) -> dict[str, Any]:
    """A v1 diff content item as v2's: the change, and a git-style patch of the text."""
    path = item.get("path")
    old = item.get("oldText")
    new = item.get("newText")
    if not isinstance(path, str) or "changes" in item:
        return item
    old_text = old if isinstance(old, str) else ""
    new_text = new if isinstance(new, str) else ""
    operation = "add" if old is None else "modify"
    change = {"operation": operation, "path": path, "fileType": "text"}
    patch = "".join(difflib.unified_diff(
        old_text.splitlines(keepends=True), new_text.splitlines(keepends=True),
        fromfile="/dev/null" if old is None else f"a{path}", tofile=f"b{path}"))
    out: dict[str, Any] = {"type": "diff", "changes": [change]}
    if patch:
        out["patch"] = {"format": "git_patch", "text": patch}
    if isinstance(item.get("_meta"), dict):
        out["_meta"] = item["_meta"]
    return out


def _item_v2(item: Any) -> Any:
    if not isinstance(item, dict):
        return item
    if item.get("type") == "diff":
        return _diff_v2(item)
    kept = content_item(item) if "_meta" in item else None  # a v2 agent's own diff
    return kept if kept is not None else item


def _content_v2(content: Any) -> Any:
    if not isinstance(content, list):
        return content
    return [_item_v2(c) for c in content]


def tool_call_v2(call: dict[str, Any]) -> dict[str, Any]:
    """A v1 tool call (or its update) as a v2 ``ToolCallUpdate`` body (no kind)."""
    out = {k: v for k, v in call.items() if k != "sessionUpdate"}
    if "content" in out:
        out["content"] = _content_v2(out["content"])
    return out


def _command_v2(command: Any) -> Any:
    if not isinstance(command, dict):
        return command
    out = dict(command)
    out.setdefault("type", "command")
    given = out.get("input")
    if isinstance(given, dict) and "type" not in given:
        out["input"] = {"type": "text", **given}
    return out


class SessionTranslator:
    """v1 updates of one session → v2 updates (module doc)."""

    def __init__(self, *, modes: Any = None, config_options: Any = None) -> None:
        self.modes: Any = modes
        self.config_options: Any = config_options
        self.foreground = STATE_IDLE
        #: The agent's last ``background`` list (None: none reported).
        self.background: Any = None
        self._message: tuple[str, str] = ("", "")

    # ------------------------------------------------------------------ state

    def state(self, state: str, **fields: Any) -> list[dict[str, Any]]:
        """A ``state_update`` to ``state`` (none when it is the state already and nothing
        more is said), with the background list when one was reported."""
        if state == self.foreground and not fields:
            return []
        self.foreground = state
        if self.background is not None:
            fields.setdefault("background", self.background)
        return [{"sessionUpdate": U2_STATE, "state": state, **fields}]

    def _agent_state(self, update: dict[str, Any]) -> list[dict[str, Any]]:
        """A v2 agent's own ``state_update`` (work without a prompt, a new background
        list): passed, the state and list kept."""
        if isinstance(update.get("background"), list):
            self.background = update["background"]
        state = update.get("state")
        if isinstance(state, str):
            self.foreground = state
        if self.background is not None and "background" not in update:
            return [{**update, "background": self.background}]
        return [update]

    def idle(self, stop_reason: str, result: Any = None,
             error: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """The idle ``state_update`` that ends foreground work: the stop reason, the
        usage and ``_meta`` the v1 prompt result reported, or the error a failed turn got."""
        fields: dict[str, Any] = {"stopReason": STOP_ERROR if error else stop_reason}
        if error:
            fields["error"] = error
        for key in ("usage", "_meta"):
            value = result.get(key) if isinstance(result, dict) else None
            if isinstance(value, dict) and value:
                fields[key] = value
        return self.state(STATE_IDLE, **fields)

    def snapshot(self) -> dict[str, Any]:
        """The current ``state_update`` (what a resume ends with)."""
        out: dict[str, Any] = {"sessionUpdate": U2_STATE, "state": self.foreground}
        if self.background is not None:
            out["background"] = self.background
        return out

    def user_message(self, prompt: Any, message_id: str) -> list[dict[str, Any]]:
        """The user message of a prompt: one ``user_message_chunk`` per block."""
        self._message = ("", "")
        blocks = prompt if isinstance(prompt, list) else []
        return [{"sessionUpdate": U2_USER_MESSAGE_CHUNK, "messageId": message_id,
                 "content": block} for block in blocks if isinstance(block, dict)]

    # ------------------------------------------------------------------ config

    def config_options_v2(self) -> list[dict[str, Any]]:
        """The session's config options in v2 shape, modes included."""
        return config_options_v2(self.config_options, self.modes)

    def set_mode(self, mode_id: str) -> None:
        """The session's mode changed to ``mode_id``."""
        if isinstance(self.modes, dict):
            self.modes = {**self.modes, "currentModeId": mode_id}
        else:
            self.modes = {"currentModeId": mode_id, "availableModes": []}

    # ------------------------------------------------------------------ updates

    def translate(self, update: dict[str, Any]) -> list[dict[str, Any]]:
        """``update`` (a v1 payload, or acpgate's own) as the v2 updates it means."""
        kind = update.get("sessionUpdate")
        if "_meta" in update and (kept := agent_form(update)) is not None:
            self._message = ("", "")
            return [kept]  # a v2 agent's update as it sent it
        if kind in _CHUNKS:
            return [self._chunk(str(kind), update)]
        self._message = ("", "")
        if kind == _V1_TOOL_CALL or kind == _V1_TOOL_CALL_UPDATE:
            return [{"sessionUpdate": U2_TOOL_CALL_UPDATE, **tool_call_v2(update)}]
        if kind == _V1_PLAN:
            return [self._plan(update)]
        if kind == _V1_CURRENT_MODE:
            mode = update.get("currentModeId", update.get("modeId"))
            if isinstance(mode, str):
                self.set_mode(mode)
            return [self._options(update)]
        if kind == _V1_CONFIG_OPTION:
            self.config_options = update.get("configOptions")
            return [self._options(update)]
        if kind == U2_AVAILABLE_COMMANDS:
            commands = update.get("availableCommands")
            out = dict(update)
            out["availableCommands"] = [_command_v2(c) for c in commands] \
                if isinstance(commands, list) else []
            return [out]
        if kind == _OWN_PROMPT_RECEIVED:
            given = update.get("messageId")
            message_id = given if isinstance(given, str) and given else new_message_id()
            return [*self.state(STATE_RUNNING),
                    *self.user_message(update.get("prompt"), message_id)]
        if kind == _OWN_TURN_COMPLETE:
            stop = update.get("stopReason")
            return self.idle(stop if isinstance(stop, str) else "end_turn", update)
        if kind == U2_STATE:
            return self._agent_state(update)
        if kind in _OWN_KINDS:
            return [{**update, "sessionUpdate": f"{OWN_KIND_PREFIX}{kind}"}]
        return [update]

    def _chunk(self, kind: str, update: dict[str, Any]) -> dict[str, Any]:
        given = update.get("messageId")
        if isinstance(given, str) and given:
            self._message = (kind, given)
            return update
        current_kind, current = self._message
        if current_kind != kind or not current:
            current = new_message_id()
            self._message = (kind, current)
        return {**update, "messageId": current}

    def _plan(self, update: dict[str, Any]) -> dict[str, Any]:
        entries = update.get("entries")
        out: dict[str, Any] = {"sessionUpdate": U2_PLAN_UPDATE, "plan": {
            "type": "items", "planId": V1_PLAN_ID,
            "entries": entries if isinstance(entries, list) else []}}
        if isinstance(update.get("_meta"), dict):
            out["_meta"] = update["_meta"]
        return out

    def _options(self, update: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"sessionUpdate": U2_CONFIG_OPTION,
                               "configOptions": self.config_options_v2()}
        if isinstance(update.get("_meta"), dict):
            out["_meta"] = update["_meta"]
        return out
