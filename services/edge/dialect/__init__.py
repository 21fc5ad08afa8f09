"""What the ACP dialect decides: a JSON-RPC peer per client connection, a handler per method.

The handlers follow SPEC §1–§8; the session tools' extension methods are here too.
May import sessions, adapter, ports and the edge-wide modules; never a front door.
"""
