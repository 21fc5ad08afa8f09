"""SPEC §4's blob rule in one place: the edge's prompts and the agent's MCP results share it."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

import pytest

from services.common.protocol import MAX_BLOB_BYTES
from services.common.uploads import (
    Blob,
    BlobError,
    decode_blob,
    file_extension,
    marker,
    store_blob,
)


@pytest.mark.parametrize(("name", "ext"), [
    ("Report.PDF", "pdf"), ("a.tar.gz", "gz"), ("a.tar-gz", ""), (".bashrc", ""),
    ("noext", ""), ("x." + "a" * 16, "a" * 16), ("x." + "a" * 17, ""), ("x.é", ""),
])
def test_extension_is_short_ascii_alphanumerics(name: str, ext: str) -> None:
    assert file_extension(name) == ext


def test_exactly_ten_mib_decodes_one_more_byte_is_refused() -> None:
    assert len(decode_blob(base64.b64encode(b"\0" * MAX_BLOB_BYTES).decode())) == MAX_BLOB_BYTES
    with pytest.raises(BlobError, match=r"exceeds 10 MB limit \(10485761 bytes\)"):
        decode_blob(base64.b64encode(b"\0" * (MAX_BLOB_BYTES + 1)).decode())


def test_invalid_base64_and_non_strings_are_refused() -> None:
    with pytest.raises(BlobError, match=r"^Invalid base64: "):
        decode_blob("@@@")
    with pytest.raises(BlobError, match="blob must be a string"):
        decode_blob(123)


def test_store_blob_is_content_addressed_and_marked(tmp_path: Path) -> None:
    blob = Blob(b"\x89PNG", "image/png", "https://x/shot.png")
    path = store_blob(tmp_path, blob)
    real = Path(os.path.realpath(tmp_path))
    digest = hashlib.sha256(blob.data).hexdigest()
    assert path == real / "uploads" / f"{digest}.png"
    assert path.read_bytes() == b"\x89PNG"
    assert store_blob(tmp_path, blob) == path  # identical content reuses the file
    assert marker(blob, path) == f"[IMAGE:{path}]"
    doc = Blob(b"x", "application/pdf", "")
    assert marker(doc, store_blob(tmp_path, doc)).startswith("[Document: upload.bin] ")


def test_symlinked_uploads_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "uploads").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(BlobError, match="is a symlink"):
        store_blob(tmp_path / "ws", Blob(b"x", "", "a.txt"))
    assert list((tmp_path / "elsewhere").iterdir()) == []
