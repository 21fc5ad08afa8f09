"""SPEC §4 blob materialization: markers, bytes, names, limits, all-or-nothing."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

import pytest

from services.common.jsonrpc import JsonRpcError
from services.common.protocol import MAX_BLOB_BYTES
from services.edge.adapter.blobs import materialize, parse_prompt


def _blob(data: bytes, uri: str, mime: str = "application/pdf") -> dict:
    return {"type": "resource",
            "resource": {"uri": uri, "mimeType": mime, "blob": base64.b64encode(data).decode()}}


def test_string_prompt_is_verbatim(tmp_path: Path) -> None:
    assert materialize(parse_prompt("  hi\nthere "), str(tmp_path)) == "  hi\nthere "


def test_parts_are_joined_in_order(tmp_path: Path) -> None:
    plan = parse_prompt([{"text": "a"}, {"type": "text", "text": "b"},
                         {"type": "resource", "resource": {"uri": "file:///x.rs", "text": "c"}},
                         {"type": "image", "data": "zz", "mimeType": "image/png"},
                         {"type": "resource_link", "uri": "file:///y", "name": "y"}])
    assert materialize(plan, str(tmp_path)) == "a\n\nb\n\nc"


def test_document_marker_and_file(tmp_path: Path) -> None:
    data = b"%PDF-1.4 hello"
    text = materialize(parse_prompt([{"text": "see"}, _blob(data, "file:///docs/Report.PDF")]),
                       str(tmp_path))
    digest = hashlib.sha256(data).hexdigest()
    path = Path(os.path.realpath(tmp_path)) / "uploads" / f"{digest}.pdf"
    assert text == f"see\n\n[Document: Report.PDF] {path}"
    assert path.read_bytes() == data


def test_image_marker_and_no_extension_default_name(tmp_path: Path) -> None:
    data = b"\x89PNG..."
    text = materialize(parse_prompt([_blob(data, "", "image/png")]), str(tmp_path))
    path = Path(os.path.realpath(tmp_path)) / "uploads" / hashlib.sha256(data).hexdigest()
    assert text == f"[IMAGE:{path}]"
    text = materialize(parse_prompt([_blob(data, "attachment://", "application/x")]), str(tmp_path))
    assert text.startswith("[Document: upload.bin] ")


def test_bad_extension_is_dropped(tmp_path: Path) -> None:
    data = b"x"
    materialize(parse_prompt([_blob(data, "file:///a.tar-gz")]), str(tmp_path))
    assert (tmp_path / "uploads" / hashlib.sha256(data).hexdigest()).exists()


def test_identical_content_reuses_file(tmp_path: Path) -> None:
    plan = parse_prompt([_blob(b"same", "file:///a.txt"), _blob(b"same", "file:///b.txt")])
    materialize(plan, str(tmp_path))
    assert len([p for p in (tmp_path / "uploads").iterdir()]) == 1


def test_invalid_base64_and_nothing_written(tmp_path: Path) -> None:
    parts = [_blob(b"ok", "file:///a.txt"),
             {"type": "resource", "resource": {"uri": "file:///b", "blob": "!!!not base64"}}]
    with pytest.raises(JsonRpcError) as err:
        parse_prompt(parts)
    assert err.value.code == -32602 and err.value.message.startswith("Invalid base64: ")
    assert not (tmp_path / "uploads").exists()


def test_size_boundary(tmp_path: Path) -> None:
    exact = bytes(MAX_BLOB_BYTES)
    plan = parse_prompt([_blob(exact, "file:///big.bin")])
    assert len(plan.blobs[0].data) == MAX_BLOB_BYTES
    with pytest.raises(JsonRpcError) as err:
        parse_prompt([_blob(exact + b"x", "file:///big.bin")])
    assert err.value.message == f"Embedded resource exceeds 10 MB limit ({MAX_BLOB_BYTES + 1} bytes)"


def test_symlinked_uploads_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "uploads").symlink_to(elsewhere)
    with pytest.raises(JsonRpcError) as err:
        materialize(parse_prompt([_blob(b"x", "file:///a.txt")]), str(ws))
    assert err.value.code == -32602 and "symlink" in err.value.message
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("prompt", [None, 5, {"text": "x"}])
def test_prompt_missing(prompt: object) -> None:
    with pytest.raises(JsonRpcError) as err:
        parse_prompt(prompt)
    assert err.value.message == "Missing required parameter: prompt (must be string or array of parts)"


@pytest.mark.parametrize(
    "prompt", [[], [{"type": "image"}], [{"text": ""}], [{"text": "  \n"}], "", "   "]
)
def test_prompt_empty(prompt: object) -> None:
    """§4 empty join → -32602, for a string prompt as for an array (audit finding 4)."""
    with pytest.raises(JsonRpcError) as err:
        parse_prompt(prompt)
    assert err.value.message == "Parameter 'prompt' array must contain at least one text part"
