"""The live sessions of one edge process: the runtime, each session and its turns, warm
pools, claims, stored history on the wire.
May import adapter, ports and the edge-wide modules; never the dialect or a front door.
"""
