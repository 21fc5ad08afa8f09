"""The edge: the only component that speaks ACP (stdio and WebSocket front doors, dialect, relay, bridge)."""
