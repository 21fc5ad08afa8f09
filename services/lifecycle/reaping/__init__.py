"""Ending a lease's process tree: one close, the batched pass at start, dead slots, old records.

- :mod:`.reaper` — :class:`~.reaper.Reaper`: verify, SIGTERM, grace, re-verify, SIGKILL;
- :mod:`.batch` — many leases reaped in one pass against one process listing;
- :mod:`.results` — what a close or reap did, and where the lease goes after it;
- :mod:`.at_start` — the startup reap: this slot's leftovers and the dead slots' leases;
- :mod:`.legacy`, :mod:`.legacy_files`, :mod:`.legacy_table`, :mod:`.legacy_at_start` —
  records without a lease id (from before leases): read, imported once, reaped fail-safe.

Nothing is signalled here without the evidence :mod:`services.lifecycle.processes.verify`
gives.
"""
