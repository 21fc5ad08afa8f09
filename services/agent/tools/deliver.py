"""deliver_file: hand a workspace file to the client as an embedded resource (SPEC §10).

The tool verifies the path and size, hashes the bytes and stores a
content-addressed copy in ``<workspace>/uploads/``. Right before the
``tool_call_update`` is built, :meth:`finalize` re-reads and re-hashes the
file: if it changed since (a swap), cannot be read, or grew too large, no blob
is embedded and the call fails.

Two views of one delivery, as the seed keeps them: the client's
``rawOutput``/``body`` is a short human summary with no machine trailer (the
``uri`` travels in the embedded resource), and the model gets the structured
result — a JSON object whose field ``uri`` it copies into citations.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import mimetypes
import os
import unicodedata
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
#: Longest display label (title, file name) the summary and the update carry.
MAX_LABEL_CHARS = 200
#: Longest caller ``mimeType`` taken as given (RFC 6838 names are at most 127 + 1 + 127).
MAX_MIME_CHARS = 255


def display_label(text: str) -> str:
    """``text`` fit for one line of a chat: control and format characters (newlines, bidi
    overrides) become spaces, runs of spaces one, at most :data:`MAX_LABEL_CHARS`."""
    cleaned = "".join(" " if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") else ch
                      for ch in text)
    return " ".join(cleaned.split())[:MAX_LABEL_CHARS]


def caller_mime(value: Any) -> str | None:
    """A caller's ``mimeType`` when it is one plain ``type/subtype[; params]`` line, else None
    (then the type is guessed from the file name): it is copied into the resource as is."""
    if not isinstance(value, str) or not value or len(value) > MAX_MIME_CHARS:
        return None
    if "/" not in value or any(unicodedata.category(ch)[0] == "C" for ch in value):
        return None
    return value


def model_result(*, uri: str, path: Path, filename: str, title: str, mime: str,
                 size: int) -> str:
    """The tool result the model sees: the delivery as a JSON object (``uri`` a field)."""
    return json.dumps({"delivered": True, "uri": uri, "path": str(path), "filename": filename,
                       "title": title, "mimeType": mime, "bytes": size}, ensure_ascii=False)


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
    """Delivers a file to the client; the model gets the delivery as JSON, never the bytes."""

    name = "deliver_file"
    kind = "other"
    mutating = False
    interactive = False
    description = ("Deliver a file from the workspace to the user (download/preview). "
                   "Args: `path`, optional `mimeType`, optional `title` (display label). "
                   "The result is JSON; its `uri` (attachment://deliver/<content hash>) is the "
                   "file's id: cite that exact uri, never make one up.")
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
        copy = await asyncio.to_thread(store_upload, workspace, digest, ext, data)
        mime = caller_mime(args.get("mimeType")) \
            or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        filename = display_label(path.name) or "file"
        title = args.get("title")
        label = (display_label(title) if isinstance(title, str) else "") or filename
        uri = URI_PREFIX + upload_name(digest, ext)
        # The human summary names no uri: that is a field of the model's JSON and of the
        # embedded resource, never a trailer in text (the seed).
        summary = f"Delivered {filename} ({len(data)} bytes, {mime})"
        model_output = model_result(uri=uri, path=copy, filename=filename, title=label,
                                    mime=mime, size=len(data))

        async def finalize() -> ToolResult:
            try:
                again = await resolve_read(ctx.policy, raw_path)
                fresh, fresh_digest = await asyncio.to_thread(read_hashed, again)
            except (ToolError, PolicyViolation, OSError) as exc:
                return ToolResult(output=f"Delivery of {filename} failed: {exc}", ok=False,
                                  title=label)
            if fresh_digest != digest:
                return ToolResult(
                    output=(f"Delivery of {filename} failed: the file changed after it was "
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
            return ToolResult(output=summary, title=label, content=content,
                              model_output=model_output)

        return ToolResult(output=summary, title=label, finalize=finalize,
                          model_output=model_output)
