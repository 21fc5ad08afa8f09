"""The edge's tests: dialect, relay, transports, sessions and the adapter link."""
