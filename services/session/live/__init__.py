"""What the edges report and the session service holds in memory only, never stored.

- :mod:`.activity` — what each edge instance last reported its sessions to be doing;
- :mod:`.worker_ledger` — the connection and session limits one host's edge workers share.

Both forget everything when the service stops; the edges' next reports rebuild them.
"""
