"""A firehose ACP agent for the benchmarks: standard library only, stdio JSON lines.

Configured as a ``kind = "acp"`` agent (``python bench/firehose_agent.py``) and
also spawned directly by the baseline client, so both paths read the very same
process. It answers ``initialize``, ``session/new`` and ``session/prompt``;
everything else that expects an answer gets -32601. It advertises neither
``loadSession`` nor ``resume``, so acpgate restores it with a fresh
``session/new`` (and replays the stored history itself).

The prompt text chooses the stream:

- ``firehose N``: N ``agent_message_chunk`` updates as fast as the pipe takes them;
- ``pace N MS``: N updates, one every MS milliseconds (latency: queues stay empty);
- anything else: one chunk.

Every chunk's text is ``"<seq>:<monotonic ns> "``, written just before the
line goes out, so a reader computes relay latency from ``time.monotonic_ns()``
(CLOCK_MONOTONIC is system-wide on Linux). Each line is flushed on its own,
as an adapter that streams updates one by one does.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def _write(out: Any, message: dict[str, Any]) -> None:
    out.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
    out.flush()


def _chunk_prefix(session_id: str) -> bytes:
    """Everything of a chunk line before its text (the text is appended per chunk)."""
    head = json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {
        "sessionId": session_id, "update": {"sessionUpdate": "agent_message_chunk",
                                            "content": {"type": "text", "text": "@"}}}},
                      separators=(",", ":"))
    return head[: head.index('"@"') + 1].encode()


_SUFFIX = b'"}}}}\n'


def _stream(out: Any, session_id: str, count: int, pace_secs: float) -> None:
    prefix = _chunk_prefix(session_id)
    for seq in range(count):
        if pace_secs > 0 and seq:
            time.sleep(pace_secs)
        out.write(prefix + f"{seq}:{time.monotonic_ns()} ".encode() + _SUFFIX)
        out.flush()


def _prompt_text(params: dict[str, Any]) -> str:
    blocks = params.get("prompt")
    if isinstance(blocks, str):
        return blocks
    if isinstance(blocks, list):
        return " ".join(b.get("text", "") for b in blocks if isinstance(b, dict))
    return ""


def _run_prompt(out: Any, params: dict[str, Any]) -> None:
    session_id = str(params.get("sessionId", ""))
    words = _prompt_text(params).split()
    try:
        if len(words) >= 2 and words[0] == "firehose":
            _stream(out, session_id, int(words[1]), 0.0)
        elif len(words) >= 3 and words[0] == "pace":
            _stream(out, session_id, int(words[1]), float(words[2]) / 1000.0)
        else:
            _stream(out, session_id, 1, 0.0)
    except ValueError:
        _stream(out, session_id, 1, 0.0)


def main() -> int:
    """Serve ACP on stdin/stdout until EOF."""
    out = sys.stdout.buffer
    sessions = 0
    for raw in sys.stdin.buffer:
        try:
            msg = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(msg, dict) or "method" not in msg:
            continue  # a response to nothing we asked, or junk
        method, msg_id = msg["method"], msg.get("id")
        raw_params = msg.get("params")
        params: dict[str, Any] = raw_params if isinstance(raw_params, dict) else {}
        if msg_id is None:
            continue  # notifications (session/cancel): the streams are short
        if method == "initialize":
            result: Any = {"protocolVersion": 1, "agentCapabilities": {"loadSession": False},
                           "agentInfo": {"name": "firehose", "version": "1"}, "authMethods": []}
        elif method == "session/new":
            sessions += 1
            result = {"sessionId": f"fh-{os.getpid()}-{sessions}"}
        elif method == "session/prompt":
            _run_prompt(out, params)
            result = {"stopReason": "end_turn"}
        else:
            _write(out, {"jsonrpc": "2.0", "id": msg_id,
                         "error": {"code": -32601, "message": f"Method not found: {method}"}})
            continue
        _write(out, {"jsonrpc": "2.0", "id": msg_id, "result": result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
