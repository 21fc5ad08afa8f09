"""Message size limits shared by every gRPC server and channel of acpgate.

Apart from ``grpc_server`` so that the channel side (``grpc_channel``,
``grpc_auth``) can use them without importing the server machinery, which
itself builds on ``grpc_auth``.
"""

from __future__ import annotations

from typing import Any

#: Large enough for a 10 MiB blob plus framing; Attach batches stay far below.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024

#: The options of both ends: a message either end may send, the other may receive.
SERVER_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
]
