"""What the session tools share: one ACP extension request to the edge per call.

The built-in agent runs only its own sessions; sessions of other agents are the
edge's to run and the session service's to decide on (ARCHITECTURE.md: only
the edge speaks ACP to adapters, only the session service decides). So each
session tool sends one request to its ACP client — the edge — under an
extension method (``_acpgate/sessions_spawn`` …, underscore-prefixed as ACP's
extensibility rules ask), naming the calling session. The edge asks the session
service with this session as the requester, so what the tool may see or reach is
decided there; it answers with a JSON object, which the model gets as indented
JSON. A refusal (a session not visible to this one, an unknown agent, a busy
session) is a JSON-RPC error whose message the model reads.

The tools are offered only when the client advertised
``clientCapabilities._meta.acpgate.sessionTools`` (the edge does): a plain ACP
client such as an editor running ``acpgate agent`` serves no such method.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from services.agent.tools.base import ToolContext, ToolError
from services.common.jsonrpc import JsonRpcError

__all__ = ["call_edge", "optional_bool", "optional_str", "render"]


async def call_edge(ctx: ToolContext, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """Send ``method`` for this session to the edge; its result, or a ToolError saying why not."""
    try:
        result = await ctx.client_request(method, {"sessionId": ctx.session_id, **params},
                                          ctx.request_timeout)
    except JsonRpcError as exc:
        raise ToolError(exc.message) from None
    except TimeoutError:
        raise ToolError(f"no answer within {ctx.request_timeout:g} seconds") from None
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the client left (stdin closed) or cannot be written to
        raise ToolError(f"the session tools are not reachable: {exc}") from None
    if not isinstance(result, dict):
        raise ToolError("the client answered without a result object")
    return result


def render(result: dict[str, Any]) -> str:
    """The model's view of an edge answer: indented JSON, non-ASCII kept."""
    return orjson.dumps(result, option=orjson.OPT_INDENT_2).decode()


def optional_str(args: dict[str, Any], key: str) -> str:
    """An optional string argument ("" when absent); another type is a clear ToolError."""
    value = args.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ToolError(f"argument `{key}` must be a string")
    return value


def optional_bool(args: dict[str, Any], key: str, default: bool) -> bool:
    """An optional boolean argument; another type is a clear ToolError."""
    value = args.get(key, default)
    if not isinstance(value, bool):
        raise ToolError(f"argument `{key}` must be true or false")
    return value
