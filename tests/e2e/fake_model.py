"""The fake model for end-to-end runs: the agent tests' real local HTTP server, in a thread.

`acpgate acp` runs as a subprocess and its built-in agent (provider ``openai``)
streams from this server, which plays back scripted OpenAI chat-completion
replies: text, or tool calls. The e2e harness is synchronous, so the asyncio
server gets its own loop in a background thread.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any

from tests.agent.fake_http import FakeProviderServer, Recorded, Reply, sse

#: The API key variable the e2e agent entry names (a value is set in the child env).
API_KEY_ENV = "ACPGATE_E2E_MODEL_KEY"


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "x", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def text_reply(text: str) -> Reply:
    """A model call that answers ``text`` and stops."""
    return sse(_chunk({"content": text}), _chunk({}, "stop"), done=True)


def tool_reply(*calls: tuple[str, dict[str, Any]]) -> Reply:
    """A model call that asks for ``calls`` (name, arguments), in order."""
    chunks = [_chunk({"tool_calls": [{"index": i, "id": f"call_{i}", "type": "function",
                                      "function": {"name": name,
                                                   "arguments": json.dumps(args)}}]})
              for i, (name, args) in enumerate(calls)]
    return sse(*chunks, _chunk({}, "tool_calls"), done=True)


class ModelServer:
    """``with ModelServer([...]) as model: model.url`` — the scripted model on a local port;
    a ``responder`` computes the replies after the scripted ones (in the server's thread)."""

    def __init__(self, replies: list[Reply],
                 responder: Callable[[Recorded], Reply] | None = None) -> None:
        self._server = FakeProviderServer(replies, responder)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def url(self) -> str:
        """The base URL to configure as ``base_url``."""
        return self._server.url

    @property
    def requests(self) -> list[Recorded]:
        """Every request the agent made, in order."""
        return list(self._server.requests)

    def add(self, *replies: Reply) -> None:
        """Script more replies."""
        self._loop.call_soon_threadsafe(self._server.replies.extend, replies)

    def __enter__(self) -> ModelServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._server.__aenter__(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._server.__aexit__(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


def agent_entry(alias: str, model: ModelServer, extra: str = "") -> str:
    """A config.toml ``[agents.<alias>]`` built-in agent on the fake model."""
    return f"""
[agents.{alias}]
kind = "builtin"
provider = "openai"
model = "fake-model"
base_url = "{model.url}/v1"
api_key_env = "{API_KEY_ENV}"
max_retries = 0
{extra}
"""
