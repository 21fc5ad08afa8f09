"""What the ACP dialect decides: one JSON-RPC peer per client connection and a handler per
method (SPEC §1–§8), the session tools' extension methods.
May import sessions, adapter, ports and the edge-wide modules; never a front door.
"""
