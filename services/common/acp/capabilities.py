"""What an acpgate agent side advertises in ``initialize`` — one builder for both.

The edge answers clients' ``initialize`` and the built-in agent answers the
edge's; both describe themselves with :func:`agent_capabilities`, so the two
cannot drift apart in shape, only in the features each one passes in.
"""

from __future__ import annotations

from services.common.acp.schema import (
    AgentCapabilities,
    McpCapabilities,
    PromptCapabilities,
    SessionAdditionalDirectoriesCapabilities,
    SessionCapabilities,
    SessionCloseCapabilities,
    SessionDeleteCapabilities,
    SessionForkCapabilities,
    SessionListCapabilities,
    SessionResumeCapabilities,
)

__all__ = ["agent_capabilities"]


def agent_capabilities(
    *,
    load_session: bool,
    resume: bool = False,
    close: bool = False,
    list_sessions: bool = False,
    delete: bool = False,
    additional_directories: bool = False,
    fork: bool = False,
    image: bool = False,
    audio: bool = False,
    mcp_http: bool = False,
    mcp_sse: bool = False,
) -> AgentCapabilities:
    """The ``agentCapabilities`` of an acpgate agent side.

    Embedded context is always accepted (SPEC §4: text resources are inlined,
    blobs are written to ``uploads/``); MCP servers over stdio always, over HTTP
    and SSE when ``mcp_http``/``mcp_sse`` say so.
    Each session method named here is advertised as ``{}``, the others are left out.
    """
    return AgentCapabilities(
        load_session=load_session,
        prompt_capabilities=PromptCapabilities(image=image, audio=audio, embedded_context=True),
        mcp_capabilities=McpCapabilities(http=mcp_http, sse=mcp_sse),
        session_capabilities=SessionCapabilities(
            list_=SessionListCapabilities() if list_sessions else None,
            delete=SessionDeleteCapabilities() if delete else None,
            additional_directories=(SessionAdditionalDirectoriesCapabilities()
                                    if additional_directories else None),
            resume=SessionResumeCapabilities() if resume else None,
            close=SessionCloseCapabilities() if close else None,
            fork=SessionForkCapabilities() if fork else None,
        ),
    )
