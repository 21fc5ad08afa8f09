"""20,000 hostile frames on stdio: each answered exactly once, memory bounded.

A real ``acpgate acp`` gets 20,000 frames an attacker would send — unknown
methods with long names, requests for sessions that do not exist, wrong
versions, batches, garbage, invalid UTF-8, NUL bytes, deep nesting, stray
responses, notifications — while the client does not read stdout. The edge
must stop reading stdin once its output backlog is over the bound (else every
answer piles up in memory); once the client reads again, every request with an
id is answered exactly once, nothing else is answered but the parse errors,
and the process exits 0 on EOF.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import ACPGATE, child_env, write_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

FRAMES = 20_000
#: No stdin progress for this long, while stdout is not read, counts as "stopped reading".
STALL_SECS = 3.0


def hostile_frames() -> tuple[list[bytes], Counter[Any], int]:
    """(frames, how often each id must be answered, parse errors expected)."""
    frames: list[bytes] = []
    answered: Counter[Any] = Counter()
    parse_errors = 0
    long_name = "x" * 300
    for i in range(FRAMES):
        kind = i % 10
        if kind in (0, 1, 2, 3):  # unknown methods with long names: big answers, no I/O
            frames.append(json.dumps({"jsonrpc": "2.0", "id": i,
                                      "method": f"{long_name}/{i}"}).encode())
            answered[i] += 1
        elif kind == 4:  # a session that does not exist
            frames.append(json.dumps({"jsonrpc": "2.0", "id": f"s{i}", "method": "session/prompt",
                                      "params": {"sessionId": f"nope-{i}", "prompt": "hi"}})
                          .encode())
            answered[f"s{i}"] += 1
        elif kind == 5:  # wrong version, with an id and (every other time) without
            if i % 20 == 5:
                frames.append(json.dumps({"jsonrpc": "1.0", "method": "initialize"}).encode())
            else:
                frames.append(json.dumps({"jsonrpc": "1.0", "id": i,
                                          "method": "initialize"}).encode())
                answered[i] += 1
        elif kind == 6:  # garbage: not JSON, invalid UTF-8, a NUL, a batch, deep nesting
            frames.append([b"{not json", b"\xff\xfe\xfd", b'{"id":1\x00}', b"[{}, {}]",
                           b"[" * 5000 + b"]" * 5000][i // 10 % 5])
            parse_errors += 1
        elif kind == 7:  # notifications: never answered
            frames.append(json.dumps({"jsonrpc": "2.0", "method": "session/cancel",
                                      "params": {"sessionId": f"n{i}"}}).encode())
        elif kind == 8:  # a stray response to an outbound request we never made: dropped
            frames.append(json.dumps({"jsonrpc": "2.0", "id": f"zc-out-{i}",
                                      "result": {"x": i}}).encode())
        else:  # a real method with hostile params
            frames.append(json.dumps({"jsonrpc": "2.0", "id": i, "method": "session/load",
                                      "params": {"sessionId": {"$gt": ""}}}).encode())
            answered[i] += 1
    return frames, answered, parse_errors


class Writer(threading.Thread):
    """Writes the frames to the child's stdin (blocking), counting what went in."""

    def __init__(self, proc: subprocess.Popen[bytes], frames: list[bytes]) -> None:
        super().__init__(daemon=True)
        self.proc = proc
        self.frames = frames
        self.written = 0

    def run(self) -> None:
        assert self.proc.stdin is not None
        fd = self.proc.stdin.fileno()
        for frame in self.frames:
            data = memoryview(frame + b"\n")
            while data:
                data = data[os.write(fd, data):]
            self.written += 1
        self.proc.stdin.close()


def wait_for_stall(writer: Writer) -> int:
    """How many frames went in before stdin stopped moving (or all of them)."""
    last, since = -1, time.monotonic()
    while writer.is_alive():
        if writer.written != last:
            last, since = writer.written, time.monotonic()
        elif time.monotonic() - since > STALL_SECS:
            return writer.written
        time.sleep(0.05)
    return writer.written


def test_hostile_frames_answered_once_with_a_stuck_stdout(tmp_path: Path) -> None:
    frames, answered, parse_errors = hostile_frames()
    cfg = write_config(tmp_path / "cfg")
    proc = subprocess.Popen([*ACPGATE, "acp", "--config-dir", str(cfg)], env=child_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    try:
        writer = Writer(proc, frames)
        writer.start()
        # stdout is not read: the edge must stop taking stdin instead of holding every answer.
        taken = wait_for_stall(writer)
        assert taken < len(frames), "acpgate acp read all of stdin while stdout was stuck"
        assert proc.stdout is not None
        out = proc.stdout.read()  # now read: everything flows, then EOF
        writer.join(60)
        assert writer.written == len(frames)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    got: Counter[Any] = Counter()
    nulls = 0
    for line in out.decode().splitlines():
        msg = json.loads(line)
        assert msg["jsonrpc"] == "2.0" and "method" not in msg, msg
        assert ("result" in msg) != ("error" in msg), msg
        if msg["id"] is None:
            nulls += 1
            assert msg["error"]["code"] == -32700, msg
        else:
            got[msg["id"]] += 1
    assert got == answered  # every request with an id exactly once, nothing else
    assert nulls == parse_errors
