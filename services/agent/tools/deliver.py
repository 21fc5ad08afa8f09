"""deliver_file: hand a workspace file to the client as an embedded resource (SPEC §10).

The tool verifies the path and size, hashes the bytes and stores a
content-addressed copy in ``<workspace>/uploads/``. Right before the
``tool_call_update`` is built, :meth:`finalize` re-reads and re-hashes the
file: if it changed since (a swap), cannot be read, or grew too large, no blob
is embedded and the call fails.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import mimetypes
import os
from pathlib import Path
from typing import Any, ClassVar

from services.agent.enforce import PolicyViolation
from services.agent.tools.base import (
    ArgumentsPreview,
    ToolContext,
    ToolError,
    ToolResult,
    require_str,
)
from services.agent.tools.fs import resolve_read
from services.common.protocol import MAX_BLOB_BYTES
from services.common.uploads import (
    BlobError,
    file_extension,
    upload_name,
    uploads_dir,
    write_upload,
)

URI_PREFIX = "attachment://deliver/"


def read_limited(path: Path) -> bytes:
    """The file's bytes, refusing directories and files over the 10 MiB limit."""
    if not path.is_file():
        raise ToolError(f"not a regular file: {path}")
    size = path.stat().st_size
    if size > MAX_BLOB_BYTES:
        raise ToolError(f"file is too large to deliver ({size} bytes; limit {MAX_BLOB_BYTES})")
    data = path.read_bytes()
    if len(data) > MAX_BLOB_BYTES:
        raise ToolError(f"file is too large to deliver ({len(data)} bytes)")
    return data


def read_hashed(path: Path) -> tuple[bytes, str]:
    """:func:`read_limited` plus the SHA-256 hex digest (both up to 10 MiB of work: off-loop)."""
    data = read_limited(path)
    return data, hashlib.sha256(data).hexdigest()


def store_upload(workspace: Path, digest: str, ext: str, data: bytes) -> Path:
    """Write the content-addressed copy ``uploads/<sha256>[.<ext>]`` (SPEC §4's rule)."""
    try:
        return write_upload(uploads_dir(workspace), upload_name(digest, ext), data)
    except BlobError as exc:
        raise ToolError(str(exc)) from None


class DeliverFileTool(ArgumentsPreview):
    """Delivers a file to the client; the model gets a short summary, never the bytes."""

    name = "deliver_file"
    kind = "other"
    mutating = False
    interactive = False
    description = ("Deliver a file from the workspace to the user (download/preview). "
                   "Args: `path`, optional `mimeType`, optional `title` (display label).")
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "mimeType": {"type": "string"},
            "title": {"type": "string"},
        },
        "required": ["path"],
    }

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Verify, hash and store the file; embedding happens in ``finalize``."""
        raw_path = require_str(args, "path")
        path = await resolve_read(ctx.policy, raw_path)
        data, digest = await asyncio.to_thread(read_hashed, path)
        ext = file_extension(path.name)
        workspace = Path(await asyncio.to_thread(os.path.realpath, ctx.policy.workspace_dir))
        await asyncio.to_thread(store_upload, workspace, digest, ext, data)
        mime = args.get("mimeType")
        if not isinstance(mime, str) or not mime:
            mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        title = args.get("title")
        label = title if isinstance(title, str) and title.strip() else path.name
        uri = URI_PREFIX + upload_name(digest, ext)
        summary = f"Delivered {path.name} ({len(data)} bytes, {mime}) as {uri}"

        async def finalize() -> ToolResult:
            try:
                again = await resolve_read(ctx.policy, raw_path)
                fresh, fresh_digest = await asyncio.to_thread(read_hashed, again)
            except (ToolError, PolicyViolation, OSError) as exc:
                return ToolResult(output=f"Delivery of {path.name} failed: {exc}", ok=False,
                                  title=label)
            if fresh_digest != digest:
                return ToolResult(
                    output=(f"Delivery of {path.name} failed: the file changed after it was "
                            "checked; nothing was attached."),
                    ok=False, title=label,
                )
            blob = base64.b64encode(fresh).decode("ascii")
            content = [
                {"type": "content", "content": {"type": "text", "text": summary}},
                {"type": "content",
                 "content": {"type": "resource",
                             "resource": {"uri": uri, "mimeType": mime, "blob": blob}}},
            ]
            return ToolResult(output=summary, title=label, content=content)

        return ToolResult(output=summary, title=label, finalize=finalize)
