"""A v2 agent as acpgate's v1 internals see it (pure, sans-I/O), one adapter's worth.

acpgate thinks in v1 toward its adapters. :class:`AgentWire` translates each way:

- **requests** (:meth:`AgentWire.request`, :meth:`AgentWire.result`): MCP entries get
  ``type: "stdio"`` where v1 left it out; ``session/load`` is ``session/resume`` with
  ``replayFrom: {"type": "start"}``; ``session/set_mode`` sets the session's mode config
  option (``category: "mode"``); ``set_config_option`` values get their ``type``;
  ``authenticate``/``logout`` are ``auth/login``/``auth/logout``. Setup results get v1's
  config option names and the mode option as ``modes``.
- **the prompt**: v2 answers ``{messageId}`` at once and reports the turn with
  ``state_update`` s. While a prompt runs (:meth:`AgentWire.prompt_sent`), ``running`` /
  ``requires_action`` and the echoed user message are dropped, and the ``idle`` update
  ends it: :meth:`AgentWire.update` returns a :class:`TurnEnd` — the v1 prompt result
  (``stopReason``, ``usage``, ``_meta``) or the error of a failed turn.
- **updates**: the first ``tool_call_update`` of an id is v1's ``tool_call`` (with a
  ``title``), ``tool_call_content_chunk`` s are folded into a ``tool_call_update`` with
  the whole content so far (the chunk itself kept in ``_meta.acpgate.contentChunk``), v2
  diffs (changes and a patch, no texts) become text content with the patch (the diff kept
  in ``_meta.acpgate.diff``), ``plan_update`` is ``plan`` (the v2 plan kept in
  ``_meta.acpgate.plan``), ``config_option_update`` is v1's (and a
  ``current_mode_update`` when the mode option changed), ``replay_complete`` is dropped;
  a ``notice`` becomes an ``agent_thought_chunk`` (text: its title and description)
  marked ``_meta.acpgate.notice`` — secondary text every v1 client shows, and not part of
  the answer; a ``state_update`` outside a prompt (agent-initiated work) passes when it
  changes the state (a resume's repeated snapshot does not). Every other kind
  (``terminal_update``, ``terminal_output_chunk``, ``agent_message``, ``usage_update``,
  ``compaction_*``…) passes as it came: v1 clients ignore kinds they do not know, as ACP
  asks.
- **child sessions** (subagents): what the agent sends on a child it announced is carried
  on the parent's stream under acpgate's ids (:mod:`.subagents`), each child with a
  tool-call card for v1 clients (:mod:`.child_cards`); once acpgate's session
  is bound (:meth:`AgentWire.bind`), an update on any other session id is dropped.
- **background work**: a ``state_update``'s ``background`` list is kept per session; when
  it changes while a prompt runs (whose own states are dropped), a ``state_update``
  ``running`` carrying it passes, so the list reaches the session's clients and its event
  log like any update.
- **agent requests**: a permission request's v2 ``title``/``subject`` become v1's
  ``toolCall`` (its ``title`` and ``description`` kept in ``_meta.acpgate.permission``).
- **bounds**: what the agent's ids make the translation keep is bounded (``names``:
  ``MAX_AGENT_SESSIONS``, ``MAX_TOOL_CALLS_KEPT``, ``MAX_CALL_CONTENT_*``). An update naming
  a session past the bound is dropped (before acpgate's session is bound, when any id
  passes; once bound, the other sessions' state is released); past a session's bound of
  tool calls the oldest is forgotten (a later update of it is a ``tool_call`` again); past
  a tool call's bound of content a chunk passes without ``content`` (v1 keeps what it
  had; a v2 client still gets the chunk). Each is told to :attr:`AgentWire.on_drop`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from services.common.acp.v2.child_cards import ChildCards
from services.common.acp.v2.names import (
    CATEGORY_MODE,
    M_AUTH_LOGIN,
    M_AUTH_LOGOUT,
    MAX_AGENT_SESSIONS,
    MAX_CALL_CONTENT_CHARS,
    MAX_CALL_CONTENT_CHUNKS,
    MAX_TOOL_CALLS_KEPT,
    MODE_CONFIG_ID,
    OWN_CHILD_UPDATE,
    REPLAY_START,
    STATE_IDLE,
    STATE_RUNNING,
    STOP_ERROR,
    U2_CONFIG_OPTION,
    U2_NOTICE,
    U2_PLAN_UPDATE,
    U2_REPLAY_COMPLETE,
    U2_STATE,
    U2_SUBAGENT_UPDATE,
    U2_TOOL_CALL_CONTENT_CHUNK,
    U2_TOOL_CALL_UPDATE,
    U2_USER_MESSAGE,
    U2_USER_MESSAGE_CHUNK,
)
from services.common.acp.v2.subagents import Children
from services.common.protocol import (
    INTERNAL_ERROR,
    M_AUTHENTICATE,
    M_LOGOUT,
    M_REQUEST_PERMISSION,
    M_SESSION_LOAD,
    M_SESSION_NEW,
    M_SESSION_RESUME,
    M_SESSION_SET_CONFIG_OPTION,
    M_SESSION_SET_MODE,
    META_ACPGATE,
    META_CONTENT_CHUNK,
    META_PERMISSION,
    META_PLAN,
    U_TOOL_CALL,
    U_TOOL_CALL_UPDATE,
)

__all__ = ["AgentWire", "TurnEnd"]

_SETUP = (M_SESSION_NEW, M_SESSION_LOAD, M_SESSION_RESUME)
#: The v1 update kinds that create or change a tool call.
_V1_CALLS = (U_TOOL_CALL, U_TOOL_CALL_UPDATE)


@dataclass(frozen=True)
class TurnEnd:
    """How a prompt's turn ended: the v1 ``session/prompt`` result, or its error."""

    session_id: str
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


