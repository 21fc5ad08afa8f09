"""The Gemini API (``generativelanguage``) side of the fake model server, for gemini-cli.

gemini-cli talks to ``$GOOGLE_GEMINI_BASE_URL/v1beta/models/<model>:<verb>``:
``streamGenerateContent?alt=sse`` for its turns, ``generateContent`` for side
requests (next-speaker checks and other JSON-schema questions, titles) and
``countTokens``. The plan follows the same triggers as the other providers
(:mod:`tests.realagents.fake_models`): a function response → ``TOOL_DONE``
text; :data:`TOOL_TRIGGER` with tools offered → one ``run_shell_command``
call; :data:`SLOW_TRIGGER` → slow text; else :data:`HELLO`. Every streamed
answer carries ``usageMetadata``, as the real API does.
"""

from __future__ import annotations

from typing import Any

import orjson

#: The Gemini API key of the tier: the fake API refuses any other (403, as Google does), so a
#: key that did not reach gemini-cli shows (``x-goog-api-key``).
GEMINI_KEY = "fake-gemini-key-for-tests"
KEY_HEADER = "x-goog-api-key"
#: The answer to a request without the key.
KEY_REFUSED = {"error": {"code": 403, "status": "PERMISSION_DENIED",
                         "message": "fake Gemini API: API key not valid"}}
#: The tool gemini-cli runs shell commands with.
GEMINI_SHELL_TOOL = "run_shell_command"
#: Token counts every fake answer reports (``usageMetadata``).
PROMPT_TOKENS = 13
ANSWER_TOKENS = 5


#: The heading over the conversation acpgate carries into a restored session's first prompt
#: when the agent could not restore it itself (gemini-cli 0.61 cannot): it quotes earlier
#: prompts, triggers included, so it is not new input.
CARRIED_OVER = "Prior conversation of this session:"


def _parts_text(parts: Any) -> str:
    if not isinstance(parts, list):
        return ""
    return " ".join(p["text"] for p in parts if isinstance(p, dict)
                    and isinstance(p.get("text"), str) and CARRIED_OVER not in p["text"])


def last_user(body: dict[str, Any]) -> dict[str, Any]:
    """The last ``contents`` entry of role user ({} when none)."""
    users = [c for c in body.get("contents") or []
             if isinstance(c, dict) and c.get("role", "user") == "user"]
    return users[-1] if users else {}


def function_response(content: dict[str, Any]) -> str | None:
    """The output of the function response in ``content`` (None: there is none)."""
    for part in content.get("parts") or []:
        if isinstance(part, dict) and isinstance(part.get("functionResponse"), dict):
            response = part["functionResponse"].get("response")
            return orjson.dumps(response).decode()[:200]
    return None


def user_text(body: dict[str, Any]) -> str:
    """The text of the last user content (less a carried-over conversation: gemini-cli puts
    an embedded resource in a part of its own after the prompt's text)."""
    return _parts_text(last_user(body).get("parts"))


def offers_tools(body: dict[str, Any]) -> bool:
    """True when the request offers function declarations (a turn, not a side request)."""
    return any(isinstance(t, dict) and t.get("functionDeclarations")
               for t in body.get("tools") or [])


def _usage() -> dict[str, Any]:
    return {"promptTokenCount": PROMPT_TOKENS, "candidatesTokenCount": ANSWER_TOKENS,
            "totalTokenCount": PROMPT_TOKENS + ANSWER_TOKENS}


def text_chunk(text: str, *, last: bool) -> dict[str, Any]:
    """One streamed ``GenerateContentResponse`` with ``text``."""
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": [{"text": text}]},
                                 "index": 0}
    if last:
        candidate["finishReason"] = "STOP"
    out: dict[str, Any] = {"candidates": [candidate], "modelVersion": "gemini-fake"}
    if last:
        out["usageMetadata"] = _usage()
    return out


def call_chunk(command: str) -> dict[str, Any]:
    """A streamed answer calling the shell tool with ``command``."""
    return {"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {
        "name": GEMINI_SHELL_TOOL, "args": {"command": command,
                                            "description": "Write the marker"}}}]},
        "finishReason": "STOP", "index": 0}],
        "usageMetadata": _usage(), "modelVersion": "gemini-fake"}


def side_answer(body: dict[str, Any]) -> dict[str, Any]:
    """A non-streamed answer: JSON for a JSON-schema question (gemini-cli's next-speaker
    check expects ``next_speaker``), else a short title-like text."""
    config = body.get("generationConfig") or {}
    if config.get("responseMimeType") == "application/json":
        text = orjson.dumps({"reasoning": "The model answered; the user speaks next.",
                             "next_speaker": "user"}).decode()
    else:
        text = "Fake title"
    return {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
                            "finishReason": "STOP", "index": 0}],
            "usageMetadata": _usage(), "modelVersion": "gemini-fake"}


def sse_data(event: dict[str, Any]) -> bytes:
    """One SSE frame of the Gemini stream (no event names)."""
    return b"data: " + orjson.dumps(event) + b"\r\n\r\n"
