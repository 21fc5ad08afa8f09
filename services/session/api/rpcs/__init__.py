"""The RPCs of ``SessionService`` in groups by job, which :mod:`..servicer` joins into one class.

- :mod:`.base` — what every group shares: config, store, row lookup, history pages;
- :mod:`.agents` — store status, alias and restore resolution, workspaces, policy;
- :mod:`.rows` — creating, reading and changing session rows (trusted callers);
- :mod:`.history` — appending turns and streaming history (trusted callers);
- :mod:`.events` — appending event-log batches and replaying them (trusted callers);
- :mod:`.reads` — the visibility-filtered reads of SPEC §14;
- :mod:`.fork` — ``ForkSession``; :mod:`.a2a` — spawning and sending to other sessions;
- :mod:`.operations` — deciding an external adapter's client-method requests;
- :mod:`.activity` — the edges' activity reports; :mod:`.workers` — edge workers' limits;
- :mod:`.unavailable` — a shared database out of reach answers UNAVAILABLE from any RPC.
"""
