"""The session service: the one place that decides, and the store of every session.

- :mod:`.api` — its gRPC face (``acpgate.session.v1.SessionService``) and serving it;
- :mod:`.decisions` — what it decides: aliases, workspaces, policy, visibility, lineage;
- :mod:`.live` — what the edges report and it keeps in memory only (activity, worker limits);
- :mod:`.store` — session rows, their history and event logs, on SQLite or PostgreSQL.
"""
