"""The edge as the ACP client of one adapter: its link (the lifecycle's Attach stream or the
adapter's own pipes), requests, capabilities, errors and relayed lines.
May import ports and the edge-wide modules only.
"""
