"""MCP tool results → model text and ACP tool-call content (SPEC §4 for blobs).

Pure mapping tests on SDK result objects; every client block is checked against
the official ACP schema's ToolCallContent.
"""

from __future__ import annotations

import base64
from pathlib import Path

import mcp_types as mt
from acp import schema
from pydantic import TypeAdapter

from services.agent.mcp.results import MAX_OUTPUT_CHARS, NO_OUTPUT, tool_result
from tests.agent.mcp_fixtures import uploaded

CONTENT = TypeAdapter(schema.ContentToolCallContent)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_every_kind_of_block_in_order(tmp_path: Path) -> None:
    result = mt.CallToolResult(content=[
        mt.TextContent(text="first"),
        mt.EmbeddedResource(resource=mt.TextResourceContents(uri="file:///a.md", text="# A")),
        mt.AudioContent(data=b64(b"RIFF"), mime_type="audio/mpeg"),
        mt.ResourceLink(name="spec", uri="https://x/spec.pdf", mime_type="application/pdf"),
    ])
    mapped = await tool_result(result, str(tmp_path))
    audio = uploaded(tmp_path, b"RIFF", "mp3")
    assert audio.read_bytes() == b"RIFF"
    assert mapped.ok
    assert mapped.output == ("first\n\n# A\n\n"
                             f"[Document: audio.mp3] {audio}\n\n"
                             "[Resource link: spec] https://x/spec.pdf")
    assert mapped.content is not None
    kinds = [c["content"]["type"] for c in mapped.content]
    assert kinds == ["text", "audio", "resource_link"]
    for block in mapped.content:
        CONTENT.validate_python(block)


async def test_structured_content_only_is_its_json(tmp_path: Path) -> None:
    mapped = await tool_result(mt.CallToolResult(content=[], structured_content={"n": 1}),
                               str(tmp_path))
    assert mapped.output == '{"n":1}'


async def test_empty_result_says_so_and_errors_fail(tmp_path: Path) -> None:
    assert (await tool_result(mt.CallToolResult(content=[]), str(tmp_path))).output == NO_OUTPUT
    failed = await tool_result(mt.CallToolResult(content=[mt.TextContent(text="no")],
                                                 is_error=True), str(tmp_path))
    assert not failed.ok and failed.output == "no"


async def test_invalid_base64_is_a_sentence_not_a_crash(tmp_path: Path) -> None:
    mapped = await tool_result(mt.CallToolResult(content=[
        mt.ImageContent(data="@@not base64@@", mime_type="image/png")]), str(tmp_path))
    assert mapped.output.startswith("[Image (image/png) not saved: Invalid base64: ")
    assert not (tmp_path / "uploads").exists()


async def test_long_output_is_cut_with_a_marker(tmp_path: Path) -> None:
    mapped = await tool_result(mt.CallToolResult(content=[
        mt.TextContent(text="x" * (MAX_OUTPUT_CHARS + 10))]), str(tmp_path))
    assert mapped.output.endswith(f"… (truncated at {MAX_OUTPUT_CHARS} characters)")
    assert len(mapped.output) < MAX_OUTPUT_CHARS + 100


async def test_images_and_blobs_are_acp_content_blocks(tmp_path: Path) -> None:
    blob = mt.BlobResourceContents(uri="file:///r/a.pdf", mime_type="application/pdf",
                                   blob=b64(b"%PDF"))
    mapped = await tool_result(mt.CallToolResult(content=[
        mt.ImageContent(data=b64(b"png"), mime_type="image/png"),
        mt.EmbeddedResource(resource=blob)]), str(tmp_path))
    assert mapped.content is not None
    for block in mapped.content:
        CONTENT.validate_python(block)
    assert [c["content"]["type"] for c in mapped.content] == ["text", "image", "resource"]
