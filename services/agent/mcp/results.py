"""An MCP ``CallToolResult`` as the agent's :class:`ToolResult`: text for the model, ACP content
for the client.

- text → the tool's output (parts joined with blank lines, as SPEC §4 joins prompts);
- an embedded resource with text → its text;
- blobs (an embedded resource's ``blob``, image and audio data) follow SPEC §4 exactly:
  decoded (10 MiB at most), written to ``<workspace>/uploads/<sha256>[.<ext>]``, and
  the model sees the marker (``[IMAGE:<path>]`` / ``[Document: <name>] <path>``),
  never base64. Images carry no uri, so their name comes from the MIME type
  (``image.png``). A blob that breaks the rule becomes a sentence saying so;
- a resource link → ``[Resource link: <name>] <uri>``;
- no content but ``structuredContent`` → that JSON.

The client gets the same output as text, then the media as ACP content blocks —
``image``, ``audio`` and ``resource`` (blob) blocks, which ACP's ToolCallContent
carries for every client, and ``resource_link`` — passed through as MCP sent them
(ACP content blocks are MCP's shapes). ``isError`` makes the call ``failed``.
"""

from __future__ import annotations

import asyncio
import mimetypes
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mcp_types
import orjson

from services.agent.tools.base import ToolResult
from services.common.uploads import Blob, BlobError, decode_blob, marker, store_blob

__all__ = ["MAX_OUTPUT_CHARS", "tool_result"]

#: Characters of output given to the model at most (as file_read).
MAX_OUTPUT_CHARS = 100_000
NO_OUTPUT = "(the tool returned no content)"


@dataclass
class _Media:
    """A decoded blob waiting to be written, with the ACP block the client gets for it."""

    blob: Blob
    block: dict[str, Any]


def _media_name(mime: str, kind: str) -> str:
    """``image.png``-style name for data that came without a uri."""
    ext = mimetypes.guess_extension(mime.split(";")[0].strip()) or ""
    return f"{kind}{ext}"


def _decode(data: str, mime: str, uri: str, what: str) -> Blob | str:
    """A :class:`Blob`, or the sentence that replaces a blob the rule refuses."""
    try:
        return Blob(decode_blob(data), mime, uri)
    except BlobError as exc:
        return f"[{what} not saved: {exc}]"


def _plan(result: mcp_types.CallToolResult) -> list[str | _Media]:
    """Each content block as text or as media to write (no I/O yet)."""
    parts: list[str | _Media] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        elif isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
            kind = "image" if isinstance(block, mcp_types.ImageContent) else "audio"
            decoded = _decode(block.data, block.mime_type, _media_name(block.mime_type, kind),
                              f"{kind.capitalize()} ({block.mime_type})")
            parts.append(decoded if isinstance(decoded, str) else _Media(decoded, {
                "type": kind, "data": block.data, "mimeType": block.mime_type}))
        elif isinstance(block, mcp_types.EmbeddedResource):
            res = block.resource
            if isinstance(res, mcp_types.TextResourceContents):
                parts.append(res.text)
                continue
            mime = res.mime_type or ""
            decoded = _decode(res.blob, mime, res.uri, f"Resource {res.uri}")
            resource: dict[str, Any] = {"uri": res.uri, "blob": res.blob}
            if mime:
                resource["mimeType"] = mime
            parts.append(decoded if isinstance(decoded, str) else _Media(decoded, {
                "type": "resource", "resource": resource}))
        elif isinstance(block, mcp_types.ResourceLink):
            parts.append(f"[Resource link: {block.name}] {block.uri}")
    if not parts and result.structured_content is not None:
        parts.append(orjson.dumps(result.structured_content, default=str).decode())
    return parts


def _write(parts: list[str | _Media], workspace_dir: str) -> tuple[list[str], list[dict[str, Any]]]:
    """Write the media (blocking): the model's texts and the client's media blocks."""
    texts: list[str] = []
    blocks: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
            continue
        try:
            path: Path = store_blob(workspace_dir, part.blob)
        except BlobError as exc:
            texts.append(f"[{part.blob.filename} not saved: {exc}]")
            continue
        except OSError as exc:
            texts.append(f"[{part.blob.filename} not saved: {exc.strerror or exc}]")
            continue
        texts.append(marker(part.blob, path))
        blocks.append({"type": "content", "content": part.block})
    return texts, blocks


#: The fields of ACP's ResourceLink (MCP's has more, e.g. icons).
_LINK_FIELDS = ("name", "uri", "title", "description", "mimeType", "size")


def _links(result: mcp_types.CallToolResult) -> list[dict[str, Any]]:
    out = []
    for block in result.content:
        if isinstance(block, mcp_types.ResourceLink):
            dumped = block.model_dump(mode="json", by_alias=True, exclude_none=True)
            link = {k: dumped[k] for k in _LINK_FIELDS if k in dumped}
            out.append({"type": "content", "content": {"type": "resource_link", **link}})
    return out


async def tool_result(result: mcp_types.CallToolResult, workspace_dir: str) -> ToolResult:
    """Map one result; blobs are written under ``workspace_dir`` off the event loop."""
    parts = _plan(result)
    if any(isinstance(p, _Media) for p in parts):
        texts, media = await asyncio.to_thread(_write, parts, workspace_dir)
    else:
        texts, media = [p for p in parts if isinstance(p, str)], []
    output = "\n\n".join(texts) or NO_OUTPUT
    if len(output) > MAX_OUTPUT_CHARS:
        output = output[:MAX_OUTPUT_CHARS] + f"\n… (truncated at {MAX_OUTPUT_CHARS} characters)"
    content = [{"type": "content", "content": {"type": "text", "text": output}},
               *media, *_links(result)]
    return ToolResult(output=output, ok=not result.is_error, content=content)
