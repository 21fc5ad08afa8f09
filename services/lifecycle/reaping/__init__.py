"""Ending a lease's process tree: one close, a batched pass, records from before leases.

- :mod:`.reaper` — :class:`~.reaper.Reaper`: verify, SIGTERM, grace, re-verify, SIGKILL;
- :mod:`.steps` — those steps, shared by one close and a batched pass;
- :mod:`.batch` — many leases reaped in one pass against one process listing;
- :mod:`.results` — what a close or reap did, and where the lease goes after it;
- :mod:`.legacy`, :mod:`.legacy_files`, :mod:`.legacy_table` — records without a lease
  id (from before leases): verified fail-safe, read from their files, kept in a table.

Nothing is signalled here without the evidence :mod:`services.lifecycle.processes.verify`
gives.
"""
