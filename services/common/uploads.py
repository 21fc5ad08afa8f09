"""SPEC §4's blob rule, one implementation for every place bytes become a workspace file.

The edge applies it to the embedded resources of a ``session/prompt``; the
built-in agent to the blobs an MCP tool returns (embedded resources, images,
audio). Either way a blob is

- base64-decoded, refusing invalid base64 and more than 10 MiB (exactly
  10 MiB is fine) before anything is written;
- written to ``<real workspace>/uploads/<sha256 hex>[.<ext>]`` through a fresh
  temp file and a rename, reusing the file when identical content is already
  there, refusing a symlinked ``uploads/``;
- shown to the model as a marker, never as bytes: ``[IMAGE:<abs path>]`` for
  ``image/*``, else ``[Document: <filename>] <abs path>``.

Everything here blocks on the file system: callers on an event loop run the
writes via ``asyncio.to_thread``.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import os
import re
import tempfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from services.common.protocol import MAX_BLOB_BYTES, MSG_BLOB_TOO_LARGE, MSG_INVALID_BASE64

__all__ = [
    "DEFAULT_UPLOAD_NAME",
    "UPLOADS_DIR_NAME",
    "Blob",
    "BlobError",
    "decode_blob",
    "file_extension",
    "marker",
    "store_blob",
    "upload_name",
    "uploads_dir",
    "write_upload",
]

UPLOADS_DIR_NAME = "uploads"
DEFAULT_UPLOAD_NAME = "upload.bin"
_EXT_RE = re.compile(r"^[A-Za-z0-9]{1,16}$")


class BlobError(Exception):
    """A blob the rule refuses (bad base64, too large, unusable ``uploads/``).

    ``str(exc)`` is the sentence for the client or the model (the SPEC §4
    messages for the base64 and size cases).
    """


def file_extension(name: str) -> str:
    """The extension of a file name when it is 1–16 ASCII alphanumerics (lowercased), else "".

    A name without a stem (``.bashrc``) has no extension.
    """
    stem, dot, ext = name.rpartition(".")
    if dot and stem and _EXT_RE.match(ext):
        return ext.lower()
    return ""


def _last_segment(uri: str) -> str:
    try:
        path = urlparse(uri).path if "://" in uri or uri.startswith("file:") else uri
    except ValueError:
        path = uri
    return unquote(path.rstrip("/").rsplit("/", 1)[-1]) if path else ""


@dataclass(frozen=True)
class Blob:
    """Decoded bytes waiting to be written, with the ``mimeType`` and ``uri`` they came with."""

    data: bytes
    mime_type: str
    uri: str

    @cached_property
    def sha256(self) -> str:
        """Hex digest of the bytes: the stored file name."""
        return hashlib.sha256(self.data).hexdigest()

    @property
    def extension(self) -> str:
        """The uri's file extension (see :func:`file_extension`)."""
        return file_extension(_last_segment(self.uri))

    @property
    def filename(self) -> str:
        """Last uri segment, ``upload.bin`` if none."""
        return _last_segment(self.uri) or DEFAULT_UPLOAD_NAME

    @property
    def stored_name(self) -> str:
        """``<sha256>[.<ext>]``: the name under ``uploads/``."""
        return upload_name(self.sha256, self.extension)


def decode_blob(text: Any) -> bytes:
    """The bytes of a base64 ``blob`` string; :class:`BlobError` when invalid or over 10 MiB.

    The size is bounded from the text's length before decoding, so an
    oversized blob is refused without allocating its bytes.
    """
    if not isinstance(text, str):
        raise BlobError(MSG_INVALID_BASE64.format(detail="blob must be a string"))
    compact = "".join(text.split())
    estimate = len(compact) * 3 // 4 - compact[-2:].count("=")
    if estimate > MAX_BLOB_BYTES + 3:
        raise BlobError(MSG_BLOB_TOO_LARGE.format(n=estimate))
    try:
        data = base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise BlobError(MSG_INVALID_BASE64.format(detail=str(exc))) from None
    if len(data) > MAX_BLOB_BYTES:
        raise BlobError(MSG_BLOB_TOO_LARGE.format(n=len(data)))
    return data


def upload_name(digest: str, ext: str) -> str:
    """``<digest>.<ext>``, or the bare digest without an extension."""
    return digest + (f".{ext}" if ext else "")


def uploads_dir(workspace_dir: str | Path) -> Path:
    """``<real workspace>/uploads``, created if missing; :class:`BlobError` if it is a symlink.

    ``OSError`` (e.g. a read-only workspace) passes through for the caller to word.
    """
    uploads = Path(os.path.realpath(workspace_dir)) / UPLOADS_DIR_NAME
    if uploads.is_symlink():
        raise BlobError(f"Refusing to write uploads: {uploads} is a symlink")
    uploads.mkdir(parents=True, exist_ok=True)
    if uploads.is_symlink() or not uploads.is_dir():
        raise BlobError(f"Refusing to write uploads: {uploads} is not a directory")
    return uploads


def write_upload(uploads: Path, name: str, data: bytes) -> Path:
    """Write ``uploads/<name>`` via a fresh O_EXCL temp file + rename; reuse an existing file.

    Names are content addresses, so an existing regular file already holds these bytes.
    """
    target = uploads / name
    if target.is_file() and not target.is_symlink():
        return target
    fd, tmp = tempfile.mkstemp(dir=uploads, prefix=".upload-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return target


def store_blob(workspace_dir: str | Path, blob: Blob) -> Path:
    """Write one blob under the workspace's ``uploads/``; its absolute path."""
    return write_upload(uploads_dir(workspace_dir), blob.stored_name, blob.data)


def marker(blob: Blob, path: Path) -> str:
    """The text the model sees instead of the bytes."""
    if blob.mime_type.startswith("image/"):
        return f"[IMAGE:{path}]"
    return f"[Document: {blob.filename}] {path}"
