"""An agent's ``fs/read_text_file`` served by acpgate itself (the client offers no ``fs``)
reads only a regular file, and never past the size limit.

The agent runs in the workspace it asks about, so it can put there what it likes: a FIFO
(opening or reading one blocks the reading thread for good — enough of them take every
thread of the edge's pool), a link swapped in after the session service resolved the path,
a directory. Each gets a clear error at once.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from services.common.jsonrpc import JsonRpcError
from services.common.protocol import INVALID_PARAMS
from services.edge.adapter.client_methods import read_text

#: Only a guard against a hang (the thread of a blocked read is left behind), not a timing.
HANG_GUARD_SECS = 20.0


async def _read(path: Path) -> JsonRpcError:
    task = asyncio.to_thread(read_text, str(path), None, None)
    with pytest.raises(JsonRpcError) as caught:
        await asyncio.wait_for(task, HANG_GUARD_SECS)
    return caught.value


async def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "notes.txt"
    os.mkfifo(fifo)
    err = await _read(fifo)
    assert err.code == INVALID_PARAMS and "Not a file" in err.message


async def test_a_link_swapped_in_is_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "elsewhere"
    secret.write_text("not for the agent")
    link = tmp_path / "notes.txt"
    link.symlink_to(secret)
    err = await _read(link)
    assert "not for the agent" not in err.message


async def test_a_directory_is_not_a_file(tmp_path: Path) -> None:
    err = await _read(tmp_path)
    assert err.code == INVALID_PARAMS and "Not a file" in err.message


async def test_a_regular_file_reads_as_before(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_bytes(b"one\r\ntwo\nthree\n")
    assert read_text(str(text), None, None) == "one\ntwo\nthree\n"
    assert read_text(str(text), 2, 1) == "two\n"
