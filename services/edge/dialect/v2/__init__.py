"""The v2 dialect: what a client that picked ACP v2 in ``initialize`` is served.

The session machinery is v1's, whatever the agent speaks; this package is the v2
surface over it. :mod:`.methods` is its method table (which v1 handler serves a v2
method, which v1 methods a v2 client does not get); :mod:`.setup` the session setup
methods (``session/new``, ``session/resume`` with ``replayFrom``, config options with
the modes among them); :mod:`.prompt` the prompt lifecycle (the prompt acknowledged with
its ``messageId``, the turn reported with ``state_update`` s, ``idempotencyKey``). The
translation itself is pure and lives in :mod:`services.common.acp.v2`.
"""
