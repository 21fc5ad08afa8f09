"""The edge as the ACP client of one adapter.

Its link (the lifecycle's Attach stream or the adapter's own pipes), requests,
capabilities, errors and relayed lines.
May import ports and the edge-wide modules only.
"""
