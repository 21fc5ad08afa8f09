"""session/prompt content: text joining and blob materialization (SPEC §4).

:func:`parse_prompt` validates every part first (nothing is written yet) and
returns a :class:`PromptPlan`; :func:`materialize` then writes the blobs into
``<workspace>/uploads/`` and returns the joined prompt text with markers. Base64
never reaches the agent.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from services.common.protocol import (
    INVALID_PARAMS,
    MAX_BLOB_BYTES,
    MSG_BLOB_TOO_LARGE,
    MSG_INVALID_BASE64,
    MSG_PROMPT_EMPTY,
    MSG_PROMPT_MISSING,
)
from services.edge.framing import JsonRpcError

_EXT_RE = re.compile(r"^[A-Za-z0-9]{1,16}$")
DEFAULT_UPLOAD_NAME = "upload.bin"


@dataclass(frozen=True)
class Blob:
    """One decoded embedded resource waiting to be written."""

    data: bytes
    mime_type: str
    uri: str

    @property
    def sha256(self) -> str:
        """Hex digest of the bytes: the stored file name."""
        return hashlib.sha256(self.data).hexdigest()

    @property
    def extension(self) -> str:
        """The uri's file extension when it is 1–16 ASCII alphanumerics (lowercased)."""
        name = _last_segment(self.uri)
        if "." not in name:
            return ""
        ext = name.rsplit(".", 1)[1]
        return ext.lower() if _EXT_RE.match(ext) else ""

    @property
    def filename(self) -> str:
        """Last uri segment, ``upload.bin`` if none."""
        return _last_segment(self.uri) or DEFAULT_UPLOAD_NAME


@dataclass
class PromptPlan:
    """The validated prompt: text parts and blobs, in order."""

    #: Each entry is either a text string or a :class:`Blob` placeholder.
    parts: list[str | Blob] = field(default_factory=list)

    @property
    def blobs(self) -> list[Blob]:
        """The embedded blobs, in order."""
        return [p for p in self.parts if isinstance(p, Blob)]


def _last_segment(uri: str) -> str:
    try:
        path = urlparse(uri).path if "://" in uri or uri.startswith("file:") else uri
    except ValueError:
        path = uri
    return unquote(path.rstrip("/").rsplit("/", 1)[-1]) if path else ""


def _decode_blob(text: Any) -> bytes:
    if not isinstance(text, str):
        raise JsonRpcError(INVALID_PARAMS, MSG_INVALID_BASE64.format(detail="blob must be a string"))
    # Upper bound before decoding: never allocate far beyond the limit.
    compact = "".join(text.split())
    estimate = len(compact) * 3 // 4 - compact[-2:].count("=")
    if estimate > MAX_BLOB_BYTES + 3:
        raise JsonRpcError(INVALID_PARAMS, MSG_BLOB_TOO_LARGE.format(n=estimate))
    try:
        return base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise JsonRpcError(INVALID_PARAMS, MSG_INVALID_BASE64.format(detail=str(exc))) from None


def parse_prompt(prompt: Any) -> PromptPlan:
    """Validate a ``prompt`` param without writing anything (SPEC §4)."""
    if isinstance(prompt, str):
        # Used verbatim, but held to the same "some text" rule as an array so a
        # blank prompt is a -32602 here rather than an adapter failure later.
        if not prompt.strip():
            raise JsonRpcError(INVALID_PARAMS, MSG_PROMPT_EMPTY)
        return PromptPlan([prompt])
    if not isinstance(prompt, list):
        raise JsonRpcError(INVALID_PARAMS, MSG_PROMPT_MISSING)
    plan = PromptPlan()
    for part in prompt:
        if not isinstance(part, dict):
            continue
        ptype = part.get("type")
        if ptype in (None, "text"):
            text = part.get("text")
            if isinstance(text, str):
                plan.parts.append(text)
            continue
        if ptype != "resource":
            continue  # image/audio blocks, resource_link: ignored
        resource = part.get("resource")
        if not isinstance(resource, dict):
            continue
        if "blob" in resource:
            data = _decode_blob(resource["blob"])
            if len(data) > MAX_BLOB_BYTES:
                raise JsonRpcError(INVALID_PARAMS, MSG_BLOB_TOO_LARGE.format(n=len(data)))
            mime = resource.get("mimeType")
            uri = resource.get("uri")
            plan.parts.append(Blob(data, mime if isinstance(mime, str) else "",
                                   uri if isinstance(uri, str) else ""))
        elif isinstance(resource.get("text"), str):
            plan.parts.append(resource["text"])
    if not plan.blobs and not any(isinstance(p, str) and p.strip() for p in plan.parts):
        raise JsonRpcError(INVALID_PARAMS, MSG_PROMPT_EMPTY)
    return plan


def _uploads_dir(workspace_dir: str) -> Path:
    root = Path(os.path.realpath(workspace_dir))
    uploads = root / "uploads"
    if uploads.is_symlink():
        raise JsonRpcError(INVALID_PARAMS, f"Refusing to write uploads: {uploads} is a symlink")
    uploads.mkdir(parents=True, exist_ok=True)
    if uploads.is_symlink() or not uploads.is_dir():
        raise JsonRpcError(INVALID_PARAMS, f"Refusing to write uploads: {uploads} is not a directory")
    return uploads


def write_blob(uploads: Path, blob: Blob) -> Path:
    """Write ``blob`` content-addressed under ``uploads`` (temp file + rename); reuse if present."""
    name = blob.sha256 + (f".{blob.extension}" if blob.extension else "")
    target = uploads / name
    if target.is_file() and not target.is_symlink():
        return target
    fd, tmp = tempfile.mkstemp(dir=uploads, prefix=".upload-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob.data)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return target


def marker(blob: Blob, path: Path) -> str:
    """The text the agent sees instead of the bytes."""
    if blob.mime_type.startswith("image/"):
        return f"[IMAGE:{path}]"
    return f"[Document: {blob.filename}] {path}"


def materialize(plan: PromptPlan, workspace_dir: str) -> str:
    """Write the plan's blobs and return the joined prompt text (blocking; run off-loop)."""
    out: list[str] = []
    uploads: Path | None = None
    for part in plan.parts:
        if isinstance(part, str):
            out.append(part)
            continue
        if uploads is None:
            try:
                uploads = _uploads_dir(workspace_dir)
            except OSError as exc:
                raise JsonRpcError(INVALID_PARAMS,
                                   f"Cannot create uploads directory: {exc.strerror}") from None
        try:
            path = write_blob(uploads, part)
        except OSError as exc:
            raise JsonRpcError(INVALID_PARAMS,
                               f"Cannot write embedded resource: {exc.strerror}") from None
        out.append(marker(part, path))
    return "\n\n".join(out)
