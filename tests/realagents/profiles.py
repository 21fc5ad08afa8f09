"""Capability profiles of the tier's pinned adapters, as recorded from their v1 ``initialize``
(``agentCapabilities``, ``authMethods``, ``_meta``; :func:`services.edge.adapter.caps.profile_of`).

The tier checks the live adapter still answers this (``test_real_adapters``); the edge's unit
tests use it as the real input of what ``initialize`` advertises and of the automatic login.
"""

from __future__ import annotations

from typing import Any

#: ``@agentclientprotocol/codex-acp`` 2.6.0 on v1, to a client that opted into nothing
#: (``NO_BROWSER`` unset: ``chat-gpt`` is listed).
CODEX_NAME = "@agentclientprotocol/codex-acp"
CODEX_PROFILE: dict[str, Any] = {
    "agentCapabilities": {
        "auth": {"logout": {}},
        "providers": {},
        "loadSession": True,
        "promptCapabilities": {"embeddedContext": True, "image": True},
        "sessionCapabilities": {
            "resume": {}, "list": {}, "close": {}, "delete": {}, "fork": {}, "title": {},
            "additionalDirectories": {}, "subagents": {}, "systemPrompt": {},
        },
        "mcpCapabilities": {"acp": False, "http": True, "sse": False},
        "_meta": {"authStatus": {}},
    },
    "authMethods": [
        {"id": "api-key", "name": "API Key", "description": "Use an API key to authenticate",
         "_meta": {"api-key": {"provider": "openai"}}},
        {"id": "chat-gpt", "name": "ChatGPT", "description": "Use ChatGPT to authenticate"},
    ],
    "_meta": {"steering": {"supported": True}},
}