@dataclass
class _Session:
    """What the translation knows of one agent session."""

    turn: bool = False
    state: str = STATE_IDLE
    mode_config: str = MODE_CONFIG_ID
    mode: str | None = None
    #: Each tool call's content so far (chunks append to it) and its size as JSON, and
    #: the ids v1 knows, oldest first (bounded: ``MAX_TOOL_CALLS_KEPT``).
    calls: dict[str, list[Any]] = field(default_factory=dict)
    chars: dict[str, int] = field(default_factory=dict)
    created: dict[str, None] = field(default_factory=dict)
    #: The last ``background`` list reported (None: never reported).
    background: Any = None


def _with_ours(meta: Any, key: str, value: Any) -> dict[str, Any]:
    """``meta`` (the agent's ``_meta``, screened) with ``acpgate.<key>`` set."""
    out = dict(meta) if isinstance(meta, dict) else {}
    ours = out.get(META_ACPGATE)
    out[META_ACPGATE] = {**(ours if isinstance(ours, dict) else {}), key: value}
    return out


def _size(value: Any) -> int:
    """``value``'s size as JSON (past every bound when it cannot be written)."""
    try:
        return len(orjson.dumps(value))
    except (orjson.JSONEncodeError, TypeError):
        return MAX_CALL_CONTENT_CHARS + 1


def _mcp_v2(servers: Any) -> Any:
    if not isinstance(servers, list):
        return servers
    return [{"type": "stdio", **s} if isinstance(s, dict) and "type" not in s else s
            for s in servers]


def _option_v1(option: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in option.items() if k != "configId"}
    if "configId" in option:
        out["id"] = option["configId"]
    choices = out.get("options")
    if isinstance(choices, list):
        out["options"] = [
            {**{k: v for k, v in c.items() if k != "groupId"}, "group": c["groupId"]}
            if isinstance(c, dict) and "groupId" in c else c for c in choices]
    return out


def _modes_of(option: dict[str, Any]) -> dict[str, Any]:
    available = []
    for choice in option.get("options") or ():
        if isinstance(choice, dict) and isinstance(choice.get("value"), str):
            mode = {"id": choice["value"], "name": str(choice.get("name") or choice["value"])}
            if isinstance(choice.get("description"), str):
                mode["description"] = choice["description"]
            available.append(mode)
    return {"currentModeId": option.get("currentValue"), "availableModes": available}


