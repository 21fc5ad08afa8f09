"""The typed streaming interface every model provider implements."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from services.agent.conversation import Message, ToolCall
from services.common.protocol import STOP_END_TURN


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the model sees it: name, description, JSON-schema parameters."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TextDelta:
    """A piece of the assistant's visible reply."""

    text: str


@dataclass(frozen=True)
class ThoughtDelta:
    """A piece of the model's reasoning (→ ``agent_thought_chunk``)."""

    text: str


@dataclass(frozen=True)
class ToolCallReady:
    """A complete tool call (all argument fragments received and parsed)."""

    call: ToolCall


@dataclass(frozen=True)
class UsageReport:
    """Token usage of one model call (cumulative for that call)."""

    input_tokens: int = 0
    output_tokens: int = 0


#: A provider's stop reason for "the reply asks for tool calls": internal to the agent,
#: never an ACP stop reason (the turn runs the tools and calls the model again).
STOP_TOOL_USE = "tool_use"


@dataclass(frozen=True)
class StreamDone:
    """The model stopped: an ACP stop reason (``end_turn``, ``max_tokens``, ``refusal``) or
    :data:`STOP_TOOL_USE`."""

    stop_reason: str = STOP_END_TURN


@dataclass(frozen=True)
class SlashCommand:
    """A command a provider understands when it is sent as the prompt (``/name input``),
    advertised to the client as an ACP ``AvailableCommand``."""

    name: str
    description: str
    #: What the input is, shown while it is not typed yet ("" = the command takes none).
    hint: str = ""

    def to_acp(self) -> dict[str, Any]:
        """The ACP ``AvailableCommand`` object."""
        command: dict[str, Any] = {"name": self.name, "description": self.description}
        if self.hint:
            command["input"] = {"hint": self.hint}
        return command


ProviderEvent = TextDelta | ThoughtDelta | ToolCallReady | UsageReport | StreamDone


class ProviderError(Exception):
    """A provider failure, with a message safe to show (secrets already scrubbed).

    ``summary`` leaves out whatever the provider echoed back (an error body
    may quote the prompt), so it is what goes to the logs.
    """

    def __init__(self, message: str, summary: str = "") -> None:
        super().__init__(message)
        self.summary = summary or message


class Provider(Protocol):
    """A model behind a streaming API."""

    name: str

    def stream(
        self, system: str, messages: list[Message], tools: list[ToolSpec]
    ) -> AsyncIterator[ProviderEvent]:
        """Stream one model call's events; raises :class:`ProviderError`."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


class KeyMissingProvider:
    """A keyed provider whose ``api_key_env`` names a variable that is unset or empty: every
    call fails with ``problem`` before a request goes out (a keyless request would only
    earn the provider's 401, which says nothing of the variable). ``problem`` is also what
    the agent reports at start (:func:`provider_warnings`)."""

    def __init__(self, name: str, problem: str) -> None:
        self.name = name
        self.problem = problem

    async def stream(
        self, system: str, messages: list[Message], tools: list[ToolSpec]
    ) -> AsyncIterator[ProviderEvent]:
        """Fail the call at once, saying which variable is missing."""
        raise ProviderError(self.problem)
        yield  # unreachable: makes this an async generator, like every provider's stream

    async def aclose(self) -> None:
        """Nothing to release."""


def provider_commands(provider: Provider) -> tuple[SlashCommand, ...]:
    """The slash commands ``provider`` understands (its ``commands`` attribute; a model
    provider has none: its model reads the prompt as it is)."""
    commands = getattr(provider, "commands", ())
    return tuple(c for c in commands if isinstance(c, SlashCommand))


def provider_warnings(provider: Provider) -> list[str]:
    """What is wrong with ``provider``'s configuration, as sentences for logs and the
    edge (``[]`` when nothing is)."""
    return [provider.problem] if isinstance(provider, KeyMissingProvider) else []
