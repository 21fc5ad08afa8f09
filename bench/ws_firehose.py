"""The firehose adapter served straight over WebSocket: the gateway path's transport ceiling.

``python -m bench.ws_firehose PORT`` serves the firehose agent's answers
(``initialize``, ``session/new``, ``session/prompt`` with ``firehose N``) on
``ws://127.0.0.1:PORT/`` with the ``websockets`` server settings the gateway
uses by default (no permessage-deflate: ``[gateway] compression = false``), one
text frame per update. No edge, no gRPC, no lifecycle: whatever this reaches
is the most any Python WebSocket relay of one-update-per-frame can reach here.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from websockets.asyncio.server import ServerConnection, serve

from bench.firehose_agent import _SUFFIX, _chunk_prefix, _prompt_text


def _plan(text: str) -> tuple[int, float]:
    """(updates, seconds between them) of a prompt, as the stdio firehose reads it."""
    words = text.split()
    try:
        if len(words) >= 2 and words[0] == "firehose":
            return int(words[1]), 0.0
        if len(words) >= 3 and words[0] == "pace":
            return int(words[1]), float(words[2]) / 1000.0
    except ValueError:
        pass
    return 1, 0.0


def request_of(frame: str | bytes) -> tuple[Any, str, dict[str, Any]] | None:
    """(id, method, params) of a JSON-RPC request frame; None for anything else."""
    try:
        msg = json.loads(frame)
    except ValueError:
        return None
    if not isinstance(msg, dict) or "id" not in msg or "method" not in msg:
        return None
    params = msg.get("params")
    return msg["id"], str(msg["method"]), params if isinstance(params, dict) else {}


async def _handle(ws: ServerConnection) -> None:
    sessions = 0
    async for frame in ws:
        request = request_of(frame)
        if request is None:
            continue
        msg_id, method, params = request
        result: Any
        if method == "initialize":
            result = {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}
        elif method == "session/new":
            sessions += 1
            result = {"sessionId": f"ws-{sessions}"}
        elif method == "session/prompt":
            count, pace = _plan(_prompt_text(params))
            prefix = _chunk_prefix(str(params.get("sessionId", "")))
            for seq in range(count):
                if pace > 0 and seq:
                    await asyncio.sleep(pace)
                await ws.send((prefix + f"{seq}:{time.monotonic_ns()} ".encode()
                               + _SUFFIX[:-1]).decode())
            result = {"stopReason": "end_turn"}
        else:
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": msg_id, "error": {
                "code": -32601, "message": f"Method not found: {method}"}}))
            continue
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": msg_id, "result": result}))


async def _main(port: int) -> None:
    async with serve(_handle, "127.0.0.1", port, max_size=None, ping_interval=None,
                     compression=None) as server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(_main(int(sys.argv[1])))
