"""What a client connects to: the stdio and gateway front doors (WebSocket, the ACP
remote transport), their auth, bounds and plain-HTTP endpoints, and ``acpgate bridge``.
May import every edge part below it (dialect, sessions, adapter, ports, the edge-wide modules).
"""
