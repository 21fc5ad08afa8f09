"""JSON-RPC 2.0 for every connection acpgate has (SPEC §1).

- :mod:`~services.common.jsonrpc.wire`: :func:`classify` (one raw line → one
  :class:`Frame`), :class:`JsonRpcError`, and the line encoders;
- :mod:`~services.common.jsonrpc.outbound`: our own requests — id schemes and
  the table of futures waiting for answers;
- :mod:`~services.common.jsonrpc.peer`: :class:`JsonRpcPeer`, one connection
  over an injected transport;
- :mod:`~services.common.jsonrpc.line_reader`: lines from a byte stream (stdin).

The edge (toward clients and toward adapters) and the built-in agent each
configure a :class:`JsonRpcPeer`; none of them parses or encodes a message
itself.
"""

from services.common.jsonrpc.line_reader import (
    MAX_LINE_BYTES,
    READ_CHUNK_BYTES,
    ChunkReader,
    read_lines,
)
from services.common.jsonrpc.outbound import (
    IdSource,
    PeerClosed,
    PendingRequests,
    integer_ids,
    prefixed_ids,
)
from services.common.jsonrpc.peer import (
    Handler,
    JsonRpcPeer,
    Notes,
    NotificationSink,
    Send,
    serving_id,
)
from services.common.jsonrpc.wire import (
    OVERSIZE_LINE,
    Answered,
    Frame,
    FrameKind,
    JsonRpcError,
    JsonRpcId,
    OversizeLine,
    classify,
    classify_message,
    dumps,
    error_line,
    notification_line,
    notification_lines,
    request_line,
    result_line,
)

__all__ = [
    "MAX_LINE_BYTES",
    "OVERSIZE_LINE",
    "READ_CHUNK_BYTES",
    "Answered",
    "ChunkReader",
    "Frame",
    "FrameKind",
    "Handler",
    "IdSource",
    "JsonRpcError",
    "JsonRpcId",
    "JsonRpcPeer",
    "Notes",
    "NotificationSink",
    "OversizeLine",
    "PeerClosed",
    "PendingRequests",
    "Send",
    "classify",
    "classify_message",
    "dumps",
    "error_line",
    "integer_ids",
    "notification_line",
    "notification_lines",
    "prefixed_ids",
    "read_lines",
    "request_line",
    "result_line",
    "serving_id",
]
