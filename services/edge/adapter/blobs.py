"""session/prompt content: text joining and blob materialization (SPEC §4).

:func:`parse_prompt` validates every part first (nothing is written yet) and
returns a :class:`PromptPlan`; :func:`materialize` then writes the blobs into
``<workspace>/uploads/`` and returns the joined prompt text with markers. Base64
never reaches the agent. The blob rule itself (decoding, limit, names, markers)
is :mod:`services.common.uploads`, shared with the built-in agent's MCP results.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.common.jsonrpc import JsonRpcError
from services.common.protocol import INVALID_PARAMS, MSG_PROMPT_EMPTY, MSG_PROMPT_MISSING
from services.common.uploads import (
    Blob,
    BlobError,
    decode_blob,
    marker,
    uploads_dir,
    write_upload,
)


@dataclass
class PromptPlan:
    """The validated prompt: text parts and blobs, in order."""

    #: Each entry is either a text string or a :class:`Blob` placeholder.
    parts: list[str | Blob] = field(default_factory=list)

    @property
    def blobs(self) -> list[Blob]:
        """The embedded blobs, in order."""
        return [p for p in self.parts if isinstance(p, Blob)]


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
            try:
                data = decode_blob(resource["blob"])
            except BlobError as exc:
                raise JsonRpcError(INVALID_PARAMS, str(exc)) from None
            mime = resource.get("mimeType")
            uri = resource.get("uri")
            plan.parts.append(Blob(data, mime if isinstance(mime, str) else "",
                                   uri if isinstance(uri, str) else ""))
        elif isinstance(resource.get("text"), str):
            plan.parts.append(resource["text"])
    if not plan.blobs and not any(isinstance(p, str) and p.strip() for p in plan.parts):
        raise JsonRpcError(INVALID_PARAMS, MSG_PROMPT_EMPTY)
    return plan


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
                uploads = uploads_dir(workspace_dir)
            except BlobError as exc:
                raise JsonRpcError(INVALID_PARAMS, str(exc)) from None
            except OSError as exc:
                raise JsonRpcError(INVALID_PARAMS,
                                   f"Cannot create uploads directory: {exc.strerror}") from None
        try:
            path = write_upload(uploads, part.stored_name, part.data)
        except OSError as exc:
            raise JsonRpcError(INVALID_PARAMS,
                               f"Cannot write embedded resource: {exc.strerror}") from None
        out.append(marker(part, path))
    return "\n\n".join(out)
