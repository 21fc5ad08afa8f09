"""What a tool is, what it gets to work with, and what it returns."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from services.common.policy import SecurityPolicy

#: Sends one ACP ``session/update`` payload (the ``update`` object) for the session.
SendUpdate = Callable[[dict[str, Any]], Awaitable[None]]
#: Sends an outbound JSON-RPC request to the client and returns its result.
ClientRequest = Callable[[str, dict[str, Any], float], Awaitable[Any]]


class ToolError(Exception):
    """A tool failure; ``str(exc)`` goes back to the model and the client as the output."""


@dataclass
class ToolContext:
    """Everything a tool may touch: the session's policy and its channels to the client."""

    session_id: str
    policy: SecurityPolicy
    send_update: SendUpdate
    client_request: ClientRequest
    #: The client advertised ``clientCapabilities.elicitation`` (form mode).
    elicitation: bool = False
    #: Permission / question timeout (``[acp] session_timeout_secs``).
    request_timeout: float = 3600.0
    #: Environment for shell commands (API keys removed).
    shell_env: dict[str, str] = field(default_factory=dict)
    #: The client serves the session tools' extension methods (the acpgate edge does).
    session_tools: bool = False
    #: The agent workspace (``[agents.<alias>] workspace``): its ``skills/`` (skill_load).
    agent_workspace: str = ""


@dataclass
class ToolResult:
    """A tool's outcome.

    ``output`` is what ``rawOutput``/``body`` carry and, unless ``model_output``
    is set, what the model sees. ``model_output`` is the model's own view when
    it differs from that human summary (deliver_file: the structured JSON with
    ``uri`` the seed keeps out of the summary). ``content`` replaces the default
    text content of the ``tool_call_update``; ``finalize`` (deliver_file) runs
    just before the update is built and may turn the result into a failure.
    """

    output: str
    ok: bool = True
    title: str | None = None
    content: list[dict[str, Any]] | None = None
    finalize: Callable[[], Awaitable[ToolResult]] | None = None
    model_output: str | None = None

    @property
    def model_text(self) -> str:
        """What the model is told: ``model_output`` when set, else ``output``."""
        return self.model_output if self.model_output is not None else self.output


class Tool(Protocol):
    """One tool the model may call."""

    name: str
    kind: str
    description: str
    #: True when the tool changes files or runs commands (refused in readonly).
    mutating: bool
    #: True when the tool talks to the user itself (never goes through approval).
    interactive: bool

    @property
    def parameters(self) -> dict[str, Any]:
        """JSON schema of the arguments (a class constant for the built-in tools)."""
        ...

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        """Extra fields of the ``tool_call`` update (``rawInput``, diff ``content``)."""
        ...

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Do the work; raise :class:`ToolError` (or PolicyViolation) on failure."""
        ...


class ArgumentsPreview:
    """Base of the tools whose ``tool_call`` update shows just the call's arguments."""

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        """rawInput = the arguments."""
        return {"rawInput": args}


def require_str(args: dict[str, Any], key: str) -> str:
    """A required non-empty string argument, or a clear ToolError."""
    value = args.get(key)
    if not isinstance(value, str) or not value:
        raise ToolError(f"missing required string argument `{key}`")
    return value


def optional_int(args: dict[str, Any], key: str, default: int, lo: int, hi: int) -> int:
    """An optional integer argument clamped to ``[lo, hi]``."""
    value = args.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ToolError(f"argument `{key}` must be a number")
    return max(lo, min(hi, int(value)))
