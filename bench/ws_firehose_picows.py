"""The firehose served over a bare ``picows`` server: the ceiling of the other library.

``python -m bench.ws_firehose_picows PORT`` answers exactly what
``bench.ws_firehose`` answers (same prompts, same frames, one text frame per
update, no compression) on ``ws://127.0.0.1:PORT/``, with picows
(measure a fast WebSocket server against ``websockets`` before switching the
gateway). picows calls back per frame and sends synchronously into the
asyncio transport, so the stream pauses while the transport is over its high
water mark (``pause_writing`` / ``resume_writing``), as a relay must.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from picows import WSFrame, WSListener, WSMsgType, WSTransport, WSUpgradeRequest, ws_create_server

from bench.firehose_agent import _SUFFIX, _chunk_prefix, _prompt_text
from bench.ws_firehose import _plan, request_of


class _Firehose(WSListener):  # type: ignore[misc]
    """One connection: the firehose agent's answers, one text frame per update."""

    def __init__(self) -> None:
        self.transport: WSTransport | None = None
        self.sessions = 0
        self.writable = asyncio.Event()
        self.writable.set()
        self.tasks: set[asyncio.Task[None]] = set()

    def on_ws_connected(self, transport: WSTransport) -> None:
        self.transport = transport

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def _reply(self, msg_id: Any, result: Any) -> None:
        assert self.transport is not None
        self.transport.send(WSMsgType.TEXT, json.dumps(
            {"jsonrpc": "2.0", "id": msg_id, "result": result}).encode())

    async def _stream(self, msg_id: Any, params: dict[str, Any]) -> None:
        assert self.transport is not None
        count, pace = _plan(_prompt_text(params))
        prefix = _chunk_prefix(str(params.get("sessionId", "")))
        for seq in range(count):
            if pace > 0 and seq:
                await asyncio.sleep(pace)
            if not self.writable.is_set():
                await self.writable.wait()
            self.transport.send(WSMsgType.TEXT, prefix + f"{seq}:{time.monotonic_ns()} ".encode()
                                + _SUFFIX[:-1])
        self._reply(msg_id, {"stopReason": "end_turn"})

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        if frame.msg_type == WSMsgType.CLOSE:
            transport.send_close(frame.get_close_code(), frame.get_close_message())
            transport.disconnect()
            return
        if frame.msg_type != WSMsgType.TEXT:
            return
        request = request_of(frame.get_payload_as_utf8_text())
        if request is None:
            return
        msg_id, method, params = request
        if method == "initialize":
            self._reply(msg_id, {"protocolVersion": 1, "agentCapabilities": {},
                                    "authMethods": []})
        elif method == "session/new":
            self.sessions += 1
            self._reply(msg_id, {"sessionId": f"ws-{self.sessions}"})
        elif method == "session/prompt":
            task = asyncio.get_running_loop().create_task(self._stream(msg_id, params))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        else:
            transport.send(WSMsgType.TEXT, json.dumps({"jsonrpc": "2.0", "id": msg_id, "error": {
                "code": -32601, "message": f"Method not found: {method}"}}).encode())


async def _main(port: int) -> None:
    def listener(_request: WSUpgradeRequest) -> _Firehose:
        return _Firehose()

    server = await ws_create_server(listener, "127.0.0.1", port, max_frame_size=64 * 1024 * 1024)
    await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(_main(int(sys.argv[1])))
