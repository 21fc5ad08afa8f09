"""The built-in agent's JSON-RPC connection: the common peer on a byte-line writer (SPEC §1).

Everything JSON-RPC — classification of what the client sends, answers,
the agent's own requests (``session/request_permission``, ``elicitation/create``)
with integer ids, and the matching of their answers — is
:class:`services.common.jsonrpc.JsonRpcPeer`'s, exactly as on the edge; this
module only fits it to the agent's transport, which writes encoded lines.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from services.common.jsonrpc import Handler, JsonRpcPeer, integer_ids

#: Writes one encoded line, newline included, to the client, in call order.
WriteLine = Callable[[bytes], Awaitable[None]]


def agent_peer(write_line: WriteLine, handler: Handler) -> JsonRpcPeer:
    """The agent's side of one connection: ``handler`` serves, answers go to ``write_line``.

    Feed it with ``await peer.serve(read_lines(reader))``; the agent's own
    requests carry ids 0, 1, 2, ….
    """

    async def send(line: str) -> None:
        await write_line(line.encode("utf-8", errors="surrogateescape") + b"\n")

    return JsonRpcPeer(send, handler, next_id=integer_ids(), label="client")