def _diff_v1(item: dict[str, Any]) -> dict[str, Any]:
    """A v2 diff (changes, a patch; no texts) as v1 text content showing the patch."""
    if "newText" in item:
        return item
    patch = item.get("patch")
    text = patch.get("text") if isinstance(patch, dict) else None
    if not isinstance(text, str):
        changes = item.get("changes")
        changes = changes if isinstance(changes, list) else []
        text = "\n".join(f"{c.get('operation', 'modify')} {c.get('path', '')}"
                         for c in changes if isinstance(c, dict))
    return {"type": "content", "content": {"type": "text", "text": text},
            "_meta": {"acpgate": {"diff": item}}}


def _content_v1(content: Any) -> Any:
    if not isinstance(content, list):
        return content
    return [_diff_v1(c) if isinstance(c, dict) and c.get("type") == "diff" else c
            for c in content]


class AgentWire:
    """The v1 ↔ v2 translation toward one v2 agent (module doc)."""

    def __init__(self) -> None:
        self._sessions: dict[str, _Session] = {}
        #: The child sessions the agent announced (:mod:`.subagents`).
        self.children = Children()
        #: Their cards for v1 clients (:mod:`.child_cards`).
        self.cards = ChildCards()
        #: Told of each thing the agent sent past a bound (module doc), with ``what``:
        #: ``session``, ``tool_call`` (one forgotten) or ``tool_call_content``.
        self.on_drop: Callable[..., None] | None = None

    def bind(self, agent_sid: str, edge_sid: str) -> None:
        """The agent's session ``agent_sid`` is acpgate's ``edge_sid`` (the ids a child's
        messages may name)."""
        if agent_sid:
            self.children.edge_ids[agent_sid] = edge_sid
        # The agent's other sessions are past: only a bound one's updates pass from now on.
        for sid in [sid for sid, session in self._sessions.items()
                    if sid not in self.children.edge_ids and not session.turn]:
            del self._sessions[sid]

    def _dropped(self, what: str) -> None:
        if self.on_drop is not None:
            self.on_drop(what=what)

    def _session(self, sid: Any) -> _Session:
        key = sid if isinstance(sid, str) else ""
        found = self._sessions.get(key)
        if found is None:
            found = self._sessions[key] = _Session()
        return found

    # ------------------------------------------------------------------ requests

    def request(self, method: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """A v1 request (or notification) acpgate makes, as the v2 agent is to get it."""
        if method in _SETUP:
            out = dict(params)
            if "mcpServers" in out:
                out["mcpServers"] = _mcp_v2(out["mcpServers"])
            if method == M_SESSION_LOAD:
                out["replayFrom"] = {"type": REPLAY_START}
                return M_SESSION_RESUME, out
            return method, out
        if method == M_SESSION_SET_MODE:
            session = self._session(params.get("sessionId"))
            out = {k: v for k, v in params.items() if k != "modeId"}
            out.update({"configId": session.mode_config, "type": "id",
                        "value": params.get("modeId")})
            return M_SESSION_SET_CONFIG_OPTION, out
        if method == M_SESSION_SET_CONFIG_OPTION and "type" not in params:
            value = params.get("value")
            return method, {**params, "type": "boolean" if isinstance(value, bool) else "id"}
        if method == M_AUTHENTICATE:
            return M_AUTH_LOGIN, params
        if method == M_LOGOUT:
            return M_AUTH_LOGOUT, params
        return method, params

    def result(self, method: str, params: dict[str, Any], result: Any) -> Any:
        """The v2 agent's result of the v1 request ``method`` (``params`` as acpgate sent
        it), as v1's."""
        if not isinstance(result, dict):
            return result
        if method in _SETUP or method == M_SESSION_SET_CONFIG_OPTION:
            sid = result.get("sessionId", params.get("sessionId"))
            return self._with_options(sid, result)
        if method == M_SESSION_SET_MODE:
            session = self._session(params.get("sessionId"))
            if isinstance(params.get("modeId"), str):
                session.mode = params["modeId"]
            meta = result.get("_meta")
            return {"_meta": meta} if isinstance(meta, dict) else {}
        return result

    def _with_options(self, sid: Any, result: dict[str, Any]) -> dict[str, Any]:
        options = result.get("configOptions")
        if not isinstance(options, list):
            return result
        out = dict(result)
        out["configOptions"] = [_option_v1(o) if isinstance(o, dict) else o for o in options]
        session = self._session(sid)
        for option in options:
            if isinstance(option, dict) and option.get("category") == CATEGORY_MODE:
                session.mode_config = str(option.get("configId") or MODE_CONFIG_ID)
                modes = _modes_of(option)
                session.mode = modes["currentModeId"]
                out.setdefault("modes", modes)
                break
        return out

    # ------------------------------------------------------------------ the prompt

    def prompt_sent(self, sid: str) -> None:
        """A prompt of session ``sid`` went to the agent: its turn runs until ``idle``."""
        session = self._session(sid)
        session.turn = True

    def adopt_turn(self, sid: str, logged: Sequence[Any]) -> None:
        """Session ``sid``'s turn, started by a predecessor's prompt, runs until ``idle``;
        ``logged`` is what its clients were told of it so far (v1 updates): the tool calls
        they know stay known (a later update of one is not a second ``tool_call``), with
        their content so far (later chunks append to it)."""
        session = self._session(sid)
        session.turn = True
        for update in logged:
            if not isinstance(update, dict) or update.get("sessionUpdate") not in _V1_CALLS:
                continue
            call_id = update.get("toolCallId")
            if not isinstance(call_id, str):
                continue
            if call_id not in session.created:
                self._create(session, call_id)
            if isinstance(update.get("content"), list):
                self._set_content(session, call_id, list(update["content"]))

    def prompt_failed(self, sid: str) -> None:
        """The agent refused the prompt (an error answer): no turn runs."""
        self._session(sid).turn = False

    def running(self) -> list[str]:
        """The sessions whose prompt's turn has not ended."""
        return [sid for sid, s in self._sessions.items() if s.turn]

    # ------------------------------------------------------------------ updates

    def _with_cards(self, params: dict[str, Any],
                    carried: dict[str, Any] | None) -> list[dict[str, Any]]:
        """A child's update carried on ``params``' session, then its card's (:mod:`.child_cards`)."""
        if carried is None:
            return []
        return [{**params, "update": u} for u in (carried, *self.cards.of(carried))]

    def update(self, params: dict[str, Any]) -> tuple[list[dict[str, Any]], TurnEnd | None]:
        """A v2 ``session/update``'s params as v1's (none, one or more), and the end of
        the prompt's turn when this update ended it."""
        update = params.get("update")
        sid = params.get("sessionId")
        if not isinstance(update, dict) or not isinstance(sid, str):
            return [params], None
        kind = update.get("sessionUpdate")
        if kind == OWN_CHILD_UPDATE:
            return [], None  # acpgate's own kind: never the agent's to send
        child = self.children.of_raw(sid)
        if child is not None:  # a child's: carried on its top session's stream
            carried = self.children.announce(sid, update) if kind == U2_SUBAGENT_UPDATE \
                else self.children.carried(child, update)
            return self._with_cards({**params, "sessionId": child.root}, carried), None
        if self.children.edge_ids and sid not in self.children.edge_ids:
            return [], None  # a session of the agent's acpgate does not know: dropped
        if sid not in self._sessions and len(self._sessions) >= MAX_AGENT_SESSIONS:
            self._dropped("session")  # fresh ids before acpgate's session is bound
            return [], None
        session = self._session(sid)
        if kind == U2_SUBAGENT_UPDATE:
            return self._with_cards(params, self.children.announce(sid, update)), None
        mapped = self.children.mapped(update, sid)
        if mapped is not update:
            update, params = mapped, {**params, "update": mapped}
        if kind == U2_STATE:
            return self._state(sid, session, params, update)
        if kind in (U2_USER_MESSAGE_CHUNK, U2_USER_MESSAGE) and session.turn:
            return [], None  # the prompt's echo: acpgate reports the prompt itself
        if kind == U2_REPLAY_COMPLETE:
            return [], None
        out = self._kind(session, str(kind), update)
        return [{**params, "update": u} for u in out], None

    def _state(self, sid: str, session: _Session, params: dict[str, Any],
               update: dict[str, Any]) -> tuple[list[dict[str, Any]], TurnEnd | None]:
        state = update.get("state")
        changed = state != session.state
        session.state = state if isinstance(state, str) else session.state
        background = update.get("background")
        moved = background is not None and background != session.background
        if background is not None:
            session.background = background
        if session.turn:
            # The prompt's own states are acpgate's to report; a new background list passes.
            out = [{**params, "update": {"sessionUpdate": U2_STATE, "state": STATE_RUNNING,
                                         "background": background}}] if moved else []
            if state != STATE_IDLE:
                return out, None
            session.turn = False
            return out, self._turn_end(sid, update)
        return ([params] if changed or moved else []), None

    @staticmethod
    def _turn_end(sid: str, update: dict[str, Any]) -> TurnEnd:
        stop = update.get("stopReason")
        if stop == STOP_ERROR:
            error = update.get("error")
            if not isinstance(error, dict) or not isinstance(error.get("code"), int):
                error = {"code": INTERNAL_ERROR, "message": "the agent's turn failed"}
            return TurnEnd(sid, error=error)
        result: dict[str, Any] = {"stopReason": stop if isinstance(stop, str) else "end_turn"}
        for key in ("usage", "_meta"):
            if isinstance(update.get(key), dict):
                result[key] = update[key]
        return TurnEnd(sid, result=result)

    def _kind(self, session: _Session, kind: str,
              update: dict[str, Any]) -> list[dict[str, Any]]:
        if kind == U2_TOOL_CALL_UPDATE:
            return [self._tool_call(session, update)]
        if kind == U2_TOOL_CALL_CONTENT_CHUNK:
            return self._content_chunk(session, update)
        if kind == U2_PLAN_UPDATE:
            plan = update.get("plan")
            if isinstance(plan, dict) and plan.get("type") == "items":
                out = {"sessionUpdate": "plan", "entries": plan.get("entries") or []}
                # The agent's plan whole, for a v2 client (planId and all).
                out["_meta"] = _with_ours(update.get("_meta"), META_PLAN, plan)
                return [out]
            return [update]
        if kind == U2_CONFIG_OPTION:
            return self._options_update(session, update)
        if kind == U2_NOTICE:
            return [self._notice(update)]
        return [update]

    def _tool_call(self, session: _Session, update: dict[str, Any]) -> dict[str, Any]:
        call_id = update.get("toolCallId")
        key = call_id if isinstance(call_id, str) else ""
        out = dict(update)
        known = key in session.created
        if not known:
            self._create(session, key)
        if "content" in out:
            out["content"] = _content_v1(out["content"]) if out["content"] is not None else []
            self._set_content(session, key, list(out["content"]))
        if "locations" in out and out["locations"] is None:
            out["locations"] = []
        if known:  # v1 cannot unset a field: a null is left out
            return {k: v for k, v in out.items() if v is not None}
        # The first update of an id creates the call: v1's tool_call, which needs a title.
        created = {k: v for k, v in out.items() if v is not None}
        created["sessionUpdate"] = "tool_call"
        if not isinstance(created.get("title"), str):
            name = update.get("name")
            created["title"] = name if isinstance(name, str) else key
        return created

    def _content_chunk(self, session: _Session, update: dict[str, Any]) -> list[dict[str, Any]]:
        call_id = update.get("toolCallId")
        key = call_id if isinstance(call_id, str) else ""
        item = _content_v1([update.get("content")])[0]
        # The chunk as it came, for a v2 client (v1 gets the whole content so far).
        meta = _with_ours(update.get("_meta"), META_CONTENT_CHUNK, update.get("content"))
        kept = session.calls.get(key, [])
        size = session.chars.get(key, 0) + _size(item)
        if key in session.created and (len(kept) >= MAX_CALL_CONTENT_CHUNKS
                                       or size > MAX_CALL_CONTENT_CHARS):
            self._dropped("tool_call_content")  # v1's content stays as it was
            return [{"sessionUpdate": U2_TOOL_CALL_UPDATE, "toolCallId": call_id,
                     "_meta": meta}]
        content = [*kept, item]
        out: dict[str, Any] = {"toolCallId": call_id, "content": content}
        if key not in session.created:
            self._create(session, key)
            self._set_content(session, key, content)
            return [{"sessionUpdate": "tool_call", **out, "title": key}]
        session.calls[key] = content
        session.chars[key] = size
        return [{"sessionUpdate": U2_TOOL_CALL_UPDATE, **out, "_meta": meta}]

    def _create(self, session: _Session, key: str) -> None:
        """v1 knows tool call ``key`` from now on; past the bound the oldest is forgotten."""
        created = session.created
        if len(created) >= MAX_TOOL_CALLS_KEPT:
            oldest = next(iter(created))
            del created[oldest]
            session.calls.pop(oldest, None)
            session.chars.pop(oldest, None)
            self._dropped("tool_call")
        created[key] = None

    @staticmethod
    def _set_content(session: _Session, key: str, content: list[Any]) -> None:
        session.calls[key] = content
        session.chars[key] = _size(content)

    def _options_update(self, session: _Session,
                        update: dict[str, Any]) -> list[dict[str, Any]]:
        before = session.mode
        options = update.get("configOptions")
        out = dict(update)
        if isinstance(options, list):
            out["configOptions"] = [_option_v1(o) if isinstance(o, dict) else o
                                    for o in options]
        updates = [out]
        for option in options if isinstance(options, list) else ():
            if isinstance(option, dict) and option.get("category") == CATEGORY_MODE:
                session.mode_config = str(option.get("configId") or MODE_CONFIG_ID)
                current = option.get("currentValue")
                session.mode = current if isinstance(current, str) else before
                if isinstance(current, str) and current != before:
                    updates.append({"sessionUpdate": "current_mode_update",
                                    "currentModeId": current})
        return updates

    @staticmethod
    def _notice(update: dict[str, Any]) -> dict[str, Any]:
        title = update.get("title")
        text = title if isinstance(title, str) else ""
        if isinstance(update.get("description"), str) and update["description"]:
            text = f"{text}\n\n{update['description']}" if text else update["description"]
        notice = {k: v for k, v in update.items() if k != "sessionUpdate"}
        return {"sessionUpdate": "agent_thought_chunk",
                "content": {"type": "text", "text": text},
                "_meta": {"acpgate": {"notice": notice}}}

    # ------------------------------------------------------------------ agent requests

    def agent_request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """A v2 agent's request to the client as v1's (the permission request's
        ``toolCall``)."""
        if method != M_REQUEST_PERMISSION or "toolCall" in params:
            return params
        subject = params.get("subject")
        call = subject.get("toolCall") if isinstance(subject, dict) else None
        title = params.get("title")
        tool_call = dict(call) if isinstance(call, dict) else {}
        tool_call.setdefault("toolCallId", f"permission:{title}")
        if isinstance(title, str):
            tool_call.setdefault("title", title)
        if "content" in tool_call:
            tool_call["content"] = _content_v1(tool_call["content"])
        out = {k: v for k, v in params.items() if k not in ("subject", "description")}
        out["toolCall"] = tool_call
        # The agent's own words, for a v2 client (v1 has the tool call's title alone).
        asked = {k: params[k] for k in ("title", "description") if isinstance(params.get(k), str)}
        if asked:
            out["_meta"] = _with_ours(params.get("_meta"), META_PERMISSION, asked)
        return out

