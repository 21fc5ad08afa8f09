"""The RPCs of ``SessionService``, grouped by job; :mod:`services.session.api.servicer` joins them.

- :mod:`.base` — what every group shares: config, store, row lookup, history pages;
- :mod:`.agents` — store status, alias and restore resolution, workspaces, policy;
- :mod:`.rows` — creating, reading and changing session rows (trusted callers);
- :mod:`.history` — appending turns and streaming history (trusted callers);
- :mod:`.reads` — the visibility-filtered reads of SPEC §14.
"""
