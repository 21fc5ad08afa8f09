"""The ``session/prompt`` an adapter gets: the client's ContentBlocks, or the SPEC §4 text.

The built-in agent keeps SPEC §4 exactly: one text block, parts joined, blobs
written to ``uploads/<sha256>`` and replaced by markers (:mod:`services.edge.adapter.blobs`).

An external adapter gets the client's blocks as sent, each kind that it
advertised: ``text`` and ``resource_link`` always (every ACP agent
takes them), ``image`` with ``promptCapabilities.image``, ``audio`` with
``audio``, an embedded ``resource`` with ``embeddedContext``. Only what it
lacks falls back to the SPEC §4 rule: an embedded text resource becomes its
text, an embedded blob is written to ``uploads/`` and replaced by its marker,
and image/audio blocks are left out. Consecutive plain text blocks are joined
with a blank line, so an adapter that takes none of the extra kinds gets
exactly SPEC §4's one text. Blobs are validated (base64, the 10 MiB limit)
before anything is written or sent, whichever way they go.

:func:`history_text` is the user message the store keeps for the turn.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from services.common.acp.schema import PromptCapabilities
from services.common.jsonrpc import JsonRpcError
from services.common.protocol import INVALID_PARAMS, MSG_PROMPT_EMPTY, MSG_PROMPT_MISSING
from services.edge.adapter import blobs


@dataclass(frozen=True)
class AdapterPrompt:
    """What goes to the adapter and what the store keeps as the user's message."""

    blocks: list[dict[str, Any]]
    text: str


async def spec4_prompt(prompt: Any, workspace_dir: str) -> AdapterPrompt:
    """SPEC §4: the joined text with markers, as one text block (the built-in agent)."""
    plan = blobs.parse_prompt(prompt)
    if plan.blobs:
        text = await asyncio.to_thread(blobs.materialize, plan, workspace_dir)
    else:
        text = blobs.materialize(plan, workspace_dir)
    return AdapterPrompt([{"type": "text", "text": text}], text)


def _blob_of(data: Any, mime: Any, uri: Any) -> blobs.PromptPlan:
    """A one-blob plan, validated like an embedded resource's blob (SPEC §4 errors)."""
    return blobs.parse_prompt([{"type": "resource", "resource": {
        "uri": uri if isinstance(uri, str) else "",
        "mimeType": mime if isinstance(mime, str) else "",
        "blob": data,
    }}])


#: One planned block: sent as is (a dict), or the SPEC §4 text of a fallback (a plan).
_Planned = dict[str, Any] | blobs.PromptPlan


def _plan_block(block: dict[str, Any], caps: PromptCapabilities) -> _Planned | None:
    """The planned form of one client block, or None to drop it (unknown kinds)."""
    kind = block.get("type")
    if kind in (None, "text"):
        text = block.get("text")
        if not isinstance(text, str):
            return None
        return block if kind == "text" else {"type": "text", "text": text}
    if kind == "resource_link":
        return block if isinstance(block.get("uri"), str) else None
    if kind in ("image", "audio"):
        if not (caps.image if kind == "image" else caps.audio):
            return None  # SPEC §4: ignored
        _blob_of(block.get("data"), block.get("mimeType"), block.get("uri"))  # validate only
        return block
    if kind == "resource":
        resource = block.get("resource")
        if not isinstance(resource, dict):
            return None
        if "blob" in resource:
            plan = _blob_of(resource["blob"], resource.get("mimeType"), resource.get("uri"))
        elif isinstance(resource.get("text"), str):
            plan = blobs.PromptPlan([resource["text"]])
        else:
            return None
        return block if caps.embedded_context else plan
    return None


def _is_plain_text(block: dict[str, Any]) -> bool:
    return block.get("type") == "text" and block.keys() <= {"type", "text"}


def _render(planned: list[_Planned], workspace_dir: str) -> list[dict[str, Any]]:
    """Write the fallbacks' blobs, turn every planned block into a wire block and join
    runs of plain text blocks (blocking)."""
    out: list[dict[str, Any]] = []
    for p in planned:
        block = p if isinstance(p, dict) else {
            "type": "text", "text": blobs.materialize(p, workspace_dir)}
        if out and _is_plain_text(block) and _is_plain_text(out[-1]):
            out[-1] = {"type": "text", "text": f"{out[-1]['text']}\n\n{block['text']}"}
        else:
            out.append(block)
    return out


def history_text(blocks: list[dict[str, Any]]) -> str:
    """The user's message as the store keeps it: texts, and a short note per other block."""
    parts: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind == "resource_link":
            parts.append(f"[Link: {block.get('name') or block.get('uri')}] {block.get('uri')}")
        elif kind in ("image", "audio"):
            parts.append(f"[{kind.upper()}: {block.get('uri') or block.get('mimeType') or kind}]")
        elif kind == "resource":
            resource = block.get("resource") or {}
            text = resource.get("text")
            parts.append(text if isinstance(text, str) else
                         f"[Document: {blobs.Blob(b'', '', str(resource.get('uri') or '')).filename}]")
    return "\n\n".join(parts)


async def adapter_prompt(prompt: Any, caps: PromptCapabilities,
                         workspace_dir: str) -> AdapterPrompt:
    """The client's blocks for an external adapter whose ``promptCapabilities`` are ``caps``
    (see the module doc)."""
    if isinstance(prompt, str):
        return await spec4_prompt(prompt, workspace_dir)
    if not isinstance(prompt, list):
        raise JsonRpcError(INVALID_PARAMS, MSG_PROMPT_MISSING)
    planned = [p for b in prompt if isinstance(b, dict) and (p := _plan_block(b, caps)) is not None]
    if not any(_has_content(p) for p in planned):
        raise JsonRpcError(INVALID_PARAMS, MSG_PROMPT_EMPTY)
    if any(isinstance(p, blobs.PromptPlan) and p.blobs for p in planned):
        out = await asyncio.to_thread(_render, planned, workspace_dir)
    else:
        out = _render(planned, workspace_dir)
    return AdapterPrompt(out, history_text(out))


def _has_content(planned: _Planned) -> bool:
    """A block that carries something: non-blank text, or anything that is not text."""
    if isinstance(planned, blobs.PromptPlan):
        return bool(planned.blobs) or any(isinstance(p, str) and p.strip() for p in planned.parts)
    if planned.get("type") == "text":
        return bool(str(planned.get("text", "")).strip())
    return True


def carried_blocks(session_id: str, history: str | None, embedded: bool) -> list[dict[str, Any]]:
    """The block that carries a restored session's prior conversation into its first prompt
    (an external adapter that could not restore itself): an embedded text resource, or
    plain text for an adapter without ``embeddedContext``; none without ``history``."""
    if not history:
        return []
    prior = "Prior conversation of this session:\n\n" + history
    if not embedded:
        return [{"type": "text", "text": prior}]
    return [{"type": "resource", "resource": {
        "uri": f"acpgate://session/{session_id}/history.txt",
        "mimeType": "text/plain", "text": prior}}]
